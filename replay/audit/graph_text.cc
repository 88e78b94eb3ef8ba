#include "replay/audit/graph_text.h"

#include <fmt/format.h>

#include <charconv>
#include <string_view>

namespace tracecache::audit {

std::string graph_text_with_sources(const Graph& graph, const GraphSources& sources) {
  const std::string text = graph.to_text();
  if (sources.nodes.empty()) return text;
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    out.append(line);
    // "param %N : ..." and "%N : ... = op(...)" name node N.
    std::string_view rest = line.starts_with("param ") ? line.substr(6) : line;
    if (rest.starts_with('%')) {
      uint32_t id = 0;
      auto [p, err] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), id);
      if (err == std::errc() && p != rest.data() + 1 && !sources.node(id).empty()) {
        out += fmt::format("  # {}", sources.node(id));
      }
    }
    out += '\n';
    pos = end + 1;
  }
  return out;
}

}  // namespace tracecache::audit
