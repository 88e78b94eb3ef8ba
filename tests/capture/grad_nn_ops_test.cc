// Gradients of the lookups, layer_norm, softmax, log_softmax and attention
// (capture/ops/grad_nn_ops.h), and their primitive scatter_add:
//  - scatter_add: known values with duplicate and clamped indices; the cpu kernel bitwise equal
//    to the reference on inputs full of duplicates (the CpuOp suite adds random cases);
//  - every rule against a directional finite difference of its own forward op (independent of
//    any other gradient implementation), clamped indices included;
//  - a tiny transformer block (embedding, layer_norm, causal attention, softmax, matmul
//    projections, gather of the targets' log-probabilities): eager and lazy gradients on the cpu
//    backend are the same bits.
// Against PyTorch: tests/grad/cases_nn_ops.py (the tests/grad/ harness).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/eager_runner.h"
#include "capture/ir/graph.h"
#include "capture/reference/reference.h"
#include "capture/trace/autograd.h"
#include "capture/trace/nn.h"
#include "replay/engine/runtime.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

using test::random_values;

HostBuffer random_f32(const Shape& s, uint32_t seed) {
  return test::f32(s, random_values(static_cast<size_t>(s.numel()), seed));
}

// ---- scatter_add -------------------------------------------------------------------------------

// Runs scatter_add on the reference and on the cpu kernel; expects the same bits and returns them.
std::vector<float> scatter_add_both(const HostBuffer& x, const HostBuffer& index, const HostBuffer& src,
                                    int64_t axis) {
  const std::vector<TensorType> in = {{x.dtype(), x.shape()}, {index.dtype(), index.shape()},
                                      {src.dtype(), src.shape()}};
  std::vector<AttrValue> attrs = {AttrValue::of_int(axis)};
  const TensorType type = infer_op(OpKind::kScatterAdd, in, attrs).value_or_throw();
  const std::vector<const HostBuffer*> ptrs = {&x, &index, &src};
  HostBuffer want(type.dtype, type.shape);
  op_info(OpKind::kScatterAdd).reference(ptrs, attrs, want);
  Graph g;
  std::vector<NodeId> ids;
  for (const TensorType& t : in) ids.push_back(g.add_parameter(t));
  const NodeId node = g.add_node(OpKind::kScatterAdd, ids, attrs, type);
  HostBuffer got(type.dtype, type.shape);
  cpu::run_op(g, node, ptrs, got);
  EXPECT_EQ(0, std::memcmp(got.bytes(), want.bytes(), want.nbytes())) << "cpu differs from the reference";
  return std::vector<float>(want.data<float>(), want.data<float>() + want.numel());
}

TEST(ScatterAdd, DuplicatesAccumulateAndOutOfRangeIndicesAreClamped) {
  // torch.zeros(3, 2).scatter_add(0, [[0, 2], [0, 0], [2, 1]], [[1, 2], [3, 4], [5, 6]])
  // = [[4, 4], [0, 6], [5, 2]]; row indices -7 and 9 read as 0 and 2.
  const HostBuffer x = test::f32({3, 2}, {0, 0, 0, 0, 0, 0});
  const HostBuffer src = test::f32({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(scatter_add_both(x, test::i64({3, 2}, {0, 2, 0, 0, 2, 1}), src, 0),
            (std::vector<float>{4, 4, 0, 6, 5, 2}));
  EXPECT_EQ(scatter_add_both(x, test::i32({3, 2}, {-7, 9, 0, 0, 2, 1}), src, 0),
            (std::vector<float>{4, 4, 0, 6, 5, 2}));
  // axis -1, an index smaller than x on the other dim, x not zero.
  const HostBuffer base = test::f32({2, 3}, {10, 20, 30, 40, 50, 60});
  EXPECT_EQ(scatter_add_both(base, test::i64({1, 4}, {2, 2, 0, 2}), test::f32({1, 4}, {1, 2, 3, 4}), -1),
            (std::vector<float>{13, 20, 37, 40, 50, 60}));
}

TEST(ScatterAdd, SumsEachElementInDoubleAndRoundsOnce) {
  // 1 + 2^-24 + 2^-24 in f32 steps stays 1; in double it rounds to 1 + 2^-23.
  const float tiny = std::ldexp(1.0f, -24);
  EXPECT_EQ(scatter_add_both(test::f32({1}, {1}), test::i64({2}, {0, 0}), test::f32({2}, {tiny, tiny}), 0),
            (std::vector<float>{1 + 2 * tiny}));
}

TEST(ScatterAdd, CpuEqualsTheReferenceOnManyDuplicates) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> pick(-2, 5);  // rows 0..3, some clamped
  for (int axis : {0, 1, 2}) {
    const Shape xs{4, 4, 4};
    Shape is{3, 4, 2};
    is[axis] = 40;
    std::vector<int64_t> idx(static_cast<size_t>(is.numel()));
    for (int64_t& v : idx) v = pick(rng);
    scatter_add_both(random_f32(xs, 1), test::i64(is, idx), random_f32(is, 2), axis);
  }
}

// The embedding gradient's shape: a table larger than one copy chunk (2^18 elements), a few rows
// reached many times; and the same along a middle axis with an outer and an inner dim.
TEST(ScatterAdd, CpuEqualsTheReferenceOnALargeTable) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> pick(-1, 700);  // rows 0..599, some clamped at both ends
  struct Case {
    Shape xs, is;
    int axis;
  };
  for (const Case& c : {Case{{600, 700}, {90, 700}, 0}, Case{{3, 500, 200}, {2, 300, 150}, 1}}) {
    std::vector<int64_t> idx(static_cast<size_t>(c.is.numel()));
    for (int64_t& v : idx) v = pick(rng);
    const std::vector<float> out = scatter_add_both(random_f32(c.xs, 3), test::i64(c.is, idx), random_f32(c.is, 4), c.axis);
    EXPECT_EQ(static_cast<int64_t>(out.size()), c.xs.numel());
  }
}

