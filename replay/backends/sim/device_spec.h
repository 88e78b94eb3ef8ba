// DeviceSpec: the numbers that describe a simulated accelerator for the `sim` backend
// (replay/backends/sim/sim_backend.h): peak FLOP/s, memory bandwidth and capacity, the host link, and the
// fixed costs of a kernel launch and a transfer. Presets come from published datasheets (each
// figure's source is cited in device_spec.cc and docs/sim.md); anything else comes from a spec
// file.
//
// Spec file format: UTF-8 text, one `key = value` per line; blank lines and lines starting with
// `#` are ignored.
//
//   name               = my-gpu          # a label (letters, digits, '-', '_', '.'); not in the digest
//   matmul_tflops      = 19.5            # peak for matrix-unit ops on f32 (matmul, conv2d, linear, attention)
//   matmul_bf16_tflops = 312             # optional: the same ops on bf16 (default: matmul_tflops)
//   matmul_f16_tflops  = 312             # optional: the same ops on f16 (default: matmul_tflops)
//   vector_tflops      = 19.5            # peak for every other op (and integer matmul)
//   memory_gbps        = 2039            # device memory bandwidth, GB/s (10^9 bytes/s)
//   memory_capacity    = 80G             # bytes; suffixes K, M, G, T are powers of 1024
//   link_gbps          = 32              # host<->device link, GB/s per direction
//   link_latency_ns    = 2000            # fixed cost of one transfer
//   launch_overhead_ns = 4000            # fixed cost of one kernel
//
// Every key but the two optional ones is required exactly once; unknown keys are errors.
// Rates are positive and finite; latencies are finite and >= 0; the capacity is > 0.
// Errors name the file and line: "spec.txt:3: unknown key 'matmul_tflop'".
// Thread-safety: plain values; the functions are pure (parse_device_spec_file reads one file).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "capture/core/dtype.h"
#include "capture/core/status.h"

namespace tracecache {

struct DeviceSpec {
  std::string name;
  double matmul_tflops = 0;
  double matmul_bf16_tflops = 0;  // 0: unset, the f32 rate
  double matmul_f16_tflops = 0;   // 0: unset, the f32 rate
  double vector_tflops = 0;
  double memory_gbps = 0;
  uint64_t memory_capacity = 0;
  double link_gbps = 0;
  double link_latency_ns = 0;
  double launch_overhead_ns = 0;

  // The matrix-unit peak for a contraction computing in `t`: the bf16 or f16 rate, else the f32 one.
  double matmul_peak(DType t) const {
    const double half = t == DType::kBF16 ? matmul_bf16_tflops : t == DType::kF16 ? matmul_f16_tflops : 0;
    return half > 0 ? half : matmul_tflops;
  }

  // The spec in the file format above (parses back to an equal spec; an unset half rate is
  // left out).
  std::string to_text() const;
  // Hex XXH3-64 of every field but `name`, in fixed order and spelling: the sim backend's
  // options digest, so executables are never shared between different devices.
  std::string digest() const;
};

// The built-in presets: "h100", "a100", "tpu-v4".
std::span<const DeviceSpec> device_presets();
// nullptr if no preset has that name.
const DeviceSpec* find_device_preset(std::string_view name);

// Parses spec-file text; `origin` names the source in errors ("FILE:LINE: ...", kParseError).
Result<DeviceSpec> parse_device_spec(std::string_view text, std::string_view origin);
// Reads and parses a spec file (kNotFound / kIOError if it cannot be read).
Result<DeviceSpec> load_device_spec_file(const std::string& path);
// A preset name, else a spec file path.
Result<DeviceSpec> resolve_device_spec(const std::string& preset_or_path);

}  // namespace tracecache
