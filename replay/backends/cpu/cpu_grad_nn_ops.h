// The cpu backend's kernels for the ops that gradients of the nn ops need: scatter_add (the
// backward of embedding, gather and index_select).
//
// Numerics: as the reference kernel (capture/ops/reference_grad_nn_ops.cc): each output element is
// x plus its src elements in increasing src index, summed in double and rounded once, so the
// result is BITWISE the reference's. Only the walk differs: x is copied (over the thread team),
// src elements are bucketed by their row along `axis` (a stable counting sort) and each row's sums
// are kept in double only for the elements that row reaches, so the cost is that of x's copy plus
// src, not a double copy of all of x (the embedding gradient's x is the whole table). The sums are
// single-threaded: the scatter's writes collide by design (duplicate indices).
// Thread-safe (per-call scratch only).
#pragma once

#include <span>

#include "capture/core/buffer.h"
#include "capture/ops/attrs.h"
#include "capture/ops/ops.h"

namespace tracecache::cpu {

// Runs `op` on `inputs` with normalized `attrs` into `out` (preallocated with the inferred type,
// fully overwritten). Returns false, writing nothing, for an op it does not handle; the caller
// then runs the reference kernel. REQUIRES: inputs and attrs as the op's inference rule accepted
// them; `out` does not overlap any input.
bool run_grad_nn_op(OpKind op, std::span<const HostBuffer* const> inputs,
                    std::span<const AttrValue> attrs, HostBuffer& out);

}  // namespace tracecache::cpu
