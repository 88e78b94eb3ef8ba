// The gradients of the nn layers (capture/ops/grad_nn_layers.h):
//  - the cpu kernels of the gradient primitives (replay/backends/cpu/cpu_grad_nn_layers.h) against
//    their reference kernels on varied attributes: bitwise for the pools, within the GEMM
//    bound for the conv2d gradients;
//  - each rule against a directional finite difference of its forward op (f32, central
//    differences with eps = 1e-2 on the reference executor; inputs away from max_pool2d's ties),
//    independent of any other implementation;
//  - a small conv net's gradients in eager mode and lazy mode on the cpu backend, and against
//    the reference executor.
// Against PyTorch: tests/grad/cases_nn_layers.py (the harness of tests/grad/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/eager_runner.h"
#include "replay/backends/cpu/onednn_conv.h"
#include "replay/backends/sim/sim_backend.h"
#include "capture/ir/graph.h"
#include "capture/ir/hash.h"
#include "capture/ops/ops.h"
#include "capture/reference/reference.h"
#include "capture/trace/autograd.h"
#include "capture/trace/nn.h"
#include "replay/compile/compiler.h"
#include "replay/engine/runtime.h"
#include "tests/backend_compare.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

AttrValue ints(IntList v) { return AttrValue::of_ints(std::move(v)); }
AttrValue num(int64_t v) { return AttrValue::of_int(v); }
AttrValue flag(bool v) { return AttrValue::of_bool(v); }

