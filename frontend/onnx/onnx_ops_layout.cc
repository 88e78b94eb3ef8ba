// ONNX op handlers: layout (reshapes, slices, gathers...) (the handler contract: onnx_lowering.h).
#include "frontend/onnx/onnx_lowering.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

// ---- handlers: layout -------------------------------------------------------------------------

void Importer::reshape() {
  V x = in(0);
  std::vector<int64_t> dims = ints_of(in(1), "shape");
  const bool allowzero = attr_int("allowzero", 0) != 0;
  int infer = -1;
  int64_t known_product = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 0 && !allowzero) {
      if (static_cast<int>(k) >= x->type.shape.rank()) fail_invalid(where_() + ": a 0 in 'shape' past the input's rank");
      dims[k] = x->type.shape[static_cast<int>(k)];
    }
    if (dims[k] == -1) {
      if (infer >= 0) fail_invalid(where_() + ": 'shape' has two -1 entries");
      infer = static_cast<int>(k);
    } else if (dims[k] < 0) {
      fail_invalid(fmt::format("{}: 'shape' has a negative entry {}", where_(), dims[k]));
    } else {
      known_product *= dims[k];
    }
  }
  if (infer >= 0) {
    if (known_product == 0) fail_invalid(where_() + ": -1 in 'shape' next to a 0");
    dims[static_cast<size_t>(infer)] = x->type.shape.numel() / known_product;
  }
  out(0, reshape_to(x, dims));
}

void Importer::flatten() {
  V x = in(0);
  const int r = x->type.shape.rank();
  int64_t axis = attr_int("axis", 1);
  if (axis < -r || axis > r) fail_invalid(fmt::format("{}: axis {} is out of range for rank {}", where_(), axis, r));
  if (axis < 0) axis += r;
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < r; ++k) (k < axis ? outer : inner) *= x->type.shape[k];
  out(0, reshape_to(x, {outer, inner}));
}

void Importer::squeeze() {
  V x = in(0);
  const int r = x->type.shape.rank();
  std::set<int64_t> axes;
  if (has_in(1)) {
    for (int64_t a : ints_of(in(1), "axes")) axes.insert(axis_of(a, r));
  } else {
    for (int k = 0; k < r; ++k) if (x->type.shape[k] == 1) axes.insert(k);
  }
  std::vector<int64_t> dims;
  for (int k = 0; k < r; ++k) {
    if (!axes.count(k)) { dims.push_back(x->type.shape[k]); continue; }
    if (x->type.shape[k] != 1) fail_invalid(fmt::format("{}: dim {} has size {}, not 1", where_(), k, x->type.shape[k]));
  }
  out(0, reshape_to(x, dims));
}

void Importer::unsqueeze() {
  V x = in(0);
  std::vector<int64_t> axes = ints_of(in(1), "axes");
  const int r = x->type.shape.rank() + static_cast<int>(axes.size());
  std::set<int64_t> set;
  for (int64_t a : axes) {
    if (!set.insert(axis_of(a, r)).second) fail_invalid(where_() + ": an axis is named twice");
  }
  std::vector<int64_t> dims;
  int src = 0;
  for (int k = 0; k < r; ++k) dims.push_back(set.count(k) ? 1 : x->type.shape[src++]);
  out(0, reshape_to(x, dims));
}

void Importer::transpose() {
  V x = in(0);
  const int r = x->type.shape.rank();
  std::vector<int64_t> perm;
  if (std::optional<std::vector<int64_t>> p = attr_ints("perm")) perm = *p;
  else for (int k = r - 1; k >= 0; --k) perm.push_back(k);
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == static_cast<int64_t>(k);
  out(0, identity && static_cast<int>(perm.size()) == r ? x : op(OpKind::kPermute, {x}, {{"perm", ints(perm)}}));
}

void Importer::concat() {
  std::vector<Arg> args;
  for (int k = 0; k < node_->input_size(); ++k) args.emplace_back(in(k));
  const int r = args[0].v->type.shape.rank();
  out(0, op(OpKind::kConcat, std::move(args), {{"axis", i(axis_of(attr_int("axis", 0), r))}}));
}

