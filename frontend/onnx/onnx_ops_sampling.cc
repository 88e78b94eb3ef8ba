// ONNX op handlers: GridSample and RoiAlign (the handler contract: onnx_lowering.h).
// GridSample (opset 16: 4-D input, PyTorch's grid_sample) is lowered to elementwise ops on the
// grid and gathers from the input. The grid may come from data: each output pixel's source
// coordinates are computed with PyTorch's formulas (grid_sampler_unnormalize,
// compute_coordinates with its border clip and reflection), then the input is read at the 1
// (nearest), 4 (bilinear) or 16 (bicubic) integer positions around them (gather on the
// flattened H · W, out-of-range reads 0) and weighted as PyTorch's CPU kernel weights them.
#include "frontend/onnx/onnx_lowering.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

void Importer::grid_sample() {
  V x = in(0), grid = in(1);
  require_float(x, "X");
  require_float(grid, "grid");
  const std::string mode = attr_string("mode", "bilinear"), padding = attr_string("padding_mode", "zeros");
  const bool align = attr_int("align_corners", 0) != 0;
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") node_unsupported("mode=" + mode);
  if (padding != "zeros" && padding != "border" && padding != "reflection") node_unsupported("padding_mode=" + padding);
  const Shape& xs = x->type.shape;
  const Shape& gs = grid->type.shape;
  if (xs.rank() != 4 || gs.rank() != 4 || gs[0] != xs[0] || gs[3] != 2) {
    fail_invalid(where_() + ": GridSample needs X [N, C, H, W] and grid [N, H_out, W_out, 2]");
  }
  const int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3], points = gs[1] * gs[2];
  auto coordinate = [&](int64_t k) {
    return reshape_to(op(OpKind::kSlice, {grid}, {{"axis", i(3)}, {"start", i(k)}, {"end", i(k + 1)}}), {n, points});
  };
  // grid_sampler_unnormalize: [-1, 1] to pixel coordinates.
  auto unnormalize = [&](const V& g, int64_t size) {
    const auto s = static_cast<double>(size);
    if (align) return op(OpKind::kMul, {op(OpKind::kMul, {op(OpKind::kAdd, {g, 1.0}), 0.5}), s - 1});
    return op(OpKind::kMul, {op(OpKind::kSub, {op(OpKind::kMul, {op(OpKind::kAdd, {g, 1.0}), s}), 1.0}), 0.5});
  };
  // reflect_coordinates(v, twice_low, twice_high): v folded into [low, high].
  auto reflect = [&](const V& v, int64_t twice_low, int64_t twice_high) -> V {
    if (twice_low == twice_high) return op(OpKind::kMul, {v, 0.0});
    const double low = static_cast<double>(twice_low) / 2, span = static_cast<double>(twice_high - twice_low) / 2;
    V a = op(OpKind::kAbs, {op(OpKind::kSub, {v, low})});
    V extra = op(OpKind::kFmod, {a, span});
    V flips = op(OpKind::kFloor, {op(OpKind::kDiv, {a, span})});
    V even = op(OpKind::kEq, {op(OpKind::kFmod, {flips, 2.0}), 0.0});
    return op(OpKind::kWhere, {even, op(OpKind::kAdd, {extra, low}), op(OpKind::kAdd, {op(OpKind::kSub, {span, extra}), low})});
  };
  // compute_coordinates: the padding mode's treatment of a source coordinate.
  auto pad_coordinate = [&](const V& v, int64_t size) -> V {
    auto clip = [&](const V& u) { return op(OpKind::kClamp, {u}, {{"min", f(0)}, {"max", f(static_cast<double>(size - 1))}}); };
    if (padding == "border") return clip(v);
    if (padding == "reflection") return clip(align ? reflect(v, 0, 2 * (size - 1)) : reflect(v, -1, 2 * size - 1));
    return v;
  };
  const V flat = reshape_to(x, {n, c, h * w});
  // The input at integer positions (xi, yi) (f32 holding integers), 0 outside the image.
  auto read = [&](const V& xi, const V& yi) {
    V inside = op(OpKind::kMinimum, {op(OpKind::kMinimum, {op(OpKind::kGt, {xi, -1.0}), op(OpKind::kLt, {xi, static_cast<double>(w)})}),
                                     op(OpKind::kMinimum, {op(OpKind::kGt, {yi, -1.0}), op(OpKind::kLt, {yi, static_cast<double>(h)})})});
    auto clip = [&](const V& u, int64_t size) { return op(OpKind::kClamp, {u}, {{"min", f(0)}, {"max", f(static_cast<double>(size - 1))}}); };
    V index = cast_to(op(OpKind::kAdd, {op(OpKind::kMul, {clip(yi, h), static_cast<double>(w)}), clip(xi, w)}), DType::kI64);
    index = op(OpKind::kBroadcastTo, {reshape_to(index, {n, 1, points})}, {{"shape", ints({n, c, points})}});
    V value = op(OpKind::kGather, {flat, index}, {{"axis", i(2)}});
    return op(OpKind::kWhere, {reshape_to(inside, {n, 1, points}), value, 0.0});
  };
  auto weight = [&](const V& v) { return reshape_to(v, {n, 1, points}); };
  V gx = unnormalize(coordinate(0), w), gy = unnormalize(coordinate(1), h);
  V y;
  if (mode == "nearest") {
    V ix = op(OpKind::kRound, {pad_coordinate(gx, w)}), iy = op(OpKind::kRound, {pad_coordinate(gy, h)});
    y = read(ix, iy);
  } else if (mode == "bilinear") {
    V ix = pad_coordinate(gx, w), iy = pad_coordinate(gy, h);
    V x0 = op(OpKind::kFloor, {ix}), y0 = op(OpKind::kFloor, {iy});
    V x1 = op(OpKind::kAdd, {x0, 1.0}), y1 = op(OpKind::kAdd, {y0, 1.0});
    V east = op(OpKind::kSub, {ix, x0}), west = op(OpKind::kSub, {x1, ix});
    V south = op(OpKind::kSub, {iy, y0}), north = op(OpKind::kSub, {y1, iy});
    V nw = op(OpKind::kMul, {read(x0, y0), weight(op(OpKind::kMul, {west, north}))});
    V ne = op(OpKind::kMul, {read(x1, y0), weight(op(OpKind::kMul, {east, north}))});
    V sw = op(OpKind::kMul, {read(x0, y1), weight(op(OpKind::kMul, {west, south}))});
    V se = op(OpKind::kMul, {read(x1, y1), weight(op(OpKind::kMul, {east, south}))});
    y = op(OpKind::kAdd, {op(OpKind::kAdd, {op(OpKind::kAdd, {nw, ne}), sw}), se});
  } else {
    // Bicubic: the 4 x 4 integer neighbours of the unpadded coordinate, each padded as a
    // coordinate and truncated (get_value_bounded), cubic weights of A = -0.75 (PyTorch's).
    constexpr double a = -0.75;
    auto near_weight = [&](const V& t) {  // ((A + 2) t - (A + 3)) t^2 + 1
      return op(OpKind::kAdd, {op(OpKind::kMul, {op(OpKind::kSub, {op(OpKind::kMul, {t, a + 2}), a + 3}), op(OpKind::kMul, {t, t})}), 1.0});
    };
    auto far_weight = [&](const V& t) {  // ((A t - 5A) t + 8A) t - 4A
      return op(OpKind::kSub, {op(OpKind::kMul, {op(OpKind::kAdd, {op(OpKind::kMul, {op(OpKind::kSub, {op(OpKind::kMul, {t, a}), 5 * a}), t}), 8 * a}), t}), 4 * a});
    };
    auto weights = [&](const V& t) {
      V rest = op(OpKind::kSub, {1.0, t});
      return std::array<V, 4>{far_weight(op(OpKind::kAdd, {t, 1.0})), near_weight(t), near_weight(rest),
                              far_weight(op(OpKind::kAdd, {rest, 1.0}))};
    };
    V x0 = op(OpKind::kFloor, {gx}), y0 = op(OpKind::kFloor, {gy});
    const std::array<V, 4> wx = weights(op(OpKind::kSub, {gx, x0})), wy = weights(op(OpKind::kSub, {gy, y0}));
    auto position = [&](const V& base, int k, int64_t size) {
      // static_cast<int64_t>: toward zero.
      return cast_to(cast_to(pad_coordinate(op(OpKind::kAdd, {base, static_cast<double>(k - 1)}), size), DType::kI64), DType::kF32);
    };
    for (int row = 0; row < 4; ++row) {
      V yi = position(y0, row, h);
      V line;
      for (int col = 0; col < 4; ++col) {
        V term = op(OpKind::kMul, {read(position(x0, col, w), yi), weight(wx[static_cast<size_t>(col)])});
        line = line ? op(OpKind::kAdd, {line, term}) : term;
      }
      V term = op(OpKind::kMul, {line, weight(wy[static_cast<size_t>(row)])});
      y = y ? op(OpKind::kAdd, {y, term}) : term;
    }
  }
  out(0, reshape_to(y, {n, c, gs[1], gs[2]}));
}

