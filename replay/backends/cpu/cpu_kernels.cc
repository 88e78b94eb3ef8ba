// The cpu backend's kernels. See cpu_kernels.h for the contract and the numerics table.
//
// Fused chains run on a tiled interpreter: the chain is first compiled into a short list of
// instructions over typed tile registers (one per member, per leaf and per operand conversion;
// a register's scratch is reused once its node is no longer read, so scratch is bounded by the
// values live at once); the output is then processed kTileElements at a time, each instruction
// running one tight loop over the tile with the op and dtypes fixed outside the loop. Leaves
// with the full shape and the output are read/written in place; broadcast leaves are gathered
// into a register. Compiling a chain is linear in its length.
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
#include "replay/backends/cpu/cpu_nn_layers.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/backends/cpu/cpu_grad_nn_layers.h"
#include "replay/backends/cpu/vector_math.h"

namespace tracecache::cpu {

namespace {

// ---- threading --------------------------------------------------------------------------------

// Calls fn(begin, end) on disjoint ranges covering [0, items). Split over threads when `work`
// (elements touched in total) reaches kParallelThreshold, in chunks of about kGrain elements of
// work so threads balance dynamically; one call on this thread otherwise.
template <typename Fn>
void parallel_chunks(int64_t items, int64_t work, Fn&& fn) {
  if (items <= 0) return;
  constexpr int64_t kGrain = int64_t{1} << 14;
  if (work < kParallelThreshold || items < 2) {
    fn(int64_t{0}, items);
    return;
  }
  const int64_t chunks = std::min(items, work / kGrain);
  auto chunk = [&](int64_t c) {
    const int64_t begin = items * c / chunks, end = items * (c + 1) / chunks;
    if (begin < end) fn(begin, end);
  };
  run_chunks(chunks, chunk);
}

// ---- shapes and strided copies ----------------------------------------------------------------

// A row-major iteration space with one strided operand, simplified: dims of size 1 dropped and
// neighbours merged where the operand's strides allow, so the innermost dim is as long as
// possible. Strides in elements.
struct StridedSpace {
  int rank = 0;
  std::array<int64_t, kMaxRank> dims{};
  std::array<int64_t, kMaxRank> strides{};
};

StridedSpace simplify(const Shape& shape, const IntList& strides) {
  StridedSpace s;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (s.rank > 0 && s.strides[s.rank - 1] == strides[d] * shape[d]) {
      s.dims[s.rank - 1] *= shape[d];
      s.strides[s.rank - 1] = strides[d];
    } else {
      s.dims[s.rank] = shape[d];
      s.strides[s.rank] = strides[d];
      ++s.rank;
    }
  }
  if (s.rank == 0) {  // a single element
    s.dims[0] = 1;
    s.strides[0] = 0;
    s.rank = 1;
  }
  return s;
}

// Copies `count` elements of `elem` bytes, reading src with stride `stride` (elements).
void copy_run(std::byte* dst, const std::byte* src, int64_t stride, int64_t count, size_t elem) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(count) * elem);
    return;
  }
  auto run = [&]<typename U>() {
    U* d = reinterpret_cast<U*>(dst);
    const U* s = reinterpret_cast<const U*>(src);
    if (stride == 0) {
      std::fill_n(d, count, *s);  // vectorized: the library's cost model (CMakeLists.txt)
    } else {
      for (int64_t i = 0; i < count; ++i) d[i] = s[i * stride];
    }
  };
  switch (elem) {
    case 1: return run.operator()<uint8_t>();
    case 4: return run.operator()<uint32_t>();
    default: return run.operator()<uint64_t>();
  }
}

// Writes elements [start, start + count) of the row-major iteration over `space` into dst,
// reading src[offset] (offset per `space`'s strides, plus `base`).
void gather_range(const StridedSpace& space, const std::byte* src, int64_t base, size_t elem,
                  int64_t start, int64_t count, std::byte* dst) {
  const int last = space.rank - 1;
  std::array<int64_t, kMaxRank> idx{};
  int64_t off = base;
  int64_t rem = start;
  for (int d = last; d >= 0; --d) {
    idx[d] = rem % space.dims[d];
    rem /= space.dims[d];
    off += idx[d] * space.strides[d];
  }
  int64_t done = 0;
  while (done < count) {
    const int64_t run = std::min(space.dims[last] - idx[last], count - done);
    copy_run(dst + static_cast<size_t>(done) * elem, src + static_cast<size_t>(off) * elem,
             space.strides[last], run, elem);
    done += run;
    idx[last] += run;
    off += run * space.strides[last];
    if (idx[last] < space.dims[last]) continue;
    off -= space.strides[last] * space.dims[last];
    idx[last] = 0;
    for (int d = last - 1; d >= 0; --d) {
      off += space.strides[d];
      if (++idx[d] < space.dims[d]) break;
      off -= space.strides[d] * space.dims[d];
      idx[d] = 0;
    }
  }
}

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