void Importer::slice() {
  V x = in(0);
  const int r = x->type.shape.rank();
  std::vector<int64_t> starts = ints_of(in(1), "starts"), ends = ints_of(in(2), "ends");
  std::vector<int64_t> axes, steps;
  if (has_in(3)) axes = ints_of(in(3), "axes");
  else for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (has_in(4)) steps = ints_of(in(4), "steps");
  else steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    fail_invalid(where_() + ": starts, ends, axes and steps must have one entry each per sliced axis");
  }
  V y = x;
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t axis = axis_of(axes[k], r);
    const int64_t dim = x->type.shape[static_cast<int>(axis)];
    const int64_t step = steps[k];
    if (step == 0) fail_invalid(where_() + ": a step of 0");
    if (step > 0) {
      y = op(OpKind::kSlice, {y}, {{"axis", i(axis)}, {"start", i(starts[k])}, {"end", i(ends[k])}, {"step", i(step)}});
      continue;
    }
    // A negative step: ONNX clamps start into [0, dim - 1] and end into [-1, dim - 1].
    int64_t s = starts[k], e = ends[k];
    if (s < 0) s = s < -dim ? -1 : s + dim;
    if (e < 0) e = e < -dim ? -1 : e + dim;
    s = std::min(s, dim - 1);
    e = std::min(e, dim - 1);
    y = op(OpKind::kIndexSelect, {y, arange(s, std::min(s, e), step)}, {{"axis", i(axis)}});
  }
  out(0, y);
}

void Importer::split() {
  V x = in(0);
  const int r = x->type.shape.rank();
  const int64_t axis = axis_of(attr_int("axis", 0), r);
  const int64_t dim = x->type.shape[static_cast<int>(axis)];
  std::vector<int64_t> sizes;
  if (has_in(1)) {
    sizes = ints_of(in(1), "split");
  } else {
    const int64_t n = node_->output_size();
    if (dim % n != 0) fail_invalid(fmt::format("{}: dim {} does not split into {} equal parts", where_(), dim, n));
    sizes.assign(static_cast<size_t>(n), dim / n);
  }
  if (static_cast<int>(sizes.size()) != node_->output_size()) fail_invalid(where_() + ": one split size per output");
  int64_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] < 0) fail_invalid(where_() + ": a negative split size");
    out(static_cast<int>(k), op(OpKind::kSlice, {x}, {{"axis", i(axis)}, {"start", i(start)}, {"end", i(start + sizes[k])}}));
    start += sizes[k];
  }
  if (start != dim) fail_invalid(fmt::format("{}: split sizes sum to {}, the dim is {}", where_(), start, dim));
}

void Importer::expand() {
  V x = in(0);
  std::vector<int64_t> target = broadcast_dims(dims_of(x->type.shape), ints_of(in(1), "shape"), where_());
  out(0, target == dims_of(x->type.shape) ? x : op(OpKind::kBroadcastTo, {x}, {{"shape", ints(target)}}));
}

void Importer::tile() {
  V x = in(0);
  std::vector<int64_t> repeats = ints_of(in(1), "repeats");
  if (static_cast<int>(repeats.size()) != x->type.shape.rank()) fail_invalid(where_() + ": one repeat per dim");
  V y = x;
  for (size_t a = 0; a < repeats.size(); ++a) {
    if (repeats[a] < 0) fail_invalid(where_() + ": a negative repeat");
    if (repeats[a] == 1) continue;
    if (repeats[a] == 0) {
      y = op(OpKind::kSlice, {y}, {{"axis", i(static_cast<int64_t>(a))}, {"start", i(0)}, {"end", i(0)}});
      continue;
    }
    // A new axis of `repeats` copies before axis a, merged into it.
    std::vector<int64_t> dims = dims_of(y->type.shape), spread = dims;
    dims.insert(dims.begin() + static_cast<long>(a), 1);
    spread.insert(spread.begin() + static_cast<long>(a), repeats[a]);
    V copies = op(OpKind::kBroadcastTo, {reshape_to(y, dims)}, {{"shape", ints(spread)}});
    std::vector<int64_t> merged = dims_of(y->type.shape);
    merged[a] *= repeats[a];
    y = reshape_to(copies, merged);
  }
  out(0, y);
}

