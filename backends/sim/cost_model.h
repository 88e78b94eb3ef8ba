// The `sim` backend's cost model: how long a kernel or a transfer keeps the simulated device
// busy. A roofline per kernel,
//
//   time = max(flops / peak, bytes / memory bandwidth) + launch overhead
//
// with peak = matmul_tflops for matrix-unit ops on f32 and vector_tflops otherwise, and per
// transfer time = bytes / link bandwidth + link latency. Times are integer picoseconds, each
// term rounded up, so the model is exact and deterministic (1 TFLOP/s = 1 flop per ps;
// 1 GB/s = 1 byte per 1000 ps).
//
// Flops per op (`out` = output elements, `in` = input elements):
//   elementwise, comparisons, where, cast       1 per out; exp log sqrt rsqrt tanh sigmoid pow
//                                               kTranscendentalFlops per out (the ratio of FP32
//                                               FMA lanes to special-function lanes on NVIDIA
//                                               SMs, 64 : 16)
//   broadcast_to and the layout ops             0 (memory only)
//   matmul                                      2 * out * K (K = a's last dim; batched)
//   sum mean max argmax                         1 per in
//   full arange uniform                         1 per out; normal kTranscendentalFlops per out
// By registry name, for the model-zoo ops (absent names simply never match):
//   conv2d                     2 * out * (C/groups) * kh * kw (from the weight [O, C/g, kh, kw])
//   linear                     2 * out * in_features (x's last dim)
//   scaled_dot_product_attention  2 * B * Lq * Lk * (E + Ev) + (kTranscendentalFlops + 3) * B * Lq * Lk
//   max_pool2d avg_pool2d      out * kh * kw (attribute "kernel")
//   adaptive_avg_pool2d        1 per in
//   batch_norm                 2 per out (scale and shift)
//   layer_norm                 8 per in (mean, variance, normalize, affine)
//   softmax log_softmax        (kTranscendentalFlops + 3) per in (max, subtract, exp, sum, divide)
//   gelu silu erf hardswish hardsigmoid clamp  as elementwise (gelu/silu/erf transcendental)
//   any other op               1 per out
// Matrix-unit ops (run at matmul_tflops when their output is f32): matmul, conv2d, linear,
// scaled_dot_product_attention. Integer matmuls run at vector_tflops.
//
// Bytes: a single-op kernel reads each distinct input once and writes its output; a fused
// kernel reads each distinct leaf (an input from outside the chain) once and writes the root;
// intermediates of a fused chain never touch memory.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "capture/ir/graph.h"
#include "backends/sim/device_spec.h"
#include "compile/executable.h"

namespace tracecache {

inline constexpr int64_t kTranscendentalFlops = 4;

struct KernelCost {
  int64_t flops = 0;
  int64_t bytes = 0;         // read + written
  bool matrix_unit = false;  // costed at matmul_tflops
  friend bool operator==(const KernelCost&, const KernelCost&) = default;
};

// Flops of node `id` of `g` alone (see the table above). 0 for a parameter.
int64_t op_flops(const Graph& g, NodeId id);
// Flops and bytes of one kernel of an executable over `g`.
KernelCost kernel_cost(const Graph& g, const Kernel& kernel);

// Device time of a kernel and of a transfer of `bytes`, in picoseconds.
int64_t kernel_time_ps(const DeviceSpec& spec, const KernelCost& cost);
int64_t transfer_time_ps(const DeviceSpec& spec, int64_t bytes);

// "matmul", or "fused(mul,add,exp)" listing a fused kernel's members in order.
std::string kernel_name(const Graph& g, const Kernel& kernel);

}  // namespace tracecache
