// The cpu backend's fused interpreter: run_fused and plan_fused (cpu_kernels.h has the contract
// and the numerics table).
//
// Fused chains run on a tiled interpreter: the chain is first compiled into a short list of
// instructions over typed tile registers (one per member, per leaf and per operand conversion;
// a register's scratch is reused once its node is no longer read, so scratch is bounded by the
// values live at once); the output is then processed kTileElements at a time, each instruction
// running one tight loop over the tile with the op and dtypes fixed outside the loop. Leaves
// with the full shape and the output are read/written in place; broadcast leaves are gathered
// into a register. Compiling a chain is linear in its length.
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
#include "replay/backends/cpu/cpu_nn_layers.h"
#include "replay/backends/cpu/cpu_loops.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/backends/cpu/vector_math.h"

namespace tracecache::cpu {

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
    default: break;
  }
  return nullptr;
}

TileFn numeric_unary_clamp(DType c) {
  switch (c) {
    case DType::kI32: return clamp_tile<int32_t>;
    case DType::kI64: return clamp_tile<int64_t>;
    case DType::kF32: return clamp_tile<float>;
    default: break;
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
    default: break;
  }
  return nullptr;
}

template <typename F>
TileFn any_binary(DType c) {
  return dispatch_cpu_dtype(c, [&]<typename T>() -> TileFn { return binary_tile<T, T, F>; });
}

template <typename F>
TileFn compare(DType c) {
  return dispatch_cpu_dtype(c, [&]<typename T>() -> TileFn { return binary_tile<T, bool, F>; });
}

TileFn where_fn(DType c) {
  return dispatch_cpu_dtype(c, [&]<typename T>() -> TileFn { return where_tile<T>; });
}

// Casts run between any two dtypes (cpu_dtypes.h: the backend holds all but f64): the only
// instructions that read or write bf16, f16, i8, u8 or i16.
TileFn convert_fn(DType from, DType to) {
  return dispatch_dtype(from, [&]<typename From>() -> TileFn {
    return dispatch_dtype(to, [&]<typename To>() -> TileFn { return convert_tile<From, To>; });
  });
}

// A fused chain has no reference fallback, so every elementwise op (OpInfo::elementwise()) needs a
// case in op_fn; other ops fall back to their reference kernel in run_op when they have no fast
// kernel here or in cpu_nn_*.cc. A new op: decide, then update the count.
static_assert(kOpCount == 89, "a new op: give it a cpu kernel (required here if elementwise)");

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

}  // namespace

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

}  // namespace tracecache::cpu
