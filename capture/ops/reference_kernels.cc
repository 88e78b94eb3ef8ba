// The reference kernels. Numerical behaviour (what to expect from a backend) is documented per
// op in docs/ops.md. Element-level semantics (conversion, wrapping integer arithmetic, one
// functor per elementwise op, the compute dtype) come from capture/ops/elementwise.h, which backends
// share; the kernels here add the naive index loops around them:
//   - integer add/sub/mul/neg/abs/pow/sum/matmul wrap around modulo 2^bits (computed in the
//     unsigned type, so no signed overflow);
//   - float -> integer conversion truncates toward zero, clamps to the integer type's range and
//     maps NaN to 0.
#include "capture/ops/reference_kernels.h"

#include <array>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "capture/ops/attr_views.h"
#include "capture/ops/elementwise.h"
#include "capture/ops/random.h"

namespace tracecache::ref {

namespace {

// ---- element conversion ---------------------------------------------------------------------

// Writes every element of `in` into `out` (same numel) converted to out's dtype.
void convert_buffer(const HostBuffer& in, HostBuffer& out) {
  assert(in.numel() == out.numel());
  dispatch_compute_dtype(in.dtype(), [&]<typename From>() {
    dispatch_compute_dtype(out.dtype(), [&]<typename To>() {
      const From* src = in.data<From>();
      To* dst = out.data<To>();
      for (int64_t i = 0; i < in.numel(); ++i) dst[i] = convert<To>(src[i]);
    });
  });
}

// The elements of a buffer as T: the buffer itself when it already holds T, otherwise a copy
// converted by `convert`. This is how "inputs are converted to the computation dtype" is done.
template <typename T>
class ElementsAs {
 public:
  explicit ElementsAs(const HostBuffer& b, void (*convert)(const HostBuffer&, HostBuffer&) = convert_buffer) {
    if (b.dtype() == dtype_of<T>()) {
      data_ = b.data<T>();
    } else {
      copy_ = HostBuffer(dtype_of<T>(), b.shape());
      convert(b, copy_);
      data_ = copy_.data<T>();
    }
  }
  T operator[](int64_t i) const { return data_[i]; }

 private:
  HostBuffer copy_;
  const T* data_ = nullptr;
};

// Like dispatch_compute_dtype, for ops whose inference rule rejects bool outputs.
template <typename Fn>
void dispatch_numeric(DType t, Fn&& fn) {
  assert(t != DType::kBool && "the inference rule rejects bool here");
  if (t == DType::kBool) return;
  dispatch_compute_dtype(t, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) fn.template operator()<T>();
  });
}

// ---- strided iteration ----------------------------------------------------------------------

// Visits every index of `shape` in row-major order with an odometer. For each of the N
// operands it keeps offset[k] = base[k] + sum_d index[d] * strides[k][d] and calls
// fn(i, offset) where i is the row-major position of the index.
template <size_t N, typename Fn>
void for_each_index(const Shape& shape, const std::array<IntList, N>& strides, Fn&& fn,
                    std::array<int64_t, N> base = {}) {
  const int64_t n = shape.numel();
  if (n == 0) return;
  const int rank = shape.rank();
  IntList index = shape;
  for (int64_t& x : index) x = 0;
  std::array<int64_t, N> offset = base;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, std::as_const(offset));
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        for (size_t k = 0; k < N; ++k) offset[k] += strides[k][d];
        break;
      }
      index[d] = 0;
      for (size_t k = 0; k < N; ++k) offset[k] -= strides[k][d] * (shape[d] - 1);
    }
  }
}

// out[i] = src[offset(i)] for every row-major position i of out, where offset follows
// `src_strides` from `src_base`. Byte copies, so it works for every dtype.
void gather(const HostBuffer& src, const IntList& src_strides, int64_t src_base, HostBuffer& out) {
  const size_t elem = dtype_size(src.dtype());
  const std::byte* s = src.bytes();
  std::byte* o = out.bytes();
  for_each_index<1>(out.shape(), {src_strides}, [&](int64_t i, const std::array<int64_t, 1>& off) {
    std::memcpy(o + static_cast<size_t>(i) * elem, s + static_cast<size_t>(off[0]) * elem, elem);
  }, {src_base});
}

