// The cpu backend's kernels: run_op's dispatch, strided copies, matmul and the layout ops. The
// fused interpreter is in cpu_fused.cc, the reductions in cpu_reductions.cc. See cpu_kernels.h
// for the contract and the numerics table.
#include "replay/backends/cpu/cpu_dtypes.h"
#include "replay/backends/cpu/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <climits>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>


#include "capture/ops/attr_views.h"
#include "capture/ops/elementwise.h"
#include "capture/ops/reference_kernels.h"
#include "capture/ops/resize.h"
#include "capture/ops/topk.h"
#include "replay/backends/cpu/cpu_grad_nn_ops.h"
#include "replay/backends/cpu/cpu_nn_ops.h"
#include "replay/backends/cpu/cpu_quant.h"
#include "replay/backends/cpu/cpu_nn_layers.h"
#include "replay/backends/cpu/cpu_loops.h"
#include "replay/backends/cpu/cpu_reductions.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/backends/cpu/cpu_grad_nn_layers.h"
#include "replay/backends/cpu/vector_math.h"

namespace tracecache::cpu {

namespace {

// A transpose's copy: out[o][a][b] = src[base + o * outer_stride + a + b * b_stride] over
// `outer` x `rows` x `cols`. Read row by row, every output row would read a column of src, one
// element per cache line; in blocks of kBlock x kBlock, the lines a block reads are used whole
// while they are in cache. Blocks of rows split over the team.
template <typename U>
void transpose_blocks(const U* src, int64_t outer, int64_t outer_stride, int64_t rows, int64_t cols,
                      int64_t b_stride, U* dst) {
  constexpr int64_t kBlock = 16;
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock;
  parallel_chunks(outer * row_blocks, outer * rows * cols, [&](int64_t first, int64_t last) {
    for (int64_t unit = first; unit < last; ++unit) {
      const int64_t o = unit / row_blocks, a0 = unit % row_blocks * kBlock;
      const int64_t a1 = std::min(rows, a0 + kBlock);
      const U* s = src + o * outer_stride;
      U* d = dst + o * rows * cols;
      for (int64_t b0 = 0; b0 < cols; b0 += kBlock) {
        const int64_t b1 = std::min(cols, b0 + kBlock);
        for (int64_t a = a0; a < a1; ++a) {
          for (int64_t b = b0; b < b1; ++b) d[a * cols + b] = s[a + b * b_stride];
        }
      }
    }
  });
}

}  // namespace

void strided_gather(const HostBuffer& src, const IntList& strides, int64_t base, HostBuffer& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const StridedSpace space = simplify(out.shape(), strides);
  const size_t elem = dtype_size(out.dtype());
  // A transpose of the last two dims (after merging): the second-to-last reads contiguously, the
  // last with a stride, and at most one dim outside them; blocked when one slice is larger than
  // the caches hold (a [1024, 3072] f32 transpose: 15.9 -> 5.7 ms, [1024, 768] 1.12 -> 0.86 ms),
  // row by row below that (bert's heads, [96, 128, 64]: 0.35 ms row by row, 0.92 blocked;
  // nn_layers_bench, 1 thread).
  const int r = space.rank;
  constexpr int64_t kBlockedSliceBytes = int64_t{1} << 18;
  if (r >= 2 && r <= 3 && space.strides[r - 2] == 1 && space.strides[r - 1] > 1 &&
      space.dims[r - 2] * space.dims[r - 1] * static_cast<int64_t>(elem) > kBlockedSliceBytes &&
      (elem == 4 || elem == 8)) {
    const int64_t outer = r == 3 ? space.dims[0] : 1, outer_stride = r == 3 ? space.strides[0] : 0;
    auto go = [&]<typename U>() {
      transpose_blocks(reinterpret_cast<const U*>(src.bytes()) + base, outer, outer_stride, space.dims[r - 2],
                       space.dims[r - 1], space.strides[r - 1], reinterpret_cast<U*>(out.bytes()));
    };
    if (elem == 4) go.operator()<uint32_t>();
    else go.operator()<uint64_t>();
    return;
  }
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_chunks(chunks, n, [&](int64_t b, int64_t e) {
    const int64_t start = b * kChunk, end = std::min(n, e * kChunk);
    gather_range(space, src.bytes(), base, elem, start, end - start,
                 out.bytes() + static_cast<size_t>(start) * elem);
  });
}

namespace {

// ---- matmul -----------------------------------------------------------------------------------

// b's elements as f32: b itself, or a converted copy in `copy`.
const float* as_f32(const HostBuffer& b, HostBuffer& copy) {
  if (b.dtype() == DType::kF32) return b.data<float>();
  copy = HostBuffer(DType::kF32, b.shape());
  float* o = copy.data<float>();
  dispatch_cpu_dtype(b.dtype(), [&]<typename T>() {
    const T* x = b.data<T>();
    for (int64_t i = 0; i < b.numel(); ++i) o[i] = convert<float>(x[i]);
  });
  return o;
}

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
              static_cast<int>(n));
}

