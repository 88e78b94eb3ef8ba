// ONNX op handlers: nn layers (convolution, pooling, normalization, resize) (the handler
// contract: onnx_lowering.h).
#include "frontend/onnx/onnx_lowering.h"

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

// ---- handlers: nn layers ---------------------------------------------------------------------------

void Importer::conv() {
  V x = in(0), w = in(1);
  require_rank4(x, "input");
  require_float(x, "input");
  const Shape& ws = w->type.shape;
  if (ws.rank() != 4) fail_invalid(where_() + ": the weight must have rank 4");
  if (std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape"); k && *k != std::vector<int64_t>{ws[2], ws[3]}) {
    fail_invalid(where_() + ": kernel_shape does not match the weight");
  }
  const auto stride = pair_attr("strides", 1), dil = pair_attr("dilations", 1);
  const int64_t group = attr_int("group", 1);
  const auto pads = spatial_pads(x->type.shape, {dil[0] * (ws[2] - 1) + 1, dil[1] * (ws[3] - 1) + 1}, stride);
  std::vector<int64_t> padding = {pads[0], pads[1]};
  if (pads[0] != pads[2] || pads[1] != pads[3]) {
    x = pad2d(x, pads[0], pads[2], pads[1], pads[3], 0.0);
    padding = {0, 0};
  }
  std::vector<Arg> args = {x, w};
  if (has_in(2)) args.emplace_back(in(2));
  out(0, op(OpKind::kConv2d, std::move(args),
            {{"stride", ints({stride[0], stride[1]})}, {"padding", ints(padding)},
             {"dilation", ints({dil[0], dil[1]})}, {"groups", i(group)}}));
}

void Importer::conv_transpose() {
  V x = in(0), w = in(1);
  require_rank4(x, "input");
  require_float(x, "input");
  const Shape& ws = w->type.shape;
  if (ws.rank() != 4) fail_invalid(where_() + ": the weight must have rank 4");
  if (std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape"); k && *k != std::vector<int64_t>{ws[2], ws[3]}) {
    fail_invalid(where_() + ": kernel_shape does not match the weight");
  }
  const auto stride = pair_attr("strides", 1), dil = pair_attr("dilations", 1), opad = pair_attr("output_padding", 0);
  const int64_t group = attr_int("group", 1);
  const std::string auto_pad = attr_string("auto_pad", "NOTSET");
  std::optional<std::vector<int64_t>> output_shape = attr_ints("output_shape");
  std::optional<std::vector<int64_t>> pads_attr = attr_ints("pads");
  std::array<int64_t, 4> pads{};  // top, left, bottom, right
  std::array<int64_t, 2> full{};  // the un-cropped output size
  for (int a = 0; a < 2; ++a) {
    const auto u = static_cast<size_t>(a);
    full[u] = stride[u] * (x->type.shape[2 + a] - 1) + dil[u] * (ws[2 + a] - 1) + 1;
  }
  if (output_shape || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    std::vector<int64_t> target;
    if (output_shape) {
      target = *output_shape;
      if (target.size() == 4) target.erase(target.begin(), target.begin() + 2);
      if (target.size() != 2) fail_invalid(where_() + ": output_shape must have 2 entries");
    } else {
      target = {x->type.shape[2] * stride[0], x->type.shape[3] * stride[1]};
    }
    for (int a = 0; a < 2; ++a) {
      const auto u = static_cast<size_t>(a);
      const int64_t total = full[u] + opad[u] - target[u];
      const int64_t half = total / 2;
      // A larger target extends the end (as output_padding does); a smaller one is cropped
      // from both sides, the larger half first at the start unless SAME_UPPER.
      pads[u] = total < 0 ? 0 : auto_pad == "SAME_UPPER" ? half : total - half;
      pads[u + 2] = total - pads[u];
    }
  } else if (auto_pad == "NOTSET" && pads_attr) {
    if (pads_attr->size() != 4) fail_invalid(where_() + ": 'pads' must have 4 entries");
    pads = {(*pads_attr)[0], (*pads_attr)[1], (*pads_attr)[2], (*pads_attr)[3]};
  } else if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    node_unsupported("auto_pad=" + auto_pad);
  }
  const Attrs common = {{"stride", ints({stride[0], stride[1]})}, {"dilation", ints({dil[0], dil[1]})}, {"groups", i(group)}};
  const bool direct = pads[0] == pads[2] && pads[1] == pads[3] && pads[0] >= 0 && pads[1] >= 0 &&
                      opad[0] < stride[0] && opad[1] < stride[1] && opad[0] >= 0 && opad[1] >= 0;
  std::vector<Arg> args = {x, w};
  if (direct) {
    if (has_in(2)) args.emplace_back(in(2));
    Attrs a = common;
    a.push_back({"padding", ints({pads[0], pads[1]})});
    a.push_back({"output_padding", ints({opad[0], opad[1]})});
    out(0, op(OpKind::kConvTranspose2d, std::move(args), a));
    return;
  }
  // Every other geometry: the full result, then cropped (or zero-extended) to ONNX's window.
  V y = op(OpKind::kConvTranspose2d, std::move(args), common);
  y = op(OpKind::kPad, {y}, {{"pads", ints({-pads[1], opad[1] - pads[3], -pads[0], opad[0] - pads[2]})}});
  if (has_in(2)) {
    V bias = in(2);
    y = op(OpKind::kAdd, {y, reshape_to(bias, {bias->type.shape.numel(), 1, 1})});
  }
  out(0, y);
}

