// The cpu backend's reductions (cpu_reductions.h).
#include "replay/backends/cpu/cpu_dtypes.h"
#include "replay/backends/cpu/cpu_reductions.h"

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
#include "replay/backends/cpu/cpu_nn_layers.h"
#include "replay/backends/cpu/cpu_loops.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/backends/cpu/cpu_grad_nn_layers.h"
#include "replay/backends/cpu/vector_math.h"

namespace tracecache::cpu {

namespace {

// ---- reductions -------------------------------------------------------------------------------

// The input of a reduction as two strided index spaces: the kept dims (row-major order of the
// output) and the reduced dims (row-major order of the input: the reference's order), each with
// size-1 dims dropped and neighbours merged. Output j, at kept offset k(j), reduces
// x[k(j) + r(i)] for i = 0..count-1 in increasing i. Strides in elements.
struct ReduceView {
  int kept_rank = 0, reduced_rank = 0;
  std::array<int64_t, kMaxRank> kept_dims{}, kept_strides{};
  std::array<int64_t, kMaxRank> reduced_dims{}, reduced_strides{};
  int64_t outputs = 1, count = 1;  // output elements; reduced elements per output
};

ReduceView reduce_view(const Shape& s, const IntList& axes) {
  std::array<bool, kMaxRank> reduced{};
  for (int64_t a : axes) reduced[static_cast<size_t>(a)] = true;
  const IntList strides = contiguous_strides(s);
  ReduceView v;
  int last = -1;  // whether the previous dim kept was reduced (1) or kept (0); -1 none yet
  for (int d = 0; d < s.rank(); ++d) {
    const bool r = reduced[static_cast<size_t>(d)];
    (r ? v.count : v.outputs) *= s[d];
    if (s[d] == 1) continue;
    int& rank = r ? v.reduced_rank : v.kept_rank;
    std::array<int64_t, kMaxRank>& dims = r ? v.reduced_dims : v.kept_dims;
    std::array<int64_t, kMaxRank>& st = r ? v.reduced_strides : v.kept_strides;
    if (last == static_cast<int>(r)) {  // the neighbour is in the same space: merge (contiguous)
      dims[static_cast<size_t>(rank - 1)] *= s[d];
      st[static_cast<size_t>(rank - 1)] = strides[d];
    } else {
      dims[static_cast<size_t>(rank)] = s[d];
      st[static_cast<size_t>(rank)] = strides[d];
      ++rank;
    }
    last = static_cast<int>(r);
  }
  return v;
}

// o[j] = finish(acc) where acc = step(...step(step(init, x_0), x_1)..., x_{count-1}) over the
// elements reducing into j in the reference's order, so order-sensitive accumulations (doubles,
// NaN handling) give the same bits. Throughput comes from several outputs advancing together
// (independent dependency chains, each still in its own order), never from reassociating one:
// a block of up to 256 outputs adjacent in memory when the innermost input dim is kept
// (vectorizable across the block), else 8 outputs whose innermost reduced runs are contiguous.
template <typename T, typename R, typename Acc, typename Step, typename Finish>
void reduce_in_order(const T* x, const ReduceView& v, R* o, Acc init, Step step, Finish finish) {
  if (v.outputs == 0) return;
  if (v.count == 0) {
    std::fill_n(o, v.outputs, finish(init));
    return;
  }
  // Outputs: `rows` runs of `run` outputs along the innermost kept dim (stride `ks`).
  const int kr = v.kept_rank;
  const int64_t run = kr > 0 ? v.kept_dims[static_cast<size_t>(kr - 1)] : 1;
  const int64_t ks = kr > 0 ? v.kept_strides[static_cast<size_t>(kr - 1)] : 0;
  const int64_t rows = v.outputs / run;
  // Reduced elements: `groups` runs of `len` along the innermost reduced dim (stride `rs`).
  const int rr = v.reduced_rank;
  const int64_t len = rr > 0 ? v.reduced_dims[static_cast<size_t>(rr - 1)] : 1;
  const int64_t rs = rr > 0 ? v.reduced_strides[static_cast<size_t>(rr - 1)] : 0;
  const int64_t groups = v.count / len;
  const bool across = ks == 1;  // outputs adjacent in memory: vectorize across them
  const int64_t block = across ? 256 : 8;
  const int64_t blocks = (run + block - 1) / block;

  // Offset of the first element of output row `row` (kept dims but the innermost).
  auto row_offset = [&](int64_t row) {
    int64_t off = 0;
    for (int d = kr - 2; d >= 0; --d) {
      const size_t u = static_cast<size_t>(d);
      off += row % v.kept_dims[u] * v.kept_strides[u];
      row /= v.kept_dims[u];
    }
    return off;
  };
  // Calls fn(offset) for each reduced run, in order; the odometer over the outer reduced dims.
  auto for_each_group = [&](auto&& fn) {
    std::array<int64_t, kMaxRank> idx{};
    int64_t off = 0;
    for (int64_t g = 0; g < groups; ++g) {
      fn(off);
      for (int d = rr - 2; d >= 0; --d) {
        const size_t u = static_cast<size_t>(d);
        off += v.reduced_strides[u];
        if (++idx[u] < v.reduced_dims[u]) break;
        off -= idx[u] * v.reduced_strides[u];
        idx[u] = 0;
      }
    }
  };

  parallel_chunks(rows * blocks, v.outputs * v.count, [&](int64_t begin, int64_t end) {
    std::array<Acc, 256> acc;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / blocks, c0 = item % blocks * block;
      const int64_t cn = std::min(block, run - c0);
      const T* base = x + row_offset(row) + c0 * ks;
      R* out = o + row * run + c0;
      if (across) {
        for (int64_t c = 0; c < cn; ++c) acc[static_cast<size_t>(c)] = init;
        for_each_group([&](int64_t off) {
          for (int64_t r = 0; r < len; ++r) {
            const T* p = base + off + r * rs;
            for (int64_t c = 0; c < cn; ++c) acc[static_cast<size_t>(c)] = step(acc[static_cast<size_t>(c)], p[c]);
          }
        });
        for (int64_t c = 0; c < cn; ++c) out[c] = finish(acc[static_cast<size_t>(c)]);
        continue;
      }
      if (cn == 8) {  // eight chains, each over its own contiguous runs
        assert(rs == 1);
        // The chains live in eight scalar locals, not in `acc`: an accumulator in memory would
        // put a store and a load into every chain's dependency (measured: about three times as
        // slow). A local std::array<Acc, 8> copied in and out per group is no better: GCC 12
        // keeps it in memory too (measured: as slow as `acc`).
        Acc a0 = init, a1 = init, a2 = init, a3 = init, a4 = init, a5 = init, a6 = init, a7 = init;
        for_each_group([&](int64_t off) {
          const T* p0 = base + off;
          const T* p1 = p0 + ks;
          const T* p2 = p1 + ks;
          const T* p3 = p2 + ks;
          const T* p4 = p3 + ks;
          const T* p5 = p4 + ks;
          const T* p6 = p5 + ks;
          const T* p7 = p6 + ks;
          Acc b0 = a0, b1 = a1, b2 = a2, b3 = a3, b4 = a4, b5 = a5, b6 = a6, b7 = a7;
          for (int64_t r = 0; r < len; ++r) {
            b0 = step(b0, p0[r]);
            b1 = step(b1, p1[r]);
            b2 = step(b2, p2[r]);
            b3 = step(b3, p3[r]);
            b4 = step(b4, p4[r]);
            b5 = step(b5, p5[r]);
            b6 = step(b6, p6[r]);
            b7 = step(b7, p7[r]);
          }
          a0 = b0, a1 = b1, a2 = b2, a3 = b3, a4 = b4, a5 = b5, a6 = b6, a7 = b7;
        });
        out[0] = finish(a0), out[1] = finish(a1), out[2] = finish(a2), out[3] = finish(a3);
        out[4] = finish(a4), out[5] = finish(a5), out[6] = finish(a6), out[7] = finish(a7);
        continue;
      }
      for (int64_t q = 0; q < cn; ++q) {
        Acc a = init;
        for_each_group([&](int64_t off) {
          const T* p = base + q * ks + off;
          for (int64_t r = 0; r < len; ++r) a = step(a, p[r * rs]);
        });
        out[q] = finish(a);
      }
    }
  });
}

// sum, mean, max or min over any set of axes.

}  // namespace