std::vector<float> uniform_values(int64_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

// Values from {-1, 0, 1, 2}: many ties in every pooling window.
std::vector<float> tie_values(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(static_cast<int>(gen() % 4) - 1);
  return v;
}

// ---- primitives: cpu against reference ------------------------------------------------------------

struct PrimitiveCase {
  OpKind op;
  std::vector<HostBuffer> inputs;
  std::vector<AttrValue> attrs;  // positional, one per declared attribute
  int64_t gemm_terms = 0;        // 0: compared bitwise; else the GEMM bound with this K
};

// Computes node `node` of `g` from `in` into `out`.
using RunNode = std::function<void(const Graph& g, NodeId node, std::span<const HostBuffer* const> in, HostBuffer& out)>;

// Runs `c` through the reference and `run` (by default cpu::run_op) and compares them.
void check_primitive(const PrimitiveCase& c, const RunNode& run = {}) {
  const OpInfo& op = op_info(c.op);
  std::vector<TensorType> types;
  for (const HostBuffer& b : c.inputs) types.push_back({b.dtype(), b.shape()});
  std::vector<AttrValue> attrs = c.attrs;
  Result<TensorType> type = infer_op(c.op, types, attrs);
  ASSERT_TRUE(type.is_ok()) << op.name << ": " << type.status().message();
  Graph g;
  std::vector<NodeId> ids;
  for (const TensorType& t : types) ids.push_back(g.add_parameter(t));
  const NodeId node = g.add_node(c.op, ids, attrs, *type);
  std::vector<const HostBuffer*> in;
  for (const HostBuffer& b : c.inputs) in.push_back(&b);
  HostBuffer want(type->dtype, type->shape);
  op.reference(in, g.attrs(g.node(node)), want);
  HostBuffer got(type->dtype, type->shape);
  for (float& v : got.span<float>()) v = 12345.0f;  // every element must be written
  if (run) {
    run(g, node, in, got);
  } else {
    cpu::run_op(g, node, in, got);
  }
  const std::string what = std::string(op.name) + " -> " + type_to_string(*type);
  if (c.gemm_terms == 0) {
    EXPECT_TRUE(testing::same_bits(got, want)) << what;
    return;
  }
  std::vector<HostBuffer> abs_inputs;
  std::vector<const HostBuffer*> abs_in;
  for (const HostBuffer& b : c.inputs) {
    HostBuffer a = b.clone();
    for (float& v : a.span<float>()) v = std::fabs(v);
    abs_inputs.push_back(std::move(a));
  }
  for (const HostBuffer& b : abs_inputs) abs_in.push_back(&b);
  HostBuffer abs_ref(type->dtype, type->shape);
  op.reference(abs_in, g.attrs(g.node(node)), abs_ref);
  EXPECT_TRUE(testing::within_gemm_bound(got, want, abs_ref, c.gemm_terms)) << what;
}

struct ConvConfig {
  Shape x, w;
  IntList stride, padding, dilation;
  int64_t groups;
};

const std::vector<ConvConfig>& conv_configs() {
  static const std::vector<ConvConfig> configs = {
      {{2, 4, 7, 7}, {6, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 2},
      {{1, 3, 8, 9}, {4, 3, 3, 2}, {1, 2}, {2, 1}, {2, 2}, 1},
      {{2, 4, 6, 6}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4},   // depthwise, 2 per channel
      {{2, 5, 9, 7}, {5, 1, 5, 3}, {2, 1}, {2, 1}, {1, 3}, 5},   // depthwise
      {{2, 3, 5, 5}, {4, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},   // 1x1 direct
      {{1, 6, 4, 5}, {6, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 3},   // 1x1 direct, grouped
      {{3, 2, 11, 4}, {3, 2, 4, 4}, {3, 1}, {0, 2}, {2, 1}, 1},  // output rows skip input rows
      {{1, 2, 3, 3}, {2, 2, 3, 3}, {4, 4}, {1, 1}, {1, 1}, 1},   // stride larger than the input
      {{1, 1, 40, 40}, {2, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1}, // 1600 output positions
      {{2, 16, 9, 9}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},  // oneDNN's blocked kernels
      {{3, 16, 10, 10}, {16, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 16}, // depthwise 16, strided
      {{2, 64, 6, 6}, {64, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 32},   // 32 groups (ResNeXt-like)
      {{2, 8, 12, 12}, {16, 8, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},   // 1x1 stride 2 (downsample)
      {{2, 3, 13, 11}, {4, 3, 3, 3}, {3, 2}, {2, 1}, {1, 3}, 1},    // last window short of the padding
      {{0, 3, 5, 5}, {2, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},      // empty batch
      {{1, 3, 4, 4}, {0, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},      // no output channels
  };
  return configs;
}

// Runs conv2d_input_grad and conv2d_weight_grad of every config through `run` (default
// cpu::run_op) against the reference, within the GEMM bound.
void check_conv_gradients(const RunNode& run = {}) {
  uint64_t seed = 1;
  for (const ConvConfig& k : conv_configs()) {
    std::vector<AttrValue> conv_attrs = {ints(k.stride), ints(k.padding), ints(k.dilation), num(k.groups)};
    Result<TensorType> y = infer_op(OpKind::kConv2d, std::vector<TensorType>{{DType::kF32, k.x}, {DType::kF32, k.w}},
                                    conv_attrs);
    ASSERT_TRUE(y.is_ok()) << y.status().message();
    const Shape& gs = y->shape;
    HostBuffer g = test::f32(gs, uniform_values(gs.numel(), seed++));
    HostBuffer w = test::f32(k.w, uniform_values(k.w.numel(), seed++));
    HostBuffer x = test::f32(k.x, uniform_values(k.x.numel(), seed++));
    PrimitiveCase input_grad{OpKind::kConv2dInputGrad, {}, conv_attrs,
                             std::max<int64_t>((k.w[0] / k.groups) * k.w[2] * k.w[3], 1)};
    input_grad.inputs.push_back(g.clone());
    input_grad.inputs.push_back(std::move(w));
    input_grad.attrs.push_back(ints({k.x[2], k.x[3]}));
    check_primitive(input_grad, run);
    PrimitiveCase weight_grad{OpKind::kConv2dWeightGrad, {}, conv_attrs, std::max<int64_t>(gs[0] * gs[2] * gs[3], 1)};
    weight_grad.inputs.push_back(std::move(g));
    weight_grad.inputs.push_back(std::move(x));
    weight_grad.attrs.push_back(ints({k.w[2], k.w[3]}));
    check_primitive(weight_grad, run);
  }
}

TEST(GradNnCpu, ConvGradientsMatchReference) { check_conv_gradients(); }

// The same through oneDNN's backward primitives (replay/backends/cpu/onednn_conv.h), as executables and
// eager mode run them: every config with something to compute is computed by oneDNN (groups,
// depthwise, strides, dilation, padding, batches, pointwise), within the same bound; the empty
// ones are declined (the builtin kernel's zeros).
TEST(GradNnCpu, ConvGradientsOnOneDnnMatchReference) {
  cpu::OneDnnConvs convs;
  size_t computed = 0, declined = 0;
  check_conv_gradients([&](const Graph& g, NodeId node, std::span<const HostBuffer* const> in, HostBuffer& out) {
    EXPECT_TRUE(onednn_conv_grad_node(g, g.node(node)));
    const bool empty = out.numel() == 0 || in[0]->numel() == 0 || in[1]->numel() == 0;
    const bool done = convs.run(hash_graph(g), g, node, in, nullptr, out);
    EXPECT_EQ(done, !empty) << op_info(g.node(node).op).name << " " << type_to_string({DType::kF32, in[0]->shape()})
                            << " " << type_to_string({DType::kF32, in[1]->shape()});
    ++(done ? computed : declined);
    if (!done) cpu::run_op(g, node, in, out);
  });
  EXPECT_EQ(computed, 2 * (conv_configs().size() - 2));
  EXPECT_EQ(declined, 4u);
}

// A graph of both gradients of one convolution (params grad_out, weight, x; outputs dx, dw):
// the cpu backend's executable marks both kernels oneDNN (CompileOptions::onednn_conv_grad),
// its outputs equal sim's and eager mode's (which run the same primitives) bitwise and the
// reference within the GEMM bound. The empty batch is declined by oneDNN at run time and the
// executable's kernels fall back to the builtin ones (zeros for dw).
TEST(GradNnCpu, ConvGradientExecutablesRunOneDnnLikeEagerAndSim) {
  const std::vector<ConvConfig> configs = {
      {{2, 8, 9, 9}, {16, 4, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 2},
      {{3, 6, 7, 8}, {6, 1, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 6},  // depthwise, dilated
      {{0, 3, 5, 5}, {2, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},  // empty batch: the fallback
  };
  uint64_t seed = 300;
  for (const ConvConfig& k : configs) {
    std::vector<AttrValue> conv_attrs = {ints(k.stride), ints(k.padding), ints(k.dilation), num(k.groups)};
    const Shape gs = infer_op(OpKind::kConv2d, std::vector<TensorType>{{DType::kF32, k.x}, {DType::kF32, k.w}},
                              conv_attrs)
                         .value_or_throw()
                         .shape;
    std::vector<AttrValue> in_attrs = conv_attrs, w_attrs = conv_attrs;
    in_attrs.push_back(ints({k.x[2], k.x[3]}));
    w_attrs.push_back(ints({k.w[2], k.w[3]}));
    const std::vector<BufferRef> params = {testing::filled(DType::kF32, gs, seed++),
                                           testing::filled(DType::kF32, k.w, seed++),
                                           testing::filled(DType::kF32, k.x, seed++)};
    Graph g;
    std::vector<NodeId> p;
    for (const BufferRef& b : params) p.push_back(g.add_parameter({DType::kF32, b->shape()}));
    const TensorType dx_type{DType::kF32, k.x}, dw_type{DType::kF32, k.w};
    const NodeId dx = g.add_node(OpKind::kConv2dInputGrad, std::vector<NodeId>{p[0], p[1]}, in_attrs, dx_type);
    const NodeId dw = g.add_node(OpKind::kConv2dWeightGrad, std::vector<NodeId>{p[0], p[2]}, w_attrs, dw_type);
    g.add_output(dx);
    g.add_output(dw);
    const std::string what = type_to_string(dx_type) + " " + type_to_string(dw_type);

    CpuBackend cpu;
    const Executable exe = cpu.compile(g, hash_graph(g), cpu.compiler_version()).value_or_throw();
    ASSERT_TRUE(exe.validate().is_ok()) << exe.validate().to_string();
    size_t onednn = 0;
    for (const Kernel& kern : exe.kernel_plan()->kernels) onednn += kern.library == Kernel::Library::kOneDnn;
    EXPECT_EQ(onednn, 2u) << what;

    const std::vector<BufferRef> got = testing::run_on(cpu, g, params);
    SimBackend sim(*find_device_preset("a100"));
    const std::vector<BufferRef> on_sim = testing::run_on(sim, g, params);
    CpuOpRunner eager;
    const std::vector<BufferRef> eager_out = {
        eager.run_op(OpKind::kConv2dInputGrad, std::vector<BufferRef>{params[0], params[1]}, in_attrs, dx_type)
            .value_or_throw(),
        eager.run_op(OpKind::kConv2dWeightGrad, std::vector<BufferRef>{params[0], params[2]}, w_attrs, dw_type)
            .value_or_throw()};
    for (size_t o = 0; o < 2; ++o) {
      EXPECT_TRUE(testing::same_bits(*on_sim[o], *got[o])) << what << " output " << o << ": sim vs cpu";
      EXPECT_TRUE(testing::same_bits(*eager_out[o], *got[o])) << what << " output " << o << ": eager vs cpu";
      const NodeId node = g.outputs()[o];
      const Node& n = g.node(node);
      const std::vector<const HostBuffer*> in = {params[0].get(), params[o + 1].get()};
      HostBuffer want(n.dtype, n.shape);
      op_info(n.op).reference(in, g.attrs(n), want);
      HostBuffer abs0 = params[0]->clone(), abs1 = params[o + 1]->clone();
      for (float& v : abs0.span<float>()) v = std::fabs(v);
      for (float& v : abs1.span<float>()) v = std::fabs(v);
      HostBuffer abs_ref(n.dtype, n.shape);
      op_info(n.op).reference(std::vector<const HostBuffer*>{&abs0, &abs1}, g.attrs(n), abs_ref);
      const int64_t terms = o == 0 ? k.w[0] / k.groups * k.w[2] * k.w[3] : gs[0] * gs[2] * gs[3];
      EXPECT_TRUE(testing::within_gemm_bound(*got[o], want, abs_ref, std::max<int64_t>(terms, 1)))
          << what << " output " << o;
    }
  }
}

struct PoolConfig {
  Shape x;
  IntList kernel, stride, padding, dilation;
  bool ceil_mode, count_include_pad;
};

TEST(GradNnCpu, PoolGradientsMatchReferenceBitwise) {
  const std::vector<PoolConfig> configs = {
      {{2, 3, 6, 6}, {2, 2}, {}, {0, 0}, {1, 1}, false, true},
      {{1, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true},
      {{1, 2, 7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false},
      {{2, 1, 9, 8}, {2, 3}, {1, 2}, {1, 1}, {2, 2}, true, false},
      {{1, 3, 5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false, false},  // overlapping windows
      {{1, 1, 4, 4}, {4, 4}, {4, 4}, {2, 2}, {1, 1}, true, true},
      // rows wider than a vector with a remainder, as the cpu's max_pool2d_grad scans them
      {{2, 2, 9, 45}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, false},
  };
  uint64_t seed = 100;
  for (const PoolConfig& k : configs) {
    for (int specials : {0, 1, 2}) {
      std::vector<float> xv = tie_values(k.x.numel(), seed++);
      if (specials == 1) {  // NaN and infinities in max_pool2d's windows
        xv[0] = std::numeric_limits<float>::quiet_NaN();
        xv[xv.size() / 2] = -std::numeric_limits<float>::infinity();
        xv[xv.size() - 1] = std::numeric_limits<float>::infinity();
      } else if (specials == 2) {  // all -inf: each window's first cell inside the input gets it
        std::fill(xv.begin(), xv.end(), -std::numeric_limits<float>::infinity());
      }
      HostBuffer x = test::f32(k.x, xv);
      std::vector<AttrValue> max_attrs = {ints(k.kernel), ints(k.stride), ints(k.padding), ints(k.dilation),
                                          flag(k.ceil_mode)};
      Result<TensorType> y = infer_op(OpKind::kMaxPool2d, std::vector<TensorType>{{DType::kF32, k.x}}, max_attrs);
      ASSERT_TRUE(y.is_ok()) << y.status().message();
      PrimitiveCase max_grad{OpKind::kMaxPool2dGrad, {}, max_attrs};
      max_grad.inputs.push_back(test::f32(y->shape, uniform_values(y->shape.numel(), seed++)));
      max_grad.inputs.push_back(std::move(x));
      check_primitive(max_grad);
    }
    std::vector<AttrValue> avg_attrs = {ints(k.kernel), ints(k.stride), ints(k.padding), flag(k.ceil_mode),
                                        flag(k.count_include_pad)};
    Result<TensorType> y = infer_op(OpKind::kAvgPool2d, std::vector<TensorType>{{DType::kF32, k.x}}, avg_attrs);
    ASSERT_TRUE(y.is_ok()) << y.status().message();
    PrimitiveCase avg_grad{OpKind::kAvgPool2dGrad, {},
                           {ints(k.kernel), ints(k.stride), ints(k.padding), flag(k.count_include_pad),
                            ints({k.x[2], k.x[3]})}};
    avg_grad.inputs.push_back(test::f32(y->shape, uniform_values(y->shape.numel(), seed++)));
    check_primitive(avg_grad);
  }
  const std::vector<std::pair<Shape, IntList>> adaptive = {
      {{2, 3, 5, 7}, {3, 2}}, {{1, 2, 4, 4}, {4, 4}}, {{1, 1, 3, 10}, {5, 3}}, {{2, 2, 6, 6}, {1, 1}}};
  for (const auto& [x, size] : adaptive) {
    const Shape gs{x[0], x[1], size[0], size[1]};
    PrimitiveCase c{OpKind::kAdaptiveAvgPool2dGrad, {}, {ints({x[2], x[3]})}};
    c.inputs.push_back(test::f32(gs, uniform_values(gs.numel(), seed++)));
    check_primitive(c);
  }
}

TEST(GradNnInference, ShapesAndErrors) {
  auto infer = [](OpKind op, std::vector<TensorType> in, std::vector<AttrValue> attrs) {
    return infer_op(op, in, attrs);
  };
  const TensorType g{DType::kF32, {2, 6, 4, 4}};
  Result<TensorType> dx = infer(OpKind::kConv2dInputGrad, {g, {DType::kF32, {6, 2, 3, 3}}},
                                {ints({2}), ints({1}), ints({1}), num(2), ints({7, 8})});
  ASSERT_TRUE(dx.is_ok()) << dx.status().message();
  EXPECT_EQ(dx->shape, (Shape{2, 4, 7, 8}));
  // An input size conv2d does not map onto grad_out's plane.
  Result<TensorType> bad = infer(OpKind::kConv2dInputGrad, {g, {DType::kF32, {6, 2, 3, 3}}},
                                 {ints({2}), ints({1}), ints({1}), num(2), ints({9, 8})});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("op 'conv2d_input_grad'"), std::string::npos);
  Result<TensorType> dw = infer(OpKind::kConv2dWeightGrad, {g, {DType::kF32, {2, 4, 7, 8}}},
                                {ints({2}), ints({1}), ints({1}), num(2), ints({3})});
  ASSERT_TRUE(dw.is_ok()) << dw.status().message();
  EXPECT_EQ(dw->shape, (Shape{6, 2, 3, 3}));
  EXPECT_FALSE(infer(OpKind::kConv2dWeightGrad, {g, {DType::kF32, {2, 5, 7, 8}}},
                     {ints({2}), ints({1}), ints({1}), num(2), ints({3})})
                   .is_ok());  // 5 channels, groups 2
  // avg_pool2d_grad takes the floor or the ceil_mode plane.
  for (int64_t out : {4, 5}) {
    Result<TensorType> da = infer(OpKind::kAvgPool2dGrad, {{DType::kF32, {1, 1, out, out}}},
                                  {ints({3}), ints({2}), ints({1}), flag(true), ints({8, 8})});
    ASSERT_TRUE(da.is_ok()) << da.status().message();
    EXPECT_EQ(da->shape, (Shape{1, 1, 8, 8}));
  }
  EXPECT_FALSE(infer(OpKind::kAvgPool2dGrad, {{DType::kF32, {1, 1, 6, 6}}},
                     {ints({3}), ints({2}), ints({1}), flag(true), ints({8, 8})})
                   .is_ok());
  EXPECT_FALSE(infer(OpKind::kMaxPool2dGrad, {{DType::kF32, {1, 1, 2, 2}}, {DType::kF32, {1, 1, 6, 6}}},
                     {ints({2}), ints({}), ints({0}), ints({1}), flag(false)})
                   .is_ok());  // the pool's output is 3x3
  Result<TensorType> dp = infer(OpKind::kAdaptiveAvgPool2dGrad, {{DType::kF32, {2, 3, 2, 2}}}, {ints({5})});
  ASSERT_TRUE(dp.is_ok()) << dp.status().message();
  EXPECT_EQ(dp->shape, (Shape{2, 3, 5, 5}));
}

// ---- rules: directional finite differences ---------------------------------------------------

struct FdCase {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Tensor(const std::vector<Tensor>&)> forward;
  // Per input: values in [lo, hi); `spaced` gives distinct values 0.05 apart (no max_pool2d
  // window changes its maximum under the +-eps perturbation).
  std::vector<std::pair<float, float>> ranges = {};
  bool spaced = false;
};

std::vector<float> input_values(const FdCase& c, size_t i, uint64_t seed) {
  const int64_t n = c.shapes[i].numel();
  if (c.spaced) {
    std::vector<float> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), 0.0f);
    std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
    for (float& x : v) x = x * 0.05f - static_cast<float>(n) * 0.025f;
    return v;
  }
  const auto [lo, hi] = i < c.ranges.size() ? c.ranges[i] : std::pair<float, float>{-1, 1};
  return uniform_values(n, seed, lo, hi);
}

// sum(forward(inputs) * r) on the reference executor, and its gradients when `grads`.
double weighted_loss(const FdCase& c, const std::vector<std::vector<float>>& values, std::vector<std::vector<float>>* grads) {
  ReferenceExecutor reference;
  LazyContext ctx(&reference);
  std::vector<Tensor> in;
  for (size_t i = 0; i < values.size(); ++i) {
    in.push_back(ctx.from_buffer(test::f32(c.shapes[i], values[i])).set_requires_grad(grads != nullptr));
  }
  Tensor y = c.forward(in);
  Tensor r = ctx.from_buffer(test::f32(y.shape(), uniform_values(y.shape().numel(), 999)));
  Tensor loss = sum(mul(y, r));
  std::vector<Tensor> g;
  if (grads) g = grad(loss, std::span<const Tensor>(in));
  ctx.mark_step();
  if (grads) {
    for (const Tensor& t : g) grads->push_back(t.to_vector<float>());
  }
  return loss.item();
}

TEST(GradNnRules, DirectionalFiniteDifferencesMatch) {
  using T = std::vector<Tensor>;
  const Tensor none;
  const std::vector<FdCase> cases = {
      {"conv2d_stride2_pad1_groups2", {{2, 4, 7, 7}, {6, 2, 3, 3}, {6}},
       [](const T& t) { return conv2d(t[0], t[1], t[2], {2, 2}, {1, 1}, {1, 1}, 2); }},
      {"conv2d_dilated_no_bias", {{1, 3, 8, 9}, {4, 3, 3, 2}},
       [&](const T& t) { return conv2d(t[0], t[1], none, {1, 2}, {2, 1}, {2, 2}, 1); }},
      {"conv2d_depthwise", {{2, 4, 6, 6}, {8, 1, 3, 3}, {8}},
       [](const T& t) { return conv2d(t[0], t[1], t[2], {1, 1}, {1, 1}, {1, 1}, 4); }},
      {"conv2d_1x1", {{2, 3, 5, 5}, {4, 3, 1, 1}, {4}}, [](const T& t) { return conv2d(t[0], t[1], t[2]); }},
      {"max_pool2d_pad_ceil", {{1, 2, 7, 7}},
       [](const T& t) { return max_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}, {1, 1}, true); }, {}, true},
      {"max_pool2d_dilated", {{2, 1, 9, 8}},
       [](const T& t) { return max_pool2d(t[0], {2, 3}, {1, 2}, {1, 1}, {2, 2}, true); }, {}, true},
      {"avg_pool2d_exclude_pad_ceil", {{1, 2, 7, 8}},
       [](const T& t) { return avg_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}, true, false); }},
      {"avg_pool2d_include_pad", {{1, 2, 7, 8}},
       [](const T& t) { return avg_pool2d(t[0], {3, 2}, {2, 1}, {1, 1}, false, true); }},
      {"adaptive_avg_pool2d", {{2, 3, 5, 7}}, [](const T& t) { return adaptive_avg_pool2d(t[0], {3, 2}); }},
      {"linear_3d", {{2, 3, 4}, {5, 4}, {5}}, [](const T& t) { return linear(t[0], t[1], t[2]); }},
      {"linear_1d_no_bias", {{4}, {3, 4}}, [](const T& t) { return linear(t[0], t[1]); }},
      {"flatten", {{2, 3, 4}}, [](const T& t) { return mul(flatten(t[0], 1), flatten(t[0], 1)); }},
      {"pad_crop_value", {{2, 3, 4}}, [](const T& t) { return mul(pad(t[0], {1, 2, -1, 1}, 0.5), pad(t[0], {1, 2, -1, 1}, 0.5)); }},
      {"batch_norm", {{2, 3, 4, 5}, {3}, {3}, {3}, {3}},
       [](const T& t) { return batch_norm(t[0], t[1], t[2], t[3], t[4], 1e-3); },
       {{-1, 1}, {-0.5f, 0.5f}, {0.5f, 1.5f}, {-1, 1}, {-1, 1}}},
  };
  constexpr double kEps = 1e-2;
  uint64_t seed = 7;
  for (const FdCase& c : cases) {
    std::vector<std::vector<float>> values, dir;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      values.push_back(input_values(c, i, seed++));
      dir.push_back(uniform_values(c.shapes[i].numel(), seed++));
    }
    std::vector<std::vector<float>> grads;
    weighted_loss(c, values, &grads);
    ASSERT_EQ(grads.size(), values.size()) << c.name;
    double analytic = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      for (size_t k = 0; k < values[i].size(); ++k) analytic += double(dir[i][k]) * grads[i][k];
    }
    auto shifted = [&](double s) {
      std::vector<std::vector<float>> moved = values;
      for (size_t i = 0; i < moved.size(); ++i) {
        for (size_t k = 0; k < moved[i].size(); ++k) moved[i][k] += static_cast<float>(s * dir[i][k]);
      }
      return weighted_loss(c, moved, nullptr);
    };
    const double numeric = (shifted(kEps) - shifted(-kEps)) / (2 * kEps);
    // The rules are exact; the tolerance covers f32 rounding of the shifted inputs and losses
    // (about 1e-6 |loss| / eps) and batch_norm's curvature in var (O(eps^2)).
    EXPECT_NEAR(analytic, numeric, 2e-3 * std::max(1.0, std::fabs(numeric))) << c.name;
  }
}

// ---- a small conv net: eager == lazy ---------------------------------------------------------------

struct NetGrads {
  float loss;
  std::vector<std::vector<float>> grads;
};

// conv - batch_norm (eval) - relu - max_pool2d - avg_pool2d - flatten - linear, loss = mean of
// squares; gradients for the input and every parameter.
NetGrads conv_net(LazyContext& ctx) {
  const Shape shapes[] = {{2, 3, 10, 10}, {4, 3, 3, 3}, {4}, {4}, {4}, {4}, {4}, {5, 36}, {5}};
  std::vector<Tensor> p;
  uint64_t seed = 50;
  for (const Shape& s : shapes) {
    const bool var = p.size() == 4;
    p.push_back(ctx.from_buffer(test::f32(s, uniform_values(s.numel(), seed++, var ? 0.5f : -1, var ? 1.5f : 1)))
                    .set_requires_grad(true));
  }
  Tensor h = conv2d(p[0], p[1], p[2], {1, 1}, {1, 1});
  h = relu(batch_norm(h, p[3], p[4], p[5], p[6]));
  h = max_pool2d(h, {2, 2}, {}, {0, 0}, {1, 1}, false);
  h = avg_pool2d(h, {3, 3}, {2, 2}, {1, 1}, true, false);
  h = linear(flatten(h, 1), p[7], p[8]);
  Tensor loss = mean(mul(h, h));
  std::vector<Tensor> g = grad(loss, std::span<const Tensor>(p));
  ctx.mark_step();
  NetGrads r{static_cast<float>(loss.item()), {}};
  for (const Tensor& t : g) r.grads.push_back(t.to_vector<float>());
  return r;
}

TEST(GradNnLazy, ConvNetEagerEqualsLazy) {
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  LazyContext lazy(&runtime);
  const NetGrads a = conv_net(lazy);
  EXPECT_TRUE(runtime.warnings().empty()) << runtime.warnings().front();  // no fallback
  CpuOpRunner runner;
  LazyOptions eager_options;
  eager_options.eager = &runner;
  ReferenceExecutor unused;
  LazyContext eager(&unused, eager_options);
  const NetGrads b = conv_net(eager);
  ReferenceExecutor reference;
  LazyContext ref_ctx(&reference);
  const NetGrads c = conv_net(ref_ctx);
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.grads.size(), 9u);
  ASSERT_EQ(b.grads.size(), 9u);
  ASSERT_EQ(c.grads.size(), 9u);
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_EQ(a.grads[i].size(), b.grads[i].size());
    double scale = 0;
    for (float v : c.grads[i]) scale = std::max(scale, double(std::fabs(v)));
    for (size_t k = 0; k < a.grads[i].size(); ++k) {
      EXPECT_EQ(a.grads[i][k], b.grads[i][k]) << "input " << i << " element " << k;
      // The cpu GEMMs sum in f32 in another order than the reference.
      EXPECT_NEAR(a.grads[i][k], c.grads[i][k], 1e-4 * (1 + scale)) << "input " << i << " element " << k;
    }
  }
}

}  // namespace
}  // namespace tracecache
