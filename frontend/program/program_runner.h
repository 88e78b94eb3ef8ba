// Running trace programs (program.h) step by step through a LazyContext.
//
// Each step: bind every dim to its value for the step; make the parameters (once, on the first
// step, then reused: they are the same tensor data in every step, unless an `update` statement
// gave them a new value at the end of the previous step); make the inputs for the step
// (random generators use seed' = random_bits(seed, step), so values differ per step; schedule()
// picks its value for the step); record the op stream with LazyContext::record; apply the
// updates (LazyContext::assign: in lazy mode the param's old storage is donated to its new
// value); drop every intermediate so that only the outputs (and updated params) are live;
// mark_step(); read the outputs.
//
// Training: a `grad` statement (`gw, gb = grad(loss, w, b)`) records tracecache::grad()
// (capture/trace/autograd.h) where it stands. The params and inputs it differentiates by are
// marked as requiring a gradient before any op is recorded, an intermediate right after the op
// that makes it. Only the ops some later grad statement's loss depends on are recorded with a
// tape; the rest (an optimizer's update, metrics) are recorded as under a NoGradGuard, so no
// tape keeps a forward intermediate alive (in lazy mode it would become a graph output). Every
// grad statement but the last keeps the tape it walks (retain_graph), so a later one may walk it
// again.
//
// run_program does all of that. Its parts are exposed so a step can run another way, e.g. as
// a compiled function (replay/engine/compiled_function.h): StepArguments makes a step's argument
// tensors without recording anything, and record_step records the op stream on given
// arguments. What a step's graph depends on is exactly (the arguments, the dim values): dims
// can appear in attributes (arange(end=N), reshape(shape=[B, -1])) and not only in shapes, so
// whoever caches a step's graph must key or guard it on the dim values too.
//
// Number operands (`mul(x, 0.5)`) become rank-0 `full` constants whose dtype is the first
// non-condition tensor operand's dtype if it holds the number exactly, else f32.
//
// Errors are Statuses whose messages start with "FILE:LINE:COL: " naming the statement that
// failed: a shape or attribute error thrown while recording an op points at the op's name, an
// npy that does not match its declaration points at the generator. Executor failures at the
// barrier are reported with the file name only.
// Thread-safety: as the LazyContext (one thread at a time per context).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/ir/hash.h"
#include "capture/ops/ops.h"
#include "frontend/program/program.h"
#include "capture/core/status.h"
#include "capture/trace/tensor.h"

namespace tracecache {

struct StepResult {
  // (output name, value), in the program's output order.
  std::vector<std::pair<std::string, BufferRef>> outputs;
  // Keys of the graphs the context executed during this step, in order.
  std::vector<GraphKey> graph_keys;
};

// Runs `steps` steps (-1: program.default_steps()) of `program` on `ctx`.
// REQUIRES: `program` came from parse_program/load_program or passes the same checks; a
// hand-built program that names undefined things gets a kInvalidArgument error, not a crash.
Result<std::vector<StepResult>> run_program(const Program& program, LazyContext& ctx,
                                            int steps = -1);

// The value of every dim at `step`, in program.dims order.
std::vector<int64_t> step_dim_values(const Program& program, int step);

// Makes the argument tensors of a program's steps in one context: one materialized tensor per
// program.tensors entry, in declaration order. Parameters are made by the first make() and the
// same tensors are returned by every later one (a tensor assigned an update keeps its handle;
// set_param() replaces one); inputs are made afresh for each step.
// Ownership: `program` and `ctx` must outlive this.
class StepArguments {
 public:
  StepArguments(const Program& program, LazyContext& ctx);
  ~StepArguments();
  StepArguments(const StepArguments&) = delete;
  StepArguments& operator=(const StepArguments&) = delete;