// f32 matmul through BLAS. False (nothing written) when a dim exceeds BLAS's int range.
bool matmul_f32(const HostBuffer& a, const HostBuffer& b, HostBuffer& out) {
  // Lift 1-D operands as the inference rule does; the removed unit dims do not change the
  // row-major layout of the output, which is batch x M x N.
  Shape sa = a.shape(), sb = b.shape();
  if (sa.rank() == 1) sa.insert(0, 1);
  if (sb.rank() == 1) sb.push_back(1);
  const int ra = sa.rank(), rb = sb.rank();
  const int64_t m = sa[ra - 2], k = sa[ra - 1], n = sb[rb - 1];
  const Shape batch_a(IntList(std::span(sa.begin(), static_cast<size_t>(ra - 2))));
  const Shape batch_b(IntList(std::span(sb.begin(), static_cast<size_t>(rb - 2))));
  Shape batch;
  [[maybe_unused]] const bool ok = broadcast_shapes(batch_a, batch_b, &batch);
  assert(ok);
  if (out.numel() == 0) return true;
  float* o = out.data<float>();
  if (k == 0) {
    std::fill_n(o, out.numel(), 0.0f);
    return true;
  }
  // b without batch: one GEMM with a's batches stacked along M.
  const bool fold = batch_b.numel() == 1;
  const int64_t rows = fold ? batch_a.numel() * m : m;
  constexpr int64_t kMaxDim = INT_MAX;
  if (rows > kMaxDim || n > kMaxDim || k > kMaxDim) return false;
  HostBuffer copy_a, copy_b;
  const float* pa = as_f32(a, copy_a);
  const float* pb = as_f32(b, copy_b);
  if (fold) {
    sgemm(rows, n, k, pa, pb, o);
    return true;
  }
  const IntList stride_a = broadcast_strides(batch_a, batch);
  const IntList stride_b = broadcast_strides(batch_b, batch);
  for (int64_t bi = 0; bi < batch.numel(); ++bi) {
    int64_t off_a = 0, off_b = 0, rem = bi;
    for (int d = batch.rank() - 1; d >= 0; --d) {
      const int64_t i = rem % batch[d];
      rem /= batch[d];
      off_a += i * stride_a[d];
      off_b += i * stride_b[d];
    }
    sgemm(m, n, k, pa + off_a * m * k, pb + off_b * k * n, o + bi * m * n);
  }
  return true;
}

// ---- layout -----------------------------------------------------------------------------------

void concat(std::span<const HostBuffer* const> in, int axis, HostBuffer& out) {
  // Each input is a run of outer blocks of (its axis dim x inner) elements.
  const Shape& s = out.shape();
  const AxisSplit split = split_at_axis(s, axis);
  const int64_t outer = split.outer, inner = split.inner;
  const size_t elem = dtype_size(out.dtype());
  const size_t out_row = static_cast<size_t>(s[axis] * inner) * elem;
  size_t at = 0;
  for (const HostBuffer* src : in) {
    const size_t row = static_cast<size_t>(src->shape()[axis] * inner) * elem;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(out.bytes() + static_cast<size_t>(o) * out_row + at,
                  src->bytes() + static_cast<size_t>(o) * row, row);
    }
    at += row;
  }
}

