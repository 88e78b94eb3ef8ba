// The sampling of resize_nearest2d and resize_linear2d (ONNX Resize on the last two dims of an
// NCHW tensor): which input rows/columns each output row/column reads, and with what weights.
// Shared by the reference kernels (capture/ops/reference_onnx_ops.cc) and the cpu kernels
// (replay/backends/cpu), which therefore give the same bits; docs/ops.md has the formulas.
//
// Coordinates are computed in double from the output index, the two lengths and the scale
// (the attribute, or output length / input length when it is 0), as ONNX's reference does.
// Pure functions; thread-safe. REQUIRES (the inference rules check them): lengths >= 1, scale
// finite and >= 0, modes in range.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tracecache::resize {

// The `coordinate_transformation_mode` attribute (ONNX's spellings).
enum class CoordMode : int64_t {
  kHalfPixel = 0,
  kAsymmetric = 1,
  kAlignCorners = 2,
  kPytorchHalfPixel = 3,
  kTfHalfPixelForNearest = 4,
};
inline constexpr int64_t kCoordModes = 5;

// The `nearest_mode` attribute.
enum class NearestMode : int64_t { kRoundPreferFloor = 0, kRoundPreferCeil = 1, kFloor = 2, kCeil = 3 };
inline constexpr int64_t kNearestModes = 4;

// The input coordinate output index `x` maps to.
inline double source_coord(CoordMode mode, int64_t x, int64_t in_len, int64_t out_len, double scale) {
  if (scale == 0) scale = static_cast<double>(out_len) / static_cast<double>(in_len);
  const double xr = static_cast<double>(x);
  switch (mode) {
    case CoordMode::kHalfPixel: return (xr + 0.5) / scale - 0.5;
    case CoordMode::kAsymmetric: return xr / scale;
    case CoordMode::kAlignCorners:
      return out_len == 1 ? 0.0 : xr * static_cast<double>(in_len - 1) / static_cast<double>(out_len - 1);
    case CoordMode::kPytorchHalfPixel: return out_len > 1 ? (xr + 0.5) / scale - 0.5 : 0.0;
    case CoordMode::kTfHalfPixelForNearest: return (xr + 0.5) / scale;
  }
  return 0;
}

inline int64_t clamp_index(double i, int64_t len) {
  return static_cast<int64_t>(std::clamp(i, 0.0, static_cast<double>(len - 1)));
}

// For every output index, the input index nearest mode `nearest` picks, clamped into the input.
inline std::vector<int64_t> nearest_taps(CoordMode mode, NearestMode nearest, int64_t in_len, int64_t out_len,
                                         double scale) {
  std::vector<int64_t> taps(static_cast<size_t>(out_len));
  for (int64_t x = 0; x < out_len; ++x) {
    const double c = source_coord(mode, x, in_len, out_len, scale);
    const double f = std::floor(c);
    double i = 0;
    switch (nearest) {
      case NearestMode::kRoundPreferFloor: i = c - f == 0.5 ? f : std::round(c); break;
      case NearestMode::kRoundPreferCeil: i = c - f == 0.5 ? f + 1 : std::round(c); break;
      case NearestMode::kFloor: i = f; break;
      case NearestMode::kCeil: i = std::ceil(c); break;
    }
    taps[static_cast<size_t>(x)] = clamp_index(i, in_len);
  }
  return taps;
}

// Linear interpolation between input indices i0 and i1 = i0 + 1 (both clamped into the input,
// as ONNX's edge padding does) with weights w0 = 1 - r and w1 = r, r = c - floor(c).
struct LinearTap {
  int64_t i0, i1;
  float w0, w1;
};

inline std::vector<LinearTap> linear_taps(CoordMode mode, int64_t in_len, int64_t out_len, double scale) {
  std::vector<LinearTap> taps(static_cast<size_t>(out_len));
  for (int64_t x = 0; x < out_len; ++x) {
    const double c = source_coord(mode, x, in_len, out_len, scale);
    const double f = std::floor(c);
    const double r = c - f;
    taps[static_cast<size_t>(x)] = {clamp_index(f, in_len), clamp_index(f + 1, in_len), static_cast<float>(1 - r),
                                    static_cast<float>(r)};
  }
  return taps;
}

// One output plane of resize_nearest2d: out[y][x] = in[rows[y]][cols[x]] (elements of `elem` bytes).
inline void nearest_plane(const std::byte* in, int64_t in_w, std::byte* out, const std::vector<int64_t>& rows,
                          const std::vector<int64_t>& cols, size_t elem) {
  std::byte* o = out;
  for (int64_t r : rows) {
    const std::byte* row = in + static_cast<size_t>(r * in_w) * elem;
    for (int64_t c : cols) {
      std::copy_n(row + static_cast<size_t>(c) * elem, elem, o);
      o += elem;
    }
  }
}

// One output plane of resize_linear2d, in float:
// out = wy0 (wx0 a + wx1 b) + wy1 (wx0 c + wx1 d) for the four taps a, b (row i0), c, d (row i1).
inline void linear_plane(const float* in, int64_t in_w, float* out, const std::vector<LinearTap>& rows,
                         const std::vector<LinearTap>& cols) {
  float* o = out;
  for (const LinearTap& ry : rows) {
    const float* r0 = in + ry.i0 * in_w;
    const float* r1 = in + ry.i1 * in_w;
    for (const LinearTap& cx : cols) {
      const float top = cx.w0 * r0[cx.i0] + cx.w1 * r0[cx.i1];
      const float bottom = cx.w0 * r1[cx.i0] + cx.w1 * r1[cx.i1];
      *o++ = ry.w0 * top + ry.w1 * bottom;
    }
  }
}

}  // namespace tracecache::resize
