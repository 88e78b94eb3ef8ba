// GuardSet: the guards of one compiled-function entry (replay/engine/compiled_function.h), a flat
// list of checks over a call's arguments. `holds` decides whether the entry may replay for a
// call (the hot path: allocates nothing); `explain` names each failed check with expected vs
// actual, e.g. "input 0 'x': size of dim 0 expected 8, actual 16" (recompile reasons, audit).
//
// What is checked (docs/architecture.md invariant 3): the argument counts, the lowering
// options' digest, per tensor its dtype, rank, each dim's size (or, for a dynamic dim, a range
// and its equality with earlier dynamic dims), contiguity and device, which earlier argument it
// shares data with, and each static scalar's exact value (normalized bits: -0.0 != 0.0, NaNs
// equal).
//
// Checks run in order: the counts come first and each tensor's rank before its dims, so a
// check never reads a tensor or dim that an earlier passing check did not establish. A set that
// does not keep that order (a stored one) must be validated first (guard_entry_codec.h).
// A set laid out as record() lays out a trace without dynamic dims or scalars (most sets) is
// also kept as a table, per tensor its dtype, rank and sizes, which holds() reads instead of
// the list: the same answer with a fraction of the work.
// Errors: none reported as a Status: a failed check is an expected outcome, `false` from holds()
// and a GuardFailure from explain(). Breaking a REQUIRES (an unvalidated stored set, a tensor not
// materialized) is a programmer error, undefined behaviour (an out-of-range index, a null data
// pointer), not checked on the hot path.
// Thread-safety: const methods are safe to call concurrently. Ownership: a value type; it keeps
// nothing of the arguments it checks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/dtype.h"
#include "replay/guards/call_args.h"

namespace tracecache {

// The largest size a dynamic dim's range check admits.
inline constexpr int64_t kMaxDynamicSize = int64_t{1} << 31;

// Dim `dim` of tensor argument `tensor`: the operand of a relation between two dims.
struct TensorDim {
  uint32_t tensor = 0;
  uint32_t dim = 0;
  friend bool operator==(const TensorDim&, const TensorDim&) = default;
};

// One check. The kind numbers are stored in guard entries (guard_entry_codec.h): never reuse
// one. 9 was "distinct from input k", last written before guard-entry format 2.
struct GuardCheck {
  enum class Kind : uint8_t {
    kNumTensors = 0,   // expected: the number of tensor arguments
    kNumScalars = 1,   // expected: the number of scalar arguments
    kOptions = 2,      // expected: the digest of the options that change lowering
    kDType = 3,        // tensor `arg`; expected: its DType
    kRank = 4,         // tensor `arg`; expected: its rank
    kSize = 5,         // dim `dim` of tensor `arg`; expected: its size
    kContiguous = 6,   // tensor `arg`; expected 1 (host buffers are dense row-major)
    kDevice = 7,       // tensor `arg`; expected 0 (host memory)
    kAliasOf = 8,      // tensor `arg`; expected: the first tensor argument sharing its data
    kScalarValue = 10, // scalar `arg`; expected: its normalized bits (normalized_float_bits)
    kSizeRange = 11,   // dynamic dim `dim` of tensor `arg`: expected <= size <= kMaxDynamicSize
    kSameSize = 12,    // dynamic dim `dim` of tensor `arg`: same size as dim `same_as`
  };
  static constexpr uint32_t kLastKind = static_cast<uint32_t>(Kind::kSameSize);

  Kind kind = Kind::kNumTensors;
  uint32_t arg = 0;       // the tensor (kScalarValue: scalar) argument checked
  uint32_t dim = 0;       // kSize, kSizeRange, kSameSize: the dim of tensor `arg`
  uint64_t expected = 0;  // see Kind; unused by kSameSize
  TensorDim same_as;      // kSameSize only

  static GuardCheck num_tensors(uint64_t n) { return {Kind::kNumTensors, 0, 0, n, {}}; }
  static GuardCheck num_scalars(uint64_t n) { return {Kind::kNumScalars, 0, 0, n, {}}; }
  static GuardCheck options(uint64_t digest) { return {Kind::kOptions, 0, 0, digest, {}}; }
  static GuardCheck dtype(uint32_t tensor, DType t) { return {Kind::kDType, tensor, 0, static_cast<uint64_t>(t), {}}; }
  static GuardCheck rank(uint32_t tensor, int r) { return {Kind::kRank, tensor, 0, static_cast<uint64_t>(r), {}}; }
  static GuardCheck size(TensorDim d, int64_t size) { return {Kind::kSize, d.tensor, d.dim, static_cast<uint64_t>(size), {}}; }
  static GuardCheck contiguous(uint32_t tensor) { return {Kind::kContiguous, tensor, 0, 1, {}}; }
  static GuardCheck device(uint32_t tensor) { return {Kind::kDevice, tensor, 0, 0, {}}; }
  static GuardCheck alias_of(uint32_t tensor, uint32_t first) { return {Kind::kAliasOf, tensor, 0, first, {}}; }
  static GuardCheck scalar_value(uint32_t scalar, double value);
  static GuardCheck size_range(TensorDim d, int64_t min) { return {Kind::kSizeRange, d.tensor, d.dim, static_cast<uint64_t>(min), {}}; }
  static GuardCheck same_size(TensorDim d, TensorDim other) { return {Kind::kSameSize, d.tensor, d.dim, 0, other}; }