// Pad: constant mode is the pad op (the 4 innermost dims); edge and reflect are an index_select
// per padded axis of the source index of each output position (clamped; or mirrored without
// repeating the edge, as NumPy's "reflect").
void Importer::pad() {
  V x = in(0);
  const std::string mode = attr_string("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect") node_unsupported("mode=" + mode);
  std::vector<int64_t> pads = ints_of(in(1), "pads");
  const int r = x->type.shape.rank();
  if (static_cast<int>(pads.size()) != 2 * r) fail_invalid(where_() + ": 'pads' needs 2 entries per dim");
  if (mode != "constant") {
    V y = x;
    for (int d = 0; d < r; ++d) {
      const int64_t before = pads[static_cast<size_t>(d)], after = pads[static_cast<size_t>(d + r)];
      if (before == 0 && after == 0) continue;
      const int64_t n = x->type.shape[d], total = n + before + after;
      if (n == 0 || total < 0) fail_invalid(where_() + ": edge and reflect padding need a non-empty dim");
      if (mode == "reflect" && n == 1 && (before > 0 || after > 0)) fail_invalid(where_() + ": reflect padding of a dim of size 1");
      HostBuffer index(DType::kI64, Shape{total});
      for (int64_t j = 0; j < total; ++j) {
        int64_t src = j - before;
        if (mode == "edge") {
          src = std::clamp<int64_t>(src, 0, n - 1);
        } else {
          const int64_t period = 2 * (n - 1);
          src = ((src % period) + period) % period;
          if (src > n - 1) src = period - src;
        }
        index.data<int64_t>()[j] = src;
      }
      y = op(OpKind::kIndexSelect, {y, known(std::move(index))}, {{"axis", i(d)}});
    }
    out(0, y);
    return;
  }
  const double value = has_in(2) ? scalar_of(in(2), "constant_value") : 0.0;
  // tracecache's order: the last dim's (before, after) first.
  std::vector<int64_t> ours;
  for (int d = r - 1; d >= 0; --d) {
    ours.push_back(pads[static_cast<size_t>(d)]);
    ours.push_back(pads[static_cast<size_t>(d + r)]);
  }
  while (ours.size() >= 2 && ours[ours.size() - 1] == 0 && ours[ours.size() - 2] == 0) ours.resize(ours.size() - 2);
  if (ours.empty()) { out(0, x); return; }
  if (ours.size() > 8) node_unsupported("padding more than the 4 innermost dims");
  out(0, op(OpKind::kPad, {x}, {{"pads", ints(ours)}, {"value", f(value)}}));
}

void Importer::gather() {
  V x = in(0), idx = in(1);
  const int r = x->type.shape.rank();
  const int64_t axis = axis_of(attr_int("axis", 0), r);
  const int64_t dim = x->type.shape[static_cast<int>(axis)];
  V fixed = normalize_index(idx, dim);
  V flat = reshape_to(fixed, {idx->type.shape.numel()});
  V picked = op(OpKind::kIndexSelect, {x, flat}, {{"axis", i(axis)}});
  std::vector<int64_t> dims;
  for (int k = 0; k < axis; ++k) dims.push_back(x->type.shape[k]);
  for (int64_t d : idx->type.shape) dims.push_back(d);
  for (int k = static_cast<int>(axis) + 1; k < r; ++k) dims.push_back(x->type.shape[k]);
  if (dims.size() > static_cast<size_t>(kMaxRank)) node_unsupported("a result of rank above 8");
  out(0, reshape_to(picked, dims));
}

