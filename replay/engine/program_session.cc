#include "replay/engine/program_session.h"

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace tracecache {

namespace {

// The value of every program dim for one call: the size of the argument it is read from, or else
// the next static scalar. `tensor(i)` and `scalar(i)` read the call's arguments.
template <typename TensorAt, typename ScalarAt>
std::vector<int64_t> dim_values(const std::vector<DimSource>& sources, TensorAt tensor, ScalarAt scalar) {
  std::vector<int64_t> dims;
  size_t next_scalar = 0;
  for (const DimSource& src : sources) {
    dims.push_back(src.tensor >= 0 ? tensor(static_cast<size_t>(src.tensor)).peek_shape()[src.axis]
                                   : static_cast<int64_t>(scalar(next_scalar++)));
  }
  return dims;
}

// The host bytes of a compiled function's output that is not host memory (see host_buffer()),
// read as Tensor::buffer() reads them: copied, and counted as bytes to host in `metrics`
// (nullable).
Result<BufferRef> read_device_value(const DataRef& data, Metrics* metrics) {
  Result<BufferRef> read = data->read();
  if (read.is_ok() && metrics && !data->in_host_memory()) {
    metrics->add(counters::kBytesToHost, static_cast<int64_t>(data->nbytes()));
  }
  return read;
}

// The compiled function a program's steps are in once mode: "<program file name>:step".
std::string function_name(const Program& program) {
  return std::filesystem::path(program.file_name).filename().string() + ":step";
}

}  // namespace

ProgramSession::ProgramSession(const Program& program, std::unique_ptr<Session> session)
    : program_(program), session_(std::move(session)) {}

ProgramSession::~ProgramSession() = default;

Result<std::unique_ptr<ProgramSession>> ProgramSession::create(const Program& program,
                                                               ProgramSessionOptions options) {
  if (options.session.program.empty()) options.session.program = program.file_name;
  if (options.session.mode == SessionMode::kOnce && options.session.function.empty()) {
    options.session.function = function_name(program);
  }
  Result<std::unique_ptr<Session>> session = Session::create(options.session);
  if (!session.is_ok()) return session.status();
  std::unique_ptr<ProgramSession> s(new ProgramSession(program, std::move(*session)));
  s->arguments_ = std::make_unique<StepArguments>(program, s->session_->context());
  if (options.session.mode == SessionMode::kOnce) {
    CompiledFunctionOptions fo;
    fo.canonicalize.bake_scalars = options.session.bake_scalars;
    fo.automatic_dynamic = options.automatic_dynamic;
    for (const TensorDecl& d : program.tensors) fo.input_names.push_back(d.name);
    // Guard entries persist under the function's name; the program's canonical text is the
    // function's code, so an edited program never replays the old program's entries.
    const std::string text = print_program(program);
    fo.user_version = hex64(XXH3_64bits(text.data(), text.size()));
    std::string name = options.session.function;
    // The graph may depend on nothing but the arguments, never on the step number. A dim that
    // some argument's declared type uses is read from that argument's size, and attributes
    // written with it are bound to that size, so the step is shape-polymorphic in it: a new
    // batch size needs no retrace once the dim is dynamic. Other dims are guarded scalars.
    s->dim_sources_ = dim_sources(program);
    // Dims no argument's shape carries are scalar arguments: named as the program names them.
    for (size_t d = 0; d < program.dims.size(); ++d) {
      if (s->dim_sources_[d].tensor < 0) fo.scalar_names.push_back(program.dims[d].name);
    }
    fo.call_name = "step";
    TracedFn fn = [&program, sources = s->dim_sources_](LazyContext& ctx, const TraceArgs& args) {
      const std::vector<int64_t> dims = dim_values(
          sources, [&](size_t i) -> const Tensor& { return args.tensor(i); },
          [&](size_t i) { return args.scalar(i); });
      std::vector<Tensor> tensors;
      for (size_t i = 0; i < args.num_tensors(); ++i) tensors.push_back(args.tensor(i));
      return record_step(program, ctx, dims, tensors, sources, StepUpdates::kReturn).value_or_throw();
    };
    // What the step returns for these arguments, by the inference rules alone: a stored entry
    // is checked against it before its outputs are trusted.
    fo.output_types = [&program, sources = s->dim_sources_](const CallArgs& args) {
      const std::vector<int64_t> dims = dim_values(
          sources, [&](size_t i) -> const Tensor& { return args.tensors.at(i); },
          [&](size_t i) { return args.scalars.at(i); });
      return infer_output_types_at(program, dims, StepUpdates::kReturn);
    };
    // The updated params' new values follow the outputs; each replaces its param in place.
    for (size_t u = 0; u < program.updates.size(); ++u) {
      const size_t index = static_cast<size_t>(program.find_tensor(program.updates[u].param) - program.tensors.data());
      s->updated_params_.push_back(index);
      fo.updates.push_back({static_cast<uint32_t>(program.outputs.size() + u), static_cast<uint32_t>(index)});
    }
    s->function_ = std::make_unique<CompiledFunction>(std::move(name), std::move(fn),
                                                      s->session_->runtime(), std::move(fo));
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
    for (size_t index : updated_params_) p.call.tensors[index] = Tensor();
    for (size_t d = 0; d < p.dims.size(); ++d) {
      if (dim_sources_[d].tensor < 0) p.call.scalars.push_back(static_cast<double>(p.dims[d]));
    }
  }
  return p;
}

Result<std::vector<BufferRef>> ProgramSession::run(const PreparedStep& p) {
  std::vector<BufferRef> values;
  // Once mode reads the function's outputs as device data: no tensor is made for them.
  LazyContext& ctx = session_->context();
  auto host_values = [&](const std::vector<DataRef>& outs, size_t n) -> Status {
    values.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      if (const BufferRef* host = outs[k]->host_buffer()) {  // host memory (cpu): as it is
        values.push_back(*host);
        continue;
      }
      Result<BufferRef> b = read_device_value(outs[k], ctx.options().metrics);
      if (!b.is_ok()) return b.status();
      values.push_back(std::move(b).value());
    }
    return Status::ok();
  };
  if (function_ && updated_params_.empty()) {  // nothing to donate: no copy of the arguments
    Result<std::vector<DataRef>> outs = function_->call_data(ctx, p.call);
    if (!outs.is_ok()) return step_error(program_, p.step, outs.status());
    if (Status st = host_values(*outs, outs->size()); !st.is_ok()) return step_error(program_, p.step, st);
    return values;
  }
  if (function_) {
    CallArgs call = p.call;
    for (size_t index : updated_params_) {
      Result<Tensor> param = arguments_->take_param(index);
      if (!param.is_ok()) return step_error(program_, p.step, param.status());
      call.tensors[index] = std::move(param).value();
    }
    Result<std::vector<DataRef>> outs = function_->call_data(ctx, std::move(call));
    if (!outs.is_ok()) {
      // A param the call did not give up to an in-place update is still whole: it stays.
      for (size_t index : updated_params_) {
        if (call.tensors[index].defined()) (void)arguments_->set_param(index, std::move(call.tensors[index]));
      }
      return step_error(program_, p.step, outs.status());
    }
    const size_t n = program_.outputs.size();
    if (Status st = host_values(*outs, n); !st.is_ok()) return step_error(program_, p.step, st);
    // The updated params' new values follow the outputs: the next call's arguments.
    for (size_t u = 0; u < program_.updates.size(); ++u) {
      const TensorDecl* d = program_.find_tensor(program_.updates[u].param);
      Status st = arguments_->set_param(static_cast<size_t>(d - program_.tensors.data()), ctx.from_data((*outs)[n + u]));
      if (!st.is_ok()) return step_error(program_, p.step, st);
    }
    return values;
  }
  Result<std::vector<Tensor>> outs = record_step(program_, session_->context(), p.dims, p.call.tensors);
  if (!outs.is_ok()) return outs.status();
  try {
    session_->context().mark_step();
    values.reserve(outs->size());
    for (const Tensor& t : *outs) values.push_back(t.buffer());
  } catch (const Error& e) {
    return step_error(program_, p.step, e.status());
  }
  return values;
}

}  // namespace tracecache
