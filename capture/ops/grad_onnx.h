// Gradient rules of the ops ONNX models need (issue 16): floor, ceil, round, sin, cos,
// remainder, fmod, trunc_div, min, conv_transpose2d, topk, scatter_elements (the `grad`
// column of their registry rows, ops.cc). The
// contract every rule keeps is in grad.h; the formulas are in docs/ops.md ("Gradient" of each
// op) and follow PyTorch 1.13's: floor, ceil, round and trunc_div are flat (zero gradient),
// remainder and fmod pass the gradient to the dividend and -g * (a div b, rounded as the op
// rounds) to the divisor, min shares the gradient among equal minima as max does,
// conv_transpose2d (the adjoint of a conv2d) has conv2d and conv2d_weight_grad as gradients,
// topk scatters the gradient back to the selected elements (topk_indices, scatter_add),
// scatter_elements follows PyTorch's scatter and scatter_add (no gradient for reduction mul),
// the resizes have their adjoints resize_nearest2d_grad and resize_linear2d_grad.
// Thread-safety: pure functions. Errors: see grad.h (these rules define every attribute
// combination their ops accept, but scatter_elements with reduction mul, whose rule throws Error).
#pragma once

#include <span>

#include "capture/ops/grad.h"
#include "capture/ops/grad_elementwise.h"

namespace tracecache::grad {

TRACECACHE_GRAD_RULE(floor);
TRACECACHE_GRAD_RULE(ceil);
TRACECACHE_GRAD_RULE(round);
TRACECACHE_GRAD_RULE(sin);
TRACECACHE_GRAD_RULE(cos);
TRACECACHE_GRAD_RULE(remainder);
TRACECACHE_GRAD_RULE(fmod);
TRACECACHE_GRAD_RULE(trunc_div);
TRACECACHE_GRAD_RULE(min);
TRACECACHE_GRAD_RULE(conv_transpose2d);
TRACECACHE_GRAD_RULE(topk);
TRACECACHE_GRAD_RULE(scatter_elements);
TRACECACHE_GRAD_RULE(resize_nearest2d);
TRACECACHE_GRAD_RULE(resize_linear2d);

}  // namespace tracecache::grad