// ---- the fused interpreter --------------------------------------------------------------------

// A tile register: `dtype` elements. Either read/written in place (`direct`: element i of the
// tile starting at `start` is direct[start + i]) or a slice of the thread's scratch.
struct Reg {
  DType dtype = DType::kF32;
  std::byte* direct = nullptr;
  size_t scratch_offset = 0;
};

struct Instr;
// Runs one instruction over the tile [start, start + len); regs[r] points at register r's
// first element for this tile.
using TileFn = void (*)(const Instr& ins, std::byte* const* regs, int64_t start, int64_t len);

// A broadcast load's source: the leaf's bytes, its element size and how to walk it.
struct BroadcastLoad {
  const std::byte* leaf = nullptr;
  size_t elem = 0;
  StridedSpace space;
};

// One instruction per member (and per leaf load and operand conversion): kept small, since a
// chain of n ops has about n of them.
struct Instr {
  TileFn fn = nullptr;
  uint32_t dst = 0;
  std::array<uint32_t, 3> src{};
  // Attribute values the tile function reads (clamp: min and max).
  std::array<double, 2> params{};
  const BroadcastLoad* load = nullptr;  // broadcast loads only
  const TileSource* source = nullptr;   // a tile source's fill only
};

// The element loops read and write distinct registers (a kernel's output never overlaps its
// inputs), hence __restrict parameters (GCC honours restrict on parameters, not on locals). Full
// tiles loop over the compile-time count kTileElements: with both, GCC vectorizes the loops even
// at -O2, whose cost model rejects loops that need alias checks or a scalar epilogue. Vectorized
// or not, each element goes through the same IEEE operations, so the bits do not change.

template <typename C, typename R, typename F>
void unary_loop(const C* __restrict a, R* __restrict o, int64_t len, const F f = F{}) {
  if (len == kTileElements) {
    for (int64_t i = 0; i < kTileElements; ++i) o[i] = f(a[i]);
  } else {
    for (int64_t i = 0; i < len; ++i) o[i] = f(a[i]);
  }
}

template <typename C, typename R, typename F>
void binary_loop(const C* __restrict a, const C* __restrict b, R* __restrict o, int64_t len) {
  const F f{};
  if (len == kTileElements) {
    for (int64_t i = 0; i < kTileElements; ++i) o[i] = f(a[i], b[i]);
  } else {
    for (int64_t i = 0; i < len; ++i) o[i] = f(a[i], b[i]);
  }
}

// where as a bit select, c ? a : b (ew::Where) without a branch: a mask from the 0/1 condition
// byte picks the bits of a or of b, so GCC vectorizes it (it does not vectorize a select on a
// bool load), and a random condition (relu's backward) costs no mispredicted branches. The
// same bits as ew::Where.
template <typename T>
void where_loop(const uint8_t* __restrict c, const T* __restrict a, const T* __restrict b,
                T* __restrict o, int64_t len) {
  using U = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint8_t>>;
  static_assert(sizeof(U) == sizeof(T));
  auto select = [](uint8_t k, T x, T y) {
    const U m = static_cast<U>(U{0} - static_cast<U>(k));
    return std::bit_cast<T>(static_cast<U>((std::bit_cast<U>(x) & m) | (std::bit_cast<U>(y) & static_cast<U>(~m))));
  };
  if (len == kTileElements) {
    for (int64_t i = 0; i < kTileElements; ++i) o[i] = select(c[i], a[i], b[i]);
  } else {
    for (int64_t i = 0; i < len; ++i) o[i] = select(c[i], a[i], b[i]);
  }
}

template <typename From, typename To>
void convert_loop(const From* __restrict a, To* __restrict o, int64_t len) {
  if constexpr (std::is_same_v<From, To>) {
    std::memcpy(o, a, static_cast<size_t>(len) * sizeof(To));
  } else if (len == kTileElements) {
    for (int64_t i = 0; i < kTileElements; ++i) o[i] = convert<To>(a[i]);
  } else {
    for (int64_t i = 0; i < len; ++i) o[i] = convert<To>(a[i]);
  }
}

