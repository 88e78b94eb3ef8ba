// `tracecache diff A B`: what differs, node by node, between two graphs (capture/ir/graph_diff.h,
// the engine that also explains lazy-mode misses), with each difference's program location.
#include "capture/ir/graph_diff.h"
#include "cli/common.h"
#include "cli/graph_targets.h"
#include "replay/audit/json.h"
#include "cli/step_report.h"

namespace tracecache::cli {

namespace {

void write_target(JsonWriter& j, std::string_view name, const GraphTarget& t) {
  j.key(name).begin_object();
  j.key("hash").value(t.key.to_hex());
  j.key("from").value(t.label);
  j.key("program").value(t.sources.program);
  j.key("function").value(t.sources.function);
  j.key("nodes").value(t.graph.size());
  j.end_object();
}

std::string describe(const GraphTarget& t) {
  std::string where = t.sources.program.empty() ? std::string() : fmt::format(", program {}", t.sources.program);
  return fmt::format("graph {} ({}{}, {} nodes)", t.key.to_hex(), t.label, where, t.graph.size());
}

}  // namespace

int diff_command(const DiffOptions& options) {
  Result<GraphTarget> a = load_graph_target(options.a, options.db, options.step, options.bake_scalars);
  if (!a.is_ok()) return report_error(a.status());
  Result<GraphTarget> b = load_graph_target(options.b, options.db, options.step, options.bake_scalars);
  if (!b.is_ok()) return report_error(b.status());
  const GraphDiff d = diff_graphs(a->graph, b->graph, &a->sources, &b->sources);
  if (options.json) {
    JsonWriter j;
    j.begin_object();
    write_target(j, "a", *a);
    write_target(j, "b", *b);
    j.key("identical").value(a->key == b->key);
    j.key("aligned").value(d.aligned);
    j.key("aligned_by_index").value(d.by_index);
    j.key("derived_type_changes").value(d.derived);
    j.key("differences").begin_array();
    for (const NodeDifference& x : d.differences) write_difference(j, x);
    j.end_array();
    j.end_object();
    out(j.str() + "\n");
    return kExitOk;
  }
  out(fmt::format("A: {}\nB: {}\n", describe(*a), describe(*b)));
  if (a->key == b->key) {
    out("identical graphs (same hash)\n");
    return kExitOk;
  }
  out(fmt::format("{} difference{} ({} nodes aligned{}{})\n", d.differences.size(),
                  d.differences.size() == 1 ? "" : "s", d.aligned,
                  d.by_index ? " by index" : " by op sequence",
                  d.derived ? fmt::format("; {} types follow from an input's", d.derived) : std::string()));
  for (const NodeDifference& x : d.differences) out(fmt::format("  {}\n", x.to_string()));
  return kExitOk;
}

}  // namespace tracecache::cli