void Importer::max_pool() {
  V x = in(0);
  require_rank4(x, "input");
  require_float(x, "input");
  if (out_used(1)) node_unsupported("the Indices output");
  if (attr_int("storage_order", 0) != 0) node_unsupported("storage_order=1");
  std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape");
  if (!k || k->size() != 2) fail_invalid(where_() + ": kernel_shape must have 2 entries");
  const std::array<int64_t, 2> kernel = {(*k)[0], (*k)[1]};
  const auto stride = pair_attr("strides", 1), dil = pair_attr("dilations", 1);
  const bool ceil_mode = attr_int("ceil_mode", 0) != 0;
  const std::array<int64_t, 2> extent = {dil[0] * (kernel[0] - 1) + 1, dil[1] * (kernel[1] - 1) + 1};
  const auto pads = spatial_pads(x->type.shape, extent, stride);
  const Attrs base = {{"kernel", ints({kernel[0], kernel[1]})}, {"stride", ints({stride[0], stride[1]})},
                      {"dilation", ints({dil[0], dil[1]})}};
  if (!ceil_mode && pads[0] == pads[2] && pads[1] == pads[3] && pads[0] <= kernel[0] / 2 && pads[1] <= kernel[1] / 2) {
    Attrs a = base;
    a.push_back({"padding", ints({pads[0], pads[1]})});
    out(0, op(OpKind::kMaxPool2d, {x}, a));
    return;
  }
  // ONNX's output size, then -inf padding that makes exactly those windows.
  std::array<int64_t, 2> right{};
  for (int a = 0; a < 2; ++a) {
    const auto u = static_cast<size_t>(a);
    const int64_t span = x->type.shape[2 + a] + pads[u] + pads[u + 2] - extent[u];
    if (span < 0) fail_invalid(where_() + ": the window is larger than the padded input");
    const int64_t o = (ceil_mode ? (span + stride[u] - 1) / stride[u] : span / stride[u]) + 1;
    right[u] = (o - 1) * stride[u] + extent[u] - x->type.shape[2 + a] - pads[u];
  }
  V padded = pad2d(x, pads[0], right[0], pads[1], right[1], -std::numeric_limits<double>::infinity());
  out(0, op(OpKind::kMaxPool2d, {padded}, base));
}

