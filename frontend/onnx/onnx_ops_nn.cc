// ONNX op handlers: nn layers (convolution, pooling, normalization, resize) (the handler
// contract: onnx_lowering.h).
#include "frontend/onnx/onnx_lowering.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

// ---- 1-D as 2-D -------------------------------------------------------------------------------------

// A 1-D node ([N, C, L]; a Conv's weight [O, I, k]) is lowered as its 2-D form on [N, C, 1, L]: a
// copy of the node whose inputs are the reshaped values and whose spatial attributes gain a
// leading height entry (kernel, strides, dilations 1; pads, output_padding 0; output_shape 1),
// lowered by `handler`, its outputs reshaped back. False (nothing done) for any other rank.
bool Importer::lowered_as_2d(Handler handler) {
  V x = in(0);
  if (x->type.shape.rank() != 3) return false;
  NodeProto lifted = *node_;
  auto lifted_value = [&](int k, const V& v) {
    const std::string name = fmt::format("\x01lifted_input_{}", k);  // no ONNX name starts with \x01
    std::vector<int64_t> dims = dims_of(v->type.shape);
    dims.insert(dims.begin() + 2, 1);
    values_[name] = reshape_to(v, dims);
    lifted.set_input(k, name);
  };
  lifted_value(0, x);
  const bool conv = node_->op_type() == "Conv" || node_->op_type() == "ConvTranspose";
  if (conv) {
    V w = in(1);
    if (w->type.shape.rank() != 3) fail_invalid(where_() + ": the weight of a 1-D convolution must have rank 3");
    lifted_value(1, w);
  }
  for (AttributeProto& a : *lifted.mutable_attribute()) {
    const std::string& n = a.name();
    if (a.type() != AttributeProto::INTS) continue;
    if (n == "pads") {
      if (a.ints_size() != 2) fail_invalid(where_() + ": 'pads' of a 1-D node must have 2 entries");
      const int64_t begin = a.ints(0), end = a.ints(1);
      a.clear_ints();
      for (int64_t v : {int64_t{0}, begin, int64_t{0}, end}) a.add_ints(v);
    } else if (n == "kernel_shape" || n == "strides" || n == "dilations" || n == "output_padding" || n == "output_shape") {
      if (a.ints_size() != 1) fail_invalid(fmt::format("{}: '{}' of a 1-D node must have 1 entry", where_(), n));
      const int64_t v = a.ints(0);
      a.clear_ints();
      a.add_ints(n == "output_padding" ? 0 : 1);
      a.add_ints(v);
    }
  }
  for (int k = 0; k < lifted.output_size(); ++k) {
    if (!lifted.output(k).empty()) lifted.set_output(k, fmt::format("\x01lifted_output_{}", k));
  }
  {
    struct Restore {
      const NodeProto*& node;
      const NodeProto* original;
      ~Restore() { node = original; }
    } restore{node_, node_};
    node_ = &lifted;
    (this->*handler)();
  }
  for (int k = 0; k < lifted.output_size(); ++k) {
    if (lifted.output(k).empty()) continue;
    auto it = values_.find(lifted.output(k));
    if (it == values_.end()) continue;
    V y = it->second;
    values_.erase(it);
    std::vector<int64_t> dims = dims_of(y->type.shape);
    dims.erase(dims.begin() + 2);
    out(k, reshape_to(y, dims));
  }
  for (int k = 0; k < lifted.input_size(); ++k) {
    if (lifted.input(k) != node_->input(k)) values_.erase(lifted.input(k));
  }
  return true;
}

// ---- handlers: nn layers ---------------------------------------------------------------------------