// ---- elementwise ----------------------------------------------------------------------------
//
// Every elementwise kernel is out[i] = F(convert<C>(operands...)) with F the op's functor and C
// its compute dtype, both from capture/ops/elementwise.h (the definition backends share).

DType compute_dtype_of(OpKind op, std::span<const HostBuffer* const> in, const HostBuffer& out) {
  std::array<DType, 3> types{};
  for (size_t k = 0; k < in.size() && k < types.size(); ++k) types[k] = in[k]->dtype();
  return compute_dtype(op, std::span(types.data(), in.size()), out.dtype());
}

// Unary op computing in C and producing R.
template <typename C, typename R, typename F>
void unary(std::span<const HostBuffer* const> in, HostBuffer& out, F f) {
  ElementsAs<C> x(*in[0]);
  R* o = out.data<R>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = f(x[i]);
}

// Float unary op (exp, log, ...): computes in its output dtype, f32 or f64.
template <typename F>
void unary_float(std::span<const HostBuffer* const> in, HostBuffer& out, F f) {
  if (out.dtype() == DType::kF64) unary<double, double>(in, out, f);
  else unary<float, float>(in, out, f);
}

// Unary op keeping the (non-bool) dtype (neg, abs, relu).
template <typename F>
void unary_same(std::span<const HostBuffer* const> in, HostBuffer& out, F f) {
  dispatch_numeric(out.dtype(), [&]<typename T>() { unary<T, T>(in, out, f); });
}

// out[i] = f(a, b) with NumPy broadcasting; both operands converted to C, result R.
template <typename C, typename R, typename F>
void broadcast_binary(const HostBuffer& a, const HostBuffer& b, HostBuffer& out, F f) {
  ElementsAs<C> x(a), y(b);
  R* o = out.data<R>();
  std::array<IntList, 2> strides = {broadcast_strides(a.shape(), out.shape()),
                                    broadcast_strides(b.shape(), out.shape())};
  for_each_index<2>(out.shape(), strides, [&](int64_t i, const std::array<int64_t, 2>& off) {
    o[i] = f(x[off[0]], y[off[1]]);
  });
}

// Arithmetic (add, sub, mul, pow) in the output dtype, which the inference rule keeps non-bool.
template <typename F>
void binary_arith(OpKind op, std::span<const HostBuffer* const> in, HostBuffer& out, F f) {
  dispatch_numeric(compute_dtype_of(op, in, out), [&]<typename T>() {
    broadcast_binary<T, T>(*in[0], *in[1], out, f);
  });
}

// maximum and minimum: in the output dtype, bool included.
template <typename F>
void binary_any(OpKind op, std::span<const HostBuffer* const> in, HostBuffer& out, F f) {
  dispatch_compute_dtype(compute_dtype_of(op, in, out), [&]<typename T>() {
    broadcast_binary<T, T>(*in[0], *in[1], out, f);
  });
}

// Comparison in promote(a, b), bool result.
template <typename F>
void binary_compare(OpKind op, std::span<const HostBuffer* const> in, HostBuffer& out, F f) {
  dispatch_compute_dtype(compute_dtype_of(op, in, out), [&]<typename T>() {
    broadcast_binary<T, bool>(*in[0], *in[1], out, f);
  });
}

// ---- reductions -----------------------------------------------------------------------------

// Calls fn(i, j) for every input position i, where j is the position of the output element it
// reduces into (the output of reducing `axes`, with or without keepdim: the layout is the same).
template <typename Fn>
void for_each_reduced(const Shape& in, const IntList& axes, Fn fn) {
  Shape kept = in;
  for (int64_t a : axes) kept[static_cast<int>(a)] = 1;
  IntList strides = contiguous_strides(kept);
  for (int64_t a : axes) strides[static_cast<int>(a)] = 0;
  for_each_index<1>(in, {strides}, [&](int64_t i, const std::array<int64_t, 1>& off) { fn(i, off[0]); });
}

// Number of input elements that reduce into each output element.
int64_t reduced_count(const Shape& in, const IntList& axes) {
  int64_t n = 1;
  for (int64_t a : axes) n *= in[static_cast<int>(a)];
  return n;
}

}  // namespace

// ---- unary ----------------------------------------------------------------------------------

void neg(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_same(in, out, ew::Neg{});
}

void abs(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_same(in, out, ew::Abs{});
}