// conv_transpose2d: the cpu conv2d_input_grad (cpu_grad_nn_layers.h) into the output plane, then
// the bias added in f32 as the reference does. False if that kernel declines (sizes BLAS cannot
// index): the caller falls back to the reference.
bool conv_transpose2d(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const Shape& s = out.shape();
  const std::array<AttrValue, 5> grad_attrs = ref::conv_transpose2d_input_grad_attrs(attrs, s);
  const std::array<const HostBuffer*, 2> operands = {in[0], in[1]};
  if (!run_grad_nn_layer(OpKind::kConv2dInputGrad, operands, grad_attrs, out)) return false;
  if (in.size() < 3) return true;
  const float* bias = in[2]->data<float>();
  float* o = out.data<float>();
  const int64_t plane = s[2] * s[3];
  parallel_chunks(s[0] * s[1], out.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const float b = bias[nc % s[1]];
      float* p = o + nc * plane;
      for (int64_t i = 0; i < plane; ++i) p[i] += b;
    }
  });
  return true;
}

// resize_nearest2d and resize_linear2d: the reference's taps and plane loops (resize.h), planes
// split over threads: the reference's bits.
void resize_nearest2d(const HostBuffer& x, std::span<const AttrValue> attrs, HostBuffer& out) {
  const ResizeNearest2dAttrs a(attrs);
  const Shape& xs = x.shape();
  const Shape& s = out.shape();
  const auto mode = static_cast<resize::CoordMode>(a.coordinate_transformation_mode());
  const auto nearest = static_cast<resize::NearestMode>(a.nearest_mode());
  const std::vector<int64_t> rows = resize::nearest_taps(mode, nearest, xs[2], s[2], a.scale_h());
  const std::vector<int64_t> cols = resize::nearest_taps(mode, nearest, xs[3], s[3], a.scale_w());
  const size_t elem = dtype_size(out.dtype());
  const size_t in_plane = static_cast<size_t>(xs[2] * xs[3]) * elem;
  const size_t out_plane = static_cast<size_t>(s[2] * s[3]) * elem;
  parallel_chunks(s[0] * s[1], out.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      resize::nearest_plane(x.bytes() + static_cast<size_t>(p) * in_plane, xs[3],
                            out.bytes() + static_cast<size_t>(p) * out_plane, rows, cols, elem);
    }
  });
}

void resize_linear2d(const HostBuffer& x, std::span<const AttrValue> attrs, HostBuffer& out) {
  const ResizeLinear2dAttrs a(attrs);
  const Shape& xs = x.shape();
  const Shape& s = out.shape();
  const auto mode = static_cast<resize::CoordMode>(a.coordinate_transformation_mode());
  const std::vector<resize::LinearTap> rows = resize::linear_taps(mode, xs[2], s[2], a.scale_h());
  const std::vector<resize::LinearTap> cols = resize::linear_taps(mode, xs[3], s[3], a.scale_w());
  parallel_chunks(s[0] * s[1], 6 * out.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      resize::linear_plane(x.data<float>() + p * xs[2] * xs[3], xs[3], out.data<float>() + p * s[2] * s[3], rows, cols);
    }
  });
}

// topk's values (kIndices false) or indices: the reference's selection (topk.h), rows split
// over threads.
template <bool kIndices>
void topk_rows(const HostBuffer& x, std::span<const AttrValue> attrs, HostBuffer& out) {
  const TopkAttrs a(attrs);
  const AxisSplit split = split_at_axis(x.shape(), static_cast<int>(a.axis()));
  const int64_t k = a.k();
  dispatch_cpu_dtype(x.dtype(), [&]<typename T>() {
    auto* dst = out.data<std::conditional_t<kIndices, int64_t, T>>();
    parallel_chunks(split.outer * split.inner, x.numel(), [&](int64_t begin, int64_t end) {
      std::vector<int64_t> order;
      for (int64_t r = begin; r < end; ++r) {
        topk::write_row<kIndices>(x.data<T>(), split.len, split.inner, r, k, a.largest(), order, dst);
      }
    });
  });
}

}  // namespace

void parallel_for(int64_t items, int64_t work, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_chunks(items, work, fn);
}

