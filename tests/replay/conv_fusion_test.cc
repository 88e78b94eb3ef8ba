// Convolution epilogues (replay/compile/compiler.h, replay/backends/cpu/onednn_conv.h): which conv2d,
// batch_norm and elementwise nodes the compiler puts into one oneDNN kernel, that the fused
// kernel computes bitwise what the kernels one by one compute (and stays near the reference
// evaluator), that sim equals cpu, and that the fusion record survives serialization while a
// tampered one is refused (docs/architecture.md invariants 4 and 5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/sim/device_spec.h"
#include "replay/backends/sim/sim_backend.h"
#include "capture/reference/reference.h"
#include "capture/trace/nn.h"
#include "capture/trace/recording_executor.h"
#include "replay/compile/compiler.h"
#include "replay/compile/executable.h"
#include "tests/backend_compare.h"

namespace tracecache {
namespace {

using testing::filled;
using testing::run_on;
using testing::same_bits;

// The tensors a case builds on: x [2, 8, 6, 6], a 3x3 weight (8 -> 8, or depthwise), a bias,
// batch_norm statistics and affine of 8 channels, and a residual of the output's shape.
struct Inputs {
  Tensor x, w, w_depthwise, b, mean, var, gamma, beta, residual;
};

CanonicalGraph graph_of(const std::function<std::vector<Tensor>(const Inputs&)>& build) {
  RecordingExecutor exec;
  LazyContext ctx(&exec);
  auto t = [&](Shape s) { return ctx.from_buffer(HostBuffer(DType::kF32, s)); };
  Inputs in{t({2, 8, 6, 6}), t({8, 8, 3, 3}), t({8, 1, 3, 3}), t({8}), t({8}), t({8}), t({8}), t({8}),
            t({2, 8, 6, 6})};
  {
    std::vector<Tensor> keep = build(in);
    ctx.mark_step();
  }
  return exec.graphs().at(0).graph;
}

// Deterministic parameters: values in [-2, 2), running variances positive, one NaN in x (a
// relu after it must still propagate it, as the unfused kernels do).
std::vector<BufferRef> params_of(const Graph& g) {
  std::vector<BufferRef> params;
  for (size_t p = 0; p < g.params().size(); ++p) {
    const Node& n = g.node(g.params()[p]);
    params.push_back(filled(n.dtype, n.shape, 100 + p));
  }
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op == OpKind::kBatchNorm) {
      const auto ps = g.params();
      const size_t var = static_cast<size_t>(std::find(ps.begin(), ps.end(), g.inputs(n)[2]) - ps.begin());
      auto positive = std::make_shared<HostBuffer>(params.at(var)->clone());
      for (int64_t i = 0; i < positive->numel(); ++i) positive->data<float>()[i] = std::fabs(positive->data<float>()[i]) + 0.5f;
      params[var] = positive;
    }
    if (n.op == OpKind::kConv2d) {
      const auto ps = g.params();
      const size_t x = static_cast<size_t>(std::find(ps.begin(), ps.end(), g.inputs(n)[0]) - ps.begin());
      if (x < params.size()) {
        auto with_nan = std::make_shared<HostBuffer>(params[x]->clone());
        with_nan->data<float>()[5] = std::nanf("");
        params[x] = with_nan;
      }
    }
  }
  return params;
}

Executable compile_cpu(const CanonicalGraph& g, bool fuse = true) {
  CompileOptions o;
  o.fuse = fuse;
  o.onednn_conv = true;
  return compile_graph(g.graph, g.key, "cpu", "digest", o);
}

// The oneDNN fused kernels' member ops.
std::vector<std::vector<OpKind>> conv_kernels(const Executable& e) {
  std::vector<std::vector<OpKind>> out;
  for (const Kernel& k : e.kernel_plan()->kernels) {
    if (k.kind != Kernel::Kind::kFused || k.library != Kernel::Library::kOneDnn) continue;
    std::vector<OpKind> ops;
    for (NodeId m : k.members) ops.push_back(e.graph.node(m).op);
    out.push_back(ops);
  }
  return out;
}

// A copy of each parameter: a run that updates one in place (a donation) overwrites it.
std::vector<BufferRef> copies_of(const std::vector<BufferRef>& params) {
  std::vector<BufferRef> c;
  for (const BufferRef& p : params) c.push_back(std::make_shared<HostBuffer>(p->clone()));
  return c;
}

