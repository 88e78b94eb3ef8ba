// Training-mode layers: batch norm with batch statistics and running-stat updates, and dropout
// with a mask that changes every step without changing the graph.
//
// Both are compositions of recorded ops, so the tape (autograd.h) differentiates them with the
// rules of the ops they use, and the backward pass joins the step's one graph:
//  - batch_norm_train uses mean, sub, mul, add, exp, log and reshape (1 / sqrt(v) is recorded
//    as exp(-0.5 * log(v)), whose rules exist, instead of rsqrt);
//  - dropout_train is x * dropout_mask(...): mul's rule gives upstream * mask, i.e.
//    upstream * keep / (1 - p).
//
// The dropout mask is a pure function of (seed value, salt, shape, p) (op dropout_mask,
// docs/ops.md). The seed is a tensor, an i32/i64 scalar fed each step (a step counter:
// scalar(ctx, step, DType::kI64) is lifted to a graph input, as is data made with
// from_buffer), so the mask differs between steps while the graph, its key and its executable
// stay the same; the salt is a fixed per-layer attribute, so two layers draw different masks
// from one seed. The same seed gives the same mask in every run, process and backend.
// PyTorch's generator cannot be matched bit for bit; the keep rate is 1 - p (on a 2^-24 grid).
//
// Errors: bad operands throw Error (kInvalidArgument) at record time, naming the function.
// Thread-safety: as Tensor (one thread per context).
#pragma once

#include <cstdint>

#include "capture/trace/tensor.h"

namespace tracecache {

// f32 `shape`: 1 / (1 - p) where an element is kept, 0 where it is dropped (op dropout_mask).
// `seed` is an i32 or i64 scalar. p in [0, 1]; p = 1 drops everything.
Tensor dropout_mask(const Tensor& seed, const Shape& shape, double p, int64_t salt = 0);

// Training dropout (PyTorch's F.dropout(training=True) with its own generator):
// x * dropout_mask(seed, x.shape, p, salt).
Tensor dropout_train(const Tensor& x, double p, const Tensor& seed, int64_t salt = 0);

// Training batch norm over channel dim 1, as PyTorch's F.batch_norm(training=True): x is
// [N, C, ...] (rank >= 2, f32); weight, bias, running_mean, running_var are [C] or undefined
// (weight ones, bias zeros; undefined running stats are not tracked).
//   y = (x - mean) * rsqrt(var + eps) * weight + bias
// with the batch mean and the biased batch variance over every dim but 1. The running stats are
// updated in place (LazyContext::assign: the step's graph donates their storage), recorded
// without a tape:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)
// (n = the elements per channel: PyTorch's unbiased running variance). Throws Error when a
// channel has fewer than 2 values (n < 2), as PyTorch does.
Tensor batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                        Tensor& running_var, double momentum = 0.1, double eps = 1e-5);

}  // namespace tracecache