template <typename T>
const T* reg_in(std::byte* const* regs, uint32_t r) { return reinterpret_cast<const T*>(regs[r]); }
template <typename T>
T* reg_out(std::byte* const* regs, uint32_t r) { return reinterpret_cast<T*>(regs[r]); }

template <typename C, typename R, typename F>
void unary_tile(const Instr& ins, std::byte* const* regs, int64_t, int64_t len) {
  unary_loop<C, R, F>(reg_in<C>(regs, ins.src[0]), reg_out<R>(regs, ins.dst), len);
}

// erf, and gelu's erf form, with libmvec's vector erf (vector_math.h; within 2 ulp of the
// reference's std::erf, not bitwise). gelu keeps ew::GeluErf's f32 steps around it.
void erf_tile(const Instr& ins, std::byte* const* regs, int64_t, int64_t len) {
  erf_f32(reg_in<float>(regs, ins.src[0]), reg_out<float>(regs, ins.dst), len);
}

void gelu_erf_tile(const Instr& ins, std::byte* const* regs, int64_t, int64_t len) {
  // The input may be the output's own storage (a donated parameter read in place), so each
  // element is read before it is written.
  const float* a = reg_in<float>(regs, ins.src[0]);
  float* o = reg_out<float>(regs, ins.dst);
  float e[kTileElements];
  erf_f32(a, e, len, ew::kGeluErfScale);
  for (int64_t i = 0; i < len; ++i) o[i] = ew::GeluErf::from_erf(a[i], e[i]);
}

// clamp: the functor is built from the instruction's bounds (cheap; once per tile).
template <typename T>
void clamp_tile(const Instr& ins, std::byte* const* regs, int64_t, int64_t len) {
  unary_loop<T, T>(reg_in<T>(regs, ins.src[0]), reg_out<T>(regs, ins.dst), len,
                   ew::Clamp<T>::make(ins.params[0], ins.params[1]));
}

template <typename C, typename R, typename F>
void binary_tile(const Instr& ins, std::byte* const* regs, int64_t, int64_t len) {
  binary_loop<C, R, F>(reg_in<C>(regs, ins.src[0]), reg_in<C>(regs, ins.src[1]),
                       reg_out<R>(regs, ins.dst), len);
}

template <typename T>
void where_tile(const Instr& ins, std::byte* const* regs, int64_t, int64_t len) {
  static_assert(sizeof(bool) == 1);  // a bool register holds bytes 0 and 1
  where_loop<T>(reg_in<uint8_t>(regs, ins.src[0]), reg_in<T>(regs, ins.src[1]),
                reg_in<T>(regs, ins.src[2]), reg_out<T>(regs, ins.dst), len);
}

template <typename From, typename To>
void convert_tile(const Instr& ins, std::byte* const* regs, int64_t, int64_t len) {
  convert_loop<From, To>(reg_in<From>(regs, ins.src[0]), reg_out<To>(regs, ins.dst), len);
}

void broadcast_load_tile(const Instr& ins, std::byte* const* regs, int64_t start, int64_t len) {
  gather_range(ins.load->space, ins.load->leaf, 0, ins.load->elem, start, len, regs[ins.dst]);
}

void source_tile(const Instr& ins, std::byte* const* regs, int64_t start, int64_t len) {
  ins.source->fill(start, len, regs[ins.dst]);
}

// The tile function of each (op, compute dtype) pair the inference rules allow.
template <typename F>
TileFn numeric_unary(DType c) {
  switch (c) {
    case DType::kI32: return unary_tile<int32_t, int32_t, F>;
    case DType::kI64: return unary_tile<int64_t, int64_t, F>;
    case DType::kF32: return unary_tile<float, float, F>;
    case DType::kBool: break;
  }
  return nullptr;
}

TileFn numeric_unary_clamp(DType c) {
  switch (c) {
    case DType::kI32: return clamp_tile<int32_t>;
    case DType::kI64: return clamp_tile<int64_t>;
    case DType::kF32: return clamp_tile<float>;
    case DType::kBool: break;
  }
  return nullptr;
}

// gelu's functor depends on its `tanh` attribute.
TileFn gelu_fn(bool tanh_form) {
  return tanh_form ? unary_tile<float, float, ew::GeluTanh> : gelu_erf_tile;
}