// `g`'s outputs on cpu with fusion, without (the kernels one by one) and on sim, each run on its
// own copy of `params`.
struct ThreeRuns {
  std::vector<BufferRef> fused, unfused, simmed;
};
ThreeRuns run_fused_unfused_sim(const Graph& g, const std::vector<BufferRef>& params) {
  CpuBackend fused_cpu, unfused_cpu(CpuBackendOptions{.fuse = false});
  SimBackend sim(*find_device_preset("a100"));
  return {run_on(fused_cpu, g, copies_of(params)), run_on(unfused_cpu, g, copies_of(params)),
          run_on(sim, g, copies_of(params))};
}

// Runs `g` on cpu with fusion and without (the kernels one by one), on sim, and on the reference
// evaluator: fused == unfused == sim bitwise; near the reference (the conv2d sums in another
// order: a loose relative bound, the exact conv2d bound is nn_layers_test's).
void expect_same_as_unfused(const CanonicalGraph& g) {
  const std::vector<BufferRef> params = params_of(g.graph);
  const auto [fused, unfused, simmed] = run_fused_unfused_sim(g.graph, params);
  Result<std::vector<BufferRef>> ref = evaluate_reference(g.graph, params);
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t o = 0; o < fused.size(); ++o) {
    EXPECT_TRUE(same_bits(*fused[o], *unfused[o])) << "output " << o;
    EXPECT_TRUE(same_bits(*simmed[o], *fused[o])) << "output " << o;
    const HostBuffer& want = *(*ref)[o];
    int nans = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const float got = fused[o]->data<float>()[i], r = want.data<float>()[i];
      nans += std::isnan(r);
      EXPECT_EQ(std::isnan(got), std::isnan(r)) << "output " << o << " element " << i;
      if (!std::isnan(r)) {
        EXPECT_NEAR(got, r, 1e-4 * (1 + std::fabs(r))) << "output " << o << " element " << i;
      }
    }
    EXPECT_GT(nans, 0) << "the NaN in x reaches output " << o;
  }
}

TEST(ConvFusion, ConvBiasReluIsOneKernel) {
  CanonicalGraph g = graph_of([](const Inputs& in) {
    return std::vector<Tensor>{relu(conv2d(in.x, in.w, in.b, {1, 1}, {1, 1}))};
  });
  const Executable e = compile_cpu(g);
  ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
  EXPECT_EQ(conv_kernels(e), (std::vector<std::vector<OpKind>>{{OpKind::kConv2d, OpKind::kRelu}}));
  EXPECT_EQ(e.kernel_plan()->kernels.size(), 1u);
  EXPECT_EQ(e.kernel_plan()->arena_bytes, 0u) << "the conv2d's value is never materialized";
  EXPECT_TRUE(conv_kernels(compile_cpu(g, /*fuse=*/false)).empty());
  expect_same_as_unfused(g);
}

TEST(ConvFusion, ConvBatchNormResidualAddReluIsOneKernel) {
  CanonicalGraph g = graph_of([](const Inputs& in) {
    Tensor y = batch_norm(conv2d(in.x, in.w, Tensor(), {1, 1}, {1, 1}), in.mean, in.var, in.gamma, in.beta);
    return std::vector<Tensor>{relu(add(y, in.residual))};
  });
  const Executable e = compile_cpu(g);
  ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
  EXPECT_EQ(conv_kernels(e), (std::vector<std::vector<OpKind>>{
                                 {OpKind::kConv2d, OpKind::kBatchNorm, OpKind::kAdd, OpKind::kRelu}}));
  expect_same_as_unfused(g);
}

TEST(ConvFusion, DepthwiseAndGroupedConvolutionsFuse) {
  CanonicalGraph g = graph_of([](const Inputs& in) {
    Tensor depthwise = batch_norm(conv2d(in.x, in.w_depthwise, Tensor(), {2, 2}, {1, 1}, {1, 1}, 8), in.mean,
                                  in.var, in.gamma, in.beta);
    Tensor grouped = batch_norm(conv2d(in.x, slice(in.w, 1, 0, 2), in.b, {1, 1}, {2, 2}, {2, 2}, 4), in.beta,
                                in.var, in.mean, in.gamma);
    return std::vector<Tensor>{hardswish(depthwise), relu(grouped)};
  });
  const Executable e = compile_cpu(g);
  ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
  EXPECT_EQ(conv_kernels(e).size(), 2u);
  expect_same_as_unfused(g);
}

