// Every registered backend against the reference evaluator on every op of the registry
// (docs/architecture.md, "Backend interface"; STYLE: every backend is tested against the
// reference on every op):
//  - the backends are the registry's (replay/backends/registry/registry.h), each in every configuration its
//    entry lists (cpu; sim on every device preset): a backend registered without being
//    runnable here fails;
//  - the cases are found by searching input types and attribute values each op's inference rule
//    accepts, so an op added to the registry is covered without touching this file, and an op
//    without a case fails;
//  - each case is a one-op graph compiled and run by the backend: bitwise equal to the reference
//    (any NaN matching any NaN), except the BLAS ops (f32 matmul, linear, conv2d and its
//    gradients conv2d_input_grad, conv2d_weight_grad, and conv_transpose2d: the GEMM bound
//    of cpu_kernels.h / cpu_nn_layers.h; scaled_dot_product_attention: the bound of
//    cpu_nn_ops.h; erf and gelu's erf form: the erf bound of cpu_kernels.h, libmvec's vector
//    erf), and bitwise equal between all backends (sim computes with the cpu kernels);
//  - a backend that declines an op: the Runtime never compiles that graph and runs it on the
//    reference with a `fallback` event; the registry's names and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/registry/registry.h"
#include "capture/ops/attr_views.h"
#include "capture/ops/elementwise.h"
#include "capture/ops/ops.h"
#include "capture/reference/reference.h"
#include "replay/backends/cpu/eager_runner.h"
#include "replay/compile/widen.h"
#include "replay/engine/runtime.h"
#include "tests/attention_bound.h"
#include "tests/backend_compare.h"