  // A check on a dim's size (kSize, kSizeRange, kSameSize): the ones automatic_dynamic relaxes.
  bool on_size() const { return kind == Kind::kSize || kind == Kind::kSizeRange || kind == Kind::kSameSize; }
  friend bool operator==(const GuardCheck&, const GuardCheck&) = default;
};

// One failed guard, for audit and messages.
struct GuardFailure {
  std::string what;      // "input 0 'x': size of dim 0"
  std::string expected;  // "8"
  std::string actual;    // "16"
  std::string to_string() const;  // "input 0 'x': size of dim 0 expected 8, actual 16"
};

// What a call is checked against besides its arguments: the calling function's lowering
// options, and the names used in messages. Views: the owner outlives the uses.
struct GuardEnvironment {
  uint64_t options_digest = 0;
  std::string_view options_label;              // readable form of the digest: "sim:h100"
  std::span<const std::string> input_names;    // optional, per tensor argument
  std::string input_name(uint32_t i) const;    // "input 0 'x'", or "input 0" unnamed
  std::span<const std::string> scalar_names{}; // optional, per scalar argument
  std::string scalar_name(uint32_t i) const;   // "scalar 0 'N'", or "scalar 0" unnamed
};

class GuardSet {
 public:
  GuardSet() = default;
  // REQUIRES: `checks` in the order described at the top (validated, for stored ones).
  // `options_label` is the readable form of the options check (may be empty: not recorded).
  explicit GuardSet(std::vector<GuardCheck> checks, std::string options_label = {});

  // The guards of a trace of `args` under `env`: every property exactly as in `args`, except
  // the `dynamic` dims (a range, plus equality with the first earlier dynamic dim of equal
  // size) and the scalars with `dynamic_scalar[s]` set (not guarded).
  // REQUIRES: every tensor materialized, `dynamic` dims exist, dynamic_scalar.size() ==
  // args.scalars.size().
  static GuardSet record(const CallArgs& args, const GuardEnvironment& env, std::span<const DynamicDim> dynamic,
                         const std::vector<bool>& dynamic_scalar);

  // True if every check passes for `args` under `options_digest`. Allocates nothing.
  // REQUIRES: every tensor of `args` materialized.
  bool holds(const CallArgs& args, uint64_t options_digest) const;

  // The failed checks for `args`, described, in check order; stops after a failed count or
  // rank (later checks index by them). Empty if the set holds. `failed` (optional) receives
  // the failed checks themselves.
  std::vector<GuardFailure> explain(const CallArgs& args, const GuardEnvironment& env,
                                    std::vector<GuardCheck>* failed = nullptr) const;

  // Piecewise checks, for a caller that checks this set against calls whose tensors mostly
  // repeat and establishes the repeated ones' facts once (the replay memo of
  // replay/engine/compiled_function.h). Only for a set kept as a table (is_table()); together,
  // counts_hold, tensor_holds of every tensor and the aliasing rule of first_alias_of are holds().
  bool is_table() const { return table_.has_value(); }
  // The counts, the options digest and the static scalars. REQUIRES: is_table().
  bool counts_hold(const CallArgs& args, uint64_t options_digest) const;
  // Tensor i's dtype, rank and sizes. REQUIRES: is_table(), counts_hold(args), i < the number of
  // tensors, tensor i materialized.
  bool tensor_holds(const CallArgs& args, uint32_t i) const;
  // The first tensor argument that tensor i shares data with (i itself: none before it).
  // REQUIRES: is_table(), i < the number of tensors.
  uint32_t first_alias_of(uint32_t i) const { return table_->first_alias[i]; }

  std::span<const GuardCheck> checks() const { return checks_; }
  const std::string& options_label() const { return options_label_; }

 private:
  // The checks of a set in record()'s static layout, as a table (see the top).
  struct StaticTable {
    struct Tensor {
      DType dtype;
      int rank;
    };
    uint64_t num_scalars = 0;
    uint64_t options_digest = 0;
    std::vector<Tensor> tensors;
    std::vector<int64_t> sizes;         // every tensor's, in order
    std::vector<uint32_t> sizes_begin;  // per tensor: where its sizes start in `sizes`
    std::vector<uint32_t> first_alias;  // per tensor (0 for tensor 0): the kAliasOf check
    std::vector<uint64_t> scalar_bits;  // per scalar: normalized bits
  };
  // The table of `checks` if they are laid out so, else nullopt.
  static std::optional<StaticTable> static_table(std::span<const GuardCheck> checks);
  bool table_holds(const CallArgs& args, uint64_t options_digest) const;

  std::vector<GuardCheck> checks_;
  std::string options_label_;
  std::optional<StaticTable> table_;
};

}  // namespace tracecache