template <typename F>
TileFn numeric_binary(DType c) {
  switch (c) {
    case DType::kI32: return binary_tile<int32_t, int32_t, F>;
    case DType::kI64: return binary_tile<int64_t, int64_t, F>;
    case DType::kF32: return binary_tile<float, float, F>;
    case DType::kBool: break;
  }
  return nullptr;
}

template <typename F>
TileFn any_binary(DType c) {
  return dispatch_dtype(c, [&]<typename T>() -> TileFn { return binary_tile<T, T, F>; });
}

template <typename F>
TileFn compare(DType c) {
  return dispatch_dtype(c, [&]<typename T>() -> TileFn { return binary_tile<T, bool, F>; });
}

TileFn where_fn(DType c) {
  return dispatch_dtype(c, [&]<typename T>() -> TileFn { return where_tile<T>; });
}

TileFn convert_fn(DType from, DType to) {
  return dispatch_dtype(from, [&]<typename From>() -> TileFn {
    return dispatch_dtype(to, [&]<typename To>() -> TileFn { return convert_tile<From, To>; });
  });
}

// A fused chain has no reference fallback, so every elementwise op (OpInfo::elementwise()) needs a
// case in op_fn; other ops fall back to their reference kernel in run_op when they have no fast
// kernel here or in cpu_nn_*.cc. A new op: decide, then update the count.
static_assert(kOpCount == 87, "a new op: give it a cpu kernel (required here if elementwise)");

// nullptr if the inference rules never let `op` compute in `c`. The two ops with attributes:
// gelu's tile function comes from gelu_fn(), and a clamp instruction also carries its bounds in
// Instr::params (FusedProgram sets both).
TileFn op_fn(OpKind op, DType c) {
  switch (op) {
    case OpKind::kNeg: return numeric_unary<ew::Neg>(c);
    case OpKind::kAbs: return numeric_unary<ew::Abs>(c);
    case OpKind::kRelu: return numeric_unary<ew::Relu>(c);
    case OpKind::kExp: return unary_tile<float, float, ew::Exp>;
    case OpKind::kLog: return unary_tile<float, float, ew::Log>;
    case OpKind::kSqrt: return unary_tile<float, float, ew::Sqrt>;
    case OpKind::kRsqrt: return unary_tile<float, float, ew::Rsqrt>;
    case OpKind::kTanh: return unary_tile<float, float, ew::Tanh>;
    case OpKind::kSigmoid: return unary_tile<float, float, ew::Sigmoid>;
    case OpKind::kSilu: return unary_tile<float, float, ew::Silu>;
    case OpKind::kHardswish: return unary_tile<float, float, ew::Hardswish>;
    case OpKind::kHardsigmoid: return unary_tile<float, float, ew::Hardsigmoid>;
    case OpKind::kErf: return erf_tile;
    case OpKind::kClamp: return numeric_unary_clamp(c);
    case OpKind::kAdd: return numeric_binary<ew::Add>(c);
    case OpKind::kSub: return numeric_binary<ew::Sub>(c);
    case OpKind::kMul: return numeric_binary<ew::Mul>(c);
    case OpKind::kDiv: return binary_tile<float, float, ew::Div>;
    case OpKind::kPow: return numeric_binary<ew::Pow>(c);
    case OpKind::kMaximum: return any_binary<ew::Maximum>(c);
    case OpKind::kMinimum: return any_binary<ew::Minimum>(c);
    case OpKind::kEq: return compare<ew::Eq>(c);
    case OpKind::kLt: return compare<ew::Lt>(c);
    case OpKind::kGt: return compare<ew::Gt>(c);
    case OpKind::kFloor: return numeric_unary<ew::Floor>(c);
    case OpKind::kCeil: return numeric_unary<ew::Ceil>(c);
    case OpKind::kRound: return numeric_unary<ew::Round>(c);
    case OpKind::kSin: return unary_tile<float, float, ew::Sin>;
    case OpKind::kCos: return unary_tile<float, float, ew::Cos>;
    case OpKind::kRemainder: return numeric_binary<ew::Remainder>(c);
    case OpKind::kFmod: return numeric_binary<ew::Fmod>(c);
    case OpKind::kTruncDiv: return numeric_binary<ew::TruncDiv>(c);
    default: return nullptr;
  }
}

