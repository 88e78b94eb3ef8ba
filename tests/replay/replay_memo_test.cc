// CompiledFunction::replay_only's memo (replay/engine/compiled_function_memo.cc): arguments
// repeated between calls (a module's state) are checked once. Nothing about a call may change
// because of it: every call returns what a fresh trace returns, a call the guards refuse is
// refused, a repeated tensor assigned a new value is read anew, an argument that shares data
// with a repeated one is checked as the full lookup checks it, and the counts are every call's.
#include <gtest/gtest.h>

#include "tests/once_harness.h"

namespace tracecache {
namespace {

// w, b: the state (same handles call after call); x: the call's own argument.
std::vector<Tensor> affine(LazyContext&, const TraceArgs& a) {
  return {add(mul(a.tensor(2), a.tensor(0)), a.tensor(1))};
}

struct MemoTest : testing::Test {
  Harness h;
  CompiledFunction f{"f", affine, &h.runtime};
  Tensor w = h.tensor(filled(DType::kF32, {2, 3}, 0.5, 0.25));
  Tensor b = h.tensor(filled(DType::kF32, {2, 3}, -1, 0.5));

  CallArgs args(const Tensor& x) { return {{w, b, x}, {}}; }
  Tensor input(double start, Shape shape = {2, 3}) { return h.tensor(filled(DType::kF32, std::move(shape), start)); }

  // replay_only with w and b as the state.
  Result<std::optional<std::vector<DataRef>>> try_replay(const CallArgs& a) { return f.replay_only(h.ctx, a, 2); }
  // Its outputs as doubles; empty when it did not replay.
  std::vector<std::vector<double>> replay(const CallArgs& a) {
    auto r = try_replay(a);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    std::vector<std::vector<double>> out;
    if (!r.is_ok() || !r->has_value()) return out;
    for (const DataRef& d : **r) out.push_back(h.ctx.from_data(d).to_vector<double>());
    return out;
  }
};

TEST_F(MemoTest, RepeatedStateReplaysWhatAFreshTraceReturns) {
  ASSERT_EQ(h.call(f, args(input(0))), eager(affine, args(input(0))));  // traces
  for (int k = 1; k < 8; ++k) {
    CallArgs a = args(input(k));
    EXPECT_EQ(replay(a), eager(affine, a)) << "call " << k;
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().calls, 8);
  ASSERT_EQ(f.stats().hits_per_entry.size(), 1u);
  EXPECT_EQ(f.stats().hits_per_entry[0], 7);
  EXPECT_EQ(f.stats().guard_checks, 7) << "one check per replay, memoized or not";
  // The first replay made the memo; it served the rest.
  EXPECT_EQ(f.stats().memoized_replays, 6);
}

TEST_F(MemoTest, ACallTheGuardsRefuseIsRefused) {
  ASSERT_FALSE(h.call(f, args(input(0))).empty());
  for (int k = 1; k < 4; ++k) ASSERT_FALSE(replay(args(input(k))).empty());
  // Another shape of the call's own argument: the entry does not hold (it would trace).
  auto r = try_replay(args(input(0, {3, 2})));
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->has_value());
  // Another dtype of it, and another number of arguments.
  r = try_replay(args(h.tensor(filled(DType::kI32, {2, 3}, 0))));
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->has_value());
  r = try_replay({{w, b}, {}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(f.stats().traces, 1);
  const int64_t memoized = f.stats().memoized_replays;
  CallArgs a = args(input(5));
  EXPECT_EQ(replay(a), eager(affine, a)) << "the memo still serves the calls that hold";
  EXPECT_EQ(f.stats().memoized_replays, memoized + 1);
}

TEST_F(MemoTest, AStateTensorReplacedOrAssignedIsReadAnew) {
  ASSERT_FALSE(h.call(f, args(input(0))).empty());
  for (int k = 1; k < 4; ++k) ASSERT_FALSE(replay(args(input(k))).empty());
  ASSERT_EQ(f.stats().memoized_replays, 2);
  // A new handle in a state position (a parameter replaced): its values, not the held ones.
  w = h.tensor(filled(DType::kF32, {2, 3}, 3, -0.5));
  CallArgs a = args(input(1));
  EXPECT_EQ(replay(a), eager(affine, a));
  for (int k = 2; k < 4; ++k) {
    a = args(input(k));
    EXPECT_EQ(replay(a), eager(affine, a)) << "call " << k;
  }
  // The same handle given a new value in place (the context's one way to change a tensor's data).
  h.ctx.assign(b, h.tensor(filled(DType::kF32, {2, 3}, 10, 1)));
  (void)b.buffer();  // the barrier that applies it
  const int64_t memoized = f.stats().memoized_replays;
  a = args(input(4));
  EXPECT_EQ(replay(a), eager(affine, a));
  EXPECT_EQ(replay(a).at(0).at(0), 4 * 3 + 10) << "x[0] * w[0] + the assigned b[0]";
  EXPECT_EQ(f.stats().memoized_replays, memoized + 1) << "made anew by the first call after the assignment";
  EXPECT_EQ(f.stats().traces, 1);
}

TEST_F(MemoTest, AnArgumentSharingDataWithTheStateIsCheckedAsTheLookupChecksIt) {
  ASSERT_FALSE(h.call(f, args(input(0))).empty());
  for (int k = 1; k < 4; ++k) ASSERT_FALSE(replay(args(input(k))).empty());
  // x is w itself: the entry was recorded with x distinct from w, so it must not replay.
  auto r = try_replay(args(w));
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->has_value());
  // A second tensor over w's data (another handle, same data identity): the same.
  r = try_replay(args(h.ctx.from_data(w.data())));
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->has_value());
  // Traced as it is, the aliased call gets its own entry, and both keep replaying right.
  auto aliased = f(h.ctx, args(w));
  ASSERT_TRUE(aliased.is_ok());
  EXPECT_EQ(f.stats().traces, 2);
  CallArgs a = args(input(7));
  EXPECT_EQ(replay(a), eager(affine, a));
  EXPECT_EQ(replay(args(w)), eager(affine, args(w)));
  EXPECT_EQ(f.stats().traces, 2);
}

TEST_F(MemoTest, ACallKeepsNoHandleOfItsOwnArguments) {
  ASSERT_FALSE(h.call(f, args(input(0))).empty());
  for (int k = 1; k < 4; ++k) ASSERT_FALSE(replay(args(input(k))).empty());
  std::weak_ptr<const DeviceData> x_data;
  {
    Tensor x = input(9);
    x_data = x.data();
    ASSERT_FALSE(replay(args(x)).empty());
  }
  EXPECT_TRUE(x_data.expired()) << "the memo holds the repeated state, not the call's own tensors";
}

TEST_F(MemoTest, AnEntryDroppedOrAddedIsNeverServedFromAStaleMemo) {
  ASSERT_FALSE(h.call(f, args(input(0))).empty());
  for (int k = 1; k < 4; ++k) ASSERT_FALSE(replay(args(input(k))).empty());
  ASSERT_TRUE(f.discard_last_entry("test"));
  EXPECT_EQ(f.num_entries(), 0u);
  auto r = try_replay(args(input(4)));
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->has_value()) << "no entry: the call would trace";
  CallArgs a = args(input(5));
  EXPECT_EQ(h.call(f, a), eager(affine, a));
  EXPECT_EQ(f.stats().traces, 2);
  for (int k = 6; k < 9; ++k) {
    a = args(input(k));
    EXPECT_EQ(replay(a), eager(affine, a)) << "call " << k;
  }
}

}  // namespace
}  // namespace tracecache
