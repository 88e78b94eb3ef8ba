// ONNX op handlers: DFT and STFT as a matmul with a constant matrix of the transform's cosines
// and sines (the handler contract: onnx_lowering.h). A direct DFT is O(n^2) per signal, exact up
// to the matmul's rounding (each output a dot product of n terms); the matrix is n x 2m floats
// (m output bins), so signals are bounded by kMaxTransformLength. The table's angles are reduced
// exactly (j·k mod n) so that the zeros and ones of the unit circle are exact.
#include "frontend/onnx/onnx_lowering.h"

#include <cmath>
#include <numbers>

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

namespace {

constexpr int64_t kMaxTransformLength = 4096;

// cos and sin of 2 pi m / n, exact at the multiples of a quarter turn.
std::pair<double, double> unit_circle(int64_t m, int64_t n) {
  if (m == 0) return {1, 0};
  if (2 * m == n) return {-1, 0};
  if (4 * m == n) return {0, 1};
  if (4 * m == 3 * n) return {0, -1};
  const double a = 2 * std::numbers::pi * static_cast<double>(m) / static_cast<double>(n);
  return {std::cos(a), std::sin(a)};
}

}  // namespace

// x [..., n] real (and imag, when `imag`) along the last dim -> [..., bins, 2]: one matmul of
// [re | im] with [[C, -S], [S, C]] (forward, S = sin(2 pi jk / n)), or [[C, S], [-S, C]] / n
// (inverse).
V Importer::dft_last(const V& re, const V* im, int64_t bins, bool inverse) {
  const int64_t n = re->type.shape[re->type.shape.rank() - 1];
  if (n > kMaxTransformLength || bins > kMaxTransformLength) {
    node_unsupported(fmt::format("a transform of length {} (a matrix product: at most {})", std::max(n, bins),
                                 kMaxTransformLength));
  }
  const int64_t rows = im ? 2 * n : n;
  HostBuffer m(DType::kF32, Shape{rows, 2 * bins});
  float* p = m.data<float>();
  const double scale = inverse ? 1.0 / static_cast<double>(n) : 1.0;
  const double sign = inverse ? -1.0 : 1.0;  // forward: e^(-i theta)
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t k = 0; k < bins; ++k) {
      const auto [c, s] = unit_circle(j * k % n, n);
      // Re(y_k) += re_j c + sign · im_j s; Im(y_k) += -sign · re_j s + im_j c.
      p[j * 2 * bins + k] = static_cast<float>(c * scale);
      p[j * 2 * bins + bins + k] = static_cast<float>(-sign * s * scale);
      if (im) {
        p[(n + j) * 2 * bins + k] = static_cast<float>(sign * s * scale);
        p[(n + j) * 2 * bins + bins + k] = static_cast<float>(c * scale);
      }
    }
  }
  const int r = re->type.shape.rank();
  V in_rows = im ? op(OpKind::kConcat, {re, *im}, {{"axis", i(r - 1)}}) : re;
  V y = op(OpKind::kMatmul, {in_rows, known(std::move(m))});  // [..., 2 · bins]: re then im
  std::vector<int64_t> dims = dims_of(re->type.shape);
  dims.back() = 2;
  dims.push_back(bins);
  y = reshape_to(y, dims);  // [..., 2, bins]
  return op(OpKind::kTranspose, {y}, {{"dim0", i(r - 1)}, {"dim1", i(r)}});  // [..., bins, 2]
}