void reduce_fast(OpKind op, const HostBuffer& x, const IntList& axes, HostBuffer& out) {
  const ReduceView v = reduce_view(x.shape(), axes);
  if (op == OpKind::kSum && out.dtype() == DType::kF32) {
    // Sequential sum in double from +0.0, rounded once: as the reference.
    reduce_in_order(x.data<float>(), v, out.data<float>(), 0.0,
                    [](double acc, float e) { return acc + static_cast<double>(e); },
                    [](double acc) { return static_cast<float>(acc); });
    return;
  }
  if (op == OpKind::kSum) {
    // bool, i32, i64 -> i64, wrapping (order-independent).
    dispatch_cpu_dtype(x.dtype(), [&]<typename T>() {
      reduce_in_order(x.data<T>(), v, out.data<int64_t>(), uint64_t{0},
                      [](uint64_t acc, T e) { return acc + static_cast<uint64_t>(convert<int64_t>(e)); },
                      [](uint64_t acc) { return static_cast<int64_t>(acc); });
    });
    return;
  }
  if (op == OpKind::kMean) {
    const double count = static_cast<double>(v.count);
    dispatch_cpu_dtype(x.dtype(), [&]<typename T>() {
      reduce_in_order(x.data<T>(), v, out.data<float>(), 0.0,
                      [](double acc, T e) { return acc + static_cast<double>(e); },
                      [count](double acc) {
                        return count == 0 ? std::numeric_limits<float>::quiet_NaN()
                                          : static_cast<float>(acc / count);
                      });
    });
    return;
  }
  // max and min: the first NaN seen makes the result NaN, and each later NaN replaces it (as
  // the reference's `o = v` on NaN); otherwise the first of equal extremes stays (strict).
  const bool smallest = op == OpKind::kMin;
  dispatch_cpu_dtype(x.dtype(), [&]<typename T>() {
    if (smallest) {
      T init = std::numeric_limits<T>::max();
      if constexpr (std::is_floating_point_v<T>) init = std::numeric_limits<T>::infinity();
      reduce_in_order(x.data<T>(), v, out.data<T>(), init,
                      [](T acc, T e) -> T {
                        if constexpr (std::is_floating_point_v<T>) {
                          if (std::isnan(e)) return e;
                        }
                        return e < acc ? e : acc;
                      },
                      [](T acc) { return acc; });
      return;
    }
    T init = std::numeric_limits<T>::lowest();
    if constexpr (std::is_floating_point_v<T>) init = -std::numeric_limits<T>::infinity();
    reduce_in_order(x.data<T>(), v, out.data<T>(), init,
                    [](T acc, T e) -> T {
                      if constexpr (std::is_floating_point_v<T>) {
                        if (std::isnan(e)) return e;
                      }
                      return e > acc ? e : acc;
                    },
                    [](T acc) { return acc; });
  });
}

