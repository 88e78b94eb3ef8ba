#include "capture/ops/grad_train.h"

namespace tracecache::grad {

void dropout(GradBuilder&, const GradArgs& a, std::span<GradValue> grads) { grads[0] = a.grad; }

}  // namespace tracecache::grad