void Importer::gather_elements() {
  V x = in(0), idx = in(1);
  const int64_t axis = axis_of(attr_int("axis", 0), x->type.shape.rank());
  out(0, op(OpKind::kGather, {x, normalize_index(idx, x->type.shape[static_cast<int>(axis)])}, {{"axis", i(axis)}}));
}

void Importer::gather_nd() {
  out(0, op(OpKind::kGatherNd, {in(0), in(1)}, {{"batch_dims", i(attr_int("batch_dims", 0))}}));
}

void Importer::scatter_elements() {
  V x = in(0);
  const int64_t axis = axis_of(attr_int("axis", 0), x->type.shape.rank());
  const std::string reduction = attr_string("reduction", "none");
  int64_t code = 0;
  if (reduction == "add") code = 1;
  else if (reduction == "mul") code = 2;
  else if (reduction != "none") node_unsupported("reduction=" + reduction);
  out(0, op(OpKind::kScatterElements, {x, in(1), in(2)}, {{"axis", i(axis)}, {"reduction", i(code)}}));
}

// OneHot: eq(indices wrapped into [0, depth), arange(depth) along `axis`), then where(on, off).
// Float indices and depth are truncated to integers first (ONNX casts them to int64); an index
// outside [-depth, depth) matches nothing (all off).
void Importer::one_hot() {
  V idx = in(0), values = in(2);
  const double depth_d = scalar_of(in(1), "depth");
  if (!(depth_d >= 1) || depth_d > static_cast<double>(kMaxElements)) {
    fail_invalid(fmt::format("{}: depth {} must be a positive count", where_(), depth_d));
  }
  const auto depth = static_cast<int64_t>(depth_d);
  const int r = idx->type.shape.rank();
  const int64_t axis = axis_of(attr_int("axis", -1), r + 1);
  if (values->type.shape.numel() != 2) fail_invalid(where_() + ": 'values' must hold [off_value, on_value]");
  if (!is_integral(idx->type.dtype) || idx->type.dtype == DType::kBool) idx = cast_to(idx, DType::kI64);
  idx = op(OpKind::kWhere, {op(OpKind::kLt, {idx, 0.0}), op(OpKind::kAdd, {idx, static_cast<double>(depth)}), idx});
  std::vector<int64_t> idx_dims = dims_of(idx->type.shape), pos_dims(static_cast<size_t>(r + 1), 1);
  idx_dims.insert(idx_dims.begin() + axis, 1);
  pos_dims[static_cast<size_t>(axis)] = depth;
  V hot = op(OpKind::kEq, {reshape_to(idx, idx_dims), cast_to(reshape_to(arange(0, depth, 1), pos_dims), idx->type.dtype)});
  V flat = reshape_to(values, {2});
  V off = reshape_to(op(OpKind::kSlice, {flat}, {{"axis", i(0)}, {"start", i(0)}, {"end", i(1)}}), {});
  V on = reshape_to(op(OpKind::kSlice, {flat}, {{"axis", i(0)}, {"start", i(1)}, {"end", i(2)}}), {});
  out(0, op(OpKind::kWhere, {hot, on, off}));
}

// Compress: index_select of the positions where the (constant) condition is true; without an
// axis, of the flattened input. A condition shorter than the axis leaves the rest out.
void Importer::compress() {
  V x = in(0), cond = in(1);
  if (!cond->known) needs_constant("condition");
  int64_t axis = 0;
  if (attr("axis")) {
    axis = axis_of(attr_int("axis", 0), x->type.shape.rank());
  } else {
    x = reshape_to(x, {x->type.shape.numel()});
  }
  const int64_t dim = x->type.shape[static_cast<int>(axis)];
  if (cond->type.shape.rank() != 1 || cond->type.shape.numel() > dim) {
    fail_invalid(fmt::format("{}: the condition must be 1-D and at most {} long", where_(), dim));
  }
  std::vector<int64_t> picked;
  for (int64_t k = 0; k < cond->known->numel(); ++k) {
    if (cond->known->element_as_double(k) != 0) picked.push_back(k);
  }
  HostBuffer index(DType::kI64, Shape{static_cast<int64_t>(picked.size())});
  std::copy(picked.begin(), picked.end(), index.data<int64_t>());
  out(0, op(OpKind::kIndexSelect, {x, known(std::move(index))}, {{"axis", i(axis)}}));
}