// A value that is also an output (or used twice) stays materialized: the conv2d's output here,
// so nothing fuses into it; the batch_norm's in the second graph, so the kernel stops there.
TEST(ConvFusion, OutputsAndSharedValuesStopTheEpilogue) {
  CanonicalGraph conv_out = graph_of([](const Inputs& in) {
    Tensor c = conv2d(in.x, in.w, in.b, {1, 1}, {1, 1});
    return std::vector<Tensor>{relu(c), c};
  });
  Executable e = compile_cpu(conv_out);
  ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
  EXPECT_TRUE(conv_kernels(e).empty());
  expect_same_as_unfused(conv_out);

  CanonicalGraph bn_out = graph_of([](const Inputs& in) {
    Tensor y = batch_norm(conv2d(in.x, in.w, Tensor(), {1, 1}, {1, 1}), in.mean, in.var, in.gamma, in.beta);
    return std::vector<Tensor>{relu(y), y};
  });
  e = compile_cpu(bn_out);
  ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
  EXPECT_EQ(conv_kernels(e), (std::vector<std::vector<OpKind>>{{OpKind::kConv2d, OpKind::kBatchNorm}}));
  expect_same_as_unfused(bn_out);
}

// Two convolutions added (a residual block's downsample): one conv2d per kernel.
TEST(ConvFusion, OneConvolutionPerKernel) {
  CanonicalGraph g = graph_of([](const Inputs& in) {
    Tensor a = batch_norm(conv2d(in.x, in.w, Tensor(), {1, 1}, {1, 1}), in.mean, in.var, in.gamma, in.beta);
    Tensor b = batch_norm(conv2d(in.residual, in.w, Tensor(), {1, 1}, {1, 1}), in.var, in.var, in.beta, in.gamma);
    return std::vector<Tensor>{relu(add(a, b))};
  });
  const Executable e = compile_cpu(g);
  ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
  const auto kernels = conv_kernels(e);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0], (std::vector<OpKind>{OpKind::kConv2d, OpKind::kBatchNorm}));
  EXPECT_EQ(kernels[1], (std::vector<OpKind>{OpKind::kConv2d, OpKind::kBatchNorm, OpKind::kAdd, OpKind::kRelu}));
  expect_same_as_unfused(g);
}

