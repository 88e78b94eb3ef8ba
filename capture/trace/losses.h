// Loss functions for training, as PyTorch 1.13's torch.nn.functional with reduction='mean'.
//
// Each is a composition of recorded ops whose gradient rules exist (capture/ops/grad.h), so
// grad() differentiates it and the backward pass joins the step's graph:
//  - mse_loss: sub, mul, mean;
//  - nll_loss: the label entries are picked with a one-hot mask, eq(labels[:, None],
//    arange(C)) cast to f32, then mul, sum, mean and neg (no gather);
//  - cross_entropy: nll_loss of a log-softmax recorded as (x - m) - log(sum(exp(x - m))) with
//    m = max(x) recorded without a tape (the result does not depend on m, so its gradient
//    through m is zero): sub, exp, sum, log.
// Labels are i32 or i64 class indices in [0, C). An out-of-range label matches no class: its
// row contributes 0 to the sum (PyTorch raises an error) and still counts in the mean. Because
// the pick multiplies by the mask, a non-finite log-probability anywhere in a row makes that
// row's loss NaN (PyTorch reads only the label's entry); cross_entropy's log-probabilities are
// finite for finite logits.
//
// Errors: operands of the wrong dtype, rank or shape throw Error (kInvalidArgument) at record
// time, naming the loss and the operand. Thread-safety: as Tensor.
#pragma once

#include "capture/trace/tensor.h"

namespace tracecache {

// mean((input - target)^2). input and target: floating, the same shape.
Tensor mse_loss(const Tensor& input, const Tensor& target);
// -mean_i log_probs[i, labels[i]]. log_probs f32 [N, C], labels integer [N].
Tensor nll_loss(const Tensor& log_probs, const Tensor& labels);
// nll_loss(log_softmax(logits, 1), labels). logits f32 [N, C], labels integer [N].
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
// log_softmax over the last axis of a rank-2 f32 tensor, recorded as described above (so it is
// differentiable with the rules of sub, exp, sum and log).
Tensor log_softmax_differentiable(const Tensor& x);

}  // namespace tracecache
