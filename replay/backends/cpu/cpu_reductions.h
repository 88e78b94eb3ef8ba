// The cpu backend's reductions: sum, mean, max and min over any axis set, argmax and argmin
// (cpu_kernels.h's numerics table: bitwise equal to the reference kernels). Internal to
// replay/backends/cpu/: run_op (cpu_kernels.cc) calls them.
// REQUIRES: `out` preallocated with the inferred dtype and shape; `axes` (and `axis`) normalized
// by the inference rule. Thread-safety: split over the thread team as cpu_kernels.h's
// "Threading" says; concurrent calls are safe. Errors: none. Ownership: nothing is kept.
#pragma once

#include "capture/core/buffer.h"
#include "capture/ops/ops.h"

namespace tracecache::cpu {

// sum, mean, max or min (`op`) of `x` over `axes` into `out`.
void reduce_fast(OpKind op, const HostBuffer& x, const IntList& axes, HostBuffer& out);

// argmax (kSmallest false) and argmin over `axis`: the index of the first extreme element, or
// the last with kLast; a NaN counts as the extreme (the first NaN wins, the last with kLast).
// Instantiated for <false, false>, <true, false> and <true, true>.
template <bool kSmallest, bool kLast>
void arg_extreme(const HostBuffer& x, int axis, HostBuffer& out);

}  // namespace tracecache::cpu