void Importer::conv() {
  if (lowered_as_2d(&Importer::conv)) return;
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

// A 3-D ConvTranspose (group 1, explicit pads) as 2-D ones: for each kernel depth kd, the 2-D
// transposed convolution of every input depth slice with the weight's slice kd, placed at output
// depth d · stride + kd · dilation (zeros interleaved for the stride, then shifted) and summed
// over kd; then cropped by the pads (extended by output_padding) like the 2-D case. False
// (nothing done) for other ranks.
bool Importer::conv_transpose_3d() {
  V x = in(0), w = in(1);
  if (x->type.shape.rank() != 5) return false;
  require_float(x, "input");
  const Shape& xs = x->type.shape;
  const Shape& ws = w->type.shape;
  if (ws.rank() != 5 || ws[0] != xs[1]) fail_invalid(where_() + ": the weight must be [C_in, C_out, kD, kH, kW]");
  auto triple = [&](std::string_view name, int64_t def) {
    std::vector<int64_t> v = attr_ints(name).value_or(std::vector<int64_t>(3, def));
    if (v.size() != 3) fail_invalid(fmt::format("{}: '{}' must have 3 entries", where_(), name));
    return v;
  };
  const std::vector<int64_t> stride = triple("strides", 1), dil = triple("dilations", 1), opad = triple("output_padding", 0);
  const std::vector<int64_t> pads = attr_ints("pads").value_or(std::vector<int64_t>(6, 0));
  if (std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape"); k && *k != std::vector<int64_t>{ws[2], ws[3], ws[4]}) {
    fail_invalid(where_() + ": kernel_shape does not match the weight");
  }
  if (attr_int("group", 1) != 1 || attr_string("auto_pad", "NOTSET") != "NOTSET" || attr("output_shape") || pads.size() != 6) {
    node_unsupported("a 3-D ConvTranspose with groups, auto_pad or output_shape");
  }
  const int64_t n = xs[0], ci = xs[1], d = xs[2], co = ws[1];
  const int64_t full_d = (d - 1) * stride[0] + dil[0] * (ws[2] - 1) + 1, placed = (d - 1) * stride[0] + 1;
  V slices = reshape_to(op(OpKind::kPermute, {x}, {{"perm", ints({0, 2, 1, 3, 4})}}), {n * d, ci, xs[3], xs[4]});
  V sum;
  int64_t hf = 0, wf = 0;
  for (int64_t kd = 0; kd < ws[2]; ++kd) {
    V wk = reshape_to(op(OpKind::kSlice, {w}, {{"axis", i(2)}, {"start", i(kd)}, {"end", i(kd + 1)}}), {ci, co, ws[3], ws[4]});
    V z = op(OpKind::kConvTranspose2d, {slices, wk}, {{"stride", ints({stride[1], stride[2]})}, {"dilation", ints({dil[1], dil[2]})}});
    hf = z->type.shape[2];
    wf = z->type.shape[3];
    const int64_t plane = co * hf * wf;
    V placed_z = reshape_to(z, {n, d, 1, plane});
    if (stride[0] > 1) {
      placed_z = op(OpKind::kPad, {placed_z}, {{"pads", ints({0, 0, 0, stride[0] - 1})}, {"value", f(0)}});
    }
    placed_z = reshape_to(placed_z, {n, d * stride[0], plane});
    // Depth d lands at d · stride + kd · dilation: crop the stride's tail, shift by kd · dilation.
    placed_z = op(OpKind::kPad, {placed_z}, {{"pads", ints({0, 0, kd * dil[0], full_d - placed - kd * dil[0] - (d * stride[0] - placed)})}, {"value", f(0)}});
    sum = sum ? op(OpKind::kAdd, {sum, placed_z}) : placed_z;
  }
  sum = op(OpKind::kPermute, {reshape_to(sum, {n, full_d, co, hf, wf})}, {{"perm", ints({0, 2, 1, 3, 4})}});
  // Crop by the pads, extend by output_padding (tracecache's pad order: the last dim first).
  V y = op(OpKind::kPad, {sum}, {{"pads", ints({-pads[2], opad[2] - pads[5], -pads[1], opad[1] - pads[4], -pads[0], opad[0] - pads[3]})}, {"value", f(0)}});
  if (has_in(2)) {
    V bias = in(2);
    y = op(OpKind::kAdd, {y, reshape_to(bias, {bias->type.shape.numel(), 1, 1, 1})});
  }
  out(0, y);
  return true;
}

void Importer::conv_transpose() {
  if (lowered_as_2d(&Importer::conv_transpose) || conv_transpose_3d()) return;
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

// A 3-D MaxPool or AveragePool without padding, dilation or ceil_mode, as two 2-D pools: over
// (H, W) on [N, C · D, H, W], then over D on [N, C, D, Ho · Wo]. Max is separable; so is the
// average, every window having the same count. False (nothing done) for other ranks.
bool Importer::pooled_as_two_2d() {
  V x = in(0);
  if (x->type.shape.rank() != 5) return false;
  require_float(x, "input");
  const bool max = node_->op_type() == "MaxPool";
  if (max && out_used(1)) node_unsupported("the Indices output of a 3-D pool");
  std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape");
  if (!k || k->size() != 3) fail_invalid(where_() + ": kernel_shape must have 3 entries");
  std::vector<int64_t> stride = attr_ints("strides").value_or(std::vector<int64_t>{1, 1, 1});
  const std::vector<int64_t> pads = attr_ints("pads").value_or(std::vector<int64_t>(6, 0));
  const std::vector<int64_t> dil = attr_ints("dilations").value_or(std::vector<int64_t>{1, 1, 1});
  const std::string auto_pad = attr_string("auto_pad", "NOTSET");
  if (stride.size() != 3) fail_invalid(where_() + ": strides must have 3 entries");
  if (attr_int("ceil_mode", 0) != 0 || std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p != 0; }) ||
      std::any_of(dil.begin(), dil.end(), [](int64_t d) { return d != 1; }) || (auto_pad != "NOTSET" && auto_pad != "VALID") ||
      (max && attr_int("storage_order", 0) != 0)) {
    node_unsupported("a 3-D pool with pads, dilations or ceil_mode");
  }
  if (!max) attr_int("count_include_pad", 0);  // no pads: the same either way
  const Shape& s = x->type.shape;
  const OpKind kind = max ? OpKind::kMaxPool2d : OpKind::kAvgPool2d;
  auto pool = [&](const V& v, int64_t kh, int64_t kw, int64_t sh, int64_t sw) {
    Attrs a = {{"kernel", ints({kh, kw})}, {"stride", ints({sh, sw})}};
    return op(kind, {v}, a);
  };
  V plane = pool(reshape_to(x, {s[0], s[1] * s[2], s[3], s[4]}), (*k)[1], (*k)[2], stride[1], stride[2]);
  const int64_t ho = plane->type.shape[2], wo = plane->type.shape[3];
  V depth = pool(reshape_to(plane, {s[0], s[1], s[2], ho * wo}), (*k)[0], 1, stride[0], 1);
  out(0, reshape_to(depth, {s[0], s[1], depth->type.shape[2], ho, wo}));
  return true;
}