void run_op(const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs, HostBuffer& out) {
  const Node& n = g.node(node);
  const OpInfo& info = op_info(n.op);
  assert(n.op != OpKind::kParameter && "parameters have no kernel");
  const std::span<const AttrValue> attrs = g.attrs(n);
  if (info.elementwise()) {
    const std::span<const NodeId> ids = g.inputs(n);
    run_fused(g, std::span(&node, 1), [&](NodeId id) -> const HostBuffer* {
      for (size_t k = 0; k < ids.size(); ++k) {
        if (ids[k] == id) return inputs[k];
      }
      return nullptr;
    }, out);
    return;
  }
  // nn layers (replay/backends/cpu/cpu_nn_layers.h); normalization, softmax, attention (replay/backends/cpu/cpu_nn_ops.h);
  // quantization (replay/backends/cpu/cpu_quant.h);
  // the gradients' scatter_add (replay/backends/cpu/cpu_grad_nn_ops.h) and the nn layers' gradients
  // (replay/backends/cpu/cpu_grad_nn_layers.h).
  if (info.op_class == OpClass::kNn &&
      (run_nn_layer(n.op, inputs, attrs, out) || run_nn_op(n.op, inputs, attrs, out) ||
       run_quant_op(n.op, inputs, out) || run_grad_nn_op(n.op, inputs, attrs, out) ||
       run_grad_nn_layer(n.op, inputs, attrs, out))) {
    return;
  }
  switch (n.op) {
    case OpKind::kMatmul:
      if (out.dtype() == DType::kF32 && matmul_f32(*inputs[0], *inputs[1], out)) return;
      break;
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kMax:
    case OpKind::kMin:
      reduce_fast(n.op, *inputs[0], ReduceAttrs(attrs).axes(), out);
      return;
    case OpKind::kArgmax:
      arg_extreme<false, false>(*inputs[0], static_cast<int>(ArgmaxAttrs(attrs).axis()), out);
      return;
    case OpKind::kArgmin: {
      const ArgminAttrs a(attrs);
      const int axis = static_cast<int>(a.axis());
      if (a.select_last_index()) arg_extreme<true, true>(*inputs[0], axis, out);
      else arg_extreme<true, false>(*inputs[0], axis, out);
      return;
    }
    case OpKind::kReshape:
      std::memcpy(out.bytes(), inputs[0]->bytes(), out.nbytes());
      return;
    case OpKind::kPermute: {
      const IntList in_strides = contiguous_strides(inputs[0]->shape());
      IntList strides;
      for (int64_t p : PermuteAttrs(attrs).perm()) strides.push_back(in_strides[static_cast<int>(p)]);
      strided_gather(*inputs[0], strides, 0, out);
      return;
    }
    case OpKind::kTranspose: {
      IntList strides = contiguous_strides(inputs[0]->shape());
      const TransposeAttrs a(attrs);
      std::swap(strides[static_cast<int>(a.dim0())], strides[static_cast<int>(a.dim1())]);
      strided_gather(*inputs[0], strides, 0, out);
      return;
    }
    case OpKind::kBroadcastTo:
      strided_gather(*inputs[0], broadcast_strides(inputs[0]->shape(), out.shape()), 0, out);
      return;
    case OpKind::kSlice: {
      // attrs are normalized: axis >= 0, 0 <= start <= end <= dim, step >= 1.
      const SliceAttrs a(attrs);
      const int axis = static_cast<int>(a.axis());
      IntList strides = contiguous_strides(inputs[0]->shape());
      const int64_t base = a.start() * strides[axis];
      strides[axis] *= a.step();
      strided_gather(*inputs[0], strides, base, out);
      return;
    }
    case OpKind::kConcat:
      concat(inputs, static_cast<int>(AxisAttrs(attrs).axis()), out);
      return;
    case OpKind::kConvTranspose2d:
      if (conv_transpose2d(inputs, attrs, out)) return;
      break;
    case OpKind::kResizeNearest2d:
      resize_nearest2d(*inputs[0], attrs, out);
      return;
    case OpKind::kResizeLinear2d:
      resize_linear2d(*inputs[0], attrs, out);
      return;
    case OpKind::kTopk:
      topk_rows<false>(*inputs[0], attrs, out);
      return;
    case OpKind::kTopkIndices:
      topk_rows<true>(*inputs[0], attrs, out);
      return;
    default:
      break;
  }
  info.reference(inputs, attrs, out);
}

}  // namespace tracecache::cpu