// NonZero: its output's shape is its input's values, so the input must be known; folded.
void Importer::non_zero() {
  V x = in(0);
  if (!x->known) needs_constant("X");
  const int r = x->type.shape.rank();
  std::vector<int64_t> coords;  // [count][rank], row-major order of x
  int64_t count = 0;
  for (int64_t k = 0; k < x->known->numel(); ++k) {
    if (x->known->element_as_double(k) == 0) continue;
    ++count;
    int64_t rest = k;
    std::vector<int64_t> c(static_cast<size_t>(r));
    for (int d = r - 1; d >= 0; --d) {
      c[static_cast<size_t>(d)] = rest % x->type.shape[d];
      rest /= x->type.shape[d];
    }
    coords.insert(coords.end(), c.begin(), c.end());
  }
  HostBuffer buf(DType::kI64, Shape{r, count});
  for (int64_t n = 0; n < count; ++n) {
    for (int d = 0; d < r; ++d) buf.data<int64_t>()[d * count + n] = coords[static_cast<size_t>(n * r + d)];
  }
  out(0, known(std::move(buf)));
}

// ScatterND on data [d0..d(r-1)], indices [..., k], updates [..., d(k)..]: data as a matrix
// [d0 · ... · d(k-1), rest], each index tuple as its row (negative entries wrapped, then
// sum(index · stride)), scatter_elements of the updates' rows along axis 0.
void Importer::scatter_nd() {
  V data = in(0), idx = in(1), updates = in(2);
  const std::string reduction = attr_string("reduction", "none");
  int64_t code = 0;
  if (reduction == "add") code = 1;
  else if (reduction == "mul") code = 2;
  else if (reduction != "none") node_unsupported("reduction=" + reduction);
  const Shape& ds = data->type.shape;
  const Shape& is = idx->type.shape;
  if (is.rank() < 1 || !is_integral(idx->type.dtype) || idx->type.dtype == DType::kBool) {
    fail_invalid(where_() + ": indices must be an integer tensor of rank >= 1");
  }
  const int64_t k = is[is.rank() - 1];
  if (k < 1 || k > ds.rank()) fail_invalid(fmt::format("{}: index tuples of {} for data of rank {}", where_(), k, ds.rank()));
  int64_t rows = 1, rest = 1, tuples = 1;
  for (int d = 0; d < ds.rank(); ++d) (d < k ? rows : rest) *= ds[d];
  for (int d = 0; d + 1 < is.rank(); ++d) tuples *= is[d];
  if (updates->type.shape.numel() != tuples * rest) fail_invalid(where_() + ": updates do not match the indices and data");
  HostBuffer dims(DType::kI64, Shape{k}), strides(DType::kI64, Shape{k});
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    dims.data<int64_t>()[j] = ds[static_cast<int>(j)];
    strides.data<int64_t>()[j] = stride;
    stride *= ds[static_cast<int>(j)];
  }
  V index = cast_to(idx, DType::kI64);
  index = op(OpKind::kAdd, {index, op(OpKind::kWhere, {op(OpKind::kLt, {index, 0.0}), known(std::move(dims)), 0.0})});
  V row = reduce_with(OpKind::kSum, op(OpKind::kMul, {index, known(std::move(strides))}), {is.rank() - 1}, false);
  V row_index = op(OpKind::kBroadcastTo, {reshape_to(row, {tuples, 1})}, {{"shape", ints({tuples, rest})}});
  V y = op(OpKind::kScatterElements, {reshape_to(data, {rows, rest}), row_index, reshape_to(updates, {tuples, rest})},
           {{"axis", i(0)}, {"reduction", i(code)}});
  out(0, reshape_to(y, dims_of(ds)));
}

