// The cpu backend's kernels (replay/backends/cpu/cpu_kernels.h) against the reference kernels, the oracle:
//  - every op of the registry but parameter, through run_op, on dtype/shape cases including
//    broadcasting, size-1 and size-0 dims, tile- and thread-crossing sizes: bitwise equal,
//    except f32 matmul and scaled_dot_product_attention (BLAS), which must be within the
//    bounds cpu_kernels.h and cpu_nn_ops.h document (tests/capture/nn_ops_test.cc has the nn ops'
//    edge cases);
//  - random fused elementwise chains (seeded) with broadcast leaves, mixed dtypes,
//    compare/where/cast inside, through run_fused: bitwise equal to running the same nodes one
//    by one with the reference kernels.
// "Bitwise" lets any NaN stand for any NaN (see cpu_kernels.h); everything else compares bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/ir/graph.h"
#include "capture/ops/attr_views.h"
#include "capture/ops/ops.h"
#include "capture/ops/random.h"
#include "capture/core/status.h"
#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "tests/attention_bound.h"
#include "tests/backend_compare.h"

namespace tracecache {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Seeded random values. mt19937_64's output is fixed by the standard; the mapping to values is
// ours (std distributions differ between standard libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  uint64_t bits() { return gen_(); }
  // Uniform in [lo, hi].
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(bits() % static_cast<uint64_t>(hi - lo + 1));
  }
  double unit() { return static_cast<double>(bits() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }
  template <typename T> const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(between(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  std::mt19937_64 gen_;
};

// Values that exercise every rule: mostly ordinary numbers, some specials (NaN, ±inf, ±0,
// subnormals, values beyond the integer ranges, integer extremes). `tame` leaves specials out.
HostBuffer random_buffer(DType dtype, const Shape& shape, Rng& rng, bool tame = false) {
  HostBuffer b(dtype, shape);
  for (int64_t i = 0; i < b.numel(); ++i) {
    const bool special = !tame && rng.chance(0.08);
    switch (dtype) {
      case DType::kBool:
        b.data<bool>()[i] = rng.chance(0.5);
        break;
      case DType::kF32: {
        static const std::vector<float> kSpecial = {kNaN, -kNaN, kInf, -kInf, 0.0f, -0.0f, 1e-40f,
                                                    -3e9f, 3e9f, 1e30f, 2.0f, -1.0f, 0.5f};
        float v = static_cast<float>(rng.unit() * 8.0 - 4.0);
        if (rng.chance(0.2)) v = std::round(v);  // integers: pow, eq and ties meet them
        b.data<float>()[i] = special ? rng.pick(kSpecial) : v;
        break;
      }
      case DType::kI32: {
        static const std::vector<int32_t> kSpecial = {std::numeric_limits<int32_t>::min(),
                                                      std::numeric_limits<int32_t>::max(), 0, -1, 1};
        b.data<int32_t>()[i] = special ? rng.pick(kSpecial)
                                       : static_cast<int32_t>(rng.between(tame ? -4 : -20, tame ? 4 : 20));
        break;
      }
      case DType::kI64: {
        static const std::vector<int64_t> kSpecial = {std::numeric_limits<int64_t>::min(),
                                                      std::numeric_limits<int64_t>::max(), 0, -1,
                                                      int64_t{1} << 40};
        b.data<int64_t>()[i] = special ? rng.pick(kSpecial) : rng.between(tame ? -4 : -20, tame ? 4 : 20);
        break;
      }
      default:  // the storage types: small whole numbers (non-negative for u8: -1 as u8 is UB)
        dispatch_dtype(dtype, [&]<typename T>() {
          const int64_t lo = dtype == DType::kU8 ? 0 : -4;
          b.data<T>()[i] = static_cast<T>(static_cast<float>(rng.between(lo, lo + 8)));
        });
        break;
    }
  }
  return b;
}

std::string element_string(const HostBuffer& b, int64_t i) {
  if (b.dtype() == DType::kF32) {
    uint32_t bits;
    std::memcpy(&bits, b.data<float>() + i, 4);
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", bits);
    return std::to_string(b.data<float>()[i]) + " (0x" + hex + ")";
  }
  return std::to_string(b.element_as_double(i));
}

bool same_element(const HostBuffer& a, const HostBuffer& b, int64_t i) {
  if (a.dtype() == DType::kF32) {
    const float x = a.data<float>()[i], y = b.data<float>()[i];
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  }
  const size_t elem = dtype_size(a.dtype());
  return std::memcmp(a.bytes() + static_cast<size_t>(i) * elem, b.bytes() + static_cast<size_t>(i) * elem,
                     elem) == 0;
}

::testing::AssertionResult same_bits(const HostBuffer& got, const HostBuffer& want) {
  if (got.dtype() != want.dtype() || !(got.shape() == want.shape())) {
    return ::testing::AssertionFailure()
           << "type " << type_to_string({got.dtype(), got.shape()}) << " vs "
           << type_to_string({want.dtype(), want.shape()});
  }
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!same_element(got, want, i)) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.numel() << " elements differ; first at "
                                       << first << ": cpu " << element_string(got, first)
                                       << ", reference " << element_string(want, first);
}

// A buffer for `t` whose bytes are garbage (except bool, whose bytes must stay 0/1), so a
// kernel that leaves elements unwritten is caught.
HostBuffer poisoned(const TensorType& t) {
  HostBuffer b(t.dtype, t.shape);
  if (t.dtype != DType::kBool) std::memset(b.bytes(), 0xA5, b.nbytes());
  return b;
}

// ---- one op at a time -------------------------------------------------------------------------

using NamedAttrs = std::vector<std::pair<std::string_view, AttrValue>>;

struct OpCase {
  std::vector<TensorType> inputs;
  NamedAttrs attrs;
};

AttrValue ints(IntList v) { return AttrValue::of_ints(v); }
AttrValue num(int64_t v) { return AttrValue::of_int(v); }
AttrValue real(double v) { return AttrValue::of_float(v); }
AttrValue flag(bool v) { return AttrValue::of_bool(v); }
AttrValue dt(DType v) { return AttrValue::of_dtype(v); }

const std::vector<DType> kAll = {DType::kBool, DType::kI32, DType::kI64, DType::kF32};
const std::vector<DType> kNumeric = {DType::kI32, DType::kI64, DType::kF32};

// Small shapes cover ranks 0-3, size 1 and size 0; large ones cross the tile (512) and the
// threading threshold (2^16).
const std::vector<Shape> kUnaryShapes = {{}, {0}, {1}, {7}, {2, 3, 5}, {3, 0, 2}, {1000}};
const std::vector<Shape> kLargeShapes = {{300, 300}};
const std::vector<std::pair<Shape, Shape>> kBinaryShapes = {
    {{2, 3}, {2, 3}}, {{4, 1, 3}, {5, 3}}, {{}, {6}},     {{7}, {}},       {{3, 1}, {1, 4}},
    {{0, 3}, {1, 3}}, {{2, 0}, {2, 1}},    {{513}, {513}}, {{2, 1, 700}, {3, 1}}};
const std::vector<std::pair<Shape, Shape>> kLargeBinaryShapes = {{{300, 257}, {257}},
                                                                 {{300, 1}, {300, 257}}};
const std::vector<std::pair<DType, DType>> kLargePairs = {
    {DType::kF32, DType::kF32}, {DType::kI32, DType::kF32}, {DType::kI64, DType::kI64}};

std::vector<OpCase> cases_for(const OpInfo& op) {
  std::vector<OpCase> cases;
  auto add = [&](std::vector<TensorType> in, NamedAttrs attrs = {}) {
    cases.push_back({std::move(in), std::move(attrs)});
  };
  switch (op.op_class) {
    case OpClass::kParameter:
      break;
    case OpClass::kUnary:
    case OpClass::kCast: {
      // neg/abs/relu/clamp reject bool; the cases the rule rejects are filtered out by the caller.
      std::vector<NamedAttrs> attr_sets = {{}};
      if (op.op_class == OpClass::kCast) {
        attr_sets.clear();
        for (DType to : kAll) attr_sets.push_back({{"dtype", dt(to)}});
      } else if (op.kind == OpKind::kGelu) {
        attr_sets = {{{"tanh", flag(false)}}, {{"tanh", flag(true)}}};
      } else if (op.kind == OpKind::kClamp) {
        const double inf = std::numeric_limits<double>::infinity();
        attr_sets = {{{"min", real(-1.5)}, {"max", real(2.5)}}, {{"min", real(0)}, {"max", real(6)}},
                     {{"min", real(-inf)}, {"max", real(0.5)}}, {{"min", real(2)}, {"max", real(2)}},
                     {{"min", real(-1e30)}, {"max", real(inf)}}};
      }
      for (const NamedAttrs& attrs : attr_sets) {
        for (DType t : kAll) {
          for (const Shape& s : kUnaryShapes) add({{t, s}}, attrs);
          if (t != DType::kBool) {
            for (const Shape& s : kLargeShapes) add({{t, s}}, attrs);
          }
        }
      }
      break;
    }
    case OpClass::kBinary:
    case OpClass::kCompare:
      for (DType a : kAll) {
        for (DType b : kAll) {
          for (const auto& [sa, sb] : kBinaryShapes) add({{a, sa}, {b, sb}});
        }
      }
      for (const auto& [a, b] : kLargePairs) {
        for (const auto& [sa, sb] : kLargeBinaryShapes) add({{a, sa}, {b, sb}});
      }
      break;
    case OpClass::kWhere: {
      const std::vector<std::array<Shape, 3>> shapes = {{Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},
                                                        {Shape{3, 1}, Shape{1, 4}, Shape{}},
                                                        {Shape{5}, Shape{2, 5}, Shape{2, 1}},
                                                        {Shape{0, 2}, Shape{1, 2}, Shape{2}},
                                                        {Shape{}, Shape{}, Shape{}},
                                                        {Shape{300, 257}, Shape{257}, Shape{300, 1}}};
      for (DType a : kAll) {
        for (DType b : kAll) {
          for (const auto& s : shapes) add({{DType::kBool, s[0]}, {a, s[1]}, {b, s[2]}});
        }
      }
      break;
    }
    case OpClass::kMatmul: {
      const std::vector<std::pair<Shape, Shape>> shapes = {
          {{5}, {5}},          {{3, 5}, {5}},       {{5}, {5, 4}},          {{3, 5}, {5, 4}},
          {{2, 3, 5}, {5, 4}}, {{5}, {2, 5, 4}},    {{2, 1, 3, 5}, {3, 5, 4}}, {{3, 5}, {2, 5, 4}},
          {{4, 2, 3}, {4, 3, 2}}, {{3, 0}, {0, 4}}, {{0, 5}, {5, 4}},       {{3, 5}, {5, 0}},
          {{1, 1, 1}, {1, 1, 1}}, {{64, 70}, {70, 90}}, {{2, 33, 257}, {257, 65}}};
      const std::vector<std::pair<DType, DType>> dtypes = {
          {DType::kF32, DType::kF32}, {DType::kI32, DType::kF32}, {DType::kF32, DType::kI64},
          {DType::kI32, DType::kI32}, {DType::kI64, DType::kI32}};
      for (const auto& [a, b] : dtypes) {
        for (const auto& [sa, sb] : shapes) add({{a, sa}, {b, sb}});
      }
      break;
    }
    case OpClass::kReduce: {
      if (op.kind == OpKind::kArgmax || op.kind == OpKind::kArgmin) {
        const std::vector<Shape> shapes = {{2, 3, 4}, {7}, {1, 5}, {4, 0}, {300, 300}, {3, 1, 700}};
        for (DType t : kAll) {
          for (const Shape& s : shapes) {
            for (int axis = 0; axis < s.rank(); ++axis) {
              add({{t, s}}, {{"axis", num(axis)}});
              add({{t, s}}, {{"axis", num(axis - s.rank())}, {"keepdim", flag(true)}});
              if (op.kind == OpKind::kArgmin) add({{t, s}}, {{"axis", num(axis)}, {"select_last_index", flag(true)}});
            }
          }
        }
        break;
      }
      const std::vector<std::pair<Shape, IntList>> shapes = {
          {{2, 3, 4}, {2}},    {{2, 3, 4}, {1}},       {{2, 3, 4}, {0}},     {{2, 3, 4}, {1, 2}},
          {{2, 3, 4}, {0, 1}}, {{2, 3, 4}, {0, 2}},    {{2, 3, 4}, {}},      {{}, {}},
          {{5, 0, 3}, {1}},    {{0, 4}, {1}},          {{1000}, {0}},        {{2, 1, 3, 1, 4}, {1, 2}},
          {{2, 1, 3, 1, 4}, {0, 3, 4}}, {{4, 1}, {0}}, {{300, 300}, {1}},    {{300, 300}, {0}},
          {{3, 700, 40}, {1}}, {{13, 9}, {1}},
          // reduced axes that are not one run: batch-norm statistics (0, 2, 3) and the like
          {{2, 3, 4, 5}, {0, 2, 3}}, {{2, 3, 4, 5}, {1, 3}}, {{2, 3, 4, 5}, {0, 1, 3}},
          {{3, 1, 4, 1, 5}, {0, 4}}, {{0, 3, 2, 2}, {0, 2, 3}}, {{3, 0, 2, 2}, {0, 2, 3}},
          {{8, 16, 30, 30}, {0, 2, 3}}, {{5, 9, 3, 300}, {0, 2}}, {{7, 300, 11, 5}, {0, 2}}};
      const std::vector<DType> dtypes = op.kind == OpKind::kSum ? kAll : kAll;
      for (DType t : dtypes) {
        for (const auto& [s, axes] : shapes) {
          add({{t, s}}, {{"axes", ints(axes)}});
          add({{t, s}}, {{"axes", ints(axes)}, {"keepdim", flag(true)}});
        }
      }
      break;
    }
    case OpClass::kLayout:
      for (DType t : kAll) {
        switch (op.kind) {
          case OpKind::kReshape:
            add({{t, {2, 3, 4}}}, {{"shape", ints({4, 6})}});
            add({{t, {2, 3, 4}}}, {{"shape", ints({-1})}});
            add({{t, {0, 3}}}, {{"shape", ints({3, 0})}});
            add({{t, {}}}, {{"shape", ints({1, 1})}});
            break;
          case OpKind::kPermute:
            add({{t, {2, 3, 4}}}, {{"perm", ints({2, 0, 1})}});
            add({{t, {2, 3, 4, 5}}}, {{"perm", ints({3, 1, 2, 0})}});
            add({{t, {2, 0, 4}}}, {{"perm", ints({1, 2, 0})}});
            add({{t, {1, 3, 1}}}, {{"perm", ints({2, 1, 0})}});
            add({{t, {300, 300}}}, {{"perm", ints({1, 0})}});
            break;
          case OpKind::kTranspose:
            add({{t, {2, 3, 4}}}, {{"dim0", num(0)}, {"dim1", num(2)}});
            add({{t, {2, 3, 4}}}, {{"dim0", num(-1)}, {"dim1", num(1)}});
            add({{t, {5}}}, {{"dim0", num(0)}, {"dim1", num(0)}});
            add({{t, {3, 0}}}, {{"dim0", num(0)}, {"dim1", num(1)}});
            // transposes of the last two dims (strided_gather; CpuTranspose has the blocked ones)
            add({{t, {70, 45}}}, {{"dim0", num(0)}, {"dim1", num(1)}});
            add({{t, {3, 37, 70}}}, {{"dim0", num(1)}, {"dim1", num(2)}});
            break;
          case OpKind::kBroadcastTo:
            add({{t, {3, 1}}}, {{"shape", ints({2, 3, 4})}});
            add({{t, {}}}, {{"shape", ints({5})}});
            add({{t, {1}}}, {{"shape", ints({0})}});
            add({{t, {4}}}, {{"shape", ints({4})}});
            add({{t, {300}}}, {{"shape", ints({300, 300})}});
            add({{t, {2, 1, 3}}}, {{"shape", ints({2, 5, 3})}});
            // runs of one value longer than a vector and not a multiple of one, for every
            // element size (copy_run's vectorized fill and its remainder)
            add({{t, {3, 1}}}, {{"shape", ints({2, 3, 77})}});
            add({{t, {}}}, {{"shape", ints({1000})}});
            break;
          case OpKind::kConcat:
            add({{t, {2, 3}}, {t, {2, 5}}}, {{"axis", num(1)}});
            add({{t, {2, 3}}, {t, {4, 3}}, {t, {1, 3}}}, {{"axis", num(0)}});
            add({{t, {2, 0}}, {t, {2, 3}}}, {{"axis", num(-1)}});
            add({{t, {7}}}, {{"axis", num(0)}});
            add({{t, {2, 3, 4}}, {t, {2, 1, 4}}}, {{"axis", num(1)}});
            break;
          case OpKind::kSlice:
            add({{t, {10}}}, {{"axis", num(0)}, {"start", num(2)}, {"end", num(9)}, {"step", num(3)}});
            add({{t, {4, 6}}}, {{"axis", num(-1)}, {"start", num(-4)}, {"step", num(2)}});
            add({{t, {4, 6}}}, {{"axis", num(0)}, {"start", num(5)}, {"end", num(2)}});
            add({{t, {3, 4, 5}}}, {{"axis", num(1)}, {"start", num(1)}, {"end", num(3)}});
            add({{t, {300, 300}}}, {{"axis", num(1)}, {"start", num(1)}, {"step", num(2)}});
            break;
          default:
            break;
        }
      }
      break;
    case OpClass::kNn:
      switch (op.kind) {
        case OpKind::kBatchNorm:
          for (const Shape& x : std::vector<Shape>{{2, 3, 4, 5}, {4, 3}, {1, 1, 1}, {0, 3, 2}, {2, 5, 0}, {2, 64, 40, 30}}) {
            const TensorType c{DType::kF32, {x[1]}};
            add({{DType::kF32, x}, c, c, c, c});
            add({{DType::kF32, x}, c, c, c, c}, {{"eps", real(0.1)}});
          }
          break;
        case OpKind::kLayerNorm:
          for (const auto& [x, dims] : std::vector<std::pair<Shape, int>>{
                   {{2, 3, 4}, 1}, {{2, 3, 4}, 2}, {{2, 3, 4}, 3}, {{5, 1}, 1}, {{5, 0}, 1}, {{300, 300}, 1}, {{7}, 1}}) {
            Shape normalized;
            for (int d = x.rank() - dims; d < x.rank(); ++d) normalized.push_back(x[d]);
            const TensorType xt{DType::kF32, x}, wt{DType::kF32, normalized};
            add({xt}, {{"normalized_dims", num(dims)}});
            add({xt, wt}, {{"normalized_dims", num(dims)}, {"eps", real(0.5)}});
            add({xt, wt, wt}, {{"normalized_dims", num(dims)}});
          }
          break;
        case OpKind::kSoftmax:
        case OpKind::kLogSoftmax:
          for (const Shape& x : std::vector<Shape>{{2, 3, 4}, {7}, {1, 5}, {4, 0}, {300, 300}, {3, 700, 40}, {2, 1, 70}}) {
            for (int axis = 0; axis < x.rank(); ++axis) add({{DType::kF32, x}}, {{"axis", num(axis)}});
            add({{DType::kF32, x}}, {{"axis", num(-1)}});
          }
          break;
        case OpKind::kResizeNearest2d:
        case OpKind::kResizeLinear2d: {
          const std::vector<DType> dtypes = op.kind == OpKind::kResizeLinear2d ? std::vector<DType>{DType::kF32} : kAll;
          const std::vector<std::pair<Shape, IntList>> shapes = {
              {{1, 2, 3, 4}, {6, 8}}, {{2, 1, 5, 7}, {3, 2}}, {{1, 1, 4, 4}, {1, 1}}, {{0, 3, 2, 2}, {4, 4}},
              {{2, 3, 5, 3}, {7, 13}}, {{1, 3, 150, 150}, {300, 300}}};
          for (DType t : dtypes) {
            for (const auto& [x, size] : shapes) {
              for (int64_t mode = 0; mode < 5; ++mode) {
                NamedAttrs attrs = {{"size", ints(size)}, {"coordinate_transformation_mode", num(mode)}};
                if (op.kind == OpKind::kResizeNearest2d) attrs.push_back({"nearest_mode", num(mode % 4)});
                add({{t, x}}, attrs);
              }
              add({{t, x}}, {{"size", ints(size)}, {"scale_h", real(1.5)}, {"scale_w", real(2.25)}});
            }
          }
          break;
        }
        case OpKind::kTopk:
        case OpKind::kTopkIndices: {
          const std::vector<std::pair<Shape, int64_t>> shapes = {
              {{2, 7}, 3}, {{2, 7}, 7}, {{5, 4, 3}, 2}, {{9}, 0}, {{0, 4}, 2}, {{300, 300}, 5}, {{3, 1000}, 17}};
          for (DType t : kAll) {
            for (const auto& [x, k] : shapes) {
              for (int axis = 0; axis < x.rank(); ++axis) {
                if (k > x[axis]) continue;
                add({{t, x}}, {{"k", num(k)}, {"axis", num(axis)}});
                add({{t, x}}, {{"k", num(k)}, {"axis", num(axis - x.rank())}, {"largest", flag(false)}});
              }
            }
          }
          break;
        }
        case OpKind::kScatterElements:
          for (DType t : kAll) {
            for (DType it : {DType::kI32, DType::kI64}) {
              for (int64_t reduction = 0; reduction < 3; ++reduction) {
                add({{t, {4, 5}}, {it, {3, 5}}, {t, {3, 5}}}, {{"axis", num(0)}, {"reduction", num(reduction)}});
                add({{t, {4, 5}}, {it, {4, 2}}, {t, {4, 2}}}, {{"axis", num(-1)}, {"reduction", num(reduction)}});
                add({{t, {2, 3, 4}}, {it, {2, 3, 9}}, {t, {2, 3, 9}}}, {{"axis", num(2)}, {"reduction", num(reduction)}});
                add({{t, {3, 0}}, {it, {2, 0}}, {t, {2, 0}}}, {{"axis", num(0)}, {"reduction", num(reduction)}});
              }
            }
          }
          break;
        case OpKind::kGatherNd:
          for (DType t : kAll) {
            for (DType it : {DType::kI32, DType::kI64}) {
              add({{t, {4, 5}}, {it, {3, 2}}});
              add({{t, {4, 5, 6}}, {it, {2, 3, 1}}});
              add({{t, {2, 4, 5}}, {it, {2, 3, 1}}}, {{"batch_dims", num(1)}});
              add({{t, {2, 3, 4, 5}}, {it, {2, 3, 2}}}, {{"batch_dims", num(2)}});
              add({{t, {4, 5}}, {it, {0, 2}}});
              add({{t, {300, 300}}, {it, {50, 1}}});
            }
          }
          break;
        case OpKind::kQuantizeLinear:
          for (DType x : {DType::kF32, DType::kBF16, DType::kI32}) {
            for (DType q : {DType::kI8, DType::kU8}) {
              add({{x, {2, 3, 4}}, {DType::kF32, {}}, {q, {}}});
              add({{x, {2, 3, 4, 5}}, {DType::kF32, {3, 1, 1}}, {q, {3, 1, 1}}});
              add({{x, {0, 3}}, {DType::kF32, {}}, {q, {}}});
              add({{x, {300, 300}}, {DType::kF32, {300, 1}}, {q, {300, 1}}});
            }
          }
          break;
        case OpKind::kDequantizeLinear:
          for (DType q : {DType::kI8, DType::kU8, DType::kI32}) {
            for (DType scale : {DType::kF32, DType::kF16}) {
              add({{q, {2, 3, 4}}, {scale, {}}, {q, {}}});
              add({{q, {2, 3, 4, 5}}, {scale, {3, 1, 1}}, {q, {3, 1, 1}}});
              add({{q, {0, 3}}, {scale, {}}, {q, {}}});
              add({{q, {300, 300}}, {scale, {300, 1}}, {q, {300, 1}}});
            }
          }
          break;
        case OpKind::kResizeNearest2dGrad:
        case OpKind::kResizeLinear2dGrad:
          for (const auto& [g, size] : std::vector<std::pair<Shape, IntList>>{
                   {{1, 2, 6, 8}, {3, 4}}, {{2, 1, 3, 2}, {5, 7}}, {{1, 1, 1, 1}, {4, 4}}, {{0, 3, 4, 4}, {2, 2}}}) {
            for (int64_t mode = 0; mode < 5; ++mode) {
              NamedAttrs attrs = {{"input_size", ints(size)}, {"coordinate_transformation_mode", num(mode)}};
              if (op.kind == OpKind::kResizeNearest2dGrad) attrs.push_back({"nearest_mode", num(mode % 4)});
              add({{DType::kF32, g}}, attrs);
            }
          }
          break;
        case OpKind::kDropoutMask:
          for (DType seed : {DType::kI64, DType::kI32}) {
            add({{seed, {}}}, {{"shape", ints({3, 4})}, {"p", real(0.5)}});
            add({{seed, {}}}, {{"shape", ints({1000, 70})}, {"p", real(0.1)}, {"salt", num(7)}});
            add({{seed, {}}}, {{"shape", ints({5})}, {"p", real(0)}});
            add({{seed, {}}}, {{"shape", ints({5})}, {"p", real(1)}});
            add({{seed, {}}}, {{"shape", ints({0, 3})}, {"p", real(0.3)}});
          }
          break;
        case OpKind::kRandUniform:
        case OpKind::kRandNormal:
          // Random seeds (negative ones too); [1000, 71] splits over threads at odd elements.
          for (int64_t stream : {int64_t{0}, int64_t{1}, kMaxRandStream}) {
            add({{DType::kI64, {2}}}, {{"shape", ints({3, 4})}, {"stream", num(stream)}});
            add({{DType::kI64, {2}}}, {{"shape", ints({1000, 71})}, {"stream", num(stream)}});
            add({{DType::kI64, {2}}}, {{"shape", ints({7})}, {"stream", num(stream)}});
            add({{DType::kI64, {2}}}, {{"shape", ints({0, 3})}, {"stream", num(stream)}});
            add({{DType::kI64, {2}}}, {{"shape", ints({})}, {"stream", num(stream)}});
          }
          break;
        case OpKind::kScaledDotProductAttention: {
          const TensorType q{DType::kF32, {2, 3, 5, 8}}, k{DType::kF32, {2, 3, 7, 8}}, v{DType::kF32, {2, 3, 7, 4}};
          add({q, k, v});
          add({q, k, v}, {{"causal", flag(true)}});
          add({q, k, v, {DType::kF32, {5, 7}}}, {{"scale", real(0.3)}});
          add({q, k, v, {DType::kF32, {3, 1, 7}}}, {{"causal", flag(true)}});
          add({{DType::kF32, {1, 1}}, {DType::kF32, {1, 1}}, {DType::kF32, {1, 1}}});
          add({{DType::kF32, {4, 0, 3}}, {DType::kF32, {4, 6, 3}}, {DType::kF32, {4, 6, 2}}});
          add({{DType::kF32, {2, 3}}, {DType::kF32, {0, 3}}, {DType::kF32, {0, 5}}});
          add({{DType::kF32, {70, 64}}, {DType::kF32, {90, 64}}, {DType::kF32, {90, 33}}}, {{"causal", flag(true)}});
          break;
        }
        case OpKind::kScatterAdd: {
          // Random indices: many out of range (clamped) and many duplicates.
          const std::vector<std::tuple<Shape, Shape, int>> shapes = {
              {{4, 3}, {6, 3}, 0}, {{4, 3}, {2, 5}, 1}, {{4, 3}, {4, 2}, -1}, {{2, 3, 4}, {2, 7, 3}, 1},
              {{3, 0}, {3, 0}, 0}, {{5}, {9}, 0},   {{200, 33}, {500, 33}, 0}, {{2, 1, 3}, {2, 1, 0}, 2}};
          for (DType it : {DType::kI32, DType::kI64}) {
            for (const auto& [x, index, axis] : shapes) {
              add({{DType::kF32, x}, {it, index}, {DType::kF32, index}}, {{"axis", num(axis)}});
            }
          }
          break;
        }
        default:
          break;
      }
      break;
    case OpClass::kSource:
      for (DType t : kAll) {
        switch (op.kind) {
          case OpKind::kFull:
            add({}, {{"shape", ints({2, 3})}, {"value", real(-2.7)}, {"dtype", dt(t)}});
            add({}, {{"shape", ints({0})}, {"value", real(1)}, {"dtype", dt(t)}});
            add({}, {{"shape", ints({})}, {"value", real(std::nan(""))}, {"dtype", dt(t)}});
            break;
          case OpKind::kArange:
            add({}, {{"start", real(-3)}, {"end", real(5)}, {"step", real(0.7)}, {"dtype", dt(t)}});
            add({}, {{"end", real(1000)}, {"dtype", dt(t)}});
            add({}, {{"start", real(2)}, {"end", real(2)}, {"dtype", dt(t)}});
            break;
          case OpKind::kUniform:
            if (t == DType::kBool) break;
            add({}, {{"shape", ints({3, 4})}, {"seed", num(7)}, {"dtype", dt(t)}});
            add({}, {{"shape", ints({1000})}, {"low", real(-5)}, {"high", real(5)}, {"seed", num(1)}, {"dtype", dt(t)}});
            add({}, {{"shape", ints({0, 2})}, {"seed", num(2)}, {"dtype", dt(t)}});
            break;
          case OpKind::kNormal:
            if (t != DType::kF32) break;
            add({}, {{"shape", ints({3, 4})}, {"seed", num(7)}});
            add({}, {{"shape", ints({1001})}, {"mean", real(2)}, {"std", real(3)}, {"seed", num(9)}});
            add({}, {{"shape", ints({0})}, {"seed", num(2)}});
            break;
          default:
            break;
        }
      }
      break;
  }
  return cases;
}

std::string describe(const OpInfo& op, const OpCase& c) {
  std::string s = std::string(op.name) + "(";
  for (size_t k = 0; k < c.inputs.size(); ++k) s += (k ? ", " : "") + type_to_string(c.inputs[k]);
  for (const auto& [name, value] : c.attrs) s += ", " + std::string(name) + "=" + value.to_string();
  return s + ")";
}

// |cpu - ref| bound for an f32 matmul output: see cpu_kernels.h. `abs_ref` is the reference
// matmul of |a| and |b|, i.e. sum_p |a[i,p] * b[p,j]| (itself rounded, well within the slack).
::testing::AssertionResult within_gemm_bound(const HostBuffer& got, const HostBuffer& want,
                                             const HostBuffer& abs_ref, int64_t k) {
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    const double bound = static_cast<double>(k + 2) * 0x1.0p-24 * abs_ref.data<float>()[i] +
                         std::fabs(w) * 0x1.0p-23 + std::numeric_limits<float>::denorm_min();
    if (!(std::fabs(g - w) <= bound)) {
      return ::testing::AssertionFailure() << "element " << i << ": cpu " << g << ", reference " << w
                                           << ", bound " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs one case through the registry (attributes normalized by infer_op, as the tracer does)
// with both the reference and run_op. False if the inference rule rejects the case.
bool check_case(const OpInfo& op, const OpCase& c, Rng& rng) {
  std::vector<AttrValue> attrs;
  for (const AttrSpec& spec : op.attrs) attrs.push_back(spec.default_value);
  for (const auto& [name, value] : c.attrs) attrs[static_cast<size_t>(op.attr_index(name))] = value;
  TensorType type;
  Result<TensorType> inferred = infer_op(op.kind, c.inputs, attrs);
  if (!inferred.is_ok()) return false;
  type = *inferred;
  Graph g;
  std::vector<NodeId> ids;
  std::vector<HostBuffer> values;
  // keeps the tolerance meaningful
  const bool tame = op.kind == OpKind::kMatmul || op.kind == OpKind::kScaledDotProductAttention;
  for (const TensorType& t : c.inputs) {
    ids.push_back(g.add_parameter(t));
    values.push_back(random_buffer(t.dtype, t.shape, rng, tame));
  }
  const NodeId node = g.add_node(op.kind, ids, attrs, type);
  std::vector<const HostBuffer*> in;
  for (const HostBuffer& v : values) in.push_back(&v);

  HostBuffer want = poisoned(type);
  op.reference(in, g.attrs(g.node(node)), want);
  HostBuffer got = poisoned(type);
  cpu::run_op(g, node, in, got);

  if (op.kind == OpKind::kMatmul && type.dtype == DType::kF32) {
    std::vector<HostBuffer> abs_values;
    for (const HostBuffer& v : values) {
      HostBuffer a = v.clone();
      dispatch_dtype(a.dtype(), [&]<typename T>() {
        for (T& e : a.span<T>()) {
          if constexpr (!std::is_same_v<T, bool>) e = e < 0 ? static_cast<T>(-e) : e;
        }
      });
      abs_values.push_back(std::move(a));
    }
    const std::vector<const HostBuffer*> abs_in = {&abs_values[0], &abs_values[1]};
    HostBuffer abs_ref(type.dtype, type.shape);
    op.reference(abs_in, g.attrs(g.node(node)), abs_ref);
    const Shape& sa = c.inputs[0].shape;
    EXPECT_TRUE(within_gemm_bound(got, want, abs_ref, sa[sa.rank() - 1])) << describe(op, c);
  } else if (op.kind == OpKind::kScaledDotProductAttention) {
    const AttentionAttrs a(g.attrs(g.node(node)));
    EXPECT_TRUE(testing::within_attention_bound(got, want, values[0], values[1], values[2],
                                                values.size() > 3 ? &values[3] : nullptr,
                                                a.causal(), a.scale()))
        << describe(op, c);
  } else if (op.kind == OpKind::kErf || (op.kind == OpKind::kGelu && !GeluAttrs(g.attrs(g.node(node))).tanh())) {
    EXPECT_TRUE(testing::within_erf_bound(got, want, values[0], op.kind == OpKind::kGelu)) << describe(op, c);
  } else {
    EXPECT_TRUE(same_bits(got, want)) << describe(op, c);
  }
  return true;
}

// Parameterized by op name, so test names and failures read "add", "matmul"...
class CpuOp : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuOp, MatchesReferenceOnEveryCase) {
  const OpInfo& op = *find_op(GetParam());
  Rng rng(1234 + static_cast<uint64_t>(op.kind));
  int ran = 0;
  for (const OpCase& c : cases_for(op)) ran += check_case(op, c, rng) ? 1 : 0;
  // Every op is covered by several accepted cases (a rejected case list would be a silent gap).
  EXPECT_GE(ran, 3) << op.name;
}

// The nn layers of capture/trace/nn.h, which tests/capture/nn_layers_test.cc compares with the reference,
// and their gradients.
bool nn_layer(OpKind k) {
  switch (k) {
    case OpKind::kConv2d: case OpKind::kMaxPool2d: case OpKind::kAvgPool2d:
    case OpKind::kAdaptiveAvgPool2d: case OpKind::kLinear: case OpKind::kFlatten: case OpKind::kPad:
    case OpKind::kDropout: case OpKind::kEmbedding: case OpKind::kGather: case OpKind::kIndexSelect:
      return true;
    // their gradients: tests/capture/grad_nn_layers_test.cc compares them with the reference
    case OpKind::kConv2dInputGrad: case OpKind::kConv2dWeightGrad: case OpKind::kMaxPool2dGrad:
    case OpKind::kAvgPool2dGrad: case OpKind::kAdaptiveAvgPool2dGrad:
      return true;
    // tests/frontend/onnx_ops_test.cc compares it with the reference (GEMM bound)
    case OpKind::kConvTranspose2d:
      return true;
    default:
      return false;
  }
}

// Every op but parameter and the nn layers.
std::vector<std::string> ops_with_kernels() {
  std::vector<std::string> names;
  for (const OpInfo& op : all_ops()) {
    if (op.kind != OpKind::kParameter && !nn_layer(op.kind)) names.emplace_back(op.name);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(EveryOp, CpuOp, ::testing::ValuesIn(ops_with_kernels()),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

TEST(CpuKernels, EveryOpButParameterIsTested) {
  // A new op joins the parameterized suite automatically; this count is a reminder to give it
  // cases in cases_for().
  EXPECT_EQ(ops_with_kernels().size(), static_cast<size_t>(kOpCount - 1 - 17));
  EXPECT_EQ(kOpCount, 89);
  for (const std::string& name : ops_with_kernels()) EXPECT_FALSE(cases_for(*find_op(name)).empty()) << name;
}

// Reductions over every set of axes of thread-crossing shapes (size-1 dims among them), at one
// and at two threads: bitwise the reference's result each time, so the same at both counts.
TEST(CpuReduce, EveryAxisSetAtOneAndTwoThreads) {
  const int saved = cpu::threads();
  const std::vector<Shape> shapes = {{6, 20, 5, 120}, {2, 1, 300, 130}, {3, 4, 1, 5}};
  for (int n : {1, 2}) {
    cpu::set_threads(n);
    for (const char* name : {"sum", "mean", "max", "min"}) {
      const OpInfo& op = *find_op(name);
      Rng rng(77);
      for (DType t : {DType::kF32, DType::kI32}) {
        for (const Shape& s : shapes) {
          for (int mask = 0; mask < (1 << s.rank()); ++mask) {
            IntList axes;
            for (int d = 0; d < s.rank(); ++d) {
              if (mask & (1 << d)) axes.push_back(d);
            }
            if (axes.empty()) continue;  // the empty list means every axis: covered by the full mask
            const OpCase c{{{t, s}}, {{"axes", ints(axes)}, {"keepdim", flag(mask % 3 == 0)}}};
            EXPECT_TRUE(check_case(op, c, rng)) << describe(op, c) << " rejected";
          }
        }
      }
    }
  }
  cpu::set_threads(saved);
}

// Transposes large enough to split over the team (strided_gather's blocked path), every dtype.
TEST(CpuTranspose, BlockedAtOneAndTwoThreads) {
  const int saved = cpu::threads();
  const OpInfo& op = *find_op("transpose");
  for (int n : {1, 2}) {
    cpu::set_threads(n);
    Rng rng(5);
    for (DType t : kAll) {
      for (const Shape& s : {Shape{2, 300, 250}, Shape{257, 263}}) {  // slices past 256 KB at 4 bytes
        const OpCase c{{{t, s}}, {{"dim0", num(-2)}, {"dim1", num(-1)}}};
        EXPECT_TRUE(check_case(op, c, rng)) << describe(op, c) << " rejected";
      }
    }
  }
  cpu::set_threads(saved);
}

// ---- fused chains -----------------------------------------------------------------------------

struct Chain {
  Graph graph;
  std::vector<NodeId> members;
  std::vector<HostBuffer> params;  // one per parameter (leaf), in parameter order
};

// A random leaf shape broadcastable to `root`: leading dims dropped, some dims set to 1.
Shape leaf_shape(const Shape& root, Rng& rng) {
  if (rng.chance(0.4)) return root;
  Shape s;
  const int drop = static_cast<int>(rng.between(0, root.rank()));
  for (int d = drop; d < root.rank(); ++d) s.push_back(rng.chance(0.5) ? 1 : root[d]);
  return s;
}

// Adds op(inputs) to the chain if the inference rule accepts it and the result has the root's
// shape; returns whether it did.
bool try_member(Chain& c, OpKind op, std::vector<NodeId> inputs, std::vector<AttrValue> attrs,
                const Shape& root) {
  std::vector<TensorType> types;
  for (NodeId id : inputs) types.push_back(c.graph.node(id).type());
  TensorType t;
  Result<TensorType> inferred = infer_op(op, types, attrs);
  if (!inferred.is_ok()) return false;
  t = *inferred;
  if (!(t.shape == root)) return false;
  c.members.push_back(c.graph.add_node(op, inputs, attrs, t));
  return true;
}

// A random chain: leaves of random dtypes and broadcast shapes, then `length` members, each
// taking the previous member as one operand (so every member but the root is used later) and
// other operands from the leaves and earlier members.
Chain random_chain(const Shape& root, int length, Rng& rng) {
  Chain c;
  const int leaves = static_cast<int>(rng.between(1, 4));
  std::vector<NodeId> leaf_ids;
  for (int i = 0; i < leaves; ++i) {
    TensorType t{rng.pick(kAll), i == 0 && rng.chance(0.5) ? root : leaf_shape(root, rng)};
    leaf_ids.push_back(c.graph.add_parameter(t));
    c.params.push_back(random_buffer(t.dtype, t.shape, rng));
  }
  // The first member: a broadcast_to of a leaf, or a unary op / cast of a full-shape leaf.
  const NodeId first = leaf_ids[0];
  if (!(c.graph.node(first).shape == root) || rng.chance(0.3)) {
    try_member(c, OpKind::kBroadcastTo, {first}, {AttrValue::of_ints(root)}, root);
  } else if (!try_member(c, OpKind::kCast, {first}, {AttrValue::of_dtype(rng.pick(kAll))}, root)) {
    ADD_FAILURE() << "cast cannot fail";
  }
  const std::vector<OpKind> ops = {
      OpKind::kNeg, OpKind::kAbs,  OpKind::kExp,   OpKind::kLog,     OpKind::kSqrt,    OpKind::kRsqrt,
      OpKind::kTanh, OpKind::kSigmoid, OpKind::kRelu, OpKind::kAdd,  OpKind::kSub,     OpKind::kMul,
      OpKind::kDiv, OpKind::kPow,  OpKind::kMaximum, OpKind::kMinimum, OpKind::kEq,    OpKind::kLt,
      OpKind::kGt,  OpKind::kWhere, OpKind::kCast,  OpKind::kCast,    OpKind::kWhere,  OpKind::kBroadcastTo,
      OpKind::kGelu, OpKind::kSilu, OpKind::kHardswish, OpKind::kHardsigmoid, OpKind::kErf, OpKind::kClamp,
      OpKind::kClamp};
  int attempts = 0;
  while (static_cast<int>(c.members.size()) < length && ++attempts < 200) {
    const NodeId last = c.members.back();
    std::vector<NodeId> pool = leaf_ids;
    pool.insert(pool.end(), c.members.begin(), c.members.end());
    const OpKind op = rng.pick(ops);
    const OpInfo& info = op_info(op);
    std::vector<AttrValue> attrs;
    for (const AttrSpec& spec : info.attrs) attrs.push_back(spec.default_value);
    std::vector<NodeId> inputs;
    if (op == OpKind::kBroadcastTo) {
      // Only of a leaf (the compiler fuses broadcast_to of leaves only).
      const NodeId leaf = rng.pick(leaf_ids);
      ShapeAttrs{std::span(attrs)}.shape() = root;
      if (try_member(c, op, {leaf}, attrs, root)) {
        // Keep `last` in use: combine the broadcast with it.
        const NodeId b = c.members.back();
        try_member(c, OpKind::kMaximum, {last, b}, {}, root) || try_member(c, OpKind::kAdd, {b, last}, {}, root) ||
            try_member(c, OpKind::kWhere, {last, b, b}, {}, root) ||
            try_member(c, OpKind::kEq, {b, last}, {}, root);
      }
      continue;
    }
    if (op == OpKind::kCast) CastAttrs{std::span(attrs)}.dtype() = rng.pick(kAll);
    if (op == OpKind::kGelu) attrs = {AttrValue::of_bool(rng.chance(0.5))};
    if (op == OpKind::kClamp) {
      // Bounds with fractions (integer clamp rounds them inward), sometimes infinite.
      const double lo = rng.chance(0.2) ? -std::numeric_limits<double>::infinity() : rng.unit() * 6 - 4;
      attrs = {AttrValue::of_float(lo), AttrValue::of_float(std::max(lo, 0.0) + rng.unit() * 3 + 1)};
    }
    if (op == OpKind::kWhere) {
      // The previous member is the condition when bool, else one of the values.
      std::vector<NodeId> bools;
      for (NodeId id : pool) {
        if (c.graph.node(id).dtype == DType::kBool) bools.push_back(id);
      }
      if (c.graph.node(last).dtype == DType::kBool && rng.chance(0.7)) {
        inputs = {last, rng.pick(pool), rng.pick(pool)};
      } else if (!bools.empty()) {
        inputs = {rng.pick(bools), last, rng.pick(pool)};
        if (rng.chance(0.5)) std::swap(inputs[1], inputs[2]);
      } else {
        continue;
      }
    } else if (info.max_inputs == 1) {
      inputs = {last};
    } else {
      inputs = {last, rng.pick(pool)};
      if (rng.chance(0.5)) std::swap(inputs[0], inputs[1]);
    }
    try_member(c, op, inputs, attrs, root);
  }
  return c;
}

// True for the ops whose cpu kernel is not bitwise the reference's (erf and gelu's erf form:
// libmvec's vector erf, cpu_kernels.h).
bool erf_based(const Graph& g, const Node& n) {
  return n.op == OpKind::kErf || (n.op == OpKind::kGelu && !GeluAttrs(g.attrs(n)).tanh());
}

// The chain's nodes evaluated one by one with the reference kernels (the erf-based ones with the
// cpu's single-op kernel, which CpuOp checks against the reference within the erf bound: fusion
// must not change them either); the root's value.
HostBuffer evaluate_with_reference(const Chain& c) {
  std::vector<HostBuffer> value(c.graph.size());
  for (NodeId id = 0; id < c.graph.size(); ++id) {
    const Node& n = c.graph.node(id);
    if (n.op == OpKind::kParameter) {
      value[id] = c.params[c.graph.attr(n, "index").i].clone();
      continue;
    }
    std::vector<const HostBuffer*> in;
    for (NodeId i : c.graph.inputs(n)) in.push_back(&value[i]);
    value[id] = poisoned(n.type());
    if (erf_based(c.graph, n)) {
      cpu::run_op(c.graph, id, in, value[id]);
    } else {
      op_info(n.op).reference(in, c.graph.attrs(n), value[id]);
    }
  }
  return std::move(value[c.members.back()]);
}

// Fused chains over root shapes around the tile size and the threading threshold; the leaves
// handed to run_fused are views (as the cpu backend does with arena slices).
TEST(CpuFused, RandomChainsMatchReferenceNodeByNode) {
  const std::vector<std::pair<Shape, int>> roots = {
      {{}, 40},    {{1}, 30},       {{5}, 40},          {{511}, 20},       {{512}, 20},
      {{513}, 20}, {{3, 700}, 20},  {{2, 3, 4, 5}, 30}, {{257, 256}, 6},   {{3, 1, 22000}, 4},
      {{0, 4}, 10}, {{2, 0, 3}, 10}};
  Rng rng(20240607);
  int chains = 0, members = 0;
  for (const auto& [root, count] : roots) {
    for (int i = 0; i < count; ++i) {
      Chain c = random_chain(root, static_cast<int>(rng.between(1, 9)), rng);
      ASSERT_FALSE(c.members.empty());
      const HostBuffer want = evaluate_with_reference(c);
      std::vector<HostBuffer> views;
      for (HostBuffer& p : c.params) views.push_back(HostBuffer::view(p.dtype(), p.shape(), p.bytes()));
      const Node& r = c.graph.node(c.members.back());
      HostBuffer got = poisoned(r.type());
      cpu::run_fused(c.graph, c.members, [&](NodeId leaf) -> const HostBuffer* {
        const Node& n = c.graph.node(leaf);
        EXPECT_EQ(n.op, OpKind::kParameter) << "asked for a member as a leaf";
        return &views[static_cast<size_t>(c.graph.attr(n, "index").i)];
      }, got);
      EXPECT_TRUE(same_bits(got, want)) << "root " << root.to_string() << ", chain:\n" << c.graph.to_text();
      ++chains;
      members += static_cast<int>(c.members.size());
    }
  }
  EXPECT_GT(members, 3 * chains) << "chains are too short to test fusion";
}

// A chain written out by hand: x:f32[N, 4] + b:i32[4] -> gt(., 0) -> where(., x, -1) ->
// cast i64 -> mul by itself; exercises conversion of a broadcast leaf, a compare, a where with
// mixed dtypes and a shared operand, across tiles and threads.
TEST(CpuFused, HandWrittenMixedChain) {
  for (int64_t rows : {1, 200, 40000}) {
    Chain c;
    const Shape root{rows, 4};
    Rng rng(static_cast<uint64_t>(rows));
    const NodeId x = c.graph.add_parameter({DType::kF32, root});
    const NodeId b = c.graph.add_parameter({DType::kI32, {4}});
    const NodeId zero = c.graph.add_parameter({DType::kF32, {}});
    const NodeId neg1 = c.graph.add_parameter({DType::kI64, {}});
    c.params.push_back(random_buffer(DType::kF32, root, rng));
    c.params.push_back(random_buffer(DType::kI32, {4}, rng));
    c.params.push_back(random_buffer(DType::kF32, {}, rng, true));
    c.params.push_back(random_buffer(DType::kI64, {}, rng, true));
    ASSERT_TRUE(try_member(c, OpKind::kAdd, {x, b}, {}, root));
    ASSERT_TRUE(try_member(c, OpKind::kGt, {c.members.back(), zero}, {}, root));
    ASSERT_TRUE(try_member(c, OpKind::kWhere, {c.members.back(), x, neg1}, {}, root));
    ASSERT_TRUE(try_member(c, OpKind::kCast, {c.members.back()}, {AttrValue::of_dtype(DType::kI64)}, root));
    ASSERT_TRUE(try_member(c, OpKind::kMul, {c.members.back(), c.members.back()}, {}, root));
    const HostBuffer want = evaluate_with_reference(c);
    HostBuffer got = poisoned(c.graph.node(c.members.back()).type());
    cpu::run_fused(c.graph, c.members, [&](NodeId leaf) {
      return &c.params[static_cast<size_t>(c.graph.attr(c.graph.node(leaf), "index").i)];
    }, got);
    EXPECT_TRUE(same_bits(got, want)) << rows << " rows";
  }
}

// ---- HostBuffer views -------------------------------------------------------------------------

TEST(HostBufferView, AliasesWithoutOwning) {
  HostBuffer owner(DType::kF32, {2, 4});
  {
    HostBuffer v = HostBuffer::view(DType::kI32, {4}, owner.bytes() + 16);
    EXPECT_FALSE(v.owns_data());
    EXPECT_EQ(v.bytes(), owner.bytes() + 16);
    v.data<int32_t>()[0] = 0x3f800000;  // the bits of 1.0f
    HostBuffer moved = std::move(v);
    EXPECT_EQ(moved.numel(), 4);
    HostBuffer copy = moved.clone();
    EXPECT_TRUE(copy.owns_data());
    EXPECT_NE(copy.bytes(), moved.bytes());
    EXPECT_EQ(copy.data<int32_t>()[0], 0x3f800000);
  }  // the view and its moved-to value go out of scope without freeing owner's bytes
  EXPECT_EQ(owner.data<float>()[4], 1.0f);
  EXPECT_TRUE(owner.owns_data());
}

}  // namespace
}  // namespace tracecache
