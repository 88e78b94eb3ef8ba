// Gradient rules of the elementwise, matmul, reduction, layout and nn-activation ops (the
// `grad` column of their registry rows, ops.cc). The contract every rule keeps is in grad.h;
// each rule's comment states its tie and boundary choices (PyTorch 1.13's, checked against
// PyTorch by tests/grad/cases_elementwise.py), and docs/ops.md ("Gradients") lists them.
// Thread-safety: pure functions. Errors: see grad.h.
#pragma once

#include <span>

#include "capture/ops/grad.h"

namespace tracecache::grad {

#define TRACECACHE_GRAD_RULE(name) void name(GradBuilder& b, const GradArgs& a, std::span<GradValue> grads)

TRACECACHE_GRAD_RULE(neg);
TRACECACHE_GRAD_RULE(abs);
TRACECACHE_GRAD_RULE(exp);
TRACECACHE_GRAD_RULE(log);
TRACECACHE_GRAD_RULE(sqrt);
TRACECACHE_GRAD_RULE(rsqrt);
TRACECACHE_GRAD_RULE(tanh);
TRACECACHE_GRAD_RULE(sigmoid);
TRACECACHE_GRAD_RULE(relu);
TRACECACHE_GRAD_RULE(add);
TRACECACHE_GRAD_RULE(sub);
TRACECACHE_GRAD_RULE(mul);
TRACECACHE_GRAD_RULE(div);
TRACECACHE_GRAD_RULE(pow);
TRACECACHE_GRAD_RULE(maximum);
TRACECACHE_GRAD_RULE(minimum);
TRACECACHE_GRAD_RULE(where);
TRACECACHE_GRAD_RULE(cast);
TRACECACHE_GRAD_RULE(matmul);
TRACECACHE_GRAD_RULE(sum);
TRACECACHE_GRAD_RULE(mean);
TRACECACHE_GRAD_RULE(max);
TRACECACHE_GRAD_RULE(reshape);
TRACECACHE_GRAD_RULE(transpose);
TRACECACHE_GRAD_RULE(permute);
TRACECACHE_GRAD_RULE(broadcast_to);
TRACECACHE_GRAD_RULE(concat);
TRACECACHE_GRAD_RULE(slice);
TRACECACHE_GRAD_RULE(gelu);
TRACECACHE_GRAD_RULE(silu);
TRACECACHE_GRAD_RULE(hardswish);
TRACECACHE_GRAD_RULE(hardsigmoid);
TRACECACHE_GRAD_RULE(erf);
TRACECACHE_GRAD_RULE(clamp);

}  // namespace tracecache::grad