TEST(ScatterAdd, RejectsWhatItCannotScatter) {
  auto error = [](std::vector<TensorType> in, int64_t axis) {
    std::vector<AttrValue> attrs = {AttrValue::of_int(axis)};
    Result<TensorType> r = infer_op(OpKind::kScatterAdd, in, attrs);
    return r.is_ok() ? std::string() : r.status().message();
  };
  const TensorType x{DType::kF32, {3, 4}};
  EXPECT_NE(error({x, {DType::kI64, {2, 4}}, {DType::kF32, {2, 3}}}, 0).find("must have the shape of index"),
            std::string::npos);
  EXPECT_NE(error({x, {DType::kI64, {2, 5}}, {DType::kF32, {2, 5}}}, 0).find("no dim larger"), std::string::npos);
  EXPECT_NE(error({x, {DType::kF32, {2, 4}}, {DType::kF32, {2, 4}}}, 0).find("must be i32 or i64"),
            std::string::npos);
  EXPECT_NE(error({x, {DType::kI64, {2, 4}}, {DType::kI64, {2, 4}}}, 0).find("must be f32"), std::string::npos);
  EXPECT_NE(error({x, {DType::kI64, {2, 4}}, {DType::kF32, {2, 4}}}, 2).find("out of range"), std::string::npos);
  EXPECT_NE(error({{DType::kF32, {0, 4}}, {DType::kI64, {2, 4}}, {DType::kF32, {2, 4}}}, 0).find("empty"),
            std::string::npos);
  EXPECT_EQ(error({x, {DType::kI32, {5, 2}}, {DType::kF32, {5, 2}}}, -2), "");
}

TEST(ScatterAdd, CostsOneFlopPerSrcElement) {
  const std::vector<TensorType> in = {{DType::kF32, {3, 4}}, {DType::kI64, {5, 4}}, {DType::kF32, {5, 4}}};
  std::vector<AttrValue> attrs = {AttrValue::of_int(0)};
  const TensorType out = infer_op(OpKind::kScatterAdd, in, attrs).value_or_throw();
  EXPECT_EQ(op_info(OpKind::kScatterAdd).cost(in, out, attrs), (OpCost{20, false}));
}

// ---- directional finite differences -------------------------------------------------------------

// One rule's check: the op's inputs (every floating one is differentiated) and the op.
struct FdCase {
  std::string name;
  std::vector<HostBuffer> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> f;
};