namespace tracecache {
namespace {

using testing::filled;
using testing::run_on;
using testing::same_bits;
using testing::within_gemm_bound;

struct OpCase {
  std::vector<TensorType> inputs;
  std::vector<AttrValue> attrs;
};

// Candidate operand types. Square and NCHW-like shapes let matmul, conv, pooling, attention and
// the norms find a valid combination; [2] and [3] serve as bias, statistics and index vectors.
std::vector<TensorType> candidate_types(std::initializer_list<DType> dtypes = {DType::kF32, DType::kI64, DType::kBool}) {
  const std::vector<Shape> shapes = {{}, {2}, {3}, {2, 3}, {3, 3}, {2, 3, 3}, {2, 2, 4, 4}, {2, 2, 3, 3}};
  std::vector<TensorType> types;
  for (DType d : dtypes) {
    for (const Shape& s : shapes) types.push_back({d, s});
  }
  return types;
}

// Attribute variants: the defaults, then every list attribute set to one candidate list.
// `dtypes`: the values a dtype attribute (a source op's result type) also takes.
std::vector<std::vector<AttrValue>> attr_variants(const OpInfo& op, std::span<const DType> dtypes = {}) {
  std::vector<AttrValue> defaults;
  for (const AttrSpec& spec : op.attrs) defaults.push_back(spec.default_value);
  std::vector<std::vector<AttrValue>> variants = {defaults};
  for (size_t a = 0; a < defaults.size(); ++a) {
    if (op.attrs[a].kind != AttrKind::kDType) continue;
    for (DType d : dtypes) {
      std::vector<AttrValue> v = defaults;
      v[a] = AttrValue::of_dtype(d);
      variants.push_back(std::move(v));
    }
  }
  for (IntList list : {IntList{-1}, IntList{1, 0}, IntList{2, 2}, IntList{1, 1}}) {
    std::vector<AttrValue> v = defaults;
    bool changed = false;
    for (size_t a = 0; a < v.size(); ++a) {
      if (op.attrs[a].kind == AttrKind::kInts) {
        v[a] = AttrValue::of_ints(list);
        changed = true;
      }
    }
    if (changed) variants.push_back(std::move(v));
    // Only the first list attribute (a pool's kernel), the others at their defaults.
    for (size_t a = 0; a < defaults.size(); ++a) {
      if (op.attrs[a].kind != AttrKind::kInts) continue;
      std::vector<AttrValue> first = defaults;
      first[a] = AttrValue::of_ints(list);
      variants.push_back(std::move(first));
      break;
    }
  }
  // The gradient primitives' input plane: one that conv2d and the pools map onto the candidate
  // planes (6x6 -> 3x3 or 4x4).
  if (const int size = op.attr_index("input_size"); size >= 0) {
    const size_t n = variants.size();
    for (size_t k = 0; k < n; ++k) {
      std::vector<AttrValue> v = variants[k];
      v[static_cast<size_t>(size)] = AttrValue::of_ints({6, 6});
      variants.push_back(std::move(v));
    }
  }
  return variants;
}

// Up to `limit` input/attribute combinations that `op`'s inference rule accepts. Inputs past
// the second share one type (biases, statistics), which keeps the search small.
// `types`: the candidate operand types; `wanted`: whether a case (its inputs and inferred output
// type) is one to keep.
std::vector<OpCase> find_cases(
    const OpInfo& op, size_t limit, const std::vector<TensorType>& types = candidate_types(),
    const std::function<bool(const std::vector<TensorType>&, const TensorType&)>& wanted = {},
    std::span<const DType> dtype_attrs = {}) {
  std::vector<OpCase> found;
  const int max_inputs = op.max_inputs == kVariadic ? std::max(op.min_inputs, 2) : op.max_inputs;
  auto accepts = [&](const std::vector<TensorType>& in, std::vector<AttrValue> attrs) {
    Result<TensorType> type = infer_op(op.kind, in, attrs);
    if (!type.is_ok() || (wanted && !wanted(in, *type))) return false;
    found.push_back({in, std::move(attrs)});
    return true;
  };
  for (const std::vector<AttrValue>& attrs : attr_variants(op, dtype_attrs)) {
    for (int arity = op.min_inputs; arity <= max_inputs; ++arity) {
      const size_t n0 = arity >= 1 ? types.size() : 1, n1 = arity >= 2 ? types.size() : 1,
                   n2 = arity >= 3 ? types.size() : 1;
      for (size_t a = 0; a < n0 && found.size() < limit; ++a) {
        for (size_t b = 0; b < n1 && found.size() < limit; ++b) {
          for (size_t c = 0; c < n2 && found.size() < limit; ++c) {
            std::vector<TensorType> in;
            for (int k = 0; k < arity; ++k) in.push_back(types[k == 0 ? a : k == 1 ? b : c]);
            accepts(in, attrs);
          }
        }
      }
      if (found.size() >= limit) return found;
    }
  }
  return found;
}

// The reduction length K of a GEMM-like op's output elements.
int64_t gemm_k(OpKind kind, const std::vector<TensorType>& in) {
  const Shape& a = in[0].shape;
  const Shape& w = in[1].shape;
  switch (kind) {
    case OpKind::kMatmul: return a[a.rank() - 1];
    case OpKind::kLinear: return w[1];
    // conv2d's gradients: out channels (an upper bound of those per group) x kernel, and the
    // images x output positions
    case OpKind::kConv2dInputGrad: return w[0] * w[2] * w[3];
    case OpKind::kConv2dWeightGrad: return a[0] * a[2] * a[3];
    // conv_transpose2d (conv2d_input_grad, weight [C, O / groups, kh, kw]) and its bias
    case OpKind::kConvTranspose2d: return w[1] * w[2] * w[3] + 1;
    default: return w[1] * w[2] * w[3];  // conv2d: in channels x kernel
  }
}

// The GEMM-like ops, whose f32 results are within the GEMM bound of the reference's.
bool gemm_op(OpKind op) {
  return op == OpKind::kMatmul || op == OpKind::kLinear || op == OpKind::kConv2d || op == OpKind::kConv2dInputGrad ||
         op == OpKind::kConv2dWeightGrad || op == OpKind::kConvTranspose2d;
}

// A one-op graph: `op` on parameters of types `inputs`, their values from fill(k, type), its
// attributes normalized and its result type inferred.
struct OneOpGraph {
  Graph graph;
  std::vector<BufferRef> params;
  std::vector<AttrValue> attrs;
  TensorType type;
};
OneOpGraph one_op_graph(OpKind op, const std::vector<TensorType>& inputs, std::vector<AttrValue> attrs,
                        const std::function<BufferRef(size_t, const TensorType&)>& fill) {
  OneOpGraph r;
  std::vector<NodeId> ids;
  for (size_t k = 0; k < inputs.size(); ++k) {
    ids.push_back(r.graph.add_parameter(inputs[k]));
    r.params.push_back(fill(k, inputs[k]));
  }
  r.type = infer_op(op, inputs, attrs).value_or_throw();
  r.attrs = std::move(attrs);
  r.graph.add_output(r.graph.add_node(op, ids, r.attrs, r.type));
  return r;
}

// Checks a backend's outputs against the reference's for one case; the tolerances of the
// header comment.
void expect_matches_reference(const OpInfo& op, const Graph& g, std::span<const BufferRef> params,
                              const std::vector<BufferRef>& got, const std::vector<BufferRef>& want,
                              const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const Node& node = g.node(g.outputs()[0]);
  const bool gemm = node.dtype == DType::kF32 && gemm_op(op.kind);
  if (gemm) {
    std::vector<BufferRef> abs_params;
    for (const BufferRef& p : params) {
      HostBuffer a = p->clone();
      if (a.dtype() == DType::kF32) {
        for (float& e : a.span<float>()) e = std::fabs(e);
      }
      abs_params.push_back(std::make_shared<const HostBuffer>(std::move(a)));
    }
    std::vector<BufferRef> abs_ref = std::move(evaluate_reference(g, abs_params)).value_or_throw();
    std::vector<TensorType> in;
    for (NodeId id : g.inputs(node)) in.push_back(g.node(id).type());
    EXPECT_TRUE(within_gemm_bound(*got[0], *want[0], *abs_ref[0], gemm_k(op.kind, in))) << what;
  } else if (op.kind == OpKind::kScaledDotProductAttention) {
    const std::span<const AttrValue> a = g.attrs(node);
    EXPECT_TRUE(testing::within_attention_bound(*got[0], *want[0], *params[0], *params[1], *params[2],
                                                params.size() > 3 ? params[3].get() : nullptr,
                                                a[0].as_bool(), a[1].f))
        << what;
  } else if (op.kind == OpKind::kErf || (op.kind == OpKind::kGelu && !GeluAttrs(g.attrs(node)).tanh())) {
    EXPECT_TRUE(testing::within_erf_bound(*got[0], *want[0], *params[0], op.kind == OpKind::kGelu)) << what;
  } else {
    for (size_t o = 0; o < got.size(); ++o) EXPECT_TRUE(same_bits(*got[o], *want[o])) << what;
  }
}

class EveryBackend : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryBackend, MatchesTheReferenceOnEveryOp) {
  const OpInfo* op = find_op(GetParam());
  ASSERT_NE(op, nullptr);
  // The quantization ops take i8/u8 operands, which no other op needs here.
  const bool quantization = op->kind == OpKind::kQuantizeLinear || op->kind == OpKind::kDequantizeLinear;
  const std::vector<OpCase> cases =
      quantization ? find_cases(*op, 4, candidate_types({DType::kF32, DType::kU8, DType::kI8})) : find_cases(*op, 4);
  ASSERT_FALSE(cases.empty()) << "no operand types found for '" << op->name
                              << "': extend candidate_types() / attr_variants() in this file";
  const BackendRegistry& registry = default_backend_registry();
  uint64_t seed = 1;
  for (const OpCase& c : cases) {
    const OneOpGraph one = one_op_graph(op->kind, c.inputs, c.attrs,
                                        [&](size_t, const TensorType& t) { return filled(t.dtype, t.shape, seed++); });
    const Graph& g = one.graph;
    const std::vector<BufferRef>& params = one.params;
    const std::vector<BufferRef> want = std::move(evaluate_reference(g, params)).value_or_throw();
    std::vector<BufferRef> first;  // the first backend's outputs: every other must equal them
    std::string first_spec;
    for (const BackendEntry& entry : registry.entries()) {
      for (const std::string& spec : entry.conformance_specs) {
        std::unique_ptr<Backend> backend = std::move(registry.create(spec)).value_or_throw();
        ASSERT_TRUE(backend->supports(g.node(g.outputs()[0])))
            << spec << " declines " << op->name << ": give it a fallback test instead";
        const std::vector<BufferRef> got = run_on(*backend, g, params);
        const std::string what = spec + ": " + g.to_text();
        expect_matches_reference(*op, g, params, got, want, what);
        if (first.empty()) {
          first = got;
          first_spec = spec;
          continue;
        }
        ASSERT_EQ(got.size(), first.size()) << what;
        for (size_t o = 0; o < got.size(); ++o) {
          EXPECT_TRUE(same_bits(*got[o], *first[o])) << what << " vs " << first_spec;
        }
      }
    }
  }
}

// ---- the storage types: bf16, f16, i8, u8 and i16 ------------------------------------------
// cpu and sim hold them and compute every op but `cast` on them in f32 or i32 between casts
// (replay/compile/widen.h), compiled and eager. Each op's cases with a storage type, run by every
// backend compiled (and through an executable's encoding, which stores only that it was widened)
// and by the cpu eager runner:
//  - bitwise equal to the reference, which computes a half op in f32 and rounds once and the
//    small integers in their own C++ types;
//  - for the ops whose f32 result is within a bound of the reference (the GEMM ops, attention,
//    erf) and a half output: the backend's own f32 result on the widened operands, rounded once,
//    bit for bit (the f32 result is checked against the reference by the test above).

// Values for a storage-type case: halves in [-2, 2), integers 0 and 1 (valid indices of every
// candidate shape, and no integer division by zero either way), bools at random.
BufferRef storage_filled(DType dtype, const Shape& shape, uint64_t seed) {
  auto b = std::make_shared<HostBuffer>(dtype, shape);
  std::mt19937_64 gen(seed);
  for (int64_t i = 0; i < b->numel(); ++i) {
    const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53;
    dispatch_dtype(dtype, [&]<typename T>() {
      if constexpr (std::is_same_v<T, bool>) {
        b->data<T>()[i] = u < 0.5;
      } else if constexpr (std::is_integral_v<T>) {
        b->data<T>()[i] = static_cast<T>(u < 0.5 ? 0 : 1);
      } else {
        b->data<T>()[i] = convert<T>(u * 4.0 - 2.0);
      }
    });
  }
  return b;
}

BufferRef cast_buffer(const HostBuffer& b, DType to) {
  HostBuffer out(to, b.shape());
  const HostBuffer* in = &b;
  const AttrValue a = AttrValue::of_dtype(to);
  evaluate_op(OpKind::kCast, std::span(&in, 1), std::span(&a, 1), out);
  return std::make_shared<const HostBuffer>(std::move(out));
}

bool bounded_op(OpKind op) {
  return gemm_op(op) || op == OpKind::kScaledDotProductAttention || op == OpKind::kErf || op == OpKind::kGelu;
}

bool touches_storage(const std::vector<TensorType>& in, const TensorType& out) {
  return storage_dtype(out.dtype) ||
         std::any_of(in.begin(), in.end(), [](const TensorType& t) { return storage_dtype(t.dtype); });
}

std::vector<OpCase> storage_cases(const OpInfo& op) {
  static constexpr DType kStorage[] = {DType::kBF16, DType::kF16, DType::kI8, DType::kU8, DType::kI16};
  return find_cases(op, 4,
                    candidate_types({DType::kBF16, DType::kF16, DType::kI8, DType::kU8, DType::kI16, DType::kI64,
                                     DType::kBool}),
                    touches_storage, kStorage);
}

TEST_P(EveryBackend, ComputesTheStorageTypesWidened) {
  const OpInfo* op = find_op(GetParam());
  ASSERT_NE(op, nullptr);
  const BackendRegistry& registry = default_backend_registry();
  uint64_t seed = 1;
  for (const OpCase& c : storage_cases(*op)) {
    const OneOpGraph one = one_op_graph(
        op->kind, c.inputs, c.attrs, [&](size_t, const TensorType& t) { return storage_filled(t.dtype, t.shape, seed++); });
    const Graph& g = one.graph;
    const std::vector<BufferRef>& params = one.params;
    const TensorType& type = one.type;
    const std::string text = g.to_text();
    // The expected bits: the reference's, or for a bounded op with a half output, the backend's
    // f32 result on the widened operands, rounded once (made per backend below).
    const bool rounded = bounded_op(op->kind) && is_half_float(type.dtype);
    const std::vector<BufferRef> want = std::move(evaluate_reference(g, params)).value_or_throw();
    Graph wide = widen_storage_types(g);
    OneOpGraph f32;  // the op on the widened operands, its result not rounded
    if (rounded) {
      std::vector<TensorType> in32;
      for (const TensorType& t : c.inputs) in32.push_back({widened_dtype(t.dtype), t.shape});
      std::vector<AttrValue> attrs32 = c.attrs;
      widen_dtype_attrs(attrs32, type.dtype);
      f32 = one_op_graph(op->kind, in32, attrs32,
                         [&](size_t k, const TensorType& t) { return cast_buffer(*params[k], t.dtype); });
      ASSERT_EQ(f32.type.dtype, widened_dtype(type.dtype)) << text;
    }
    for (const BackendEntry& entry : registry.entries()) {
      for (const std::string& spec : entry.conformance_specs) {
        std::unique_ptr<Backend> backend = std::move(registry.create(spec)).value_or_throw();
        const std::string what = spec + ": " + text + "widened:\n" + wide.to_text();
        ASSERT_TRUE(backend->supports(g.node(g.outputs()[0]))) << what;
        const BufferRef expected =
            rounded ? cast_buffer(*run_on(*backend, f32.graph, f32.params)[0], type.dtype) : want[0];
        const std::vector<BufferRef> got = run_on(*backend, g, params);
        ASSERT_EQ(got.size(), 1u) << what;
        EXPECT_TRUE(same_bits(*got[0], *expected)) << what;
        // The same executable through its encoding: only `widened` is stored.
        Executable exe = std::move(backend->compile(g, hash_graph(g), backend->compiler_version())).value_or_throw();
        ASSERT_NE(exe.kernel_plan(), nullptr);
        ASSERT_EQ(exe.kernel_plan()->widened(), needs_widening(g)) << what;
        Executable back = std::move(parse_executable(serialize_executable(exe))).value_or_throw();
        EXPECT_EQ(back.kernel_plan()->widened(), exe.kernel_plan()->widened()) << what;
        EXPECT_EQ(back.run_graph().to_text(), exe.run_graph().to_text()) << what;
        if (spec == "cpu") {
          CpuOpRunner eager;
          std::vector<BufferRef> ins(params.begin(), params.end());
          BufferRef e = std::move(eager.run_op(op->kind, ins, one.attrs, type)).value_or_throw();
          EXPECT_TRUE(same_bits(*e, *expected)) << "eager " << what;
        }
      }
    }
  }
}

// Inference takes bf16 or f16 wherever it takes an f32 operand or makes an f32 result by a dtype
// attribute: every such op has a case on a storage type (so the test above covers it).
TEST(StorageTypes, EveryOpWithAFloatCaseHasAStorageCase) {
  std::vector<std::string> missing;
  for (const OpInfo& op : all_ops()) {
    if (op.kind == OpKind::kParameter) continue;
    // An f32 operand, or an f32 result the op's dtype attribute names (dropout_mask, rand_uniform
    // and rand_normal make f32 from integer operands only: a cast follows them).
    const bool names_dtype = std::any_of(op.attrs.begin(), op.attrs.end(),
                                         [](const AttrSpec& a) { return a.kind == AttrKind::kDType; });
    const auto f32 = [&](const std::vector<TensorType>& in, const TensorType& out) {
      return (names_dtype && out.dtype == DType::kF32) ||
             std::any_of(in.begin(), in.end(), [](const TensorType& t) { return t.dtype == DType::kF32; });
    };
    if (!find_cases(op, 1, candidate_types(), f32).empty() && storage_cases(op).empty()) missing.emplace_back(op.name);
  }
  EXPECT_TRUE(missing.empty()) << "no bf16/f16 case: " << fmt::format("{}", fmt::join(missing, ", "));
}

std::vector<std::string> registry_ops() {
  std::vector<std::string> names;
  for (const OpInfo& op : all_ops()) {
    if (op.kind != OpKind::kParameter) names.emplace_back(op.name);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryBackend, ::testing::ValuesIn(registry_ops()),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

TEST(EveryBackend, RegistryHoldsCpuAndEverySimPreset) {
  const BackendRegistry& registry = default_backend_registry();
  std::vector<std::string> specs;
  for (const BackendEntry& e : registry.entries()) {
    specs.insert(specs.end(), e.conformance_specs.begin(), e.conformance_specs.end());
  }
  EXPECT_EQ(specs, (std::vector<std::string>{"cpu", "sim:h100", "sim:a100", "sim:tpu-v4"}));
}

// ---- the registry --------------------------------------------------------------------------

TEST(BackendRegistry, MakesBackendsByName) {
  const BackendRegistry& registry = default_backend_registry();
  std::unique_ptr<Backend> cpu = std::move(registry.create("cpu")).value_or_throw();
  EXPECT_EQ(cpu->display_name(), "cpu");
  EXPECT_EQ(std::move(registry.create("sim")).value_or_throw()->display_name(), "sim:h100");
  EXPECT_EQ(std::move(registry.create("sim:a100")).value_or_throw()->display_name(), "sim:a100");
  EXPECT_EQ(std::move(registry.create("sim:tpu-v4")).value_or_throw()->display_name(), "sim:tpu-v4");
  // Keys do not change: the compiler version every backend reports is today's.
  EXPECT_EQ(cpu->compiler_version(), kCompilerVersion);
}

TEST(BackendRegistry, UnknownNamesAndBadOptionsAreErrors) {
  const BackendRegistry& registry = default_backend_registry();
  Result<std::unique_ptr<Backend>> typo = registry.create("smi");
  ASSERT_FALSE(typo.is_ok());
  EXPECT_EQ(typo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(typo.status().message(),
            "unknown backend 'smi' (available: cpu, sim:PRESET or sim:SPEC_FILE) (did you mean 'sim'?)");
  const std::string also[] = {"reference"};
  EXPECT_EQ(registry.unknown_backend("vulkan", also).message(),
            "unknown backend 'vulkan' (available: cpu, reference, sim:PRESET or sim:SPEC_FILE)");
  Result<std::unique_ptr<Backend>> cpu_options = registry.create("cpu:fast");
  ASSERT_FALSE(cpu_options.is_ok());
  EXPECT_EQ(cpu_options.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(registry.create("sim:no_such_spec_file.spec").is_ok());
}

TEST(BackendRegistry, RefusesDuplicatesAndIncompleteEntries) {
  BackendRegistry registry;
  register_builtin_backends(registry);
  BackendEntry again = *registry.find("cpu");
  EXPECT_EQ(registry.add(again).code(), StatusCode::kInvalidArgument);
  BackendEntry nameless = again;
  nameless.name.clear();
  EXPECT_EQ(registry.add(nameless).code(), StatusCode::kInvalidArgument);
  BackendEntry untested = again;
  untested.name = "cpu2";
  untested.conformance_specs.clear();
  EXPECT_EQ(registry.add(untested).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.entries().size(), 2u);
}

// ---- a backend that declines an op ---------------------------------------------------------

// The cpu backend, except that it declines exp.
class NoExpBackend final : public Backend {
 public:
  std::string_view name() const override { return "noexp"; }
  std::string options_digest() const override { return cpu_.options_digest(); }
  bool supports(const Node& node) const override { return node.op != OpKind::kExp; }
  Result<Executable> compile(const Graph& graph, const GraphKey& key, uint32_t version) override {
    ++compiles;
    Result<Executable> exe = cpu_.compile(graph, key, version);
    if (exe.is_ok()) exe->backend = "noexp";
    return exe;
  }
  std::string serialize(const Executable& exe) override { return cpu_.serialize(exe); }
  Result<Executable> load(std::string_view bytes) override { return parse_executable(bytes); }
  bool shares_host_memory() const override { return true; }
  Result<DeviceRef> to_device(const DataRef& data) override { return cpu_.to_device(data); }
  Result<BufferRef> to_host(const DeviceRef& device) override { return cpu_.to_host(device); }
  Result<std::vector<DeviceRef>> run(const Executable& exe, std::span<const DeviceRef> params) override {
    return cpu_.run(exe, params);
  }
  void synchronize() override {}

  int compiles = 0;

 private:
  CpuBackend cpu_;
};

TEST(BackendSupports, ADeclinedOpFallsBackToTheReferenceWithAnEvent) {
  NoExpBackend backend;
  Runtime runtime(&backend, nullptr, nullptr);
  const TensorType t{DType::kF32, Shape{2, 3}};
  const BufferRef x = filled(DType::kF32, t.shape, 7);

  Graph declined;
  NodeId p = declined.add_parameter(t);
  declined.add_output(declined.add_node(OpKind::kExp, {&p, 1}, {}, t));
  CanonicalGraph cg;
  cg.graph = declined;
  cg.key = hash_graph(declined);
  std::vector<DataRef> got = std::move(runtime.execute(cg, {host_data(x)})).value_or_throw();
  std::vector<BufferRef> want = std::move(evaluate_reference(declined, {&x, 1})).value_or_throw();
  EXPECT_TRUE(same_bits(*std::move(got[0]->read()).value_or_throw(), *want[0]));
  EXPECT_EQ(backend.compiles, 0) << "a declined graph is never compiled";
  ASSERT_FALSE(runtime.events().empty());
  const store::Event& last = runtime.events().back();
  EXPECT_EQ(last.kind, store::EventKind::kFallback);
  EXPECT_EQ(last.reason, "unsupported op");
  EXPECT_NE(last.detail.find("'exp'"), std::string::npos) << last.detail;
  EXPECT_EQ(runtime.warnings().size(), 1u);

  Graph accepted;
  p = accepted.add_parameter(t);
  accepted.add_output(accepted.add_node(OpKind::kNeg, {&p, 1}, {}, t));
  CanonicalGraph ok;
  ok.graph = accepted;
  ok.key = hash_graph(accepted);
  got = std::move(runtime.execute(ok, {host_data(x)})).value_or_throw();
  EXPECT_EQ(backend.compiles, 1) << "the ops it supports still compile";
  EXPECT_EQ(runtime.events().back().kind, store::EventKind::kCompile);
}

}  // namespace
}  // namespace tracecache