  // Errors: a bad dim reference or an npy file that cannot be read or does not match its
  // declaration, as a Status naming the place in the program.
  Result<std::vector<Tensor>> make(int step);
  // Param `index` (into program.tensors) is `value` in the steps that follow: a param updated by
  // a step that returned its new value (StepUpdates::kReturn). kInvalidArgument if `index` is not
  // a param or `value` is not a materialized tensor.
  Status set_param(size_t index, Tensor value);
  // Gives param `index`'s tensor up to the caller, so that the caller may hold its only handle
  // (a compiled function then updates it in place, by donation); the caller gives the new value
  // back with set_param(). Until it does, make() fails for it (kInvalidArgument) rather than
  // making it afresh. kInvalidArgument if `index` is not a param make() made and still holds.
  Result<Tensor> take_param(size_t index);

  // The files the generators read (npy, safetensors), each opened once; opaque, defined in the
  // .cc.
  struct Files;

 private:
  const Program& program_;
  LazyContext& ctx_;
  std::map<size_t, Tensor> params_;  // by index into program.tensors
  std::unique_ptr<Files> files_;
};

// Where a dim's value can be read from a step's arguments: size `axis` of argument `tensor`
// (-1: no argument's declared type uses the dim).
struct DimSource {
  int tensor = -1;
  int axis = 0;
};
// For each program.dims entry, the first program.tensors declaration that uses it.
std::vector<DimSource> dim_sources(const Program& program);

// What record_step does with the program's `update` statements.
enum class StepUpdates : uint8_t {
  kAssign,  // each updated param's argument tensor is assigned its new value (LazyContext::assign)
  kReturn,  // the new values are returned after the outputs, in program.updates order
};

// Records one step's op stream on `ctx` and returns its outputs (pending, unless ctx is eager),
// in the program's output order; every intermediate is dropped before returning. `dims` holds
// one value per program.dims entry (step_dim_values()); `args` one tensor per program.tensors
// entry (StepArguments::make()), each of its declared type with `dims` bound.
// With `bound` (one DimSource per dim, from dim_sources()), every attribute element written as
// a dim that has a source is recorded bound to that argument's size (AttrBinding), and the
// arguments' shapes are checked without being observed: a captured template then follows the
// sizes (shape-polymorphic trace once). `dims` must hold the sources' sizes.
// `updates` says what becomes of the program's updates (the outputs are always taken first).
// Errors: argument counts or types that do not fit, shape or attribute errors while recording,
// a grad statement that tracecache::grad() refuses (a loss that is not a floating tensor of one
// element, a tensor that is not differentiable, an op without a gradient rule on the way) and an
// update whose value does not have its param's type, as a Status starting "FILE:LINE:COL: ".
// Does not mark_step().
Result<std::vector<Tensor>> record_step(const Program& program, LazyContext& ctx,
                                        std::span<const int64_t> dims,
                                        std::span<const Tensor> args,
                                        std::span<const DimSource> bound = {},
                                        StepUpdates updates = StepUpdates::kAssign);

// `cause` prefixed with "FILE: step N: ", how run_program reports failures at a barrier.
Status step_error(const Program& program, int step, const Status& cause);

// The shape of `decl` at `step`, its dims bound. kInvalidArgument at the decl's first dim if it
// has more than kMaxElements elements (shape.h): every declared shape is checked here, so
// nothing is allocated for one that is too large.
Result<Shape> declared_shape(const Program& program, const TensorDecl& decl, int step);

// The types of the program's outputs at `step`, by running only the inference rules (no data,
// no context). Fails like run_program would on shape and attribute errors, on a grad statement
// whose types grad() refuses (a loss that is not a floating tensor of one element, an integer
// or bool tensor to differentiate by) and on an update whose value's type is not its param's.
Result<std::vector<TensorType>> infer_output_types(const Program& program, int step);
// The same at explicit dim values (one per program.dims entry), e.g. those of a call's
// arguments; with StepUpdates::kReturn, the updates' value types follow the outputs' (what
// record_step returns then).
Result<std::vector<TensorType>> infer_output_types_at(const Program& program, std::span<const int64_t> dims,
                                                      StepUpdates updates = StepUpdates::kAssign);

// infer_output_types for every step in [0, steps) (-1: the default): a dry run that finds every
// shape error without computing anything.
Status check_program(const Program& program, int steps = -1);

}  // namespace tracecache