// loss = sum(f(inputs) * c) for a fixed random c. Compares the gradients' dot product with a
// random direction to the central difference of the loss along it (eps 1e-2, in f32 through the
// reference kernels). Tolerance 1e-2 relative to max(1, |difference|): the difference's own
// error is O(eps^2) curvature plus f32 rounding of the loss / eps, well inside it, while a
// wrong rule (a missing term, a transposed product) is off by O(1).
void check_directional(const FdCase& c) {
  SCOPED_TRACE(c.name);
  ReferenceExecutor reference;
  // sum(f(inputs) * c) recorded on `ctx`; `ts` receives the input tensors.
  auto loss_of = [&](LazyContext& ctx, std::vector<Tensor>& ts, const std::vector<HostBuffer>& values) {
    for (const HostBuffer& v : values) ts.push_back(ctx.from_buffer(v.clone()));
    for (Tensor& t : ts) {
      if (t.dtype() == DType::kF32) t.set_requires_grad(true);
    }
    Tensor y = c.f(ts);
    return sum(mul(y, ctx.from_buffer(random_f32(y.shape(), 99))));
  };
  LazyContext ctx(&reference);
  std::vector<Tensor> ts;
  Tensor loss = loss_of(ctx, ts, c.inputs);
  std::vector<Tensor> wrt;
  for (const Tensor& t : ts) {
    if (t.dtype() == DType::kF32) wrt.push_back(t);
  }
  std::vector<Tensor> g = grad(loss, wrt);
  ctx.mark_step();
  double analytic = 0;
  std::vector<std::vector<float>> dirs;
  size_t w = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].dtype() != DType::kF32) {
      dirs.emplace_back();
      continue;
    }
    dirs.push_back(random_values(static_cast<size_t>(c.inputs[i].numel()), 50 + static_cast<uint32_t>(i)));
    const std::vector<float> gi = g[w++].to_vector<float>();
    for (size_t k = 0; k < gi.size(); ++k) analytic += static_cast<double>(gi[k]) * dirs[i][k];
  }
  const double eps = 1e-2;
  auto shifted = [&](double s) {
    std::vector<HostBuffer> values;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      HostBuffer v = c.inputs[i].clone();
      if (v.dtype() == DType::kF32) {
        for (int64_t k = 0; k < v.numel(); ++k) v.data<float>()[k] += static_cast<float>(s * dirs[i][static_cast<size_t>(k)]);
      }
      values.push_back(std::move(v));
    }
    LazyContext fresh(&reference);
    std::vector<Tensor> args;
    return loss_of(fresh, args, values).item();
  };
  const double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
  EXPECT_NEAR(analytic, numeric, 1e-2 * std::max(1.0, std::abs(numeric)));
}

template <typename... B>
std::vector<HostBuffer> bufs(B&&... b) {
  std::vector<HostBuffer> v;
  (v.push_back(std::forward<B>(b)), ...);
  return v;
}