void exp(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Exp{});
}

void log(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Log{});
}

void sqrt(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Sqrt{});
}

void rsqrt(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Rsqrt{});
}

void tanh(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Tanh{});
}

void sigmoid(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Sigmoid{});
}

void relu(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_same(in, out, ew::Relu{});
}

// ---- binary ---------------------------------------------------------------------------------

void add(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_arith(OpKind::kAdd, in, out, ew::Add{});
}

void sub(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_arith(OpKind::kSub, in, out, ew::Sub{});
}

void mul(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_arith(OpKind::kMul, in, out, ew::Mul{});
}

void div(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  // Always f32 (true division): integer operands are converted to float first.
  broadcast_binary<float, float>(*in[0], *in[1], out, ew::Div{});
}

void pow(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_arith(OpKind::kPow, in, out, ew::Pow{});
}

void maximum(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_any(OpKind::kMaximum, in, out, ew::Maximum{});
}

void minimum(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_any(OpKind::kMinimum, in, out, ew::Minimum{});
}

// ---- compare, where, cast -------------------------------------------------------------------

void eq(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_compare(OpKind::kEq, in, out, ew::Eq{});
}

void lt(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_compare(OpKind::kLt, in, out, ew::Lt{});
}

void gt(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_compare(OpKind::kGt, in, out, ew::Gt{});
}

void where(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  // The condition is read as bool; the two values are converted to the output dtype.
  dispatch_compute_dtype(compute_dtype_of(OpKind::kWhere, in, out), [&]<typename T>() {
    const bool* c = in[0]->data<bool>();
    ElementsAs<T> a(*in[1]), b(*in[2]);
    T* o = out.data<T>();
    std::array<IntList, 3> strides = {broadcast_strides(in[0]->shape(), out.shape()),
                                      broadcast_strides(in[1]->shape(), out.shape()),
                                      broadcast_strides(in[2]->shape(), out.shape())};
    for_each_index<3>(out.shape(), strides, [&](int64_t i, const std::array<int64_t, 3>& off) {
      o[i] = ew::Where{}(c[off[0]], a[off[1]], b[off[2]]);
    });
  });
}

// ---- quantization ---------------------------------------------------------------------------

void convert_through_float(const HostBuffer& from, HostBuffer& to) {
  dispatch_dtype(from.dtype(), [&]<typename F>() {
    dispatch_dtype(to.dtype(), [&]<typename T>() {
      const F* src = from.data<F>();
      T* dst = to.data<T>();
      for (int64_t i = 0; i < from.numel(); ++i) dst[i] = static_cast<T>(static_cast<float>(src[i]));
    });
  });
}

void quantize_linear(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  ElementsAs<float> x(*in[0], convert_through_float), scale(*in[1], convert_through_float),
      zp(*in[2], convert_through_float);
  const std::array<IntList, 3> strides = {broadcast_strides(in[0]->shape(), out.shape()),
                                          broadcast_strides(in[1]->shape(), out.shape()),
                                          broadcast_strides(in[2]->shape(), out.shape())};
  auto quantize = [&]<typename Q>() {
    Q* o = out.data<Q>();
    for_each_index<3>(out.shape(), strides, [&](int64_t i, const std::array<int64_t, 3>& off) {
      o[i] = ew::QuantizeLinear<Q>{}(x[off[0]], scale[off[1]], zp[off[2]]);
    });
  };
  if (out.dtype() == DType::kI8) {
    quantize.operator()<int8_t>();
  } else {
    quantize.operator()<uint8_t>();
  }
}

void dequantize_linear(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  ElementsAs<float> x(*in[0], convert_through_float), scale(*in[1], convert_through_float),
      zp(*in[2], convert_through_float);
  const std::array<IntList, 3> strides = {broadcast_strides(in[0]->shape(), out.shape()),
                                          broadcast_strides(in[1]->shape(), out.shape()),
                                          broadcast_strides(in[2]->shape(), out.shape())};
  // The result in f32, then in the scale's dtype (one rounding for a half scale).
  HostBuffer wide;
  HostBuffer& result = out.dtype() == DType::kF32 ? out : (wide = HostBuffer(DType::kF32, out.shape()));
  float* o = result.data<float>();
  for_each_index<3>(out.shape(), strides, [&](int64_t i, const std::array<int64_t, 3>& off) {
    o[i] = ew::DequantizeLinear{}(x[off[0]], scale[off[1]], zp[off[2]]);
  });
  if (&result != &out) convert_through_float(result, out);
}