constexpr uint32_t kNoReg = std::numeric_limits<uint32_t>::max();
constexpr size_t kRegAlign = 64;

// A fused chain compiled to tile instructions (see the file comment), then run.
// Linear in the chain's length: node -> register is a hash map, and a scratch register is
// released after its node's last use and its bytes reused, so a long chain needs a few tiles
// of scratch, not one per member.
class FusedProgram {
 public:
  FusedProgram(const Graph& g, std::span<const NodeId> members,
               const std::function<const HostBuffer*(NodeId)>& leaf_value, HostBuffer& out,
               const TileSource* source = nullptr)
      : leaf_value_(leaf_value), source_(source), shape_(out.shape()), numel_(out.numel()) {
    const NodeId root = members.back();
    // The position of the last member that reads each node. A non-root broadcast_to is an alias
    // of its input's register: its input lives as long as it does (walk backwards so that
    // chains of aliases propagate).
    std::unordered_map<NodeId, size_t> last_use;
    last_use.reserve(members.size() * 2);
    for (size_t i = 0; i < members.size(); ++i) {
      for (NodeId in : g.inputs(g.node(members[i]))) last_use[in] = i;
    }
    for (size_t i = members.size(); i-- > 0;) {
      const Node& n = g.node(members[i]);
      if (n.op != OpKind::kBroadcastTo || members[i] == root) continue;
      auto it = last_use.find(members[i]);
      if (it == last_use.end()) continue;
      size_t& src = last_use[g.inputs(n)[0]];
      src = std::max(src, it->second);
    }
    values_.reserve(members.size() * 2);
    const uint32_t out_reg = add_reg(out.dtype(), out.bytes());
    for (size_t i = 0; i < members.size(); ++i) {
      const NodeId m = members[i];
      const Node& n = g.node(m);
      const std::span<const NodeId> ins = g.inputs(n);
      const bool is_root = m == root;
      if (n.op == OpKind::kBroadcastTo) {
        // Every register already holds the root's shape: the broadcast is the load itself.
        const uint32_t src = value(ins[0]);
        if (is_root) emit(convert_fn(n.dtype, n.dtype), out_reg, {src});
        else values_.emplace(m, make_value(src, /*owns=*/false));
        release_dead(ins, i, last_use);
        continue;
      }
      const uint32_t dst = is_root ? out_reg : add_reg(n.dtype, nullptr);
      if (n.op == OpKind::kCast) {
        const uint32_t src = value(ins[0]);
        emit(convert_fn(regs_[src].dtype, n.dtype), dst, {src});
      } else if (n.op == OpKind::kWhere) {
        const uint32_t cond = value(ins[0]);
        assert(regs_[cond].dtype == DType::kBool);
        const uint32_t a = as(ins[1], n.dtype);
        const uint32_t b = as(ins[2], n.dtype);
        emit(where_fn(n.dtype), dst, {cond, a, b});
      } else {
        std::array<DType, 2> types{};
        for (size_t k = 0; k < ins.size(); ++k) types[k] = g.node(ins[k]).dtype;
        const DType c = compute_dtype(n.op, std::span(types.data(), ins.size()), n.dtype);
        const uint32_t a = as(ins[0], c);
        if (n.op == OpKind::kGelu) {
          emit(gelu_fn(GeluAttrs(g.attrs(n)).tanh()), dst, {a});
        } else if (n.op == OpKind::kClamp) {
          emit(op_fn(n.op, c), dst, {a});
          const ClampAttrs clamp(g.attrs(n));
          instrs_.back().params = {clamp.min(), clamp.max()};
        } else if (ins.size() == 1) {
          emit(op_fn(n.op, c), dst, {a});
        } else {
          emit(op_fn(n.op, c), dst, {a, as(ins[1], c)});
        }
      }
      values_.emplace(m, make_value(dst, /*owns=*/true));
      release_dead(ins, i, last_use);
    }
  }

  void run() const {
    // A tile source may read the root's own storage: it must come before the root's write, the
    // last instruction (register 0 is out's: the constructor adds it first).
    assert(source_ == nullptr || instrs_.back().dst == 0);
    const int64_t tiles = (numel_ + kTileElements - 1) / kTileElements;
    parallel_chunks(tiles, numel_, [&](int64_t first, int64_t last) { run_tiles(first, last); });
  }

  FusedPlanSize size() const {
    return {instrs_.size(), regs_.size(), scratch_bytes_, sizeof(Instr) * instrs_.size() + sizeof(Reg) * regs_.size()};
  }