// DFT (opset 17): the signal axis `axis` of [batch, ..., 1 or 2]; dft_length pads with zeros or
// truncates; onesided keeps n / 2 + 1 bins.
void Importer::dft() {
  V x = in(0);
  require_floating(x, "input");
  const int r = x->type.shape.rank();
  if (r < 3) fail_invalid(where_() + ": DFT needs [batch, signal..., 1 or 2]");
  const int64_t parts = x->type.shape[r - 1];
  if (parts != 1 && parts != 2) fail_invalid(where_() + ": the last dim must be 1 (real) or 2 (complex)");
  const int64_t axis = attr_int("axis", 1);
  if (axis < 1 || axis >= r - 1) fail_invalid(fmt::format("{}: axis {} must name a signal dim", where_(), axis));
  const bool inverse = attr_int("inverse", 0) != 0, onesided = attr_int("onesided", 0) != 0;
  if (inverse && onesided) node_unsupported("inverse with onesided");
  int64_t n = x->type.shape[static_cast<int>(axis)];
  if (has_in(1)) {
    const std::vector<int64_t> len = ints_of(in(1), "dft_length");
    if (len.size() != 1 || len[0] < 1) fail_invalid(where_() + ": dft_length must be one positive value");
    if (len[0] < n) x = op(OpKind::kSlice, {x}, {{"axis", i(axis)}, {"start", i(0)}, {"end", i(len[0])}});
    n = len[0];
  }
  // The signal axis last, [..., n, parts] -> [..., parts, n] with the other signal dims first.
  std::vector<int64_t> perm;
  for (int k = 0; k < r - 1; ++k) if (k != axis) perm.push_back(k);
  perm.push_back(r - 1);
  perm.push_back(axis);
  V moved = op(OpKind::kPermute, {x}, {{"perm", ints(perm)}});
  const int64_t have = moved->type.shape[r - 1];
  if (have < n) {
    std::vector<int64_t> dims = dims_of(moved->type.shape);
    dims.back() = n - have;
    moved = op(OpKind::kConcat, {moved, op(OpKind::kFull, {}, {{"shape", ints(dims)}, {"value", f(0)},
                                                              {"dtype", AttrValue::of_dtype(x->type.dtype)}})},
               {{"axis", i(r - 1)}});
  }
  std::vector<int64_t> part_dims = dims_of(moved->type.shape);
  part_dims.erase(part_dims.end() - 2);
  auto part = [&](int64_t k) {
    return reshape_to(op(OpKind::kSlice, {moved}, {{"axis", i(r - 2)}, {"start", i(k)}, {"end", i(k + 1)}}), part_dims);
  };
  V re = part(0);
  std::optional<V> im;
  if (parts == 2) im = part(1);
  const int64_t bins = onesided ? n / 2 + 1 : n;
  V y = dft_last(re, im ? &*im : nullptr, bins, inverse);  // [others..., bins, 2]
  // Back: the bins to `axis`.
  std::vector<int64_t> back(static_cast<size_t>(r));
  int src = 0;
  for (int k = 0; k < r - 1; ++k) back[static_cast<size_t>(k)] = k == axis ? r - 2 : src++;
  back[static_cast<size_t>(r - 1)] = r - 1;
  out(0, cast_to(op(OpKind::kPermute, {y}, {{"perm", ints(back)}}), x->type.dtype));
}

// STFT (opset 17): signal [batch, length, 1 or 2]; frames of frame_length every frame_step
// (index_select of a constant frame index), times the window, then the DFT of each frame.
void Importer::stft() {
  V x = in(0);
  require_floating(x, "signal");
  const Shape& s = x->type.shape;
  if (s.rank() != 3 || (s[2] != 1 && s[2] != 2)) fail_invalid(where_() + ": the signal must be [batch, length, 1 or 2]");
  const bool onesided = attr_int("onesided", 1) != 0;
  const std::vector<int64_t> step_v = ints_of(in(1), "frame_step");
  if (step_v.size() != 1 || step_v[0] < 1) fail_invalid(where_() + ": frame_step must be one positive value");
  const int64_t step = step_v[0];
  std::optional<V> window;
  if (has_in(2)) window = in(2);
  int64_t length = window ? window->get()->type.shape.numel() : 0;
  if (has_in(3)) {
    const std::vector<int64_t> len = ints_of(in(3), "frame_length");
    if (len.size() != 1 || len[0] < 1 || (window && len[0] != length)) fail_invalid(where_() + ": frame_length does not match the window");
    length = len[0];
  }
  if (length < 1 || length > s[1]) fail_invalid(where_() + ": frames need a length between 1 and the signal's");
  const int64_t frames = (s[1] - length) / step + 1;
  if (frames * length > kFoldLimit) node_unsupported(fmt::format("{} frames of {} (at most {} samples)", frames, length, kFoldLimit));
  HostBuffer index(DType::kI64, Shape{frames * length});
  for (int64_t fr = 0; fr < frames; ++fr) {
    for (int64_t k = 0; k < length; ++k) index.data<int64_t>()[fr * length + k] = fr * step + k;
  }
  V framed = op(OpKind::kIndexSelect, {x, known(std::move(index))}, {{"axis", i(1)}});  // [batch, frames · length, parts]
  framed = op(OpKind::kTranspose, {reshape_to(framed, {s[0], frames, length, s[2]})}, {{"dim0", i(2)}, {"dim1", i(3)}});
  // [batch, frames, parts, length]
  auto part = [&](int64_t k) {
    V p = reshape_to(op(OpKind::kSlice, {framed}, {{"axis", i(2)}, {"start", i(k)}, {"end", i(k + 1)}}), {s[0], frames, length});
    return window ? op(OpKind::kMul, {p, *window}) : p;
  };
  V re = part(0);
  std::optional<V> im;
  if (s[2] == 2) im = part(1);
  const int64_t bins = onesided ? length / 2 + 1 : length;
  out(0, cast_to(dft_last(re, im ? &*im : nullptr, bins, false), x->type.dtype));
}

}  // namespace tracecache::onnx_import::detail