// argmax (kSmallest false) and argmin over `axis`: the index of the first extreme element, or
// the last with kLast; a NaN counts as the extreme (the first NaN wins, the last with kLast).
template <bool kSmallest, bool kLast>
void arg_extreme(const HostBuffer& x, int axis, HostBuffer& out) {
  const AxisSplit split = split_at_axis(x.shape(), axis);
  const int64_t outer = split.outer, len = split.len, inner = split.inner;
  int64_t* o = out.data<int64_t>();
  dispatch_cpu_dtype(x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    // Replaces (best, at) with (v, i) when v wins.
    auto wins = [](T v, T best) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(best)) return kLast && std::isnan(v);
        if (std::isnan(v)) return true;
      }
      if constexpr (kSmallest) return kLast ? v <= best : v < best;
      else return kLast ? v >= best : v > best;
    };
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    parallel_chunks(outer * blocks, outer * len * inner, [&](int64_t begin, int64_t end) {
      std::array<T, kBlock> best;
      std::array<int64_t, kBlock> at;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t a = item / blocks, c0 = item % blocks * kBlock;
        const int64_t cn = std::min(kBlock, inner - c0);
        const T* base = p + a * len * inner + c0;
        for (int64_t c = 0; c < cn; ++c) {
          best[static_cast<size_t>(c)] = base[c];
          at[static_cast<size_t>(c)] = 0;
        }
        for (int64_t i = 1; i < len; ++i) {
          const T* row = base + i * inner;
          for (int64_t c = 0; c < cn; ++c) {
            const size_t u = static_cast<size_t>(c);
            if (wins(row[c], best[u])) {
              best[u] = row[c];
              at[u] = i;
            }
          }
        }
        std::copy_n(at.begin(), cn, o + a * inner + c0);
      }
    });
  });
}

template void arg_extreme<false, false>(const HostBuffer& x, int axis, HostBuffer& out);
template void arg_extreme<true, false>(const HostBuffer& x, int axis, HostBuffer& out);
template void arg_extreme<true, true>(const HostBuffer& x, int axis, HostBuffer& out);

}  // namespace tracecache::cpu