 private:
  // A node's register, and the registers holding it converted to other dtypes (made once per
  // dtype and shared by every later use).
  struct Value {
    uint32_t reg;
    bool owns;  // false for a broadcast_to's alias of its input's register
    std::array<uint32_t, kDTypeCount> converted;
  };

  static Value make_value(uint32_t reg, bool owns) {
    Value v{reg, owns, {}};
    v.converted.fill(kNoReg);
    return v;
  }

  static size_t tile_bytes(DType t) {
    const size_t bytes = static_cast<size_t>(kTileElements) * dtype_size(t);
    return (bytes + kRegAlign - 1) / kRegAlign * kRegAlign;
  }

  uint32_t add_reg(DType t, std::byte* direct) {
    Reg r;
    r.dtype = t;
    r.direct = direct;
    if (direct == nullptr) {
      std::vector<size_t>& free = free_[dtype_size(t)];
      if (!free.empty()) {
        r.scratch_offset = free.back();
        free.pop_back();
      } else {
        r.scratch_offset = scratch_bytes_;
        scratch_bytes_ += tile_bytes(t);
      }
    }
    regs_.push_back(r);
    return static_cast<uint32_t>(regs_.size() - 1);
  }

  void release_reg(uint32_t reg) {
    if (reg == kNoReg || regs_[reg].direct != nullptr) return;
    free_[dtype_size(regs_[reg].dtype)].push_back(regs_[reg].scratch_offset);
  }

  // Frees the scratch of the inputs of member `i` that no later member reads. Runs after the
  // member's instructions are emitted, so a register is never reused within one instruction.
  void release_dead(std::span<const NodeId> ins, size_t i, const std::unordered_map<NodeId, size_t>& last_use) {
    for (size_t k = 0; k < ins.size(); ++k) {
      if (std::find(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(k), ins[k]) != ins.begin() + static_cast<std::ptrdiff_t>(k)) {
        continue;  // the same input twice: released once
      }
      if (last_use.at(ins[k]) != i) continue;
      auto it = values_.find(ins[k]);
      if (it == values_.end()) continue;
      if (it->second.owns) release_reg(it->second.reg);
      for (uint32_t c : it->second.converted) release_reg(c);
      values_.erase(it);
    }
  }

  void emit(TileFn fn, uint32_t dst, std::initializer_list<uint32_t> src) {
    assert(fn != nullptr && "no tile function for this op and dtype");
    Instr ins;
    ins.fn = fn;
    ins.dst = dst;
    std::copy(src.begin(), src.end(), ins.src.begin());
    instrs_.push_back(ins);
  }

  // The value of node `id`: a member computed earlier or a leaf (loaded on first use).
  Value& lookup(NodeId id) {
    auto it = values_.find(id);
    if (it != values_.end()) return it->second;
    if (source_ != nullptr && id == source_->id) {
      const uint32_t reg = add_reg(source_->dtype, nullptr);
      Instr ins;
      ins.fn = source_tile;
      ins.dst = reg;
      ins.source = source_;
      instrs_.push_back(ins);
      return values_.emplace(id, make_value(reg, /*owns=*/true)).first->second;
    }
    const HostBuffer* b = leaf_value_(id);
    assert(b != nullptr && "leaf_value returned no buffer for a leaf");
    uint32_t reg;
    if (b->numel() == numel_) {
      // Broadcastable with the same element count: the same row-major layout. Read in place.
      reg = add_reg(b->dtype(), const_cast<std::byte*>(b->bytes()));
    } else {
      reg = add_reg(b->dtype(), nullptr);
      BroadcastLoad& load = loads_.emplace_back();
      load.leaf = b->bytes();
      load.elem = dtype_size(b->dtype());
      load.space = simplify(shape_, broadcast_strides(b->shape(), shape_));
      Instr ins;
      ins.fn = broadcast_load_tile;
      ins.dst = reg;
      ins.load = &load;
      instrs_.push_back(ins);
    }
    return values_.emplace(id, make_value(reg, /*owns=*/true)).first->second;
  }

  uint32_t value(NodeId id) { return lookup(id).reg; }