void Importer::average_pool() {
  V x = in(0);
  require_rank4(x, "input");
  require_float(x, "input");
  std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape");
  if (!k || k->size() != 2) fail_invalid(where_() + ": kernel_shape must have 2 entries");
  const std::array<int64_t, 2> kernel = {(*k)[0], (*k)[1]};
  const auto stride = pair_attr("strides", 1);
  const bool ceil_mode = attr_int("ceil_mode", 0) != 0;
  const bool include_pad = attr_int("count_include_pad", 0) != 0;
  const auto pads = spatial_pads(x->type.shape, kernel, stride);
  const Attrs base = {{"kernel", ints({kernel[0], kernel[1]})}, {"stride", ints({stride[0], stride[1]})}};
  if (!ceil_mode && pads[0] == pads[2] && pads[1] == pads[3] && pads[0] <= kernel[0] / 2 && pads[1] <= kernel[1] / 2) {
    Attrs a = base;
    a.push_back({"padding", ints({pads[0], pads[1]})});
    a.push_back({"count_include_pad", b(include_pad)});
    out(0, op(OpKind::kAvgPool2d, {x}, a));
    return;
  }
  // The window sums over explicit zero padding, divided by how many cells ONNX counts in each
  // window (a mask pooled the same way: the input's cells, plus the pads' with count_include_pad).
  std::array<int64_t, 2> right{};
  for (int a = 0; a < 2; ++a) {
    const auto u = static_cast<size_t>(a);
    const int64_t span = x->type.shape[2 + a] + pads[u] + pads[u + 2] - kernel[u];
    if (span < 0) fail_invalid(where_() + ": the window is larger than the padded input");
    const int64_t o = (ceil_mode ? (span + stride[u] - 1) / stride[u] : span / stride[u]) + 1;
    right[u] = (o - 1) * stride[u] + kernel[u] - x->type.shape[2 + a] - pads[u];
  }
  const int64_t h = x->type.shape[2], w = x->type.shape[3];
  V mask = op(OpKind::kFull, {}, {{"shape", ints({1, 1, h, w})}, {"value", f(1)}});
  if (include_pad) {
    mask = pad2d(mask, pads[0], pads[2], pads[1], pads[3], 1.0);
    mask = pad2d(mask, 0, right[0] - pads[2], 0, right[1] - pads[3], 0.0);
  } else {
    mask = pad2d(mask, pads[0], right[0], pads[1], right[1], 0.0);
  }
  V sums = op(OpKind::kAvgPool2d, {pad2d(x, pads[0], right[0], pads[1], right[1], 0.0)}, base);
  V counts = op(OpKind::kAvgPool2d, {mask}, base);
  out(0, op(OpKind::kDiv, {sums, counts}));
}

void Importer::global_pool() {
  V x = in(0);
  std::vector<int64_t> axes;
  for (int k = 2; k < x->type.shape.rank(); ++k) axes.push_back(k);
  if (axes.empty()) fail_invalid(where_() + ": the input needs rank >= 3");
  out(0, reduce_with(node_->op_type() == "GlobalAveragePool" ? OpKind::kMean : OpKind::kMax, x, axes, true));
}

void Importer::batch_norm() {
  V x = in(0);
  const double eps = attr_float("epsilon", 1e-5f);
  attr_float("momentum", 0.9f);
  if (attr_int("training_mode", 0) != 0) node_unsupported("training_mode=1");
  if (out_used(1) || out_used(2)) node_unsupported("the running statistics outputs");
  out(0, op(OpKind::kBatchNorm, {x, in(3), in(4), in(1), in(2)}, {{"eps", f(eps)}}));
}

void Importer::instance_norm() {
  V x = in(0), scale = in(1), bias = in(2);
  const int r = x->type.shape.rank();
  if (r < 3) fail_invalid(where_() + ": the input needs rank >= 3");
  const double eps = attr_float("epsilon", 1e-5f);
  V y = op(OpKind::kLayerNorm, {x}, {{"normalized_dims", i(r - 2)}, {"eps", f(eps)}});
  std::vector<int64_t> cshape(static_cast<size_t>(r - 1), 1);
  cshape[0] = x->type.shape[1];
  y = op(OpKind::kMul, {y, reshape_to(scale, cshape)});
  out(0, op(OpKind::kAdd, {y, reshape_to(bias, cshape)}));
}

void Importer::layer_norm() {
  V x = in(0);
  const int r = x->type.shape.rank();
  const int64_t axis = axis_of(attr_int("axis", -1), r);
  const double eps = attr_float("epsilon", 1e-5f);
  if (attr_int("stash_type", 1) != 1) node_unsupported("stash_type other than 1 (float)");
  std::vector<int64_t> tail(x->type.shape.begin() + axis, x->type.shape.end());
  if (out_used(1) || out_used(2)) {
    require_float(x, "input");
    std::vector<int64_t> axes;
    for (int k = static_cast<int>(axis); k < r; ++k) axes.push_back(k);
    V mean = reduce_with(OpKind::kMean, x, axes, true);
    V centered = op(OpKind::kSub, {x, mean});
    V var = reduce_with(OpKind::kMean, op(OpKind::kMul, {centered, centered}), axes, true);
    out(1, mean);
    out(2, op(OpKind::kRsqrt, {op(OpKind::kAdd, {var, eps})}));
  }
  auto fit = [&](V v) {
    if (dims_of(v->type.shape) == tail) return v;
    return op(OpKind::kBroadcastTo, {v}, {{"shape", ints(tail)}});
  };
  std::vector<Arg> args = {x, fit(in(1))};
  if (has_in(2)) args.emplace_back(fit(in(2)));
  out(0, op(OpKind::kLayerNorm, std::move(args), {{"normalized_dims", i(r - axis)}, {"eps", f(eps)}}));
}

