// Gradient rules of the training family: dropout (the `grad` column of its registry row,
// ops.cc). dropout_mask has no rule: its only input is an integer seed. The contract every rule
// keeps is in grad.h.
// Thread-safety: pure functions. Errors: none (every attribute combination is defined).
#pragma once

#include <span>

#include "capture/ops/grad.h"

namespace tracecache::grad {

// Inference dropout is the identity, and so is its gradient (PyTorch: dropout with
// training=False). Training dropout is x * dropout_mask(...) (capture/trace/train_layers.h),
// differentiated by mul's rule: upstream * mask.
void dropout(GradBuilder& b, const GradArgs& a, std::span<GradValue> grads);

}  // namespace tracecache::grad
