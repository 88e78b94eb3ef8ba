// Running trace programs (program.h) step by step through a LazyContext.
//
// Each step: bind every dim to its value for the step; make the parameters (once, on the first
// step, then reused: they are the same tensor data in every step); make the inputs for the step
// (random generators use seed' = random_bits(seed, step), so values differ per step; schedule()
// picks its value for the step); record the op stream with LazyContext::record; drop every
// intermediate so that only the outputs are live; mark_step(); read the outputs.
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

#include <string>
#include <utility>
#include <vector>

#include "capture/buffer.h"
#include "capture/hash.h"
#include "capture/ops.h"
#include "capture/program.h"
#include "capture/status.h"
#include "capture/tensor.h"

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

// The shape of `decl` at `step`, its dims bound.
Result<Shape> declared_shape(const Program& program, const TensorDecl& decl, int step);

// The types of the program's outputs at `step`, by running only the inference rules (no data,
// no context). Fails like run_program would on shape and attribute errors.
Result<std::vector<TensorType>> infer_output_types(const Program& program, int step);

// infer_output_types for every step in [0, steps) (-1: the default): a dry run that finds every
// shape error without computing anything.
Status check_program(const Program& program, int steps = -1);

}  // namespace tracecache