void Importer::max_pool() {
  if (lowered_as_2d(&Importer::max_pool) || pooled_as_two_2d()) return;
  V x = in(0);
  require_rank4(x, "input");
  if (x->type.dtype == DType::kU8 || x->type.dtype == DType::kI8) {
    // Through f32, which holds every 8-bit value exactly (max only picks one).
    if (out_used(1)) node_unsupported("the Indices output of 8-bit integers");
    const DType dtype = x->type.dtype;
    values_[node_->input(0)] = cast_to(x, DType::kF32);
    max_pool();
    values_[node_->input(0)] = x;
    out(0, cast_to(values_[node_->output(0)], dtype));
    return;
  }
  require_float(x, "input");
  const bool column_major = attr_int("storage_order", 0) != 0;  // the Indices' order
  std::optional<std::vector<int64_t>> k = attr_ints("kernel_shape");
  if (!k || k->size() != 2) fail_invalid(where_() + ": kernel_shape must have 2 entries");
  const std::array<int64_t, 2> kernel = {(*k)[0], (*k)[1]};
  const auto stride = pair_attr("strides", 1), dil = pair_attr("dilations", 1);
  const bool ceil_mode = attr_int("ceil_mode", 0) != 0;
  const std::array<int64_t, 2> extent = {dil[0] * (kernel[0] - 1) + 1, dil[1] * (kernel[1] - 1) + 1};
  const auto pads = spatial_pads(x->type.shape, extent, stride);
  const Attrs base = {{"kernel", ints({kernel[0], kernel[1]})}, {"stride", ints({stride[0], stride[1]})},
                      {"dilation", ints({dil[0], dil[1]})}};
  if (!out_used(1) && !ceil_mode && pads[0] == pads[2] && pads[1] == pads[3] && pads[0] <= kernel[0] / 2 &&
      pads[1] <= kernel[1] / 2) {
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
  if (!out_used(1)) {
    out(0, op(OpKind::kMaxPool2d, {padded}, base));
    return;
  }
  // With Indices: every window's cells gathered ([N, C, Ho · Wo, kh · kw], index_select of a
  // constant table), max and argmax over them (the first maximum, as ONNX's reference), the
  // argmax mapped to the cell's flat index in x ([N, C, H, W] row-major, pads not counted;
  // storage_order=1: H and W column-major).
  const Shape& s = x->type.shape;
  const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  const int64_t hp = h + pads[0] + right[0], wp = w + pads[1] + right[1];
  const int64_t ho = (hp - extent[0]) / stride[0] + 1, wo = (wp - extent[1]) / stride[1] + 1, cells = kernel[0] * kernel[1];
  if (ho * wo * cells > kFoldLimit) node_unsupported("the Indices output of more than 65536 window cells");
  HostBuffer table(DType::kI64, Shape{ho * wo * cells}), source(DType::kI64, Shape{ho * wo, cells});
  for (int64_t oy = 0; oy < ho; ++oy) {
    for (int64_t ox = 0; ox < wo; ++ox) {
      for (int64_t ky = 0; ky < kernel[0]; ++ky) {
        for (int64_t kx = 0; kx < kernel[1]; ++kx) {
          const int64_t py = oy * stride[0] + ky * dil[0], px = ox * stride[1] + kx * dil[1];
          const int64_t at = ((oy * wo + ox) * kernel[0] + ky) * kernel[1] + kx;
          table.data<int64_t>()[at] = py * wp + px;
          // A pad cell holds -inf and is never the first maximum of a window with an input cell.
          const int64_t sy = std::clamp<int64_t>(py - pads[0], 0, h - 1), sx = std::clamp<int64_t>(px - pads[1], 0, w - 1);
          source.data<int64_t>()[at] = column_major ? sx * h + sy : sy * w + sx;
        }
      }
    }
  }
  V cells_v = reshape_to(op(OpKind::kIndexSelect, {reshape_to(padded, {n, c, hp * wp}), known(std::move(table))}, {{"axis", i(2)}}),
                         {n, c, ho * wo, cells});
  out(0, reshape_to(reduce_with(OpKind::kMax, cells_v, {3}, false), {n, c, ho, wo}));
  V first = op(OpKind::kArgmax, {cells_v}, {{"axis", i(3)}, {"keepdim", b(true)}});
  V src = op(OpKind::kBroadcastTo, {known(std::move(source))}, {{"shape", ints({n, c, ho * wo, cells})}});
  V picked = reshape_to(op(OpKind::kGather, {src, first}, {{"axis", i(3)}}), {n, c, ho, wo});
  // + (n · C + c) · H · W
  V plane = op(OpKind::kMul, {reshape_to(arange(0, n * c, 1), {n, c, 1, 1}), static_cast<double>(h * w)});
  out(1, op(OpKind::kAdd, {picked, plane}));
}

void Importer::average_pool() {
  if (lowered_as_2d(&Importer::average_pool) || pooled_as_two_2d()) return;
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

// Inference: batch_norm with the running statistics. Training mode: with the batch's mean and
// (population) variance over every dim but 1, and the running statistics' updates
// running · momentum + batch · (1 - momentum) as outputs 1 and 2.
void Importer::batch_norm() {
  V x = in(0);
  const double eps = attr_float("epsilon", 1e-5f);
  const double momentum = attr_float("momentum", 0.9f);
  if (attr_int("training_mode", 0) == 0) {
    if (out_used(1) || out_used(2)) node_unsupported("the running statistics outputs without training_mode");
    out(0, op(OpKind::kBatchNorm, {x, in(3), in(4), in(1), in(2)}, {{"eps", f(eps)}}));
    return;
  }
  const int r = x->type.shape.rank();
  if (r < 2) fail_invalid(where_() + ": the input needs rank >= 2");
  std::vector<int64_t> axes = {0}, channel_dims(static_cast<size_t>(r - 1), 1);
  for (int k = 2; k < r; ++k) axes.push_back(k);
  channel_dims[0] = x->type.shape[1];
  V mean = reduce_with(OpKind::kMean, x, axes, false);
  V centered = op(OpKind::kSub, {x, reshape_to(mean, channel_dims)});
  V var = reduce_with(OpKind::kMean, op(OpKind::kMul, {centered, centered}), axes, false);
  out(0, op(OpKind::kBatchNorm, {x, mean, var, in(1), in(2)}, {{"eps", f(eps)}}));
  auto running = [&](const V& old, const V& batch) {
    return op(OpKind::kAdd, {op(OpKind::kMul, {old, momentum}), op(OpKind::kMul, {batch, 1.0 - momentum})});
  };
  if (out_used(1)) out(1, running(in(3), mean));
  if (out_used(2)) out(2, running(in(4), var));
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

// MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over `axes` (ONNX's function
// body; var as the mean of the squared deviations, which ONNX writes E[x^2] - E[x]^2).
void Importer::mean_variance_normalization() {
  V x = in(0);
  require_floating(x, "input");
  const int r = x->type.shape.rank();
  std::vector<int64_t> axes = attr_ints("axes").value_or(std::vector<int64_t>{0, 2, 3});
  for (int64_t& a : axes) a = axis_of(a, r);
  V mean = reduce_with(OpKind::kMean, x, axes, true);
  V centered = op(OpKind::kSub, {x, mean});
  V var = reduce_with(OpKind::kMean, op(OpKind::kMul, {centered, centered}), axes, true);
  out(0, cast_to(op(OpKind::kDiv, {centered, op(OpKind::kAdd, {op(OpKind::kSqrt, {var}), 1e-9})}), x->type.dtype));
}

// LRN: x / (bias + alpha / size · square_sum)^beta, square_sum over the channels
// [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)]: x^2 with the channels last, times a
// constant band matrix of ones.
void Importer::lrn() {
  V x = in(0);
  require_floating(x, "input");
  const int r = x->type.shape.rank();
  if (r < 3) fail_invalid(where_() + ": LRN needs rank >= 3 ([N, C, d...])");
  const double alpha = attr_float("alpha", 1e-4f), beta = attr_float("beta", 0.75f), bias = attr_float("bias", 1.0f);
  const int64_t size = attr_int("size", 0);
  if (size <= 0) fail_invalid(where_() + ": 'size' must be positive");
  const int64_t c = x->type.shape[1];
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  HostBuffer band(DType::kF32, Shape{c, c});  // band[c', c] = 1 where channel c' is in c's window
  for (int64_t src = 0; src < c; ++src) {
    for (int64_t dst = 0; dst < c; ++dst) band.data<float>()[src * c + dst] = src >= dst - before && src <= dst + after ? 1.0f : 0.0f;
  }
  std::vector<int64_t> to_last = {0}, back(static_cast<size_t>(r));
  for (int k = 2; k < r; ++k) to_last.push_back(k);
  to_last.push_back(1);
  for (int k = 0; k < r; ++k) back[static_cast<size_t>(to_last[static_cast<size_t>(k)])] = k;
  V sq = op(OpKind::kMul, {x, x});
  V sums = op(OpKind::kMatmul, {op(OpKind::kPermute, {sq}, {{"perm", ints(to_last)}}), known(std::move(band))});
  sums = op(OpKind::kPermute, {sums}, {{"perm", ints(back)}});
  V scale = op(OpKind::kPow, {op(OpKind::kAdd, {op(OpKind::kMul, {sums, alpha / static_cast<double>(size)}), bias}), beta});
  out(0, cast_to(op(OpKind::kDiv, {x, scale}), x->type.dtype));
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

namespace {

// Resize along one axis as a matrix [out, in] (ONNX's reference, interpolate_1d_with_x, as a
// linear map): output i reads the n nearest input positions of its source coordinate x (ties
// toward the smaller; past either end the edge value), weighted by the mode's coefficients of
// the fraction of x (in (0, 1]). `valid[i]` is false where tf_crop_and_resize extrapolates (a zero
// row: the value is the extrapolation value).
struct AxisResize {
  std::vector<double> weights;  // [out, in]
  std::vector<bool> valid;
  bool identity = true;
};

struct ResizeMode {
  std::string mode, ctm, nearest;
  double cubic_a = -0.75;
  bool exclude_outside = false;
};

std::vector<double> resize_coefficients(const ResizeMode& m, double ratio) {
  const bool whole = ratio == 1;
  if (m.mode == "nearest") {
    if (whole) return {0, 1};
    if (m.nearest == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
    if (m.nearest == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (m.nearest == "floor") return {1, 0};
    return {0, 1};  // ceil
  }
  if (m.mode == "linear") return {1 - ratio, ratio};
  const double a = m.cubic_a, r = ratio, q = 1 - ratio;
  return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
          ((a + 2) * q - (a + 3)) * q * q + 1, ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a};
}

AxisResize axis_resize(const ResizeMode& m, int64_t in, int64_t out, double scale, double out_width, double roi_start,
                       double roi_end) {
  AxisResize r;
  r.weights.assign(static_cast<size_t>(out * in), 0.0);
  r.valid.assign(static_cast<size_t>(out), true);
  r.identity = in == out;
  const auto width = static_cast<double>(in);
  for (int64_t i = 0; i < out; ++i) {
    const auto x = static_cast<double>(i);
    double src;
    if (m.ctm == "align_corners") {
      src = out_width == 1 ? 0.0 : x * (width - 1) / (out_width - 1);
    } else if (m.ctm == "asymmetric") {
      src = x / scale;
    } else if (m.ctm == "tf_crop_and_resize") {
      src = out_width == 1 ? (roi_end - roi_start) * (width - 1) / 2 : x * (roi_end - roi_start) * (width - 1) / (out_width - 1);
      src += roi_start * (width - 1);
      if (src < 0 || src > width - 1) {
        r.valid[static_cast<size_t>(i)] = false;
        r.identity = false;
        continue;
      }
    } else if (m.ctm == "pytorch_half_pixel") {
      src = out_width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    } else if (m.ctm == "tf_half_pixel_for_nn") {
      src = (x + 0.5) / scale;
    } else {  // half_pixel
      src = (x + 0.5) / scale - 0.5;
    }
    const double whole = std::floor(src);
    const double ratio = src == whole ? 1.0 : src - whole;
    std::vector<double> c = resize_coefficients(m, ratio);
    const auto n = static_cast<int64_t>(c.size());
    // The n nearest of the edge-padded positions (padded by ceil(n / 2)), in ascending order.
    const int64_t pad = (n + 1) / 2, limit = in + 2 * pad;
    const double xp = src + static_cast<double>(pad);
    std::vector<int64_t> near;
    for (int64_t j = static_cast<int64_t>(std::floor(xp)) - n - 1; j <= static_cast<int64_t>(std::floor(xp)) + n + 1; ++j) {
      if (j >= 0 && j < limit) near.push_back(j);
    }
    std::sort(near.begin(), near.end(), [&](int64_t p, int64_t q) {
      const double dp = std::fabs(xp - static_cast<double>(p)), dq = std::fabs(xp - static_cast<double>(q));
      return dp != dq ? dp < dq : p < q;
    });
    near.resize(static_cast<size_t>(std::min<int64_t>(n, static_cast<int64_t>(near.size()))));
    std::sort(near.begin(), near.end());
    if (m.exclude_outside) {
      double total = 0;
      for (size_t k = 0; k < near.size(); ++k) {
        const int64_t j = near[k] - pad;
        if (j < 0 || j >= in) c[k] = 0;
        total += c[k];
      }
      for (double& v : c) v /= total;
    }
    for (size_t k = 0; k < near.size(); ++k) {
      const int64_t j = std::clamp<int64_t>(near[k] - pad, 0, in - 1);
      r.weights[static_cast<size_t>(i * in + j)] += c[k];
    }
  }
  for (int64_t i = 0; i < out && r.identity; ++i) {
    for (int64_t j = 0; j < in; ++j) {
      if (r.weights[static_cast<size_t>(i * in + j)] != (i == j ? 1.0 : 0.0)) r.identity = false;
    }
  }
  return r;
}

}  // namespace

// Resize: nearest and linear on the 2 last dims of a rank-4 input are the registry's resize ops;
// every other case (cubic, exclude_outside, tf_crop_and_resize, other dims or ranks, align_corners
// with a fractional output length) is a product with one constant interpolation matrix per
// resized axis (axis_resize: ONNX's reference as a linear map), plus the extrapolation value where
// tf_crop_and_resize reads outside the input.
void Importer::resize() {
  V x = in(0);
  ResizeMode m;
  m.mode = attr_string("mode", "nearest");
  m.ctm = attr_string("coordinate_transformation_mode", "half_pixel");
  m.nearest = attr_string("nearest_mode", "round_prefer_floor");
  m.cubic_a = attr_float("cubic_coeff_a", -0.75f);
  m.exclude_outside = attr_int("exclude_outside", 0) != 0;
  const double extrapolation = attr_float("extrapolation_value", 0.0f);
  if (m.mode != "nearest" && m.mode != "linear" && m.mode != "cubic") node_unsupported("mode=" + m.mode);
  if (m.ctm == "tf_half_pixel_for_nearest") m.ctm = "tf_half_pixel_for_nn";  // the name ONNX 1.12 uses
  static const std::map<std::string, int64_t> kCtm = {{"half_pixel", 0}, {"asymmetric", 1}, {"align_corners", 2},
                                                      {"pytorch_half_pixel", 3}, {"tf_half_pixel_for_nn", 4},
                                                      {"tf_crop_and_resize", -1}};
  static const std::map<std::string, int64_t> kNearest = {{"round_prefer_floor", 0}, {"round_prefer_ceil", 1},
                                                          {"floor", 2}, {"ceil", 3}};
  auto ctm_it = kCtm.find(m.ctm);
  if (ctm_it == kCtm.end()) node_unsupported("coordinate_transformation_mode=" + m.ctm);
  auto nearest_it = kNearest.find(m.nearest);
  if (nearest_it == kNearest.end()) node_unsupported("nearest_mode=" + m.nearest);
  const Shape& s = x->type.shape;
  const int r = s.rank();
  // Per axis: the output size, the scale and the output width the coordinates use.
  std::vector<int64_t> size(static_cast<size_t>(r));
  std::vector<double> scale(static_cast<size_t>(r)), width(static_cast<size_t>(r));
  V sizes_v = has_in(3) ? in(3) : nullptr;
  if (sizes_v && sizes_v->type.shape.numel() > 0) {
    std::vector<int64_t> sizes = ints_of(sizes_v, "sizes");
    if (static_cast<int>(sizes.size()) != r) fail_invalid(where_() + ": 'sizes' needs one entry per dim");
    for (int a = 0; a < r; ++a) {
      const auto u = static_cast<size_t>(a);
      size[u] = sizes[u];
      scale[u] = static_cast<double>(sizes[u]) / static_cast<double>(s[a]);
      width[u] = scale[u] * static_cast<double>(s[a]);
    }
  } else {
    V scales_v = has_in(2) ? in(2) : nullptr;
    if (!scales_v) fail_invalid(where_() + ": Resize needs scales or sizes");
    if (!scales_v->known) needs_constant("scales");
    if (scales_v->type.shape.numel() != r) fail_invalid(where_() + ": 'scales' needs one entry per dim");
    for (int a = 0; a < r; ++a) {
      const auto u = static_cast<size_t>(a);
      scale[u] = scales_v->known->element_as_double(a);
      if (!(scale[u] > 0)) fail_invalid(where_() + ": scales must be positive");
      // ONNX's reference: the f32 scale times the length, in f32.
      width[u] = static_cast<float>(scale[u] * static_cast<double>(s[a]));
      size[u] = static_cast<int64_t>(std::floor(scale[u] * static_cast<double>(s[a])));
    }
  }
  const bool last_two = r == 4 && size[0] == s[0] && size[1] == s[1] && scale[0] == 1 && scale[1] == 1;
  const bool whole_widths = width[2] == static_cast<double>(size[2]) && width[3] == static_cast<double>(size[3]);
  if (last_two && m.mode != "cubic" && !m.exclude_outside && m.ctm != "tf_crop_and_resize" &&
      (m.ctm != "align_corners" || whole_widths)) {
    const bool from_sizes = sizes_v && sizes_v->type.shape.numel() > 0;
    Attrs a = {{"size", ints({size[2], size[3]})}, {"scale_h", f(from_sizes ? 0.0 : scale[2])},
               {"scale_w", f(from_sizes ? 0.0 : scale[3])}, {"coordinate_transformation_mode", i(ctm_it->second)}};
    if (m.mode == "nearest") {
      a.push_back({"nearest_mode", i(nearest_it->second)});
      out(0, op(OpKind::kResizeNearest2d, {x}, a));
    } else {
      out(0, op(OpKind::kResizeLinear2d, {x}, a));
    }
    return;
  }
  require_floating(x, "input");
  std::vector<double> roi;
  if (m.ctm == "tf_crop_and_resize") {
    if (!has_in(1)) fail_invalid(where_() + ": tf_crop_and_resize needs roi");
    V roi_v = in(1);
    if (!roi_v->known) needs_constant("roi");
    if (roi_v->type.shape.numel() != 2 * r) fail_invalid(where_() + ": 'roi' needs 2 entries per dim");
    for (int64_t k = 0; k < 2 * r; ++k) roi.push_back(roi_v->known->element_as_double(k));
  }
  V y = x;
  std::vector<std::vector<bool>> valid(static_cast<size_t>(r));
  bool extrapolates = false;
  for (int a = 0; a < r; ++a) {
    const auto u = static_cast<size_t>(a);
    if (size[u] * s[a] > (int64_t{1} << 22)) node_unsupported("a resize matrix above 2^22 elements");
    AxisResize ar = axis_resize(m, s[a], size[u], scale[u], width[u], roi.empty() ? 0 : roi[u],
                                roi.empty() ? 1 : roi[u + static_cast<size_t>(r)]);
    valid[u] = ar.valid;
    extrapolates = extrapolates || std::find(ar.valid.begin(), ar.valid.end(), false) != ar.valid.end();
    if (ar.identity) continue;
    HostBuffer wt(DType::kF32, Shape{s[a], size[u]});  // the matrix transposed: [in, out]
    for (int64_t i = 0; i < size[u]; ++i) {
      for (int64_t j = 0; j < s[a]; ++j) wt.data<float>()[j * size[u] + i] = static_cast<float>(ar.weights[static_cast<size_t>(i * s[a] + j)]);
    }
    const bool last = a == r - 1;
    V moved = last ? y : op(OpKind::kTranspose, {y}, {{"dim0", i(a)}, {"dim1", i(r - 1)}});
    V mapped = op(OpKind::kMatmul, {moved, known(std::move(wt))});
    y = last ? mapped : op(OpKind::kTranspose, {mapped}, {{"dim0", i(a)}, {"dim1", i(r - 1)}});
  }
  if (extrapolates && extrapolation != 0) {
    // extrapolation · (1 - the product of the axes' in-range masks), over the output's shape.
    HostBuffer fill(DType::kF32, Shape(IntList(std::span<const int64_t>(size))));
    float* p = fill.data<float>();
    for (int64_t k = 0; k < fill.numel(); ++k) {
      int64_t rest = k;
      bool inside = true;
      for (int a = r - 1; a >= 0; --a) {
        const auto u = static_cast<size_t>(a);
        inside = inside && valid[u][static_cast<size_t>(rest % size[u])];
        rest /= size[u];
      }
      p[k] = inside ? 0.0f : static_cast<float>(extrapolation);
    }
    y = op(OpKind::kAdd, {y, known(std::move(fill))});
  }
  out(0, cast_to(y, x->type.dtype));
}

}  // namespace tracecache::onnx_import::detail