std::vector<FdCase> fd_cases() {
  std::vector<FdCase> cases;
  auto tensor_case = [&](std::string name, std::vector<HostBuffer> in, std::function<Tensor(const std::vector<Tensor>&)> f) {
    cases.push_back({std::move(name), std::move(in), std::move(f)});
  };
  // Lookups: duplicates, and out-of-range indices (their gradient goes to the clamped row).
  tensor_case("embedding", bufs(random_f32({5, 3}, 1), test::i64({2, 4}, {0, 4, 4, 1, -3, 9, 0, 2})),
              [](const auto& t) { return embedding(t[0], t[1]); });
  tensor_case("gather", bufs(random_f32({3, 4}, 2), test::i32({3, 5}, {0, 0, 3, 3, 3, 1, 2, 7, -1, 0, 2, 2, 2, 1, 0})),
              [](const auto& t) { return gather(t[0], 1, t[1]); });
  tensor_case("gather_axis0", bufs(random_f32({4, 3}, 3), test::i64({5, 2}, {0, 3, 3, 3, 1, 1, 0, 2, 9, -4})),
              [](const auto& t) { return gather(t[0], -2, t[1]); });
  tensor_case("index_select", bufs(random_f32({2, 3, 4}, 4), test::i64({6}, {3, 0, 3, 1, 5, 3})),
              [](const auto& t) { return index_select(t[0], -1, t[1]); });
  tensor_case("index_select_axis0", bufs(random_f32({4, 3}, 5), test::i32({5}, {1, 1, 0, 3, 1})),
              [](const auto& t) { return index_select(t[0], 0, t[1]); });
  tensor_case("scatter_add", bufs(random_f32({3, 4}, 6), test::i64({5, 4}, {0, 2, 2, 1, 0, 0, 2, 2, 1, 1, 1, 0, 2, 7, -1, 0, 0, 0, 0, 0}),
                              random_f32({5, 4}, 7)),
              [](const auto& t) { return scatter_add(t[0], 0, t[1], t[2]); });
  // layer_norm with 1 to 3 inputs and 1 to all normalized dims.
  tensor_case("layer_norm_x", bufs(random_f32({3, 5}, 8)),
              [](const auto& t) { return layer_norm(t[0], 1, Tensor(), Tensor()); });
  tensor_case("layer_norm_weight", bufs(random_f32({2, 3, 4}, 9), random_f32({4}, 10)),
              [](const auto& t) { return t[0].context().record(OpKind::kLayerNorm, {t[0], t[1]},
                                                              {AttrValue::of_int(1), AttrValue::of_float(0.01)}); });
  tensor_case("layer_norm_weight_bias", bufs(random_f32({2, 3, 4}, 11), random_f32({3, 4}, 12), random_f32({3, 4}, 13)),
              [](const auto& t) { return layer_norm(t[0], 2, t[1], t[2]); });
  tensor_case("layer_norm_all_dims", bufs(random_f32({3, 4}, 14), random_f32({3, 4}, 15), random_f32({3, 4}, 16)),
              [](const auto& t) { return layer_norm(t[0], 2, t[1], t[2], 1e-3); });
  tensor_case("softmax", bufs(random_f32({3, 5}, 17)), [](const auto& t) { return softmax(t[0], -1); });
  tensor_case("softmax_axis0", bufs(random_f32({4, 2, 3}, 18)), [](const auto& t) { return softmax(t[0], 0); });
  tensor_case("log_softmax", bufs(random_f32({3, 5}, 19)), [](const auto& t) { return log_softmax(t[0], 1); });
  tensor_case("log_softmax_middle", bufs(random_f32({2, 4, 3}, 20)), [](const auto& t) { return log_softmax(t[0], -2); });
  // Attention: plain, causal with Lq < Lk and Lq > Lk, a custom scale, masks (full and broadcast).
  tensor_case("attention", bufs(random_f32({2, 3, 4}, 21), random_f32({2, 5, 4}, 22), random_f32({2, 5, 3}, 23)),
              [](const auto& t) { return scaled_dot_product_attention(t[0], t[1], t[2]); });
  tensor_case("attention_causal_lq_lt_lk",
              bufs(random_f32({2, 2, 3, 4}, 24), random_f32({2, 2, 5, 4}, 25), random_f32({2, 2, 5, 3}, 26)),
              [](const auto& t) { return scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), true); });
  tensor_case("attention_causal_lq_gt_lk_scale", bufs(random_f32({5, 4}, 27), random_f32({3, 4}, 28), random_f32({3, 2}, 29)),
              [](const auto& t) { return scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), true, 0.7); });
  tensor_case("attention_mask_scale",
              bufs(random_f32({2, 3, 4}, 30), random_f32({2, 5, 4}, 31), random_f32({2, 5, 3}, 32), random_f32({2, 3, 5}, 33)),
              [](const auto& t) { return scaled_dot_product_attention(t[0], t[1], t[2], t[3], false, 1.5); });
  tensor_case("attention_broadcast_mask_causal",
              bufs(random_f32({2, 2, 4, 3}, 34), random_f32({2, 2, 4, 3}, 35), random_f32({2, 2, 4, 5}, 36), random_f32({2, 1, 4}, 37)),
              [](const auto& t) { return scaled_dot_product_attention(t[0], t[1], t[2], t[3], true); });
  return cases;
}

TEST(GradNnOps, EveryRuleMatchesADirectionalFiniteDifference) {
  for (const FdCase& c : fd_cases()) check_directional(c);
}

// Only the wanted inputs get work: a rule asked for dv alone still gives the right dv.
TEST(GradNnOps, AttentionGivesOnlyTheWantedGradients) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  Tensor q = ctx.from_buffer(random_f32({3, 4}, 1));
  Tensor k = ctx.from_buffer(random_f32({5, 4}, 2));
  Tensor v = ctx.from_buffer(random_f32({5, 2}, 3)).set_requires_grad(true);
  Tensor y = scaled_dot_product_attention(q, k, v, Tensor(), true);
  std::vector<Tensor> dv = grad(sum(y), {v});
  // sum over the outputs: dv[j] = sum_i P[i, j] for every column; the causal rows sum to 1 each.
  ctx.mark_step();
  const std::vector<float> got = dv[0].to_vector<float>();
  double total = 0;
  for (float x : got) total += x;
  EXPECT_NEAR(total, 3 * 2, 1e-5);
  EXPECT_EQ(got[8], 0.0f);  // key 4 is after every query: no probability, no gradient
  EXPECT_EQ(got[6], 0.0f);  // key 3 too (queries 0..2)
}