void cast(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  convert_buffer(*in[0], out);
}

// ---- matmul ---------------------------------------------------------------------------------

void matmul(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  // Lift 1-D operands to matrices as the inference rule does; the removed unit dims do not
  // change the row-major layout of the output, so `out` is filled as batch x M x N.
  Shape sa = in[0]->shape(), sb = in[1]->shape();
  if (sa.rank() == 1) sa.insert(0, 1);
  if (sb.rank() == 1) sb.push_back(1);
  const int ra = sa.rank(), rb = sb.rank();
  const int64_t m = sa[ra - 2], k = sa[ra - 1], n = sb[rb - 1];
  Shape batch_a(IntList(std::span(sa.begin(), static_cast<size_t>(ra - 2))));
  Shape batch_b(IntList(std::span(sb.begin(), static_cast<size_t>(rb - 2))));
  Shape batch;
  [[maybe_unused]] bool ok = broadcast_shapes(batch_a, batch_b, &batch);
  assert(ok);
  // Offsets of each operand's matrix for a batch index, in elements.
  std::array<IntList, 2> strides = {broadcast_strides(batch_a, batch), broadcast_strides(batch_b, batch)};
  for (int64_t& s : strides[0]) s *= m * k;
  for (int64_t& s : strides[1]) s *= k * n;

  dispatch_numeric(out.dtype(), [&]<typename T>() {
    ElementsAs<T> a(*in[0]), b(*in[1]);
    T* o = out.data<T>();
    for_each_index<2>(batch, strides, [&](int64_t bi, const std::array<int64_t, 2>& off) {
      T* c = o + bi * m * n;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          // f32: exact products summed in double in k order, rounded once. Integers: int64
          // accumulation, wrapping, then narrowed (wrapping) to the output type.
          std::conditional_t<std::is_floating_point_v<T>, double, uint64_t> acc = 0;
          for (int64_t p = 0; p < k; ++p) {
            T x = a[off[0] + i * k + p], y = b[off[1] + p * n + j];
            if constexpr (std::is_floating_point_v<T>) {
              acc += static_cast<double>(x) * static_cast<double>(y);
            } else {
              acc += static_cast<uint64_t>(static_cast<int64_t>(x)) * static_cast<uint64_t>(static_cast<int64_t>(y));
            }
          }
          c[i * n + j] = static_cast<T>(static_cast<std::conditional_t<std::is_floating_point_v<T>, double, int64_t>>(acc));
        }
      }
    });
  });
}

// ---- reductions -----------------------------------------------------------------------------

void sum(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const IntList& axes = ReduceAttrs(attrs).axes();
  if (out.dtype() == DType::kF32) {
    // Sequential sum in double, in row-major order of the input, rounded once.
    std::vector<double> acc(static_cast<size_t>(out.numel()), 0.0);
    const float* p = x.data<float>();
    for_each_reduced(x.shape(), axes, [&](int64_t i, int64_t j) { acc[static_cast<size_t>(j)] += p[i]; });
    float* o = out.data<float>();
    for (int64_t j = 0; j < out.numel(); ++j) o[j] = static_cast<float>(acc[static_cast<size_t>(j)]);
    return;
  }
  if (out.dtype() == DType::kF64) {
    // f64: sequential in row-major order, in double (NumPy's pairwise sum may differ in the last bits).
    std::vector<double> acc(static_cast<size_t>(out.numel()), 0.0);
    const double* p = x.data<double>();
    for_each_reduced(x.shape(), axes, [&](int64_t i, int64_t j) { acc[static_cast<size_t>(j)] += p[i]; });
    std::copy(acc.begin(), acc.end(), out.data<double>());
    return;
  }
  // bool, i32 and i64 sum to i64, wrapping.
  std::vector<uint64_t> acc(static_cast<size_t>(out.numel()), 0);
  ElementsAs<int64_t> v(x);
  for_each_reduced(x.shape(), axes, [&](int64_t i, int64_t j) {
    acc[static_cast<size_t>(j)] += static_cast<uint64_t>(v[i]);
  });
  int64_t* o = out.data<int64_t>();
  for (int64_t j = 0; j < out.numel(); ++j) o[j] = static_cast<int64_t>(acc[static_cast<size_t>(j)]);
}