void Importer::resize() {
  V x = in(0);
  require_rank4(x, "input");
  const std::string mode = attr_string("mode", "nearest");
  const std::string ctm = attr_string("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = attr_string("nearest_mode", "round_prefer_floor");
  attr_float("cubic_coeff_a", -0.75f);
  attr_float("extrapolation_value", 0.0f);
  if (attr_int("exclude_outside", 0) != 0) node_unsupported("exclude_outside=1");
  if (mode != "nearest" && mode != "linear") node_unsupported("mode=" + mode);
  static const std::map<std::string, int64_t> kCtm = {{"half_pixel", 0}, {"asymmetric", 1}, {"align_corners", 2},
                                                      {"pytorch_half_pixel", 3}, {"tf_half_pixel_for_nearest", 4},
                                                      // the name ONNX 1.12's reference and node tests use
                                                      {"tf_half_pixel_for_nn", 4}};
  static const std::map<std::string, int64_t> kNearest = {{"round_prefer_floor", 0}, {"round_prefer_ceil", 1},
                                                          {"floor", 2}, {"ceil", 3}};
  auto ctm_it = kCtm.find(ctm);
  if (ctm_it == kCtm.end()) node_unsupported("coordinate_transformation_mode=" + ctm);
  auto nearest_it = kNearest.find(nearest);
  if (nearest_it == kNearest.end()) node_unsupported("nearest_mode=" + nearest);
  const Shape& s = x->type.shape;
  std::vector<int64_t> size;
  double scale_h = 0, scale_w = 0;
  V sizes_v = has_in(3) ? in(3) : nullptr;
  if (sizes_v && sizes_v->type.shape.numel() > 0) {
    std::vector<int64_t> sizes = ints_of(sizes_v, "sizes");
    if (sizes.size() != 4 || sizes[0] != s[0] || sizes[1] != s[1]) node_unsupported("resizing other than the 2 last dims");
    size = {sizes[2], sizes[3]};
  } else {
    V scales_v = has_in(2) ? in(2) : nullptr;
    if (!scales_v) fail_invalid(where_() + ": Resize needs scales or sizes");
    if (!scales_v->known) {
      needs_constant("scales");
    }
    if (scales_v->type.shape.numel() != 4) fail_invalid(where_() + ": 'scales' must have 4 entries");
    std::vector<double> scales;
    for (int64_t k = 0; k < 4; ++k) scales.push_back(scales_v->known->element_as_double(k));
    if (scales[0] != 1 || scales[1] != 1) node_unsupported("resizing other than the 2 last dims");
    scale_h = scales[2];
    scale_w = scales[3];
    const double h = static_cast<double>(s[2]) * scale_h, w = static_cast<double>(s[3]) * scale_w;
    size = {static_cast<int64_t>(std::floor(h)), static_cast<int64_t>(std::floor(w))};
    // ONNX's align_corners divides by the unrounded output length (in * scale - 1); the op
    // divides by its output size - 1.
    if (ctm == "align_corners" && (std::floor(h) != h || std::floor(w) != w)) {
      node_unsupported("align_corners with scales whose output length is fractional");
    }
  }
  Attrs a = {{"size", ints(size)}, {"scale_h", f(scale_h)}, {"scale_w", f(scale_w)},
             {"coordinate_transformation_mode", i(ctm_it->second)}};
  if (mode == "nearest") {
    a.push_back({"nearest_mode", i(nearest_it->second)});
    out(0, op(OpKind::kResizeNearest2d, {x}, a));
  } else {
    out(0, op(OpKind::kResizeLinear2d, {x}, a));
  }
}

}  // namespace tracecache::onnx_import::detail
