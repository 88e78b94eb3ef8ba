#include "replay/backends/sim/device_spec.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "capture/core/buffer.h"

namespace tracecache {

namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Launch overhead and transfer latency are not datasheet figures: 4 us per kernel and 2 us per
// transfer are typical measured CUDA launch and small-cudaMemcpy latencies (docs/sim.md).
const std::array<DeviceSpec, 3> kPresets = {{
    // NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column), nvidia.com/en-us/data-center/h100:
    // FP32 67 TFLOPS; TF32 Tensor Core 989 TFLOPS is with sparsity (494.5 dense) and would round
    // operands to TF32, but sim outputs are exact f32 (the CPU kernels), so f32 matmul is costed
    // at the FP32 rate, as PyTorch runs it by default (allow_tf32 = False since 1.12).
    // BF16 and FP16 Tensor Core 1,979 TFLOPS each with sparsity, i.e. 989.5 dense (the rate used).
    // GPU memory 80 GB HBM3 at 3.35 TB/s. Host link PCIe Gen5 x16: 128 GB/s bidirectional, i.e.
    // 64 GB/s per direction (NVLink-C2C exists only on Grace Hopper, not applicable).
    {"h100", 67, 989.5, 989.5, 67, 3350, 80 * kGiB, 64, 2000, 4000},
    // NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column), nvidia.com/en-us/data-center/a100:
    // FP32 19.5 TFLOPS (TF32 Tensor Core 156 dense: not used, same reason as h100), 80 GB HBM2e
    // at 2,039 GB/s, PCIe Gen4 x16 64 GB/s bidirectional = 32 GB/s per direction. BF16 and FP16
    // Tensor Core 312 TFLOPS each dense (624 with sparsity).
    {"a100", 19.5, 312, 312, 19.5, 2039, 80 * kGiB, 32, 2000, 4000},
    // Google Cloud TPU v4 system architecture (cloud.google.com/tpu/docs/v4): 275 TFLOPS peak
    // (bf16), 32 GiB HBM2 at 1,200 GB/s. ASSUMPTIONS (not published per chip): f32 matmul at
    // 1/6 of the bf16 rate (six bf16 passes, XLA's precision=HIGHEST, which matches f32), i.e.
    // 45.83 TFLOPS; vector (non-MXU) f32 at 8 TFLOPS; host link 16 GB/s (PCIe Gen3 x16 class);
    // 2 us launch overhead (one XLA program per kernel), 2 us transfer latency. bf16 matmul at the
    // published 275; f16, which the MXU does not take (ASSUMPTION: XLA computes it as f32), at
    // the f32 rate.
    {"tpu-v4", 275.0 / 6.0, 275, 275.0 / 6.0, 8, 1200, 32 * kGiB, 16, 2000, 2000},
}};

Status line_error(std::string_view origin, int line, const std::string& msg) {
  return parse_error(fmt::format("{}:{}: {}", origin, line, msg));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::optional<double> parse_number(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// "1048576", "64K", "80G" (powers of 1024). Overflow and zero are errors.
std::optional<uint64_t> parse_capacity(std::string_view s) {
  uint64_t scale = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': scale = uint64_t{1} << 10; break;
      case 'M': scale = uint64_t{1} << 20; break;
      case 'G': scale = uint64_t{1} << 30; break;
      case 'T': scale = uint64_t{1} << 40; break;
      default: break;
    }
    if (scale != 1) s.remove_suffix(1);
  }
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v == 0 || v > UINT64_MAX / scale) {
    return std::nullopt;
  }
  return v * scale;
}

bool valid_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

enum class Field {
  kName, kMatmul, kVector, kMemoryBw, kCapacity, kLinkBw, kLinkLatency, kLaunch, kMatmulBf16, kMatmulF16, kCount
};
constexpr std::array<std::string_view, static_cast<size_t>(Field::kCount)> kKeys = {
    "name", "matmul_tflops", "vector_tflops", "memory_gbps", "memory_capacity",
    "link_gbps", "link_latency_ns", "launch_overhead_ns", "matmul_bf16_tflops", "matmul_f16_tflops"};
// The keys a file may leave out (unset: matmul_tflops is used).
bool optional_key(Field f) { return f == Field::kMatmulBf16 || f == Field::kMatmulF16; }

}  // namespace

std::span<const DeviceSpec> device_presets() { return kPresets; }