  // Node `id`'s value converted to dtype `t` (its own register when it already holds t).
  uint32_t as(NodeId id, DType t) {
    Value& v = lookup(id);
    if (regs_[v.reg].dtype == t) return v.reg;
    uint32_t& to = v.converted[static_cast<size_t>(t)];
    if (to == kNoReg) {
      const uint32_t from = v.reg;
      to = add_reg(t, nullptr);
      emit(convert_fn(regs_[from].dtype, t), to, {from});
    }
    return to;
  }

  void run_tiles(int64_t first, int64_t last) const {
    thread_local std::vector<uint64_t> scratch;
    const size_t words = scratch_bytes_ / sizeof(uint64_t) + kRegAlign / sizeof(uint64_t);
    if (scratch.size() < words) scratch.resize(words);
    // Align the scratch base so every register starts on a 64-byte boundary.
    auto* base = reinterpret_cast<std::byte*>(scratch.data());
    base += (kRegAlign - reinterpret_cast<uintptr_t>(base) % kRegAlign) % kRegAlign;
    std::vector<std::byte*> ptr(regs_.size());
    for (size_t r = 0; r < regs_.size(); ++r) {
      if (regs_[r].direct == nullptr) ptr[r] = base + regs_[r].scratch_offset;
    }
    for (int64_t t = first; t < last; ++t) {
      const int64_t start = t * kTileElements;
      const int64_t len = std::min(kTileElements, numel_ - start);
      for (size_t r = 0; r < regs_.size(); ++r) {
        if (regs_[r].direct != nullptr) {
          ptr[r] = regs_[r].direct + static_cast<size_t>(start) * dtype_size(regs_[r].dtype);
        }
      }
      for (const Instr& ins : instrs_) ins.fn(ins, ptr.data(), start, len);
    }
  }

  const std::function<const HostBuffer*(NodeId)>& leaf_value_;
  const TileSource* source_;
  Shape shape_;
  int64_t numel_;
  std::vector<Reg> regs_;
  std::vector<Instr> instrs_;
  std::deque<BroadcastLoad> loads_;  // stable addresses: Instr::load points here
  std::unordered_map<NodeId, Value> values_;  // live nodes only
  std::array<std::vector<size_t>, 9> free_;   // released scratch offsets, by element size
  size_t scratch_bytes_ = 0;
};

// ---- matmul -----------------------------------------------------------------------------------

// b's elements as f32: b itself, or a converted copy in `copy`.
const float* as_f32(const HostBuffer& b, HostBuffer& copy) {
  if (b.dtype() == DType::kF32) return b.data<float>();
  copy = HostBuffer(DType::kF32, b.shape());
  float* o = copy.data<float>();
  dispatch_dtype(b.dtype(), [&]<typename T>() {
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
    dispatch_dtype(x.dtype(), [&]<typename T>() {
      reduce_in_order(x.data<T>(), v, out.data<int64_t>(), uint64_t{0},
                      [](uint64_t acc, T e) { return acc + static_cast<uint64_t>(convert<int64_t>(e)); },
                      [](uint64_t acc) { return static_cast<int64_t>(acc); });
    });
    return;
  }
  if (op == OpKind::kMean) {
    const double count = static_cast<double>(v.count);
    dispatch_dtype(x.dtype(), [&]<typename T>() {
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
  dispatch_dtype(x.dtype(), [&]<typename T>() {
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
  dispatch_dtype(x.dtype(), [&]<typename T>() {
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
  dispatch_dtype(x.dtype(), [&]<typename T>() {
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

void run_fused(const Graph& g, std::span<const NodeId> members,
               const std::function<const HostBuffer*(NodeId)>& leaf_value, HostBuffer& out,
               const TileSource* source) {
  assert(!members.empty());
  if (out.numel() == 0) return;
  FusedProgram(g, members, leaf_value, out, source).run();
}

FusedPlanSize plan_fused(const Graph& g, std::span<const NodeId> members,
                         const std::function<const HostBuffer*(NodeId)>& leaf_value, HostBuffer& out) {
  assert(!members.empty());
  return FusedProgram(g, members, leaf_value, out).size();
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
  // the gradients' scatter_add (replay/backends/cpu/cpu_grad_nn_ops.h) and the nn layers' gradients
  // (replay/backends/cpu/cpu_grad_nn_layers.h).
  if (info.op_class == OpClass::kNn &&
      (run_nn_layer(n.op, inputs, attrs, out) || run_nn_op(n.op, inputs, attrs, out) ||
       run_grad_nn_op(n.op, inputs, attrs, out) || run_grad_nn_layer(n.op, inputs, attrs, out))) {
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