void mean(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[0];
  const IntList& axes = ReduceAttrs(attrs).axes();
  std::vector<double> acc(static_cast<size_t>(out.numel()), 0.0);
  dispatch_compute_dtype(x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    for_each_reduced(x.shape(), axes, [&](int64_t i, int64_t j) {
      acc[static_cast<size_t>(j)] += static_cast<double>(p[i]);
    });
  });
  const int64_t count = reduced_count(x.shape(), axes);
  float* o = out.data<float>();
  for (int64_t j = 0; j < out.numel(); ++j) {
    o[j] = count == 0 ? std::numeric_limits<float>::quiet_NaN()
                      : static_cast<float>(acc[static_cast<size_t>(j)] / static_cast<double>(count));
  }
}

namespace {

// max (kSmallest false) and min: the first NaN seen makes the result NaN and each later NaN
// replaces it; otherwise the first of equal extremes stays (strict comparison).
template <bool kSmallest>
void reduce_extreme(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const HostBuffer& x = *in[0];
  dispatch_compute_dtype(x.dtype(), [&]<typename T>() {
    // The inference rule rejects reducing an empty dim, so every output element sees at least
    // one input and the initial value never survives by itself.
    T init = kSmallest ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
    if constexpr (std::is_floating_point_v<T>) {
      init = kSmallest ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity();
    }
    T* o = out.data<T>();
    for (int64_t j = 0; j < out.numel(); ++j) o[j] = init;
    const T* p = x.data<T>();
    for_each_reduced(x.shape(), ReduceAttrs(attrs).axes(), [&](int64_t i, int64_t j) {
      T v = p[i];
      // Once o[j] is NaN it stays NaN: every comparison with NaN is false.
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(v)) { o[j] = v; return; }
      }
      if (kSmallest ? v < o[j] : v > o[j]) o[j] = v;
    });
  });
}

// argmax (kSmallest false) and argmin over `axis`: the index of the first extreme element (the
// last with `last`), a NaN counting as the extreme (the first NaN, or the last with `last`).
template <bool kSmallest>
void arg_extreme(const HostBuffer& x, int axis, bool last, HostBuffer& out) {
  const AxisSplit split = split_at_axis(x.shape(), axis);
  const int64_t outer = split.outer, len = split.len, inner = split.inner;
  int64_t* o = out.data<int64_t>();
  dispatch_compute_dtype(x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    for (int64_t a = 0; a < outer; ++a) {
      for (int64_t c = 0; c < inner; ++c) {
        const T* row = p + a * len * inner + c;
        int64_t best = 0;
        for (int64_t i = 1; i < len; ++i) {
          T v = row[i * inner], b = row[best * inner];
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(b)) {
              if (!last) break;  // the first NaN wins
              if (std::isnan(v)) best = i;
              continue;
            }
            if (std::isnan(v)) { best = i; continue; }
          }
          const bool better = kSmallest ? v < b : v > b;
          if (better || (last && v == b)) best = i;
        }
        o[a * inner + c] = best;
      }
    }
  });
}

}  // namespace

void max(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  reduce_extreme<false>(in, attrs, out);
}

void min(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  reduce_extreme<true>(in, attrs, out);
}

void argmax(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  arg_extreme<false>(*in[0], static_cast<int>(ArgmaxAttrs(attrs).axis()), false, out);
}

void argmin(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  const ArgminAttrs a(attrs);
  arg_extreme<true>(*in[0], static_cast<int>(a.axis()), a.select_last_index(), out);
}

// ---- layout ---------------------------------------------------------------------------------

void reshape(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  assert(in[0]->nbytes() == out.nbytes());
  std::memcpy(out.bytes(), in[0]->bytes(), out.nbytes());
}

void permute(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  // Output dim d is input dim perm[d].
  const IntList& perm = PermuteAttrs(attrs).perm();
  IntList in_strides = contiguous_strides(in[0]->shape());
  IntList strides;
  for (int64_t p : perm) strides.push_back(in_strides[static_cast<int>(p)]);
  gather(*in[0], strides, 0, out);
}