const DeviceSpec* find_device_preset(std::string_view name) {
  for (const DeviceSpec& s : kPresets) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string DeviceSpec::to_text() const {
  std::string half;
  if (matmul_bf16_tflops > 0) half += fmt::format("matmul_bf16_tflops = {}\n", matmul_bf16_tflops);
  if (matmul_f16_tflops > 0) half += fmt::format("matmul_f16_tflops = {}\n", matmul_f16_tflops);
  return fmt::format(
      "name = {}\nmatmul_tflops = {}\n{}vector_tflops = {}\nmemory_gbps = {}\nmemory_capacity = {}\n"
      "link_gbps = {}\nlink_latency_ns = {}\nlaunch_overhead_ns = {}\n",
      name, matmul_tflops, half, vector_tflops, memory_gbps, memory_capacity, link_gbps, link_latency_ns,
      launch_overhead_ns);
}

std::string DeviceSpec::digest() const {
  // fmt's shortest round-trip spelling: equal doubles give equal text, different ones differ.
  // The half rates as they are used (an unset one is the f32 rate).
  std::string text = fmt::format("sim device spec v2; {}; {}; {}; {}; {}; {}; {}; {}; {}", matmul_tflops,
                                 matmul_peak(DType::kBF16), matmul_peak(DType::kF16), vector_tflops, memory_gbps,
                                 memory_capacity, link_gbps, link_latency_ns, launch_overhead_ns);
  return hex64(XXH3_64bits(text.data(), text.size()));
}

Result<DeviceSpec> parse_device_spec(std::string_view text, std::string_view origin) {
  DeviceSpec spec;
  std::array<int, static_cast<size_t>(Field::kCount)> seen_at{};
  int line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    line = trim(line.substr(0, line.find('#')));  // a comment runs to the end of the line
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return line_error(origin, line_no, fmt::format("expected 'key = value', got '{}'", line));
    }
    std::string_view key = trim(line.substr(0, eq));
    std::string_view value = trim(line.substr(eq + 1));
    size_t f = 0;
    while (f < kKeys.size() && kKeys[f] != key) ++f;
    if (f == kKeys.size()) {
      return line_error(origin, line_no,
                        fmt::format("unknown key '{}' (expected one of: {})", key, fmt::join(kKeys, ", ")));
    }
    if (seen_at[f] != 0) {
      return line_error(origin, line_no,
                        fmt::format("'{}' is set twice (first on line {})", key, seen_at[f]));
    }
    seen_at[f] = line_no;
    const auto field = static_cast<Field>(f);
    if (field == Field::kName) {
      if (!valid_name(value)) {
        return line_error(origin, line_no,
                          fmt::format("name '{}' must be letters, digits, '-', '_' or '.'", value));
      }
      spec.name = std::string(value);
      continue;
    }
    if (field == Field::kCapacity) {
      std::optional<uint64_t> bytes = parse_capacity(value);
      if (!bytes) {
        return line_error(origin, line_no,
                          fmt::format("memory_capacity '{}' is not a positive byte count "
                                      "(an integer, optionally with K, M, G or T)", value));
      }
      spec.memory_capacity = *bytes;
      continue;
    }
    std::optional<double> v = parse_number(value);
    const bool latency = field == Field::kLinkLatency || field == Field::kLaunch;
    if (!v || *v < 0 || (!latency && *v == 0)) {
      return line_error(origin, line_no,
                        fmt::format("{} '{}' must be a finite number {}", key, value,
                                    latency ? ">= 0" : "> 0"));
    }
    switch (field) {
      case Field::kMatmul: spec.matmul_tflops = *v; break;
      case Field::kMatmulBf16: spec.matmul_bf16_tflops = *v; break;
      case Field::kMatmulF16: spec.matmul_f16_tflops = *v; break;
      case Field::kVector: spec.vector_tflops = *v; break;
      case Field::kMemoryBw: spec.memory_gbps = *v; break;
      case Field::kLinkBw: spec.link_gbps = *v; break;
      case Field::kLinkLatency: spec.link_latency_ns = *v; break;
      case Field::kLaunch: spec.launch_overhead_ns = *v; break;
      case Field::kName:
      case Field::kCapacity:
      case Field::kCount: break;
    }
  }
  for (size_t f = 0; f < kKeys.size(); ++f) {
    if (seen_at[f] == 0 && !optional_key(static_cast<Field>(f))) {
      return parse_error(fmt::format("{}: missing key '{}'", origin, kKeys[f]));
    }
  }
  return spec;
}

Result<DeviceSpec> load_device_spec_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::vector<std::string_view> names;
    for (const DeviceSpec& s : kPresets) names.push_back(s.name);
    return not_found(fmt::format("device spec '{}' is neither a preset ({}) nor a readable file",
                                 path, fmt::join(names, ", ")));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return io_error(fmt::format("cannot read device spec '{}'", path));
  return parse_device_spec(buf.str(), path);
}

Result<DeviceSpec> resolve_device_spec(const std::string& preset_or_path) {
  if (const DeviceSpec* preset = find_device_preset(preset_or_path)) return *preset;
  return load_device_spec_file(preset_or_path);
}

}  // namespace tracecache
