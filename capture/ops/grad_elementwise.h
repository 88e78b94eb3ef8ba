// Gradient rules of the elementwise, matmul, reduction and layout ops (the `grad` column of
// their registry rows, ops.cc). The contract every rule keeps is in grad.h.
// Thread-safety: pure functions. Errors: see grad.h.
#pragma once

#include <span>

#include "capture/ops/grad.h"

namespace tracecache::grad {

#define TRACECACHE_GRAD_RULE(name) void name(GradBuilder& b, const GradArgs& a, std::span<GradValue> grads)

TRACECACHE_GRAD_RULE(neg);
TRACECACHE_GRAD_RULE(exp);
TRACECACHE_GRAD_RULE(log);
TRACECACHE_GRAD_RULE(tanh);
TRACECACHE_GRAD_RULE(sigmoid);
TRACECACHE_GRAD_RULE(relu);
TRACECACHE_GRAD_RULE(add);
TRACECACHE_GRAD_RULE(sub);
TRACECACHE_GRAD_RULE(mul);
TRACECACHE_GRAD_RULE(div);
TRACECACHE_GRAD_RULE(matmul);
TRACECACHE_GRAD_RULE(sum);
TRACECACHE_GRAD_RULE(mean);
TRACECACHE_GRAD_RULE(reshape);
TRACECACHE_GRAD_RULE(transpose);
TRACECACHE_GRAD_RULE(permute);
TRACECACHE_GRAD_RULE(broadcast_to);

}  // namespace tracecache::grad
