#include "replay/audit/graph_dot.h"

#include <fmt/format.h>

#include <vector>

namespace tracecache::audit {

namespace {

// The body of a DOT quoted string: quotes and backslashes escaped (so no \N, \G... escapes of
// Graphviz apply), control characters as spaces; line breaks are added by the caller as "\n".
std::string dot_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string cut(std::string s) {
  if (s.size() <= kMaxDotAttrLength) return s;
  s.resize(kMaxDotAttrLength);
  // Do not end inside a UTF-8 sequence.
  while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();
  if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.pop_back();
  return s + "...";
}

// "/a/b/mlp.trace:7 h" -> "mlp.trace:7 h": a picture has room for the file name, not its path.
std::string_view without_directories(std::string_view where) {
  const size_t colon = where.find(':');
  const size_t slash = where.substr(0, colon).rfind('/');
  return slash == std::string_view::npos ? where : where.substr(slash + 1);
}

}  // namespace

std::string graph_to_dot(const Graph& graph, const GraphSources& sources, std::string_view name) {
  std::string out = fmt::format(
      "digraph \"{}\" {{\n  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=10];\n"
      "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef3fb\", color=\"#4a6fa5\", "
      "fontname=\"Helvetica\", fontsize=10];\n  edge [color=\"#7a869a\", arrowsize=0.6];\n",
      dot_text(name));
  std::vector<bool> is_output(graph.size(), false);
  for (NodeId o : graph.outputs()) is_output[o] = true;
  for (NodeId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    const OpInfo& info = op_info(n.op);
    std::string label = fmt::format("%{} {}\\n{}", id, dot_text(info.name), dot_text(type_to_string(n.type())));
    auto attrs = graph.attrs(n);
    for (size_t i = 0; i < attrs.size(); ++i) {
      label += fmt::format("\\n{}={}", dot_text(info.attrs[i].name), dot_text(cut(attrs[i].to_string())));
    }
    if (std::string_view where = sources.node(id); !where.empty()) {
      label += "\\n" + dot_text(cut(std::string(without_directories(where))));
    }
    std::string style;
    if (n.op == OpKind::kParameter) style = ", shape=ellipse, fillcolor=\"#e8f5e9\", color=\"#2e7d32\"";
    if (is_output[id]) style += ", penwidth=2, color=\"#c62828\"";
    out += fmt::format("  n{} [label=\"{}\"{}];\n", id, label, style);
    for (NodeId in : graph.inputs(n)) out += fmt::format("  n{} -> n{};\n", in, id);
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    out += fmt::format("  out{0} [label=\"output {0}\", shape=plaintext, style=\"\"];\n  n{1} -> out{0};\n", i,
                       graph.outputs()[i]);
  }
  for (const Donation& d : graph.donations()) {
    if (d.output < graph.outputs().size() && d.param < graph.params().size()) {
      out += fmt::format("  out{} -> n{} [style=dashed, label=\"donates\", fontsize=8, constraint=false];\n",
                         d.output, graph.params()[d.param]);
    }
  }
  out += "}\n";
  return out;
}

}  // namespace tracecache::audit