// oneDNN writes each convolution in a layout of its choosing (NCHW for a 1x1 GEMM, strided or not,
// NHWC, channel blocks of 4, 8 or 16; which one depends on the shape and the CPU), reordered to
// NCHW before the epilogue reads it back: for shapes like ResNeXt's, MobileNet's and a
// stem's, every epilogue form (batch_norm alone; with relu; with a residual add and relu; a
// chain ending in a cast to another dtype) is bitwise the kernels one by one, and sim's.
TEST(ConvFusion, EveryLayoutOneDnnChoosesGivesTheUnfusedBits) {
  struct Case {
    Shape x, w;
    int64_t stride, padding, groups;
  };
  const std::vector<Case> cases = {
      {{2, 64, 10, 10}, {128, 64, 1, 1}, 1, 0, 1},  // pointwise: a GEMM on NCHW
      {{2, 64, 20, 20}, {128, 64, 1, 1}, 2, 0, 1},  // strided: a GEMM on the gathered pixels
      {{1, 64, 8, 8}, {128, 64, 1, 1}, 2, 0, 1},    // strided, batch 1, a small plane: gathered
      {{2, 64, 8, 8}, {128, 64, 1, 1}, 1, 0, 1},    // a batch on a small plane: oneDNN's layout
      {{2, 64, 8, 8}, {128, 64, 1, 1}, 2, 0, 1},    // strided, likewise
      {{2, 128, 8, 8}, {128, 4, 3, 3}, 1, 1, 32},   // ResNeXt's groups of 4 channels
      {{2, 256, 8, 8}, {256, 8, 3, 3}, 2, 1, 32},   // of 8, strided
      {{2, 512, 6, 6}, {512, 16, 3, 3}, 1, 1, 32},  // of 16
      {{2, 1024, 4, 4}, {1024, 32, 3, 3}, 1, 1, 32},
      {{2, 3, 16, 16}, {64, 3, 7, 7}, 2, 3, 1},     // a stem
      {{2, 32, 9, 9}, {32, 1, 3, 3}, 1, 1, 32},     // depthwise
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    RecordingExecutor exec;
    LazyContext ctx(&exec);
    auto t = [&](Shape s) { return ctx.from_buffer(HostBuffer(DType::kF32, s)); };
    const int64_t o = k.w[0];
    const int64_t oh = (k.x[2] + 2 * k.padding - k.w[2]) / k.stride + 1;
    Tensor x = t(k.x), mean = t({o}), var = t({o}), gamma = t({o}), beta = t({o});
    Tensor residual = t({k.x[0], o, oh, oh});
    {
      // A weight per convolution: the same conv2d twice would be one node used four times.
      std::vector<Tensor> w;
      for (int i = 0; i < 4; ++i) w.push_back(t(k.w));
      auto conv = [&](int i) {
        return conv2d(x, w[i], Tensor(), {k.stride, k.stride}, {k.padding, k.padding}, {1, 1}, k.groups);
      };
      auto bn = [&](const Tensor& y) { return batch_norm(y, mean, var, gamma, beta); };
      std::vector<Tensor> keep = {bn(conv(0)), relu(bn(conv(1))), relu(add(bn(conv(2)), residual)),
                                  cast(relu(conv(3)), DType::kI32)};
      ctx.mark_step();
    }
    const CanonicalGraph g = exec.graphs().at(0).graph;
    const Executable e = compile_cpu(g);
    ASSERT_TRUE(e.validate().is_ok()) << e.validate().to_string();
    ASSERT_EQ(conv_kernels(e).size(), 4u) << "case " << c;
    const auto [fused, unfused, simmed] = run_fused_unfused_sim(g.graph, params_of(g.graph));
    ASSERT_EQ(fused.size(), 4u);
    for (size_t i = 0; i < fused.size(); ++i) {
      EXPECT_TRUE(same_bits(*fused[i], *unfused[i])) << "case " << c << " output " << i;
      EXPECT_TRUE(same_bits(*simmed[i], *fused[i])) << "case " << c << " output " << i;
    }
  }
}

// The fusion record is part of the executable: it survives serialization, and every tampering
// below is refused like any corrupt executable.
TEST(ConvFusion, RecordRoundTripsAndTamperingIsRefused) {
  CanonicalGraph g = graph_of([](const Inputs& in) {
    Tensor y = batch_norm(conv2d(in.x, in.w, Tensor(), {1, 1}, {1, 1}), in.mean, in.var, in.gamma, in.beta);
    return std::vector<Tensor>{relu(add(y, in.residual))};
  });
  const Executable exe = compile_cpu(g);
  Result<Executable> back = parse_executable(serialize_executable(exe));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->kernel_plan()->kernels, exe.kernel_plan()->kernels);
  EXPECT_EQ(back->kernel_plan()->slots, exe.kernel_plan()->slots);

  auto fused_kernel = [](Executable& e) -> Kernel& {
    for (Kernel& k : e.kernel_plan()->kernels) {
      if (k.library == Kernel::Library::kOneDnn) return k;
    }
    throw std::runtime_error("no oneDNN kernel");
  };
  const std::vector<std::function<void(Executable&)>> tamperings = {
      // the conv2d in a builtin elementwise kernel
      [&](Executable& e) { fused_kernel(e).library = Kernel::Library::kBuiltin; },
      // the batch_norm before its conv2d
      [&](Executable& e) { std::swap(fused_kernel(e).members[0], fused_kernel(e).members[1]); },
      // the chain without its batch_norm (the add would read the conv2d)
      [&](Executable& e) { fused_kernel(e).members.erase(fused_kernel(e).members.begin() + 1); },
      // the batch_norm moved into the chain
      [&](Executable& e) { std::swap(fused_kernel(e).members[1], fused_kernel(e).members[2]); },
      // a kernel of the conv2d alone that still claims fused members
      [&](Executable& e) {
        Kernel& k = fused_kernel(e);
        k.members.resize(1);
        k.root = k.members[0];
      },
  };
  for (size_t t = 0; t < tamperings.size(); ++t) {
    Executable tampered = exe;
    tamperings[t](tampered);
    EXPECT_EQ(tampered.validate().code(), StatusCode::kCorruption) << "tampering " << t;
    EXPECT_EQ(parse_executable(serialize_executable(tampered)).status().code(), StatusCode::kCorruption)
        << "tampering " << t;
  }
}