void transpose(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  IntList strides = contiguous_strides(in[0]->shape());
  const TransposeAttrs a(attrs);
  std::swap(strides[static_cast<int>(a.dim0())], strides[static_cast<int>(a.dim1())]);
  gather(*in[0], strides, 0, out);
}

void broadcast_to(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  gather(*in[0], broadcast_strides(in[0]->shape(), out.shape()), 0, out);
}

void concat(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  // Each input is copied into the block of the output that starts at its offset along `axis`.
  const int axis = static_cast<int>(AxisAttrs(attrs).axis());
  const size_t elem = dtype_size(out.dtype());
  const IntList out_strides = contiguous_strides(out.shape());
  int64_t start = 0;
  for (const HostBuffer* src : in) {
    const std::byte* s = src->bytes();
    std::byte* o = out.bytes();
    for_each_index<1>(src->shape(), {out_strides}, [&](int64_t i, const std::array<int64_t, 1>& off) {
      std::memcpy(o + static_cast<size_t>(off[0]) * elem, s + static_cast<size_t>(i) * elem, elem);
    }, {start * out_strides[axis]});
    start += src->shape()[axis];
  }
}

void slice(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  // attrs are normalized: axis >= 0, 0 <= start <= end <= dim, step >= 1.
  const SliceAttrs a(attrs);
  const int axis = static_cast<int>(a.axis());
  const int64_t start = a.start(), step = a.step();
  IntList strides = contiguous_strides(in[0]->shape());
  const int64_t base = start * strides[axis];
  strides[axis] *= step;
  gather(*in[0], strides, base, out);
}

// ---- sources --------------------------------------------------------------------------------

void full(std::span<const HostBuffer* const>, std::span<const AttrValue> attrs, HostBuffer& out) {
  dispatch_compute_dtype(out.dtype(), [&]<typename T>() {
    const T v = convert<T>(FullAttrs(attrs).value());
    T* o = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = v;
  });
}

void arange(std::span<const HostBuffer* const>, std::span<const AttrValue> attrs, HostBuffer& out) {
  const ArangeAttrs a(attrs);
  const double start = a.start(), step = a.step();
  dispatch_compute_dtype(out.dtype(), [&]<typename T>() {
    T* o = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = convert<T>(start + static_cast<double>(i) * step);
  });
}

void uniform(std::span<const HostBuffer* const>, std::span<const AttrValue> attrs, HostBuffer& out) {
  const UniformAttrs a(attrs);
  fill_uniform(out, static_cast<uint64_t>(a.seed()), a.low(), a.high());
}

void normal(std::span<const HostBuffer* const>, std::span<const AttrValue> attrs, HostBuffer& out) {
  const NormalAttrs a(attrs);
  fill_normal(out, static_cast<uint64_t>(a.seed()), a.mean(), a.stddev());
}

// ---- nn activations (capture/trace/nn.h) ----------------------------------------------------------

void gelu(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  if (GeluAttrs(attrs).tanh()) unary_float(in, out, ew::GeluTanh{});
  else unary_float(in, out, ew::GeluErf{});
}

void silu(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Silu{});
}

void hardswish(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Hardswish{});
}

void hardsigmoid(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Hardsigmoid{});
}

void erf(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Erf{});
}

void clamp(std::span<const HostBuffer* const> in, std::span<const AttrValue> attrs, HostBuffer& out) {
  dispatch_numeric(out.dtype(), [&]<typename T>() {
    const ClampAttrs a(attrs);
    unary<T, T>(in, out, ew::Clamp<T>::make(a.min(), a.max()));
  });
}

// ---- the ops ONNX models need (issue 16): elementwise ---------------------------------------------

void floor(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_same(in, out, ew::Floor{});
}

void ceil(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_same(in, out, ew::Ceil{});
}

void round(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_same(in, out, ew::Round{});
}

void sin(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Sin{});
}

void cos(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  unary_float(in, out, ew::Cos{});
}

void remainder(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_arith(OpKind::kRemainder, in, out, ew::Remainder{});
}

void fmod(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_arith(OpKind::kFmod, in, out, ew::Fmod{});
}

void trunc_div(std::span<const HostBuffer* const> in, std::span<const AttrValue>, HostBuffer& out) {
  binary_arith(OpKind::kTruncDiv, in, out, ew::TruncDiv{});
}

}  // namespace tracecache::ref