// ReverseSequence: gather along the time axis with index t < len[b] ? len[b] - 1 - t : t.
void Importer::reverse_sequence() {
  V x = in(0), lens = in(1);
  const int r = x->type.shape.rank();
  if (r < 2) fail_invalid(where_() + ": the input needs rank >= 2");
  const int64_t batch_axis = axis_of(attr_int("batch_axis", 1), r), time_axis = axis_of(attr_int("time_axis", 0), r);
  if (batch_axis == time_axis) fail_invalid(where_() + ": batch_axis and time_axis are the same");
  const int64_t steps = x->type.shape[static_cast<int>(time_axis)], batch = x->type.shape[static_cast<int>(batch_axis)];
  if (lens->type.shape.numel() != batch) fail_invalid(where_() + ": one sequence length per batch entry");
  std::vector<int64_t> t_dims(static_cast<size_t>(r), 1), b_dims(static_cast<size_t>(r), 1);
  t_dims[static_cast<size_t>(time_axis)] = steps;
  b_dims[static_cast<size_t>(batch_axis)] = batch;
  V t = reshape_to(arange(0, steps, 1), t_dims);
  V len = reshape_to(cast_to(lens, DType::kI64), b_dims);
  V reversed = op(OpKind::kSub, {op(OpKind::kSub, {len, 1.0}), t});
  V index = op(OpKind::kWhere, {op(OpKind::kLt, {t, len}), reversed, t});
  index = op(OpKind::kBroadcastTo, {index}, {{"shape", ints(dims_of(x->type.shape))}});
  out(0, op(OpKind::kGather, {x, index}, {{"axis", i(time_axis)}}));
}

