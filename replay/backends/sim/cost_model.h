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
// Flops per op are the registry's (OpInfo::cost, capture/ops/ops.h): the cost model keeps only
// the device side. A kernel runs on the matrix unit (at matmul_tflops) when it is a single op
// whose registry cost is matrix work (matmul, linear, conv2d, scaled_dot_product_attention) and
// whose output is f32; fused kernels and integer contractions run at vector_tflops.
//
// Bytes: a single-op kernel reads each distinct input once and writes its output; a fused
// kernel reads each distinct leaf (an input from outside the chain) once and writes the root;
// intermediates of a fused chain never touch memory.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "capture/ir/graph.h"
#include "replay/backends/sim/device_spec.h"
#include "replay/compile/executable.h"

namespace tracecache {

struct KernelCost {
  int64_t flops = 0;
  int64_t bytes = 0;         // read + written
  bool matrix_unit = false;  // costed at the device's matrix-unit peak for matrix_dtype
  DType matrix_dtype = DType::kF32;  // the contraction's compute type (f32, bf16 or f16)
  friend bool operator==(const KernelCost&, const KernelCost&) = default;
};

// Flops of node `id` of `g` alone: its registry cost. 0 for a parameter.
int64_t op_flops(const Graph& g, NodeId id);
// Flops and bytes of one kernel of an executable over `g`.
KernelCost kernel_cost(const Graph& g, const Kernel& kernel);

// Device time of a kernel and of a transfer of `bytes`, in picoseconds.
int64_t kernel_time_ps(const DeviceSpec& spec, const KernelCost& cost);
int64_t transfer_time_ps(const DeviceSpec& spec, int64_t bytes);

}  // namespace tracecache
