// ONNX op handlers: layout (reshapes, slices, gathers...) (the handler contract: onnx_lowering.h).
#include "frontend/onnx/onnx_lowering.h"

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

void Importer::pad() {
  V x = in(0);
  const std::string mode = attr_string("mode", "constant");
  if (mode != "constant") node_unsupported("mode=" + mode);
  std::vector<int64_t> pads = ints_of(in(1), "pads");
  const int r = x->type.shape.rank();
  if (static_cast<int>(pads.size()) != 2 * r) fail_invalid(where_() + ": 'pads' needs 2 entries per dim");
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
