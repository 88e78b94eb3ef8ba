// Gradient rules of the lookups (embedding, gather, index_select), layer_norm, softmax,
// log_softmax, scaled_dot_product_attention and scatter_add (the `grad` column of their registry
// rows, ops.cc). The contract every rule keeps is in grad.h; the formulas are in docs/ops.md
// ("Gradient" of each op). Index inputs are never differentiated.
// Thread-safety: pure functions. Errors: see grad.h (these rules define every attribute
// combination their ops accept, so they throw nothing of their own).
#pragma once

#include <span>

#include "capture/ops/grad.h"
#include "capture/ops/grad_elementwise.h"

namespace tracecache::grad {

TRACECACHE_GRAD_RULE(embedding);
TRACECACHE_GRAD_RULE(gather);
TRACECACHE_GRAD_RULE(index_select);
TRACECACHE_GRAD_RULE(layer_norm);
TRACECACHE_GRAD_RULE(softmax);
TRACECACHE_GRAD_RULE(log_softmax);
TRACECACHE_GRAD_RULE(scaled_dot_product_attention);
TRACECACHE_GRAD_RULE(scatter_add);

}  // namespace tracecache::grad