// MaxUnpool: the values scattered (scatter_elements on the flattened tensor) to their flat
// indices in the unpooled shape ((in - 1) · stride - pads + kernel); an output_shape beyond that
// is zeros after it, as ONNX's reference places them.
void Importer::max_unpool() {
  V x = in(0), idx = in(1);
  const Shape& s = x->type.shape;
  const int r = s.rank();
  std::optional<std::vector<int64_t>> kernel = attr_ints("kernel_shape");
  const auto spatial = static_cast<size_t>(r - 2);
  if (r < 3 || !kernel || kernel->size() != spatial) fail_invalid(where_() + ": kernel_shape needs one entry per spatial dim");
  std::vector<int64_t> strides = attr_ints("strides").value_or(std::vector<int64_t>(spatial, 1));
  std::vector<int64_t> pads = attr_ints("pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  if (strides.size() != spatial || pads.size() != 2 * spatial) fail_invalid(where_() + ": strides or pads do not match the rank");
  if (!(idx->type.shape == s)) fail_invalid(where_() + ": the indices must have the input's shape");
  std::vector<int64_t> unpooled = {s[0], s[1]};
  for (size_t d = 0; d < spatial; ++d) {
    unpooled.push_back((s[static_cast<int>(d) + 2] - 1) * strides[d] - pads[d] - pads[d + spatial] + (*kernel)[d]);
  }
  int64_t total = 1;
  for (int64_t d : unpooled) total *= d;
  V zeros = op(OpKind::kFull, {}, {{"shape", ints({total})}, {"value", f(0)}, {"dtype", AttrValue::of_dtype(x->type.dtype)}});
  V y = op(OpKind::kScatterElements, {zeros, reshape_to(cast_to(idx, DType::kI64), {s.numel()}), reshape_to(x, {s.numel()})},
           {{"axis", i(0)}, {"reduction", i(0)}});
  y = reshape_to(y, unpooled);
  if (has_in(2)) {
    std::vector<int64_t> shape = ints_of(in(2), "output_shape");
    if (shape.size() != unpooled.size()) fail_invalid(where_() + ": output_shape needs one entry per dim");
    std::vector<int64_t> extra;  // tracecache's pad order: the last dim first
    for (int d = r - 1; d >= 0; --d) {
      const int64_t more = shape[static_cast<size_t>(d)] - unpooled[static_cast<size_t>(d)];
      if (more < 0 || (d < 2 && more != 0)) node_unsupported("an output_shape smaller than the unpooled shape, or of other N, C");
      extra.push_back(0);
      extra.push_back(more);
    }
    while (extra.size() >= 2 && extra[extra.size() - 1] == 0) extra.resize(extra.size() - 2);
    if (extra.size() > 8) node_unsupported("padding more than the 4 innermost dims");
    if (!extra.empty()) y = op(OpKind::kPad, {y}, {{"pads", ints(extra)}, {"value", f(0)}});
  }
  out(0, y);
}

// TfIdfVectorizer of integer n-grams (ONNX's reference, a port of onnxruntime's): each pool
// n-gram of a length in [min_gram_length, max_gram_length] is counted at every start where its
// tokens, `skip` apart (skip 1 .. max_skip_count + 1; unigrams only at skip 1), all match: per
// n-gram and skip, eq of shifted slices, minimum, sum. Counts go to the n-gram's ngram_indexes
// column; IDF and TFIDF apply the weights. Bounded by kMaxTfIdfTerms compared tokens.
void Importer::tfidf_vectorizer() {
  constexpr int64_t kMaxTfIdfTerms = 4096;
  V x = in(0);
  if (!is_integral(x->type.dtype) || x->type.dtype == DType::kBool) node_unsupported("string or non-integer input");
  const int r = x->type.shape.rank();
  if (r != 1 && r != 2) fail_invalid(where_() + ": the input must be [C] or [B, C]");
  const std::string mode = attr_string("mode", "TF");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") fail_invalid(where_() + ": mode must be TF, IDF or TFIDF");
  const int64_t min_gram = attr_int("min_gram_length", 1), max_gram = attr_int("max_gram_length", 1);
  const int64_t max_skip = attr_int("max_skip_count", 0);
  if (attr("pool_strings")) node_unsupported("pool_strings");
  const std::vector<int64_t> pool = attr_ints("pool_int64s").value_or(std::vector<int64_t>{});
  const std::vector<int64_t> counts = attr_ints("ngram_counts").value_or(std::vector<int64_t>{});
  const std::vector<int64_t> indexes = attr_ints("ngram_indexes").value_or(std::vector<int64_t>{});
  std::vector<float> weights;
  if (const AttributeProto* a = attr("weights")) weights.assign(a->floats().begin(), a->floats().end());
  if (indexes.empty() || min_gram < 1 || max_gram < min_gram || max_skip < 0) fail_invalid(where_() + ": bad n-gram attributes");
  const int64_t outputs = *std::max_element(indexes.begin(), indexes.end()) + 1;
  const int64_t c = x->type.shape[r - 1];
  // The pool's n-grams: (tokens, output column), later duplicates replacing earlier ones.
  std::map<std::vector<int64_t>, int64_t> grams;
  int64_t id = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const auto size = static_cast<int64_t>(k) + 1;
    const int64_t begin = counts[k], end = k + 1 < counts.size() ? counts[k + 1] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end > static_cast<int64_t>(pool.size()) || end < begin) fail_invalid(where_() + ": ngram_counts do not fit the pool");
    for (int64_t at = begin; at + size <= end; at += size, ++id) {
      if (id >= static_cast<int64_t>(indexes.size())) fail_invalid(where_() + ": more n-grams than ngram_indexes");
      if (size < min_gram || size > max_gram) continue;
      grams[std::vector<int64_t>(pool.begin() + at, pool.begin() + at + size)] = indexes[static_cast<size_t>(id)];
    }
  }
  int64_t terms = 0;
  std::vector<std::vector<V>> per_column(static_cast<size_t>(outputs));
  auto window = [&](int64_t start, int64_t len) {
    return op(OpKind::kSlice, {x}, {{"axis", i(r - 1)}, {"start", i(start)}, {"end", i(start + len)}});
  };
  for (const auto& [tokens, column] : grams) {
    const auto n = static_cast<int64_t>(tokens.size());
    for (int64_t skip = 1; skip <= (n == 1 ? 1 : max_skip + 1); ++skip) {
      const int64_t starts = c - (n - 1) * skip;
      if (starts <= 0) continue;
      terms += n;
      if (terms > kMaxTfIdfTerms) node_unsupported(fmt::format("more than {} token comparisons", kMaxTfIdfTerms));
      V match;
      for (int64_t j = 0; j < n; ++j) {
        V eq = op(OpKind::kEq, {window(j * skip, starts), static_cast<double>(tokens[static_cast<size_t>(j)])});
        match = match ? op(OpKind::kMinimum, {match, eq}) : eq;
      }
      per_column[static_cast<size_t>(column)].push_back(reduce_with(OpKind::kSum, match, {r - 1}, true));
    }
  }
  std::vector<int64_t> column_dims = dims_of(x->type.shape);
  column_dims.back() = 1;
  std::vector<Arg> columns;
  for (int64_t o = 0; o < outputs; ++o) {
    V total;
    for (const V& v : per_column[static_cast<size_t>(o)]) total = total ? op(OpKind::kAdd, {total, v}) : v;
    if (!total) total = op(OpKind::kFull, {}, {{"shape", ints(column_dims)}, {"value", f(0)}, {"dtype", AttrValue::of_dtype(DType::kI64)}});
    columns.emplace_back(cast_to(total, DType::kF32));
  }
  V tf = columns.size() == 1 ? columns[0].v : op(OpKind::kConcat, std::move(columns), {{"axis", i(r - 1)}});
  V y = tf;
  if (mode != "TF") {
    if (!weights.empty() && static_cast<int64_t>(weights.size()) != outputs) fail_invalid(where_() + ": one weight per output");
    HostBuffer w(DType::kF32, Shape{outputs});
    for (int64_t o = 0; o < outputs; ++o) w.data<float>()[o] = weights.empty() ? 1.0f : weights[static_cast<size_t>(o)];
    V wv = known(std::move(w));
    if (mode == "IDF") y = op(OpKind::kWhere, {op(OpKind::kGt, {tf, 0.0}), op(OpKind::kBroadcastTo, {wv}, {{"shape", ints(dims_of(tf->type.shape))}}), 0.0});
    else y = op(OpKind::kMul, {tf, wv});
  }
  out(0, y);
}

