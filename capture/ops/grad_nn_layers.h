// Gradient rules of the nn layers: conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, linear,
// flatten, pad and batch_norm (the `grad` column of their registry rows, ops.cc). The contract
// every rule keeps is in grad.h; the formulas are in docs/ops.md ("Gradient" of each op).
//
// conv2d and the pools record the primitives of the registry's "gradients of the nn layers"
// block (conv2d_input_grad, conv2d_weight_grad, max_pool2d_grad, avg_pool2d_grad,
// adaptive_avg_pool2d_grad); linear, flatten, pad and batch_norm record ordinary ops (matmul,
// reshape, pad, sum, rsqrt, ...).
// Thread-safety: pure functions. Errors: see grad.h (these rules define every attribute
// combination their forward op accepts, so they never throw).
#pragma once

#include <span>

#include "capture/ops/grad.h"
#include "capture/ops/grad_elementwise.h"

namespace tracecache::grad {

TRACECACHE_GRAD_RULE(conv2d);
TRACECACHE_GRAD_RULE(max_pool2d);
TRACECACHE_GRAD_RULE(avg_pool2d);
TRACECACHE_GRAD_RULE(adaptive_avg_pool2d);
TRACECACHE_GRAD_RULE(linear);
TRACECACHE_GRAD_RULE(flatten);
TRACECACHE_GRAD_RULE(pad);
TRACECACHE_GRAD_RULE(batch_norm);

}  // namespace tracecache::grad
