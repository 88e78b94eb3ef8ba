// OpRunner: runs one op at once, for eager mode (docs/architecture.md, "The three modes":
// each op runs at once on the backend, no cache).
//
// A LazyContext whose LazyOptions::eager is set records nothing: every op goes to the runner
// as soon as it is issued and the result is a materialized tensor, so there is no trace, no
// graph, no hash and no cache lookup, and mark_step() has nothing to do. Eager mode is the
// baseline the other modes are compared against (invariant 3: `once` equals `eager`).
//
// capture/ defines only the interface; replay/backends/cpu/eager_runner.h runs ops on the cpu kernels.
// Thread-safety: as the implementation says; a context calls its runner from one thread.
#pragma once

#include <span>

#include "capture/ops/attrs.h"
#include "capture/core/buffer.h"
#include "capture/ops/ops.h"
#include "capture/core/status.h"

namespace tracecache {

class OpRunner {
 public:
  virtual ~OpRunner() = default;
  // Computes `op` on `inputs` and returns a new buffer of type `out`.
  // REQUIRES: op is not kParameter; `attrs` are normalized (one per declared attribute, as
  // infer_op leaves them) and `out` is what infer_op computed for these inputs and attributes.
  // Errors: a backend failure, as a Status (the context throws it as Error from the op).
  virtual Result<BufferRef> run_op(OpKind op, std::span<const BufferRef> inputs,
                                   std::span<const AttrValue> attrs, const TensorType& out) = 0;
};

}  // namespace tracecache
