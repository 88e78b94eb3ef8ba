#include "cli/program_session.h"

#include <xxhash.h>

#include <fmt/format.h>

#include <cassert>
#include <filesystem>

#include "capture/reference/reference.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/eager_runner.h"

namespace tracecache::cli {

std::optional<Mode> parse_mode(std::string_view name) {
  if (name == "eager") return Mode::kEager;
  if (name == "lazy") return Mode::kLazy;
  if (name == "once") return Mode::kOnce;
  return std::nullopt;
}

std::string_view mode_name(Mode mode) {
  switch (mode) {
    case Mode::kEager: return "eager";
    case Mode::kLazy: return "lazy";
    case Mode::kOnce: return "once";
  }
  return "?";
}

ProgramSession::ProgramSession(const Program& program, SessionOptions options)
    : program_(program), options_(std::move(options)) {}

ProgramSession::~ProgramSession() {
  if (sim_) options_.metrics->set_span_observer(nullptr);
}

Result<std::unique_ptr<ProgramSession>> ProgramSession::create(const Program& program,
                                                               SessionOptions options) {
  assert(options.metrics != nullptr);
  bool cpu = options.backend == "cpu";
  std::optional<std::string> sim_spec;
  if (options.backend == "sim") sim_spec = "h100";
  if (options.backend.starts_with("sim:")) sim_spec = options.backend.substr(4);
  if (!cpu && !sim_spec && options.backend != "reference") {
    return invalid_argument(fmt::format(
        "unknown backend '{}' (available: cpu, reference, sim:PRESET or sim:SPEC_FILE)", options.backend));
  }
  if (options.backend == "reference" && options.mode == Mode::kOnce) {
    return invalid_argument(
        "--mode once runs compiled executables: it needs --backend cpu or sim, not reference");
  }
  if (sim_spec && options.mode == Mode::kEager) {
    return invalid_argument(
        "the sim backend runs compiled graphs: use --mode lazy or once (eager runs ops on the host)");
  }
  std::unique_ptr<ProgramSession> s(new ProgramSession(program, options));
  LazyOptions lazy;
  lazy.canonicalize.bake_scalars = options.bake_scalars;
  lazy.metrics = options.metrics;
  GraphExecutor* executor = nullptr;
  if (sim_spec) {
    Result<DeviceSpec> spec = resolve_device_spec(*sim_spec);
    if (!spec.is_ok()) return spec.status();
    auto sim = std::make_unique<SimBackend>(std::move(*spec));
    s->sim_ = sim.get();
    s->backend_ = std::move(sim);
    options.metrics->set_span_observer(&s->sim_->timeline());
  } else if (cpu && options.mode != Mode::kEager) {
    s->backend_ = std::make_unique<CpuBackend>(CpuBackendOptions{.threads = options.threads});
  }
  if (s->backend_) {
    s->runtime_ = std::make_unique<Runtime>(s->backend_.get(), options.db, options.metrics);
    executor = s->runtime_.get();
  } else {
    s->reference_ = std::make_unique<ReferenceExecutor>();
    executor = s->reference_.get();
  }
  if (options.mode == Mode::kEager) {
    if (cpu) {
      set_cpu_threads(options.threads > 0 ? options.threads : available_cpus());
      s->op_runner_ = std::make_unique<CpuOpRunner>(options.metrics);
    } else {
      s->op_runner_ = std::make_unique<ReferenceOpRunner>();
    }
    lazy.eager = s->op_runner_.get();
  }
  s->ctx_ = std::make_unique<LazyContext>(executor, lazy);
  s->arguments_ = std::make_unique<StepArguments>(program, *s->ctx_);
  if (options.mode == Mode::kOnce) {
    CompiledFunctionOptions fo;
    fo.canonicalize = lazy.canonicalize;
    fo.automatic_dynamic = options.automatic_dynamic;
    for (const TensorDecl& d : program.tensors) fo.input_names.push_back(d.name);
    // Guard entries persist under the function's name; the program's canonical text is the
    // function's code, so an edited program never replays the old program's entries.
    const std::string text = print_program(program);
    fo.user_version = hex64(XXH3_64bits(text.data(), text.size()));
    std::string name =
        std::filesystem::path(program.file_name).filename().string() + ":step";
    // The graph may depend on nothing but the arguments, never on the step number. A dim that
    // some argument's declared type uses is read from that argument's size, and attributes
    // written with it are bound to that size, so the step is shape-polymorphic in it: a new
    // batch size needs no retrace once the dim is dynamic. Other dims are guarded scalars.
    s->dim_sources_ = dim_sources(program);
    TracedFn fn = [&program, sources = s->dim_sources_](LazyContext& ctx, const TraceArgs& args) {
      std::vector<int64_t> dims;
      size_t scalar = 0;
      for (const DimSource& src : sources) {
        dims.push_back(src.tensor >= 0
                           ? args.tensor(static_cast<size_t>(src.tensor)).peek_shape()[src.axis]
                           : static_cast<int64_t>(args.scalar(scalar++)));
      }
      std::vector<Tensor> tensors;
      for (size_t i = 0; i < args.num_tensors(); ++i) tensors.push_back(args.tensor(i));
      return record_step(program, ctx, dims, tensors, sources).value_or_throw();
    };
    // What the step returns for these arguments, by the inference rules alone: a stored entry
    // is checked against it before its outputs are trusted.
    fo.output_types = [&program, sources = s->dim_sources_](const CallArgs& args) {
      std::vector<int64_t> dims;
      size_t scalar = 0;
      for (const DimSource& src : sources) {
        dims.push_back(src.tensor >= 0 ? args.tensors.at(static_cast<size_t>(src.tensor)).peek_shape()[src.axis]
                                       : static_cast<int64_t>(args.scalars.at(scalar++)));
      }
      return infer_output_types_at(program, dims);
    };
    s->function_ = std::make_unique<CompiledFunction>(std::move(name), std::move(fn),
                                                      s->runtime_.get(), std::move(fo));
  }
  return s;
}

Result<ProgramSession::PreparedStep> ProgramSession::prepare(int step) {
  PreparedStep p;
  p.step = step;
  p.dims = step_dim_values(program_, step);
  Result<std::vector<Tensor>> args = arguments_->make(step);
  if (!args.is_ok()) return args.status();
  p.call.tensors = std::move(args).value();
  if (function_) {
    for (size_t d = 0; d < p.dims.size(); ++d) {
      if (dim_sources_[d].tensor < 0) p.call.scalars.push_back(static_cast<double>(p.dims[d]));
    }
  }
  return p;
}

Result<std::vector<BufferRef>> ProgramSession::run(const PreparedStep& p) {
  std::vector<BufferRef> values;
  if (function_) {
    Result<std::vector<Tensor>> outs = (*function_)(*ctx_, p.call);
    if (!outs.is_ok()) return step_error(program_, p.step, outs.status());
    values.reserve(outs->size());
    for (const Tensor& t : *outs) values.push_back(t.buffer());
    return values;
  }
  Result<std::vector<Tensor>> outs = record_step(program_, *ctx_, p.dims, p.call.tensors);
  if (!outs.is_ok()) return outs.status();
  try {
    ctx_->mark_step();
    values.reserve(outs->size());
    for (const Tensor& t : *outs) values.push_back(t.buffer());
  } catch (const Error& e) {
    return step_error(program_, p.step, e.status());
  }
  return values;
}

const std::vector<GraphKey>& ProgramSession::executed_keys() const {
  return ctx_->executed_keys();
}

}  // namespace tracecache::cli