// layer_norm asked for the weight and bias alone gives the same values as asked for all three.
TEST(GradNnOps, LayerNormGivesOnlyTheWantedGradients) {
  auto grads_of = [](bool with_x) {
    ReferenceExecutor reference;
    LazyContext ctx(&reference);
    Tensor x = ctx.from_buffer(random_f32({3, 4}, 1));
    Tensor w = ctx.from_buffer(random_f32({4}, 2)).set_requires_grad(true);
    Tensor b = ctx.from_buffer(random_f32({4}, 3)).set_requires_grad(true);
    if (with_x) x.set_requires_grad(true);
    Tensor y = layer_norm(x, 1, w, b);
    Tensor loss = sum(mul(y, ctx.from_buffer(random_f32({3, 4}, 4))));
    std::vector<Tensor> g = with_x ? grad(loss, {w, b, x}) : grad(loss, {w, b});
    ctx.mark_step();
    return std::vector<std::vector<float>>{g[0].to_vector<float>(), g[1].to_vector<float>()};
  };
  EXPECT_EQ(grads_of(false), grads_of(true));
}

// ---- eager == lazy on a tiny transformer block --------------------------------------------------

struct Block {
  std::vector<float> emb = random_values(7 * 8, 1), ln_w = random_values(8, 2, 0.5f, 1.5f), ln_b = random_values(8, 3),
                     wq = random_values(8 * 8, 4), wk = random_values(8 * 8, 5), wv = random_values(8 * 8, 6),
                     wo = random_values(8 * 8, 7), head = random_values(8 * 7, 8);
};

// Token ids -> embedding -> layer_norm -> causal self-attention (2 heads) + residual -> logits ->
// log_softmax -> the targets' log-probabilities gathered; loss = -mean. Also a softmax over the
// logits enters the loss (its entropy-like term), so every rule of this file runs.
std::vector<std::vector<float>> block_grads(LazyContext& ctx, const Block& m) {
  Tensor tokens = ctx.from_buffer(test::i64({2, 5}, {1, 3, 3, 6, 0, 2, 2, 5, 1, 4}));
  Tensor targets = ctx.from_buffer(test::i64({2, 5, 1}, {3, 3, 6, 0, 1, 2, 5, 1, 4, 4}));
  std::vector<Tensor> params = {
      ctx.from_buffer(test::f32({7, 8}, m.emb)),  ctx.from_buffer(test::f32({8}, m.ln_w)),
      ctx.from_buffer(test::f32({8}, m.ln_b)),    ctx.from_buffer(test::f32({8, 8}, m.wq)),
      ctx.from_buffer(test::f32({8, 8}, m.wk)),   ctx.from_buffer(test::f32({8, 8}, m.wv)),
      ctx.from_buffer(test::f32({8, 8}, m.wo)),   ctx.from_buffer(test::f32({8, 7}, m.head))};
  for (Tensor& p : params) p.set_requires_grad(true);
  Tensor x = embedding(params[0], tokens);                        // [2, 5, 8]
  Tensor h = layer_norm(x, 1, params[1], params[2]);
  auto heads = [&](const Tensor& w) { return permute(reshape(matmul(h, w), {2, 5, 2, 4}), {0, 2, 1, 3}); };
  Tensor a = scaled_dot_product_attention(heads(params[3]), heads(params[4]), heads(params[5]), Tensor(), true);
  Tensor merged = reshape(permute(a, {0, 2, 1, 3}), {2, 5, 8});
  Tensor r = add(x, matmul(merged, params[6]));
  Tensor logits = matmul(r, params[7]);                           // [2, 5, 7]
  Tensor logp = log_softmax(logits, -1);
  Tensor picked = gather(logp, 2, targets);                       // [2, 5, 1]
  Tensor p = softmax(logits, -1);
  Tensor loss = sub(mul(mean(mul(p, logp)), 0.1), mean(picked));
  std::vector<Tensor> g = grad(loss, params);
  ctx.mark_step();
  std::vector<std::vector<float>> out;
  for (const Tensor& t : g) out.push_back(t.to_vector<float>());
  return out;
}

TEST(GradNnOps, TinyTransformerBlockEagerEqualsLazyOnCpu) {
  Block m;
  CpuBackend cpu;
  Runtime runtime(&cpu, /*db=*/nullptr, /*metrics=*/nullptr);
  LazyContext lazy(&runtime);
  const std::vector<std::vector<float>> want = block_grads(lazy, m);
  ReferenceExecutor unused;
  CpuOpRunner runner;
  LazyOptions options;
  options.eager = &runner;
  LazyContext eager(&unused, options);
  const std::vector<std::vector<float>> got = block_grads(eager, m);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    bool nonzero = false;
    for (size_t k = 0; k < got[i].size(); ++k) {
      EXPECT_EQ(got[i][k], want[i][k]) << "parameter " << i << " element " << k;
      nonzero |= want[i][k] != 0;
    }
    EXPECT_TRUE(nonzero) << "parameter " << i << " gets a gradient";
  }
}

}  // namespace
}  // namespace tracecache
