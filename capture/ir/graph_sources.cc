#include "capture/ir/graph_sources.h"

#include <fmt/format.h>

namespace tracecache {

namespace {

constexpr std::string_view kHeader = "tracecache-sources 1";

// The next line of `text` from `*pos` (without its '\n'); false at the end.
bool next_line(std::string_view text, size_t* pos, std::string_view* line) {
  if (*pos >= text.size()) return false;
  size_t end = text.find('\n', *pos);
  if (end == std::string_view::npos) end = text.size();
  *line = text.substr(*pos, end - *pos);
  *pos = end + 1;
  return true;
}

}  // namespace

std::string one_line(std::string_view text) {
  std::string out(text.substr(0, kMaxSourceLength));
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::string_view GraphSources::node(NodeId id) const {
  return id < nodes.size() ? std::string_view(nodes[id]) : std::string_view();
}

std::string GraphSources::encode() const {
  std::string out = fmt::format("{}\n{}\n{}\n", kHeader, one_line(program), one_line(function));
  for (const std::string& n : nodes) {
    out += one_line(n);
    out += '\n';
  }
  return out;
}

Result<GraphSources> GraphSources::decode(std::string_view text, size_t max_nodes) {
  size_t pos = 0;
  std::string_view line;
  if (!next_line(text, &pos, &line) || line != kHeader) {
    return corruption("stored graph sources: unknown format (expected a 'tracecache-sources 1' header)");
  }
  GraphSources s;
  if (!next_line(text, &pos, &line)) return corruption("stored graph sources: the program line is missing");
  s.program = std::string(line);
  if (!next_line(text, &pos, &line)) return corruption("stored graph sources: the function line is missing");
  s.function = std::string(line);
  while (next_line(text, &pos, &line)) {
    if (s.nodes.size() >= max_nodes) {
      return corruption(fmt::format("stored graph sources: more node locations than the graph's {} nodes", max_nodes));
    }
    s.nodes.emplace_back(line.substr(0, kMaxSourceLength));
  }
  return s;
}

}  // namespace tracecache