// Compiles `g`, a step with one donation (an in-place update) and one convolution epilogue, into
// *e, checking both.
void compile_update(const CanonicalGraph& g, Executable* e) {
  ASSERT_EQ(g.graph.donations().size(), 1u);
  *e = compile_cpu(g);
  ASSERT_TRUE(e->validate().is_ok()) << e->validate().to_string();
  ASSERT_EQ(conv_kernels(*e).size(), 1u);
}

// A donated output whose chain reads the donated parameter (elementwise, so the donation stands:
// r <- r + relu(batch_norm(conv2d(x)))) is written in place; the conv2d's value must not land in
// r's storage before the chain has read r. fused == unfused == sim bitwise, and near the
// reference.
TEST(ConvFusion, DonatedParameterReadByTheChainIsReadBeforeItIsOverwritten) {
  RecordingExecutor exec;
  LazyContext ctx(&exec);
  auto t = [&](Shape s) { return ctx.from_buffer(HostBuffer(DType::kF32, s)); };
  Tensor x = t({2, 8, 6, 6}), w = t({8, 8, 3, 3}), r = t({2, 8, 6, 6});
  Tensor mean = t({8}), var = t({8}), gamma = t({8}), beta = t({8});
  ctx.assign(r, add(r, relu(batch_norm(conv2d(x, w, Tensor(), {1, 1}, {1, 1}), mean, var, gamma, beta))));
  ctx.mark_step();
  const CanonicalGraph g = exec.graphs().at(0).graph;
  Executable e;
  ASSERT_NO_FATAL_FAILURE(compile_update(g, &e));
  const NodeId root = g.graph.outputs()[0];
  ASSERT_EQ(e.kernel_plan()->slots[root].kind, Slot::Kind::kDonated) << "the case must write in place";

  const std::vector<BufferRef> params = params_of(g.graph);
  const ThreeRuns runs = run_fused_unfused_sim(g.graph, params);
  const BufferRef fused = runs.fused.at(0), unfused = runs.unfused.at(0), simmed = runs.simmed.at(0);
  Result<std::vector<BufferRef>> ref = evaluate_reference(g.graph, copies_of(params));
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  EXPECT_TRUE(same_bits(*fused, *unfused));
  EXPECT_TRUE(same_bits(*simmed, *fused));
  const HostBuffer& want = *(*ref)[0];
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float got = fused->data<float>()[i], expect = want.data<float>()[i];
    if (std::isnan(expect)) {
      EXPECT_TRUE(std::isnan(got)) << "element " << i;
    } else {
      EXPECT_NEAR(got, expect, 1e-4 * (1 + std::fabs(expect))) << "element " << i;
    }
  }
}

// A donated output may not be written over a parameter the conv2d reads whole: the update
// x <- relu(conv2d(x)) keeps its own output buffer.
TEST(ConvFusion, NoDonationIntoTheConvolutionsInput) {
  RecordingExecutor exec;
  LazyContext ctx(&exec);
  Tensor x = ctx.from_buffer(HostBuffer(DType::kF32, {1, 4, 5, 5}));
  Tensor w = ctx.from_buffer(HostBuffer(DType::kF32, {4, 4, 3, 3}));
  ctx.assign(x, relu(conv2d(x, w, Tensor(), {1, 1}, {1, 1})));
  ctx.mark_step();
  const CanonicalGraph g = exec.graphs().at(0).graph;
  Executable e;
  ASSERT_NO_FATAL_FAILURE(compile_update(g, &e));
  for (const Slot& s : e.kernel_plan()->slots) EXPECT_NE(s.kind, Slot::Kind::kDonated);
  Executable tampered = e;
  for (Slot& s : tampered.kernel_plan()->slots) {
    if (s.kind == Slot::Kind::kOutput) s.kind = Slot::Kind::kDonated;
  }
  EXPECT_EQ(tampered.validate().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace tracecache
