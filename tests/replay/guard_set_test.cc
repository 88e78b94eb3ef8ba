// GuardSet on its own (replay/guards/guard_set.h): for every check kind, holds() is true for
// the call it was recorded from and false for a call that differs only in what it checks, and
// explain() names exactly that check with expected vs actual; relations name their typed
// operands; a stored kind that no longer exists (9) is refused by the codec.
#include <gtest/gtest.h>

#include <bit>

#include "replay/guards/guard_entry_codec.h"
#include "replay/guards/guard_set.h"
#include "store/codec/proto/tracecache.pb.h"
#include "tests/once_harness.h"

namespace tracecache {
namespace {

constexpr uint64_t kDigest = 0x1234;

struct GuardSetTest : ::testing::Test {
  Harness h;
  std::vector<std::string> names{"x", "y"};
  GuardEnvironment env{kDigest, "cpu", names};

  Tensor t(DType dtype, Shape shape) { return h.tensor(filled(dtype, std::move(shape), 0)); }

  // One failure expected: its text.
  std::string only_failure(const GuardSet& g, const CallArgs& args, const GuardEnvironment& e) {
    std::vector<GuardCheck> failed;
    std::vector<GuardFailure> f = g.explain(args, e, &failed);
    EXPECT_EQ(f.size(), 1u);
    EXPECT_EQ(failed.size(), f.size());
    return f.empty() ? std::string() : f[0].to_string();
  }
};

TEST_F(GuardSetTest, TheRecordedCallHoldsAndExplainsNothing) {
  CallArgs args{{t(DType::kF32, {8, 2}), t(DType::kI32, {3})}, {2.0}};
  GuardSet g = GuardSet::record(args, env, {}, {false});
  EXPECT_TRUE(g.holds(args, kDigest));
  EXPECT_TRUE(g.explain(args, env).empty());
  EXPECT_EQ(g.options_label(), "cpu");
  // Counts and options first, then per tensor dtype, rank, sizes, contiguity, device.
  ASSERT_GE(g.checks().size(), 7u);
  EXPECT_EQ(g.checks()[0], GuardCheck::num_tensors(2));
  EXPECT_EQ(g.checks()[1], GuardCheck::num_scalars(1));
  EXPECT_EQ(g.checks()[2], GuardCheck::options(kDigest));
  EXPECT_EQ(g.checks()[3], GuardCheck::dtype(0, DType::kF32));
  EXPECT_EQ(g.checks()[4], GuardCheck::rank(0, 2));
  EXPECT_EQ(g.checks()[5], GuardCheck::size({0, 0}, 8));
  EXPECT_EQ(g.checks()[6], GuardCheck::size({0, 1}, 2));
  EXPECT_EQ(g.checks().back(), GuardCheck::scalar_value(0, 2.0));
}

TEST_F(GuardSetTest, CountsFailFirstAndStopTheWalk) {
  CallArgs one{{t(DType::kF32, {4})}, {}};
  GuardSet g = GuardSet::record(one, env, {}, {});
  CallArgs two{{t(DType::kF32, {4}), t(DType::kF32, {4})}, {}};
  EXPECT_FALSE(g.holds(two, kDigest));
  EXPECT_EQ(only_failure(g, two, env), "number of tensor arguments expected 1, actual 2");
  CallArgs scalar{{t(DType::kF32, {4})}, {1.0}};
  EXPECT_FALSE(g.holds(scalar, kDigest));
  EXPECT_EQ(only_failure(g, scalar, env), "number of scalar arguments expected 0, actual 1");
}

TEST_F(GuardSetTest, OptionsNameTheBackendsWhenLabelledAndTheDigestOtherwise) {
  CallArgs args{{t(DType::kF32, {4})}, {}};
  GuardSet g = GuardSet::record(args, env, {}, {});
  GuardEnvironment sim{0x99, "sim:h100", names};
  EXPECT_FALSE(g.holds(args, 0x99));
  EXPECT_EQ(only_failure(g, args, sim), "backend expected cpu, actual sim:h100");
  GuardSet unlabelled(std::vector<GuardCheck>(g.checks().begin(), g.checks().end()));
  EXPECT_EQ(only_failure(unlabelled, args, sim),
            "lowering options digest expected 0000000000001234, actual 0000000000000099");
}

TEST_F(GuardSetTest, DTypeRankAndSizeNameTheInput) {
  GuardSet g = GuardSet::record({{t(DType::kF32, {8, 2})}, {}}, env, {}, {});
  CallArgs dtype{{t(DType::kI32, {8, 2})}, {}};
  EXPECT_FALSE(g.holds(dtype, kDigest));
  EXPECT_EQ(only_failure(g, dtype, env), "input 0 'x': dtype expected f32, actual i32");
  CallArgs rank{{t(DType::kF32, {8, 2, 1})}, {}};
  EXPECT_FALSE(g.holds(rank, kDigest));
  EXPECT_EQ(only_failure(g, rank, env), "input 0 'x': rank expected 2, actual 3");
  CallArgs size{{t(DType::kF32, {16, 2})}, {}};
  EXPECT_FALSE(g.holds(size, kDigest));
  EXPECT_EQ(only_failure(g, size, env), "input 0 'x': size of dim 0 expected 8, actual 16");
  // Unnamed inputs are numbered only.
  GuardEnvironment unnamed{kDigest, "cpu", {}};
  EXPECT_EQ(only_failure(g, size, unnamed), "input 0: size of dim 0 expected 8, actual 16");
}

TEST_F(GuardSetTest, AliasingIsGuardedBothWays) {
  Tensor x = t(DType::kF32, {4});
  Tensor y = t(DType::kF32, {4});
  GuardSet shared = GuardSet::record({{x, x}, {}}, env, {}, {});
  EXPECT_EQ(shared.checks().back(), GuardCheck::alias_of(1, 0));
  EXPECT_TRUE(shared.holds({{y, y}, {}}, kDigest));
  CallArgs distinct{{x, y}, {}};
  EXPECT_FALSE(shared.holds(distinct, kDigest));
  EXPECT_EQ(only_failure(shared, distinct, env), "input 1 'y': aliasing expected same data as input 0, actual its own data");
  GuardSet own = GuardSet::record(distinct, env, {}, {});
  EXPECT_FALSE(own.holds({{x, x}, {}}, kDigest));
  EXPECT_EQ(only_failure(own, {{x, x}, {}}, env), "input 1 'y': aliasing expected its own data, actual same data as input 0");
}

TEST_F(GuardSetTest, StaticScalarsByValueDynamicOnesNot) {
  Tensor x = t(DType::kF32, {4});
  GuardSet g = GuardSet::record({{x}, {2.0, 0.5}}, env, {}, {false, true});
  EXPECT_TRUE(g.holds({{x}, {2.0, 7.0}}, kDigest)) << "scalar 1 is dynamic";
  CallArgs other{{x}, {3.0, 0.5}};
  EXPECT_FALSE(g.holds(other, kDigest));
  EXPECT_EQ(only_failure(g, other, env), "scalar 0: value expected 2, actual 3");
  // Bits, normalized: -0.0 is another value, NaNs are one.
  EXPECT_FALSE(GuardSet::record({{x}, {0.0}}, env, {}, {false}).holds({{x}, {-0.0}}, kDigest));
  const double nan1 = std::bit_cast<double>(uint64_t{0x7ff8000000000001});
  const double nan2 = std::bit_cast<double>(uint64_t{0x7ff8000000000002});
  EXPECT_TRUE(GuardSet::record({{x}, {nan1}}, env, {}, {false}).holds({{x}, {nan2}}, kDigest));
}

TEST_F(GuardSetTest, DynamicDimsHaveARangeAndStayEqual) {
  const std::vector<DynamicDim> dynamic{{0, 0}, {1, 0}};
  GuardSet g = GuardSet::record({{t(DType::kF32, {8, 2}), t(DType::kF32, {8})}, {}}, env, dynamic, {});
  // Typed operands: the relation names the earlier dim by tensor and dim.
  const GuardCheck same = GuardCheck::same_size({1, 0}, {0, 0});
  EXPECT_NE(std::find(g.checks().begin(), g.checks().end(), same), g.checks().end());
  EXPECT_EQ(same.same_as, (TensorDim{0, 0}));
  EXPECT_TRUE(same.on_size());
  EXPECT_TRUE(g.holds({{t(DType::kF32, {16, 2}), t(DType::kF32, {16})}, {}}, kDigest));
  CallArgs unequal{{t(DType::kF32, {16, 2}), t(DType::kF32, {12})}, {}};
  EXPECT_FALSE(g.holds(unequal, kDigest));
  EXPECT_EQ(only_failure(g, unequal, env), "input 1 'y': size of dim 0 (dynamic) expected equal to input 0 'x' dim 0 (16), actual 12");
  CallArgs empty{{t(DType::kF32, {0, 2}), t(DType::kF32, {0})}, {}};
  EXPECT_FALSE(g.holds(empty, kDigest));
  std::vector<GuardFailure> f = g.explain(empty, env);
  ASSERT_EQ(f.size(), 2u) << "the range of both dims; the relation holds";
  EXPECT_EQ(f[0].to_string(), "input 0 'x': size of dim 0 (dynamic) expected in [1, 2147483648], actual 0");
  // The static dim is still guarded by its size.
  EXPECT_FALSE(g.holds({{t(DType::kF32, {16, 3}), t(DType::kF32, {16})}, {}}, kDigest));
}

// Host buffers are always dense and in host memory: a set expecting otherwise never holds and
// says so.
TEST_F(GuardSetTest, ContiguityAndDeviceAreThoseOfHostBuffers) {
  CallArgs args{{t(DType::kF32, {4})}, {}};
  GuardSet g = GuardSet::record(args, env, {}, {});
  EXPECT_NE(std::find(g.checks().begin(), g.checks().end(), GuardCheck::contiguous(0)), g.checks().end());
  EXPECT_NE(std::find(g.checks().begin(), g.checks().end(), GuardCheck::device(0)), g.checks().end());
  std::vector<GuardCheck> strided(g.checks().begin(), g.checks().end());
  for (GuardCheck& c : strided) {
    if (c.kind == GuardCheck::Kind::kContiguous) c.expected = 0;
  }
  EXPECT_FALSE(GuardSet(strided).holds(args, kDigest));
  EXPECT_EQ(only_failure(GuardSet(strided), args, env), "input 0 'x': contiguous expected true, actual false");
  std::vector<GuardCheck> device(g.checks().begin(), g.checks().end());
  for (GuardCheck& c : device) {
    if (c.kind == GuardCheck::Kind::kDevice) c.expected = 1;
  }
  EXPECT_FALSE(GuardSet(device).holds(args, kDigest));
  EXPECT_EQ(only_failure(GuardSet(device), args, env), "input 0 'x': device expected host, actual other");
}

TEST_F(GuardSetTest, OnlySizeChecksAreOnSize) {
  EXPECT_TRUE(GuardCheck::size({0, 1}, 4).on_size());
  EXPECT_TRUE(GuardCheck::size_range({0, 1}, 1).on_size());
  EXPECT_FALSE(GuardCheck::rank(0, 2).on_size());
  EXPECT_FALSE(GuardCheck::dtype(0, DType::kF32).on_size());
  EXPECT_FALSE(GuardCheck::scalar_value(0, 1.0).on_size());
}

// The removed "distinct" kind (9, last written before guard-entry format 2) is an unknown check
// in a format-3 entry; the same entry without it is valid.
TEST_F(GuardSetTest, TheTableOfARecordedSetAnswersAsTheListDoes) {
  // holds() reads a set in record()'s layout as a table; the same checks in another valid order
  // (the aliasing right after the counts) are walked one by one. Both must agree with each other
  // and with explain() on every call, whichever check fails.
  Tensor a = t(DType::kF32, {4, 2}), b = t(DType::kI32, {3}), c = t(DType::kF32, {4, 2});
  CallArgs recorded{{a, b, a}, {2.0, -0.0}};
  GuardSet table = GuardSet::record(recorded, env, {}, {false, false});
  std::vector<GuardCheck> reordered;
  for (const GuardCheck& check : table.checks()) {
    if (check.kind != GuardCheck::Kind::kAliasOf) reordered.push_back(check);
  }
  size_t at = 3;
  for (const GuardCheck& check : table.checks()) {
    if (check.kind == GuardCheck::Kind::kAliasOf) reordered.insert(reordered.begin() + static_cast<std::ptrdiff_t>(at++), check);
  }
  const GuardSet list(reordered, "cpu");
  const CallArgs calls[] = {
      recorded,
      {{c, b, c}, {2.0, -0.0}},                                   // other data, same aliasing
      {{a, b, c}, {2.0, -0.0}},                                   // the alias is gone
      {{a, b, a}, {2.0, 0.0}},                                    // -0.0 became 0.0
      {{a, b, a}, {3.0, -0.0}},                                   // another scalar value
      {{a, b, a}, {2.0}},                                         // a scalar fewer
      {{a, b}, {2.0, -0.0}},                                      // a tensor fewer
      {{a, t(DType::kI64, {3}), a}, {2.0, -0.0}},                 // dtype
      {{a, t(DType::kI32, {3, 1}), a}, {2.0, -0.0}},              // rank
      {{a, t(DType::kI32, {5}), a}, {2.0, -0.0}},                 // size
      {{t(DType::kF32, {4, 3}), b, t(DType::kF32, {4, 2})}, {2.0, -0.0}},  // size, and no alias
  };
  for (size_t k = 0; k < std::size(calls); ++k) {
    const bool expected = table.explain(calls[k], env).empty();
    EXPECT_EQ(expected, k < 2) << "call " << k;
    EXPECT_EQ(table.holds(calls[k], kDigest), expected) << "call " << k;
    EXPECT_EQ(list.holds(calls[k], kDigest), expected) << "call " << k;
  }
  EXPECT_FALSE(table.holds(recorded, kDigest + 1));
  EXPECT_FALSE(list.holds(recorded, kDigest + 1));
}

TEST_F(GuardSetTest, TheRetiredDistinctKindIsAnUnknownCheck) {
  Tensor x = t(DType::kF32, {4});
  GuardEntry e;
  e.guards = GuardSet::record({{x, x}, {}}, env, {}, {});
  e.outputs.push_back({ValueSource::Kind::kInput, 0, 0, nullptr});
  e.output_types.push_back({DType::kF32, Shape{4}});
  const std::string bytes = encode_guard_entry(e);
  ASSERT_TRUE(validate_guard_entry(bytes).is_ok()) << validate_guard_entry(bytes).to_string();
  proto::GuardEntry pe;
  ASSERT_TRUE(pe.ParseFromString(bytes));
  proto::GuardCheck* distinct = pe.add_checks();
  distinct->set_kind(9);
  distinct->set_index(1);
  distinct->set_dim(0);
  distinct->set_expected(1);
  Status st = validate_guard_entry(pe.SerializeAsString());
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("unknown check"), std::string::npos) << st.to_string();
}

// A relation survives the codec with its operands (stored as tensor * 256 + dim).
TEST_F(GuardSetTest, TheCodecKeepsTypedOperands) {
  GuardEntry e;
  e.guards = GuardSet::record({{t(DType::kF32, {8, 2}), t(DType::kF32, {8})}, {}}, env, std::vector<DynamicDim>{{0, 0}, {1, 0}}, {});
  e.outputs.push_back({ValueSource::Kind::kInput, 1, 0, nullptr});
  e.output_types.push_back({DType::kF32, Shape{8}});
  Result<GuardEntry> back = decode_guard_entry(encode_guard_entry(e));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_TRUE(std::equal(back->guards.checks().begin(), back->guards.checks().end(), e.guards.checks().begin(),
                         e.guards.checks().end()));
  EXPECT_EQ(back->guards.options_label(), "cpu");
}

}  // namespace
}  // namespace tracecache