void Importer::depth_to_space() {
  V x = in(0);
  require_rank4(x, "input");
  const int64_t bs = attr_int("blocksize", 0);
  const std::string mode = attr_string("mode", "DCR");
  const Shape& s = x->type.shape;
  if (bs <= 0 || s[1] % (bs * bs) != 0) fail_invalid(where_() + ": channels must divide by blocksize^2");
  const int64_t c = s[1] / (bs * bs);
  V y;
  if (mode == "DCR") {
    y = op(OpKind::kPermute, {reshape_to(x, {s[0], bs, bs, c, s[2], s[3]})}, {{"perm", ints({0, 3, 4, 1, 5, 2})}});
  } else if (mode == "CRD") {
    y = op(OpKind::kPermute, {reshape_to(x, {s[0], c, bs, bs, s[2], s[3]})}, {{"perm", ints({0, 1, 4, 2, 5, 3})}});
  } else {
    node_unsupported("mode=" + mode);
  }
  out(0, reshape_to(y, {s[0], c, s[2] * bs, s[3] * bs}));
}

void Importer::space_to_depth() {
  V x = in(0);
  require_rank4(x, "input");
  const int64_t bs = attr_int("blocksize", 0);
  const Shape& s = x->type.shape;
  if (bs <= 0 || s[2] % bs != 0 || s[3] % bs != 0) fail_invalid(where_() + ": H and W must divide by blocksize");
  V y = op(OpKind::kPermute, {reshape_to(x, {s[0], s[1], s[2] / bs, bs, s[3] / bs, bs})}, {{"perm", ints({0, 3, 5, 1, 2, 4})}});
  out(0, reshape_to(y, {s[0], s[1] * bs * bs, s[2] / bs, s[3] / bs}));
}

}  // namespace tracecache::onnx_import::detail