// RoiAlign (mode avg) with constant rois: each roi's output bins average bilinear samples of
// the input (ONNX's reference, pre_calc_for_bilinear_interpolate), a linear map of x[batch]:
// y[r] = x[batch[r]] as [C, H · W] times a constant [H · W, bins] matrix per roi (index_select
// of the rois' images, then one batched matmul). Max mode is not linear: refused.
void Importer::roi_align() {
  V x = in(0), rois = in(1), batch = in(2);
  require_float(x, "X");
  const std::string mode = attr_string("mode", "avg");
  if (mode != "avg") node_unsupported("mode=" + mode);
  const std::string ctm = attr_string("coordinate_transformation_mode", "half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel") fail_invalid(where_() + ": coordinate_transformation_mode must be half_pixel or output_half_pixel");
  const bool half_pixel = ctm == "half_pixel";
  const int64_t oh = attr_int("output_height", 1), ow = attr_int("output_width", 1);
  const int64_t ratio = attr_int("sampling_ratio", 0);
  const double scale = attr_float("spatial_scale", 1.0f);
  if (!rois->known) needs_constant("rois");
  const Shape& xs = x->type.shape;
  if (xs.rank() != 4 || rois->type.shape.rank() != 2 || rois->type.shape[1] != 4 || oh < 1 || ow < 1) {
    fail_invalid(where_() + ": RoiAlign needs X [N, C, H, W], rois [R, 4] and positive output sizes");
  }
  const int64_t r_count = rois->type.shape[0], h = xs[2], w = xs[3];
  if (r_count * h * w * oh * ow > (int64_t{1} << 22)) node_unsupported("an interpolation matrix above 2^22 entries");
  HostBuffer m(DType::kF32, Shape{r_count, h * w, oh * ow});  // per roi: [H · W, bins]
  float* p = m.data<float>();
  std::fill(p, p + m.numel(), 0.0f);
  for (int64_t r = 0; r < r_count; ++r) {
    auto roi = [&](int64_t k) { return rois->known->element_as_double(r * 4 + k) * scale - (half_pixel ? 0.5 : 0.0); };
    const double start_w = roi(0), start_h = roi(1);
    double roi_w = roi(2) - start_w, roi_h = roi(3) - start_h;
    if (!half_pixel) {
      roi_w = std::max(roi_w, 1.0);
      roi_h = std::max(roi_h, 1.0);
    }
    const double bin_h = roi_h / static_cast<double>(oh), bin_w = roi_w / static_cast<double>(ow);
    const auto grid_h = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(roi_h / static_cast<double>(oh)));
    const auto grid_w = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(roi_w / static_cast<double>(ow)));
    const double count = static_cast<double>(std::max<int64_t>(grid_h * grid_w, 1));
    for (int64_t ph = 0; ph < oh; ++ph) {
      for (int64_t pw = 0; pw < ow; ++pw) {
        for (int64_t iy = 0; iy < grid_h; ++iy) {
          for (int64_t ix = 0; ix < grid_w; ++ix) {
            double y = start_h + static_cast<double>(ph) * bin_h + (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(grid_h);
            double xx = start_w + static_cast<double>(pw) * bin_w + (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(grid_w);
            if (y < -1.0 || y > static_cast<double>(h) || xx < -1.0 || xx > static_cast<double>(w)) continue;
            y = std::max(y, 0.0);
            xx = std::max(xx, 0.0);
            auto y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(xx);
            int64_t y_high, x_high;
            if (y_low >= h - 1) { y_high = y_low = h - 1; y = static_cast<double>(y_low); } else { y_high = y_low + 1; }
            if (x_low >= w - 1) { x_high = x_low = w - 1; xx = static_cast<double>(x_low); } else { x_high = x_low + 1; }
            const double ly = y - static_cast<double>(y_low), lx = xx - static_cast<double>(x_low);
            const double hy = 1 - ly, hx = 1 - lx;
            const int64_t bin = ph * ow + pw;
            auto add = [&](int64_t pos, double weight) { p[(r * h * w + pos) * oh * ow + bin] += static_cast<float>(weight / count); };
            add(y_low * w + x_low, hy * hx);
            add(y_low * w + x_high, hy * lx);
            add(y_high * w + x_low, ly * hx);
            add(y_high * w + x_high, ly * lx);
          }
        }
      }
    }
  }
  V images = op(OpKind::kIndexSelect, {reshape_to(x, {xs[0], xs[1], h * w}), reshape_to(cast_to(batch, DType::kI64), {r_count})},
                {{"axis", i(0)}});
  V y = op(OpKind::kMatmul, {images, known(std::move(m))});  // [R, C, bins]
  out(0, reshape_to(y, {r_count, xs[1], oh, ow}));
}

}  // namespace tracecache::onnx_import::detail
