#include "replay/guards/guard_set.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>

#include "capture/ops/attrs.h"

namespace tracecache {

namespace {

const void* data(const CallArgs& args, uint32_t i) { return args.tensors[i].data_ptr()->identity(); }

// The first tensor argument that shares data with argument j (j itself if none).
uint64_t first_alias(const CallArgs& args, uint32_t j) {
  const void* p = data(args, j);
  for (uint32_t i = 0; i < j; ++i) {
    if (data(args, i) == p) return i;
  }
  return j;
}

uint64_t size_of(const CallArgs& args, uint32_t tensor, uint32_t dim) {
  return static_cast<uint64_t>(args.tensors[tensor].peek_shape()[static_cast<int>(dim)]);
}

// Value of the property `c` checks, for this call. REQUIRES: the checks before `c` passed.
uint64_t actual(const GuardCheck& c, const CallArgs& args, uint64_t options_digest) {
  using Kind = GuardCheck::Kind;
  switch (c.kind) {
    case Kind::kNumTensors: return args.tensors.size();
    case Kind::kNumScalars: return args.scalars.size();
    case Kind::kOptions: return options_digest;
    case Kind::kDType: return static_cast<uint64_t>(args.tensors[c.arg].dtype());
    case Kind::kRank: return static_cast<uint64_t>(args.tensors[c.arg].rank());
    case Kind::kContiguous: return 1;  // HostBuffers are dense row-major
    case Kind::kDevice: return 0;      // host memory
    case Kind::kAliasOf: return first_alias(args, c.arg);
    case Kind::kScalarValue: return normalized_float_bits(args.scalars[c.arg]);
    case Kind::kSize: case Kind::kSizeRange: case Kind::kSameSize: return size_of(args, c.arg, c.dim);
  }
  return 0;
}

bool passes(const GuardCheck& c, const CallArgs& args, uint64_t options_digest) {
  const uint64_t got = actual(c, args, options_digest);
  switch (c.kind) {
    case GuardCheck::Kind::kSizeRange: return got >= c.expected && got <= static_cast<uint64_t>(kMaxDynamicSize);
    case GuardCheck::Kind::kSameSize: return got == size_of(args, c.same_as.tensor, c.same_as.dim);
    default: return got == c.expected;
  }
}

bool is_dynamic(std::span<const DynamicDim> dims, size_t input, int dim) {
  return std::find(dims.begin(), dims.end(), DynamicDim{input, dim}) != dims.end();
}

}  // namespace

GuardCheck GuardCheck::scalar_value(uint32_t scalar, double value) {
  return {Kind::kScalarValue, scalar, 0, normalized_float_bits(value), {}};
}

std::string GuardFailure::to_string() const { return fmt::format("{} expected {}, actual {}", what, expected, actual); }

std::string GuardEnvironment::input_name(uint32_t i) const {
  return i < input_names.size() ? fmt::format("input {} '{}'", i, input_names[i]) : fmt::format("input {}", i);
}

std::string GuardEnvironment::scalar_name(uint32_t i) const {
  return i < scalar_names.size() && !scalar_names[i].empty() ? fmt::format("scalar {} '{}'", i, scalar_names[i])
                                                             : fmt::format("scalar {}", i);
}

GuardSet::GuardSet(std::vector<GuardCheck> checks, std::string options_label)
    : checks_(std::move(checks)), options_label_(std::move(options_label)), table_(static_table(checks_)) {}

std::optional<GuardSet::StaticTable> GuardSet::static_table(std::span<const GuardCheck> checks) {
  using Kind = GuardCheck::Kind;
  size_t next = 0;
  // The next check, if it is `kind` on argument `arg` (and dim `dim`); advances past it.
  auto take = [&](Kind kind, uint64_t arg = 0, uint64_t dim = 0) -> const GuardCheck* {
    if (next == checks.size()) return nullptr;
    const GuardCheck& c = checks[next];
    if (c.kind != kind || c.arg != arg || c.dim != dim) return nullptr;
    ++next;
    return &c;
  };
  const GuardCheck* num_tensors = take(Kind::kNumTensors);
  const GuardCheck* num_scalars = take(Kind::kNumScalars);
  const GuardCheck* options = take(Kind::kOptions);
  if (!num_tensors || !num_scalars || !options) return std::nullopt;
  // Every later check is about one argument: the counts are bounded by the list's length.
  if (num_tensors->expected > checks.size() || num_scalars->expected > checks.size()) return std::nullopt;
  StaticTable t;
  t.num_scalars = num_scalars->expected;
  t.options_digest = options->expected;
  const uint32_t n = static_cast<uint32_t>(num_tensors->expected);
  for (uint32_t i = 0; i < n; ++i) {
    const GuardCheck* dtype = take(Kind::kDType, i);
    const GuardCheck* rank = take(Kind::kRank, i);
    if (!dtype || !rank || rank->expected > static_cast<uint64_t>(kMaxRank)) return std::nullopt;
    t.tensors.push_back({static_cast<DType>(dtype->expected), static_cast<int>(rank->expected)});
    t.sizes_begin.push_back(static_cast<uint32_t>(t.sizes.size()));
    for (uint32_t d = 0; d < rank->expected; ++d) {
      const GuardCheck* size = take(Kind::kSize, i, d);
      if (!size) return std::nullopt;
      t.sizes.push_back(static_cast<int64_t>(size->expected));
    }
    const GuardCheck* contiguous = take(Kind::kContiguous, i);
    const GuardCheck* device = take(Kind::kDevice, i);
    if (!contiguous || contiguous->expected != 1 || !device || device->expected != 0) return std::nullopt;
  }
  t.first_alias.assign(n, 0);
  for (uint32_t j = 1; j < n; ++j) {
    const GuardCheck* alias = take(Kind::kAliasOf, j);
    if (!alias || alias->expected > j) return std::nullopt;
    t.first_alias[j] = static_cast<uint32_t>(alias->expected);
  }
  for (uint32_t s = 0; s < t.num_scalars; ++s) {
    const GuardCheck* value = take(Kind::kScalarValue, s);
    if (!value) return std::nullopt;
    t.scalar_bits.push_back(value->expected);
  }
  if (next != checks.size()) return std::nullopt;
  return t;
}

bool GuardSet::table_holds(const CallArgs& args, uint64_t options_digest) const {
  const StaticTable& t = *table_;
  const size_t n = t.tensors.size();
  if (args.tensors.size() != n || args.scalars.size() != t.num_scalars || options_digest != t.options_digest) {
    return false;
  }
  const int64_t* size = t.sizes.data();
  for (size_t i = 0; i < n; ++i) {
    const Tensor& arg = args.tensors[i];
    const StaticTable::Tensor& want = t.tensors[i];
    const Shape& shape = arg.peek_shape();
    if (arg.dtype() != want.dtype || shape.rank() != want.rank) return false;
    for (int d = 0; d < want.rank; ++d) {
      if (shape[d] != *size++) return false;
    }
  }
  // Aliasing: argument j's data is first seen at argument first_alias[j] (j itself: not before).
  // The identities are read once into an array when there are few arguments.
  constexpr size_t kGathered = 32;
  if (n <= kGathered) {
    std::array<const void*, kGathered> ids;
    for (size_t i = 0; i < n; ++i) ids[i] = data(args, static_cast<uint32_t>(i));
    for (uint32_t j = 1; j < n; ++j) {
      uint32_t first = 0;
      while (ids[first] != ids[j]) ++first;  // stops at j at the latest
      if (first != t.first_alias[j]) return false;
    }
  } else {
    // Sorted by (identity, index), each run of equal identities starts at its first argument:
    // n log n instead of the n^2 / 2 comparisons of first_alias (10 us for resnet18's 123
    // arguments). The buffer keeps its capacity, so a check allocates nothing after the first.
    thread_local std::vector<std::pair<const void*, uint32_t>> ids;
    ids.clear();
    for (uint32_t i = 0; i < n; ++i) ids.emplace_back(data(args, i), i);
    std::sort(ids.begin(), ids.end());
    uint32_t first = 0;
    for (size_t k = 0; k < n; ++k) {
      if (k == 0 || ids[k].first != ids[k - 1].first) first = ids[k].second;
      if (t.first_alias[ids[k].second] != first) return false;
    }
  }
  for (size_t s = 0; s < t.num_scalars; ++s) {
    if (normalized_float_bits(args.scalars[s]) != t.scalar_bits[s]) return false;
  }
  return true;
}

bool GuardSet::counts_hold(const CallArgs& args, uint64_t options_digest) const {
  const StaticTable& t = *table_;
  if (args.tensors.size() != t.tensors.size() || args.scalars.size() != t.num_scalars ||
      options_digest != t.options_digest) {
    return false;
  }
  for (size_t s = 0; s < t.num_scalars; ++s) {
    if (normalized_float_bits(args.scalars[s]) != t.scalar_bits[s]) return false;
  }
  return true;
}

bool GuardSet::tensor_holds(const CallArgs& args, uint32_t i) const {
  const StaticTable& t = *table_;
  const StaticTable::Tensor& want = t.tensors[i];
  const Tensor& arg = args.tensors[i];
  const Shape& shape = arg.peek_shape();
  if (arg.dtype() != want.dtype || shape.rank() != want.rank) return false;
  const int64_t* size = t.sizes.data() + t.sizes_begin[i];
  for (int d = 0; d < want.rank; ++d) {
    if (shape[d] != size[d]) return false;
  }
  return true;
}

GuardSet GuardSet::record(const CallArgs& args, const GuardEnvironment& env, std::span<const DynamicDim> dynamic,
                          const std::vector<bool>& dynamic_scalar) {
  std::vector<GuardCheck> checks;
  checks.push_back(GuardCheck::num_tensors(args.tensors.size()));
  checks.push_back(GuardCheck::num_scalars(args.scalars.size()));
  checks.push_back(GuardCheck::options(env.options_digest));
  for (uint32_t i = 0; i < args.tensors.size(); ++i) {
    const Tensor& t = args.tensors[i];
    checks.push_back(GuardCheck::dtype(i, t.dtype()));
    checks.push_back(GuardCheck::rank(i, t.rank()));
    for (int d = 0; d < t.rank(); ++d) {
      const TensorDim here{i, static_cast<uint32_t>(d)};
      if (!is_dynamic(dynamic, i, d)) {
        checks.push_back(GuardCheck::size(here, t.peek_shape()[d]));
        continue;
      }
      checks.push_back(GuardCheck::size_range(here, 1));
      // Dynamic dims equal now stay equal: relate this one to the first equal one before it.
      for (const DynamicDim& o : dynamic) {
        if (o.input > i || (o.input == i && o.dim >= d)) continue;
        if (args.tensors[o.input].peek_shape()[o.dim] != t.peek_shape()[d]) continue;
        checks.push_back(GuardCheck::same_size(here, {static_cast<uint32_t>(o.input), static_cast<uint32_t>(o.dim)}));
        break;
      }
    }
    checks.push_back(GuardCheck::contiguous(i));
    checks.push_back(GuardCheck::device(i));
  }
  // Aliasing: for each tensor, the first argument whose data it shares (itself if none).
  for (uint32_t j = 1; j < args.tensors.size(); ++j) {
    checks.push_back(GuardCheck::alias_of(j, static_cast<uint32_t>(first_alias(args, j))));
  }
  for (uint32_t s = 0; s < args.scalars.size(); ++s) {
    if (!dynamic_scalar[s]) checks.push_back(GuardCheck::scalar_value(s, args.scalars[s]));
  }
  return GuardSet(std::move(checks), std::string(env.options_label));
}

bool GuardSet::holds(const CallArgs& args, uint64_t options_digest) const {
  if (table_) return table_holds(args, options_digest);
  for (const GuardCheck& c : checks_) {
    if (c.kind == GuardCheck::Kind::kSize) {  // most checks: inline
      if (size_of(args, c.arg, c.dim) != c.expected) return false;
    } else if (!passes(c, args, options_digest)) {
      return false;
    }
  }
  return true;
}

std::vector<GuardFailure> GuardSet::explain(const CallArgs& args, const GuardEnvironment& env,
                                            std::vector<GuardCheck>* failed) const {
  using Kind = GuardCheck::Kind;
  std::vector<GuardFailure> out;
  for (const GuardCheck& c : checks_) {
    if (passes(c, args, env.options_digest)) continue;
    const uint64_t got = actual(c, args, env.options_digest);
    if (failed) failed->push_back(c);
    GuardFailure f;
    switch (c.kind) {
      case Kind::kNumTensors:
        f = {"number of tensor arguments", fmt::format("{}", c.expected), fmt::format("{}", got)};
        break;
      case Kind::kNumScalars:
        f = {"number of scalar arguments", fmt::format("{}", c.expected), fmt::format("{}", got)};
        break;
      case Kind::kOptions:
        // Entries stored before the label was recorded name only the digest.
        if (!options_label_.empty() && options_label_ != env.options_label) {
          f = {"backend", options_label_, std::string(env.options_label)};
        } else {
          f = {"lowering options digest", fmt::format("{:016x}", c.expected), fmt::format("{:016x}", got)};
        }
        break;
      case Kind::kDType:
        f = {env.input_name(c.arg) + ": dtype", std::string(dtype_name(static_cast<DType>(c.expected))),
             std::string(dtype_name(static_cast<DType>(got)))};
        break;
      case Kind::kRank:
        f = {env.input_name(c.arg) + ": rank", fmt::format("{}", c.expected), fmt::format("{}", got)};
        break;
      case Kind::kSize:
        f = {fmt::format("{}: size of dim {}", env.input_name(c.arg), c.dim), fmt::format("{}", c.expected),
             fmt::format("{}", got)};
        break;
      case Kind::kContiguous:
        f = {env.input_name(c.arg) + ": contiguous", "true", "false"};
        break;
      case Kind::kDevice:
        f = {env.input_name(c.arg) + ": device", "host", "other"};
        break;
      case Kind::kAliasOf: {
        auto describe = [&](uint64_t first) {
          return first == c.arg ? std::string("its own data") : fmt::format("same data as input {}", first);
        };
        f = {fmt::format("{}: aliasing", env.input_name(c.arg)), describe(c.expected), describe(got)};
        break;
      }
      case Kind::kScalarValue:
        f = {fmt::format("{}: value", env.scalar_name(c.arg)), fmt::format("{}", std::bit_cast<double>(c.expected)),
             fmt::format("{}", args.scalars[c.arg])};
        break;
      case Kind::kSizeRange:
        f = {fmt::format("{}: size of dim {} (dynamic)", env.input_name(c.arg), c.dim),
             fmt::format("in [{}, {}]", c.expected, kMaxDynamicSize), fmt::format("{}", got)};
        break;
      case Kind::kSameSize:
        f = {fmt::format("{}: size of dim {} (dynamic)", env.input_name(c.arg), c.dim),
             fmt::format("equal to {} dim {} ({})", env.input_name(c.same_as.tensor), c.same_as.dim,
                         size_of(args, c.same_as.tensor, c.same_as.dim)),
             fmt::format("{}", got)};
        break;
    }
    out.push_back(std::move(f));
    // Later checks index tensors by count and dims by rank: stop once those differ.
    if (c.kind == Kind::kNumTensors || c.kind == Kind::kNumScalars || c.kind == Kind::kRank) break;
  }
  return out;
}

}  // namespace tracecache
