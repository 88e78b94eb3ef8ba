#include "cli/commands.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "capture/npy.h"
#include "capture/program.h"
#include "capture/program_runner.h"
#include "capture/reference.h"
#include "cli/json.h"

namespace tracecache::cli {

namespace {

// Records every canonical graph and returns zero-filled outputs of the right types: lets
// `show` trace a program without computing it.
class DryRunExecutor final : public GraphExecutor {
 public:
  Result<std::vector<BufferRef>> execute(const CanonicalGraph& g, std::span<const BufferRef>) override {
    graphs.push_back(g);
    std::vector<BufferRef> outs;
    for (NodeId o : g.graph.outputs()) {
      const Node& n = g.graph.node(o);
      outs.push_back(std::make_shared<const HostBuffer>(n.dtype, n.shape));
    }
    return outs;
  }
  std::vector<CanonicalGraph> graphs;
};

LazyOptions lazy_options(bool bake_scalars) {
  LazyOptions o;
  o.canonicalize.bake_scalars = bake_scalars;
  return o;
}

Status save_outputs(const std::string& dir, const std::vector<StepResult>& steps) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(fmt::format("cannot create directory '{}': {}", dir, ec.message()));
  for (size_t s = 0; s < steps.size(); ++s) {
    for (const auto& [name, buf] : steps[s].outputs) {
      std::string path = (std::filesystem::path(dir) / fmt::format("step{}_{}.npy", s, name)).string();
      Status st = write_npy(path, *buf);
      if (!st.is_ok()) return st;
    }
  }
  return Status::ok();
}

}  // namespace

int report_error(const Status& status) {
  std::fputs(fmt::format("tracecache: {}\n", status.message()).c_str(), stderr);
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kParseError:
    case StatusCode::kUnsupported:
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

int run_command(const RunOptions& options) {
  Result<Program> program = load_program(options.program);
  if (!program.is_ok()) return report_error(program.status());

  ReferenceExecutor executor;
  LazyContext ctx(&executor, lazy_options(options.bake_scalars));
  Result<std::vector<StepResult>> steps = run_program(*program, ctx, options.steps);
  if (!steps.is_ok()) return report_error(steps.status());

  if (!options.save_outputs.empty()) {
    Status st = save_outputs(options.save_outputs, *steps);
    if (!st.is_ok()) return report_error(st);
  }

  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("program").value(options.program);
    j.key("mode").value("lazy");
    j.key("executor").value("reference");
    j.key("steps").value(steps->size());
    j.key("graph_hashes").begin_array();
    for (const StepResult& s : *steps) {
      for (const GraphKey& k : s.graph_keys) j.value(k.to_hex());
    }
    j.end_array();
    j.key("outputs").begin_array();
    for (const StepResult& s : *steps) {
      j.begin_array();
      for (const auto& [name, buf] : s.outputs) {
        j.begin_object();
        j.key("name").value(name);
        j.key("shape").begin_array();
        for (int64_t d : buf->shape()) j.value(d);
        j.end_array();
        j.key("dtype").value(dtype_name(buf->dtype()));
        j.key("checksum").value(buf->checksum());
        j.end_object();
      }
      j.end_array();
    }
    j.end_array();
    j.end_object();
    std::puts(j.str().c_str());
    return kExitOk;
  }

  for (size_t i = 0; i < steps->size(); ++i) {
    const StepResult& s = (*steps)[i];
    std::string keys;
    for (const GraphKey& k : s.graph_keys) keys += (keys.empty() ? "" : ",") + k.to_hex();
    std::fputs(fmt::format("step {}  graph {}\n", i, keys).c_str(), stdout);
    for (const auto& [name, buf] : s.outputs) {
      std::fputs(fmt::format("  {:<12} {:<16} checksum {}\n", name,
                             type_to_string({buf->dtype(), buf->shape()}), buf->checksum())
                     .c_str(),
                 stdout);
    }
  }
  return kExitOk;
}

int show_command(const ShowOptions& options) {
  Result<Program> program = load_program(options.program);
  if (!program.is_ok()) return report_error(program.status());

  DryRunExecutor executor;
  LazyContext ctx(&executor, lazy_options(options.bake_scalars));
  Result<std::vector<StepResult>> steps = run_program(*program, ctx, options.steps);
  if (!steps.is_ok()) return report_error(steps.status());

  // Distinct graphs in order of first appearance, with the steps that ran each.
  std::vector<const CanonicalGraph*> distinct;
  std::map<GraphKey, std::vector<size_t>> steps_of;
  size_t step = 0;
  for (size_t g = 0; g < executor.graphs.size(); ++g) {
    const CanonicalGraph& cg = executor.graphs[g];
    auto [it, inserted] = steps_of.try_emplace(cg.key);
    if (inserted) distinct.push_back(&cg);
    // One graph per step: trace programs have one barrier per step.
    it->second.push_back(step++);
  }

  if (options.json) {
    JsonWriter j;
    j.begin_object();
    j.key("program").value(options.program);
    j.key("steps").value(steps->size());
    j.key("graphs").begin_array();
    for (const CanonicalGraph* cg : distinct) {
      j.begin_object();
      j.key("hash").value(cg->key.to_hex());
      j.key("nodes").value(cg->graph.size());
      j.key("params").value(cg->graph.params().size());
      j.key("outputs").value(cg->graph.outputs().size());
      j.key("steps").begin_array();
      for (size_t s : steps_of[cg->key]) j.value(s);
      j.end_array();
      j.key("graph").value(cg->graph.to_text());
      j.end_object();
    }
    j.end_array();
    if (options.source) j.key("source").value(print_program(*program));
    j.end_object();
    std::puts(j.str().c_str());
    return kExitOk;
  }

  if (options.source) std::fputs((print_program(*program) + "\n").c_str(), stdout);
  for (const CanonicalGraph* cg : distinct) {
    const auto& used = steps_of[cg->key];
    std::fputs(fmt::format("graph {}  ({} nodes, {} params, {} outputs; steps {})\n",
                           cg->key.to_hex(), cg->graph.size(), cg->graph.params().size(),
                           cg->graph.outputs().size(), fmt::join(used, ","))
                   .c_str(),
               stdout);
    std::fputs(cg->graph.to_text().c_str(), stdout);
    std::fputs("\n", stdout);
  }
  std::fputs(fmt::format("hash {}\n", distinct.empty() ? std::string("none")
                                                        : distinct.front()->key.to_hex())
                 .c_str(),
             stdout);
  return kExitOk;
}

}  // namespace tracecache::cli
