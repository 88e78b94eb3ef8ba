// The ONNX ops the importer decomposes into registry ops (docs/onnx.md's op table), each on a
// one-node model run in lazy mode on the cpu backend and compared with hand-computed values or a
// double-precision reference computed here (the C library's functions, sequential sums and
// products, the ONNX formulas written as loops). The ONNX node tests (ctest onnx.conformance)
// check the same ops against ONNX's NumPy reference; these add the arguments those do not reach:
// tiny and huge arguments of the trigonometric functions, infinities, NaN, empty and odd axes.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <onnx/onnx_pb.h>

#include "capture/core/metrics.h"
#include "frontend/files/npy.h"
#include "frontend/onnx/onnx_importer.h"
#include "frontend/onnx/onnx_tensor.h"
#include "replay/engine/program_session.h"
#include "tests/test_buffers.h"

namespace tracecache {
namespace {

namespace fs = std::filesystem;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A named input value (copyable, for initializer lists).
struct In {
  In(std::string n, HostBuffer b) : name(std::move(n)), buf(std::make_shared<HostBuffer>(std::move(b))) {}
  std::string name;
  std::shared_ptr<const HostBuffer> buf;
};

// A one-node model: `inputs` are graph inputs (fed at run time) unless named in `constants`
// (initializers); the node's outputs are the graph's outputs.
struct OneNode {
  std::string op = {};
  std::vector<In> inputs = {};
  std::vector<std::string> constants = {};
  int outputs = 1;
  std::string domain = {};
  int64_t opset = 13;
  std::function<void(::onnx::NodeProto&)> attrs = [](::onnx::NodeProto&) {};
};

void set_int(::onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
void set_float(::onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void set_ints(::onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void set_string(::onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "onnx-decomp-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Imports and runs `n`; the outputs in order (empty, with a test failure, if anything fails).
std::vector<HostBuffer> run(const OneNode& n) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(n.opset);
  if (!n.domain.empty()) {
    auto* t = m.add_opset_import();
    t->set_domain(n.domain);
    t->set_version(1);
  }
  auto& g = *m.mutable_graph();
  g.set_name("g");
  auto* node = g.add_node();
  node->set_op_type(n.op);
  node->set_domain(n.domain);
  n.attrs(*node);
  for (const In& input : n.inputs) {
    const HostBuffer& buf = *input.buf;
    node->add_input(input.name);
    if (input.name.empty()) continue;
    const bool constant = std::find(n.constants.begin(), n.constants.end(), input.name) != n.constants.end();
    if (constant) {
      auto* t = g.add_initializer();
      t->set_name(input.name);
      t->set_data_type(onnx_import::onnx_from_dtype(buf.dtype()));
      for (int64_t d : buf.shape()) t->add_dims(d);
      t->set_raw_data(std::string(reinterpret_cast<const char*>(buf.bytes()), buf.nbytes()));
      continue;
    }
    auto* vi = g.add_input();
    vi->set_name(input.name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx_import::onnx_from_dtype(buf.dtype()));
    auto* shape = tt->mutable_shape();
    for (int64_t d : buf.shape()) shape->add_dim()->set_dim_value(d);
  }
  for (int k = 0; k < n.outputs; ++k) {
    const std::string name = "out" + std::to_string(k);
    node->add_output(name);
    auto* vi = g.add_output();
    vi->set_name(name);
    // The checker wants a type and a shape; the importer takes the outputs' types from the node
    // (and the checker does not compare them).
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
    vi->mutable_type()->mutable_tensor_type()->mutable_shape();
  }
  TempDir dir;
  onnx_import::ImportOptions options;
  options.weights_path = (dir.path() / "w.safetensors").string();
  for (const In& input : n.inputs) {
    if (input.name.empty() || std::find(n.constants.begin(), n.constants.end(), input.name) != n.constants.end()) continue;
    const std::string path = (dir.path() / (input.name + ".npy")).string();
    EXPECT_TRUE(write_npy(path, *input.buf).is_ok());
    options.input_files.emplace_back(input.name, path);
  }
  std::string reason;
  Result<onnx_import::ImportedModel> imported = onnx_import::import_onnx_bytes(m.SerializeAsString(), "m.onnx", "", options, &reason);
  EXPECT_TRUE(imported.is_ok()) << imported.status().message();
  if (!imported.is_ok()) return {};
  EXPECT_TRUE(onnx_import::write_params(*imported, options.weights_path).is_ok());
  Metrics metrics;
  ProgramSessionOptions po;
  po.session.mode = SessionMode::kLazy;
  po.session.backend = "cpu";
  po.session.metrics = &metrics;
  auto session = ProgramSession::create(imported->program, po);
  EXPECT_TRUE(session.is_ok()) << session.status().message();
  if (!session.is_ok()) return {};
  auto step = (*session)->prepare(0);
  EXPECT_TRUE(step.is_ok()) << step.status().message();
  if (!step.is_ok()) return {};
  auto outs = (*session)->run(*step);
  EXPECT_TRUE(outs.is_ok()) << outs.status().message();
  if (!outs.is_ok()) return {};
  std::vector<HostBuffer> result;
  for (const BufferRef& b : *outs) result.push_back(b->clone());
  return result;
}

std::vector<double> values(const HostBuffer& b) {
  std::vector<double> v;
  for (int64_t k = 0; k < b.numel(); ++k) v.push_back(b.element_as_double(k));
  return v;
}

// |got - want| <= rtol · |want| (+ atol), infinities equal, NaN where NaN is wanted.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol = 0,
                  const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(want[k])) {
      EXPECT_TRUE(std::isnan(got[k])) << what << " element " << k << ": " << got[k] << " where NaN is expected";
    } else if (std::isinf(want[k])) {
      EXPECT_EQ(got[k], want[k]) << what << " element " << k;
    } else {
      EXPECT_LE(std::fabs(got[k] - want[k]), rtol * std::fabs(want[k]) + atol)
          << what << " element " << k << ": " << got[k] << " where " << want[k] << " is expected";
    }
  }
}

// ---- trigonometric and hyperbolic functions -------------------------------------------------------

// Each function on arguments where the textbook formulas lose digits (tiny, near the ends of the
// domain, large), against the C library in double rounded to f32: within 8 ulp (f32 relative
// 2^-23 · 8 ≈ 1e-6), every result.
TEST(OnnxDecompositions, TrigonometricAndHyperbolicFunctionsMatchTheCLibraryToAFewUlp) {
  struct Fn {
    std::string op;
    double (*ref)(double);
    std::vector<float> x;
  };
  const std::vector<float> any = {0.0f, 1e-30f, -1e-30f, 1e-8f, -3e-6f, 1e-4f, 0.1f, -0.3f, 0.41f, 0.42f, 0.5f, -0.9f,
                                  0.99f, 1.0f, -1.0f, 1.5f, -2.4f, 3.0f, 10.0f, -19.9f, 20.1f, 80.0f, -88.0f, 1e5f,
                                  -1e10f, 3e38f, kInf, -kInf, kNaN};
  const std::vector<float> unit = {0.0f, 1e-30f, -1e-8f, 1e-4f, 0.1f, -0.3f, 0.5f, -0.7071f, 0.9f, 0.999f, -0.99999f,
                                   1.0f, -1.0f, 1.0001f, -2.0f, kNaN};
  const std::vector<float> above_one = {1.0f, 1.0000001f, 1.0001f, 1.01f, 1.5f, 2.0f, 10.0f, 1e5f, 1e9f, 3e9f, 1e20f,
                                        3e38f, kInf, 0.5f, -1.0f, kNaN};
  const std::vector<Fn> fns = {
      {"Tan", [](double v) { return std::tan(v); }, {0.0f, 1e-20f, -1e-6f, 0.5f, -1.2f, 1.5f, 1.57f, -3.0f, 10.0f, kNaN}},
      {"Atan", [](double v) { return std::atan(v); }, any},
      {"Asin", [](double v) { return std::asin(v); }, unit},
      {"Acos", [](double v) { return std::acos(v); }, unit},
      {"Sinh", [](double v) { return std::sinh(v); }, any},
      {"Cosh", [](double v) { return std::cosh(v); }, any},
      {"Asinh", [](double v) { return std::asinh(v); }, any},
      {"Acosh", [](double v) { return std::acosh(v); }, above_one},
      {"Atanh", [](double v) { return std::atanh(v); }, unit},
  };
  for (const Fn& fn : fns) {
    const auto n = static_cast<int64_t>(fn.x.size());
    std::vector<HostBuffer> out = run({.op = fn.op, .inputs = {{"x", test::f32({n}, fn.x)}}});
    ASSERT_EQ(out.size(), 1u) << fn.op;
    std::vector<double> want;
    for (float v : fn.x) want.push_back(static_cast<float>(fn.ref(v)));
    expect_close(values(out[0]), want, 1e-6, 0, fn.op);
  }
}

// ---- reductions and scans ---------------------------------------------------------------------

TEST(OnnxDecompositions, ReduceProdIsExactForIntegersAndMatchesASequentialProduct) {
  // [2, 5, 3] int64 over axis 1 (odd: the halving carries a slice), with a zero and negatives.
  std::vector<int64_t> xi(30);
  for (int k = 0; k < 30; ++k) xi[static_cast<size_t>(k)] = (k % 7) - 3 + (k == 4 ? 100000 : 0);
  std::vector<HostBuffer> out = run({.op = "ReduceProd", .inputs = {{"x", test::i64({2, 5, 3}, xi)}},
                                     .attrs = [](::onnx::NodeProto& n) { set_ints(n, "axes", {1}); set_int(n, "keepdims", 0); }});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(out[0].dtype(), DType::kI64);
  for (int a = 0; a < 2; ++a) {
    for (int c = 0; c < 3; ++c) {
      int64_t p = 1;
      for (int b = 0; b < 5; ++b) p *= xi[static_cast<size_t>(a * 15 + b * 3 + c)];
      EXPECT_EQ(out[0].data<int64_t>()[a * 3 + c], p) << a << ", " << c;
    }
  }
  // f32 [7, 3] over both axes (all), keepdims: 21 factors near 1.
  std::vector<float> xf = test::random_values(21, 3, 0.5f, 1.6f);
  xf[5] = -xf[5];
  out = run({.op = "ReduceProd", .inputs = {{"x", test::f32({7, 3}, xf)}}});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), (Shape{1, 1}));
  double p = 1;
  for (float v : xf) p *= v;
  expect_close(values(out[0]), {p}, 4e-6);
}

TEST(OnnxDecompositions, CumSumIsExactForIntegersInEveryDirection) {
  std::vector<int64_t> x(3 * 11);
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<int64_t>(k * k % 17) - 8;
  for (int exclusive = 0; exclusive < 2; ++exclusive) {
    for (int reverse = 0; reverse < 2; ++reverse) {
      std::vector<HostBuffer> out = run({.op = "CumSum", .inputs = {{"x", test::i64({3, 11}, x)}, {"axis", test::i64({}, {-1})}},
                                         .constants = {"axis"}, .attrs = [&](::onnx::NodeProto& n) {
                                           set_int(n, "exclusive", exclusive);
                                           set_int(n, "reverse", reverse);
                                         }});
      ASSERT_EQ(out.size(), 1u);
      for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 11; ++c) {
          int64_t s = 0;
          for (int j = 0; j < 11; ++j) {
            const bool before = reverse ? j > c : j < c;
            if (before || (j == c && !exclusive)) s += x[static_cast<size_t>(r * 11 + j)];
          }
          EXPECT_EQ(out[0].data<int64_t>()[r * 11 + c], s) << "exclusive " << exclusive << " reverse " << reverse;
        }
      }
    }
  }
  // f32 along axis 0 of [37, 2] (the rank-2 pad shift), against a sequential double sum.
  std::vector<float> xf = test::random_values(74, 5);
  std::vector<HostBuffer> out = run({.op = "CumSum", .inputs = {{"x", test::f32({37, 2}, xf)}, {"axis", test::i64({1}, {0})}},
                                     .constants = {"axis"}});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> want(74);
  double s0 = 0, s1 = 0;
  for (int r = 0; r < 37; ++r) {
    want[static_cast<size_t>(2 * r)] = s0 += xf[static_cast<size_t>(2 * r)];
    want[static_cast<size_t>(2 * r + 1)] = s1 += xf[static_cast<size_t>(2 * r + 1)];
  }
  expect_close(values(out[0]), want, 1e-5, 1e-6);
}

// ---- layout -------------------------------------------------------------------------------------

TEST(OnnxDecompositions, OneHotCompressNonZeroScatterNDAndReverseSequence) {
  // OneHot: indices 1, -1 (wraps to 3), 4 (out of range: all off) with depth 4, axis 0.
  std::vector<HostBuffer> out = run({.op = "OneHot",
                                     .inputs = {{"i", test::i64({3}, {1, -1, 4})}, {"depth", test::f32({}, {4})},
                                                {"v", test::f32({2}, {-1, 5})}},
                                     .constants = {"depth"},
                                     .attrs = [](::onnx::NodeProto& n) { set_int(n, "axis", 0); }});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{4, 3}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{-1, -1, -1, 5, -1, -1, -1, -1, -1, -1, 5, -1}));
  // Compress: rows 0 and 2 of [3, 2]; without an axis, the flattened elements 1 and 4.
  HostBuffer x = test::f32({3, 2}, {1, 2, 3, 4, 5, 6});
  HostBuffer cond = test::make<bool>(DType::kBool, {3}, {true, false, true});
  out = run({.op = "Compress", .inputs = {{"x", x.clone()}, {"c", cond.clone()}}, .constants = {"c"},
             .attrs = [](::onnx::NodeProto& n) { set_int(n, "axis", 0); }});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{1, 2, 5, 6}));
  out = run({.op = "Compress", .inputs = {{"x", x.clone()}, {"c", test::make<bool>(DType::kBool, {5}, {false, true, false, false, true})}},
             .constants = {"c"}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{2, 5}));
  // NonZero of a constant [2, 3]: coordinates [rank, count] in row-major order.
  out = run({.op = "NonZero", .inputs = {{"x", test::i64({2, 3}, {0, 7, 0, -1, 0, 2})}}, .constants = {"x"}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{0, 1, 1, 1, 0, 2}));
  // ScatterND: data [4, 2], tuples (-1) and (1) (one of rank 1 each), add.
  out = run({.op = "ScatterND",
             .inputs = {{"d", test::f32({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}, {"i", test::i64({2, 1}, {-1, 1})},
                        {"u", test::f32({2, 2}, {10, 20, 30, 40})}},
             .opset = 16, .attrs = [](::onnx::NodeProto& n) { set_string(n, "reduction", "add"); }});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{1, 2, 33, 44, 5, 6, 17, 28}));
  // ReverseSequence: time axis 0, batch axis 1, lengths 3 and 1.
  out = run({.op = "ReverseSequence",
             .inputs = {{"x", test::f32({3, 2}, {1, 2, 3, 4, 5, 6})}, {"len", test::i64({2}, {3, 1})}}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{5, 2, 3, 4, 1, 6}));
}

// Einsum on the forms the node tests have and on those they do not (a diagonal with an ellipsis,
// implicit output, three operands), against loops in double.
TEST(OnnxDecompositions, EinsumMatchesLoops) {
  std::vector<float> a = test::random_values(2 * 3 * 4, 11), b = test::random_values(2 * 4 * 5, 12);
  auto at = [](const std::vector<float>& v, size_t k) { return static_cast<double>(v[k]); };
  auto one = [](const std::string& eq) { return [eq](::onnx::NodeProto& n) { set_string(n, "equation", eq); }; };
  // bij,bjk->bik
  std::vector<HostBuffer> out = run({.op = "Einsum", .inputs = {{"a", test::f32({2, 3, 4}, a)}, {"b", test::f32({2, 4, 5}, b)}},
                                     .attrs = one("bij,bjk->bik")});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), (Shape{2, 3, 5}));
  std::vector<double> want;
  for (size_t bb = 0; bb < 2; ++bb) {
    for (size_t i = 0; i < 3; ++i) {
      for (size_t k = 0; k < 5; ++k) {
        double s = 0;
        for (size_t j = 0; j < 4; ++j) s += at(a, bb * 12 + i * 4 + j) * at(b, bb * 20 + j * 5 + k);
        want.push_back(s);
      }
    }
  }
  expect_close(values(out[0]), want, 1e-5, 1e-6, "bij,bjk->bik");
  // ...ii->...i: the diagonals of [2, 3, 3]; implicit "ij": the input itself; "ji": transposed.
  std::vector<float> c = test::random_values(18, 13);
  out = run({.op = "Einsum", .inputs = {{"c", test::f32({2, 3, 3}, c)}}, .attrs = one("...ii ->...i")});
  ASSERT_EQ(out.size(), 1u);
  want.clear();
  for (size_t bb = 0; bb < 2; ++bb) for (size_t i = 0; i < 3; ++i) want.push_back(c[bb * 9 + i * 4]);
  EXPECT_EQ(values(out[0]), want);
  out = run({.op = "Einsum", .inputs = {{"c", test::f32({6, 3}, c)}}, .attrs = one("ji")});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), (Shape{3, 6}));
  EXPECT_EQ(out[0].data<float>()[1 * 6 + 4], c[4 * 3 + 1]);
  // i,i (inner product) and ij,jk,k->i (three operands).
  out = run({.op = "Einsum", .inputs = {{"p", test::f32({4}, {1, 2, 3, 4})}, {"q", test::f32({4}, {5, 6, 7, 8})}},
             .attrs = one("i,i")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), Shape{});
  EXPECT_EQ(values(out[0]), (std::vector<double>{70}));
  out = run({.op = "Einsum",
             .inputs = {{"m", test::f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {"n", test::f32({3, 2}, {1, 0, 0, 1, 1, 1})},
                        {"v", test::f32({2}, {10, 1})}},
             .attrs = one("ij,jk,k->i")});
  ASSERT_EQ(out.size(), 1u);
  // m @ n = [[4, 5], [10, 11]]; times v: [45, 111].
  EXPECT_EQ(values(out[0]), (std::vector<double>{45, 111}));
}

// ---- nn layers ----------------------------------------------------------------------------------

TEST(OnnxDecompositions, LrnAndMeanVarianceNormalizationMatchTheirFormulas) {
  std::vector<float> x = test::random_values(2 * 5 * 3, 21, -2.0f, 2.0f);
  std::vector<HostBuffer> out = run({.op = "LRN", .inputs = {{"x", test::f32({2, 5, 3}, x)}}, .attrs = [](::onnx::NodeProto& n) {
                                       set_int(n, "size", 4);
                                       set_float(n, "alpha", 0.3f);
                                       set_float(n, "beta", 0.7f);
                                       set_float(n, "bias", 1.5f);
                                     }});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> want;
  for (int b = 0; b < 2; ++b) {
    for (int c = 0; c < 5; ++c) {
      for (int h = 0; h < 3; ++h) {
        double sq = 0;
        for (int cc = std::max(0, c - 1); cc <= std::min(4, c + 2); ++cc) {  // floor(3/2) = 1 before, ceil(3/2) = 2 after
          const double v = x[static_cast<size_t>(b * 15 + cc * 3 + h)];
          sq += v * v;
        }
        want.push_back(x[static_cast<size_t>(b * 15 + c * 3 + h)] / std::pow(1.5 + 0.3f / 4.0 * sq, 0.7f));
      }
    }
  }
  expect_close(values(out[0]), want, 1e-5, 1e-7, "LRN");
  out = run({.op = "MeanVarianceNormalization", .inputs = {{"x", test::f32({2, 5, 3}, x)}},
             .attrs = [](::onnx::NodeProto& n) { set_ints(n, "axes", {0, 2}); }});
  ASSERT_EQ(out.size(), 1u);
  want.assign(30, 0);
  for (int c = 0; c < 5; ++c) {
    double mean = 0, var = 0;
    for (int b = 0; b < 2; ++b) for (int h = 0; h < 3; ++h) mean += x[static_cast<size_t>(b * 15 + c * 3 + h)] / 6.0;
    for (int b = 0; b < 2; ++b) for (int h = 0; h < 3; ++h) var += std::pow(x[static_cast<size_t>(b * 15 + c * 3 + h)] - mean, 2) / 6.0;
    for (int b = 0; b < 2; ++b) {
      for (int h = 0; h < 3; ++h) {
        const auto k = static_cast<size_t>(b * 15 + c * 3 + h);
        want[k] = (x[k] - mean) / (std::sqrt(var) + 1e-9);
      }
    }
  }
  expect_close(values(out[0]), want, 1e-5, 1e-6, "MeanVarianceNormalization");
}

TEST(OnnxDecompositions, BatchNormTrainingDropoutMaskShrinkAndOneDPools) {
  // BatchNormalization training_mode on [2, 2, 2]: channel 0 holds 1, 2, 5, 6 (mean 3.5, var 4.25).
  std::vector<HostBuffer> out = run({.op = "BatchNormalization",
                                     .inputs = {{"x", test::f32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})},
                                                {"s", test::f32({2}, {2, 1})}, {"b", test::f32({2}, {1, 0})},
                                                {"m", test::f32({2}, {0, 10})}, {"v", test::f32({2}, {1, 1})}},
                                     .outputs = 3, .opset = 15,
                                     .attrs = [](::onnx::NodeProto& n) { set_int(n, "training_mode", 1); set_float(n, "epsilon", 0.0f); }});
  ASSERT_EQ(out.size(), 3u);
  expect_close(values(out[0]), {2 * (1 - 3.5) / std::sqrt(4.25) + 1, 2 * (2 - 3.5) / std::sqrt(4.25) + 1, (3 - 5.5) / std::sqrt(4.25),
                                (4 - 5.5) / std::sqrt(4.25), 2 * (5 - 3.5) / std::sqrt(4.25) + 1, 2 * (6 - 3.5) / std::sqrt(4.25) + 1,
                                (7 - 5.5) / std::sqrt(4.25), (8 - 5.5) / std::sqrt(4.25)},
               1e-5, 1e-6, "y");
  expect_close(values(out[1]), {0.9 * 0 + 0.1 * 3.5, 0.9 * 10 + 0.1 * 5.5}, 1e-6, 0, "running mean");
  expect_close(values(out[2]), {0.9 + 0.1 * 4.25, 0.9 + 0.1 * 4.25}, 1e-6, 0, "running var");
  // Dropout in training mode with ratio 0: the identity and a mask of trues.
  out = run({.op = "Dropout",
             .inputs = {{"x", test::f32({3}, {1, -2, 3})}, {"r", test::f32({}, {0})},
                        {"t", test::make<bool>(DType::kBool, {}, {true})}},
             .constants = {"r", "t"}, .outputs = 2});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{1, -2, 3}));
  EXPECT_EQ(out[1].dtype(), DType::kBool);
  EXPECT_EQ(values(out[1]), (std::vector<double>{1, 1, 1}));
  // Shrink lambd 1.5, bias 0.5.
  out = run({.op = "Shrink", .inputs = {{"x", test::f32({5}, {-3, -1.5f, 0, 1.6f, 4})}},
             .attrs = [](::onnx::NodeProto& n) { set_float(n, "lambd", 1.5f); set_float(n, "bias", 0.5f); }});
  ASSERT_EQ(out.size(), 1u);
  expect_close(values(out[0]), {-2.5, 0, 0, 1.1, 3.5}, 1e-6);
  // MaxPool and AveragePool 1-D (kernel 3, stride 2, pads 1 and 0 on [1, 1, 6]).
  HostBuffer x = test::f32({1, 1, 6}, {1, 5, 2, 8, 3, 0});
  auto pool = [](::onnx::NodeProto& n) { set_ints(n, "kernel_shape", {3}); set_ints(n, "strides", {2}); set_ints(n, "pads", {1, 0}); };
  out = run({.op = "MaxPool", .inputs = {{"x", x.clone()}}, .attrs = pool});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 3}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{5, 8, 8}));  // windows [pad, 1, 5], [5, 2, 8], [8, 3, 0]
  out = run({.op = "AveragePool", .inputs = {{"x", x.clone()}}, .attrs = pool});
  ASSERT_EQ(out.size(), 1u);
  expect_close(values(out[0]), {3, 5, 11.0 / 3}, 1e-6);
}

// Cubic resize along the last dim of [1, 1, 1, 4] = [1, 2, 4, 8] to 8 (asymmetric: x / 2):
// at x = 1.5 the coefficients of A = -0.75 at ratio 0.5 are [-3/32, 19/32, 19/32, -3/32];
// at 3.5 the two right neighbours are the edge (8); exclude_outside drops them instead.
TEST(OnnxDecompositions, CubicResizeIsOnnxsInterpolationMatrix) {
  for (int exclude = 0; exclude < 2; ++exclude) {
    std::vector<HostBuffer> out = run({.op = "Resize",
                                       .inputs = {{"x", test::f32({1, 1, 1, 4}, {1, 2, 4, 8})}, {"", HostBuffer(DType::kF32, Shape{0})},
                                                  {"", HostBuffer(DType::kF32, Shape{0})}, {"sizes", test::i64({4}, {1, 1, 1, 8})}},
                                       .constants = {"sizes"},
                                       .attrs = [&](::onnx::NodeProto& n) {
                                         set_string(n, "mode", "cubic");
                                         set_string(n, "coordinate_transformation_mode", "asymmetric");
                                         set_int(n, "exclude_outside", exclude);
                                       }});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].shape(), (Shape{1, 1, 1, 8}));
    std::vector<double> y = values(out[0]);
    EXPECT_EQ(y[0], 1);
    EXPECT_EQ(y[2], 2);
    EXPECT_NEAR(y[3], -3.0 / 32 * 1 + 19.0 / 32 * 2 + 19.0 / 32 * 4 - 3.0 / 32 * 8, 1e-6);
    EXPECT_NEAR(y[7], exclude ? -3.0 / 16 * 4 + 19.0 / 16 * 8 : -3.0 / 32 * 4 + 19.0 / 32 * 8 + 19.0 / 32 * 8 - 3.0 / 32 * 8, 1e-6);
  }
}

TEST(OnnxDecompositions, BitShiftDetPadMaxUnpoolAndEightBitMaxPool) {
  HostBuffer x = test::make<uint8_t>(DType::kU8, {4}, {16, 4, 1, 255}), y = test::make<uint8_t>(DType::kU8, {4}, {1, 2, 8, 1});
  std::vector<HostBuffer> out = run({.op = "BitShift", .inputs = {{"x", x.clone()}, {"y", y.clone()}},
                                     .attrs = [](::onnx::NodeProto& n) { set_string(n, "direction", "LEFT"); }});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype(), DType::kU8);
  EXPECT_EQ(values(out[0]), (std::vector<double>{32, 16, 0, 254}));  // 1 << 8 and 255 << 1 wrap
  out = run({.op = "BitShift", .inputs = {{"x", x.clone()}, {"y", y.clone()}},
             .attrs = [](::onnx::NodeProto& n) { set_string(n, "direction", "RIGHT"); }});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{8, 1, 0, 127}));
  // Det of a batch of a 2 x 2 and, separately, a 3 x 3.
  out = run({.op = "Det", .inputs = {{"m", test::f32({2, 2, 2}, {1, 2, 3, 4, 2, 0, 0, 3})}}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{-2, 6}));
  out = run({.op = "Det", .inputs = {{"m", test::f32({3, 3}, {2, 0, 1, 1, 3, 2, 1, 1, 2})}}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{6}));  // 2 (6 - 2) + 1 (1 - 3)
  // Pad [1, 2, 3] by 2 before and 3 after: reflect (NumPy's, no repeated edge) and edge.
  for (const auto& [mode, want] : std::vector<std::pair<std::string, std::vector<double>>>{
           {"reflect", {3, 2, 1, 2, 3, 2, 1, 2}}, {"edge", {1, 1, 1, 2, 3, 3, 3, 3}}}) {
    out = run({.op = "Pad", .inputs = {{"x", test::f32({3}, {1, 2, 3})}, {"pads", test::i64({2}, {2, 3})}},
               .constants = {"pads"}, .attrs = [m = mode](::onnx::NodeProto& n) { set_string(n, "mode", m); }});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(values(out[0]), want) << mode;
  }
  // MaxUnpool (ONNX's example): values to flat indices of the 4 x 4 unpooled map, then padded to 5 x 5.
  out = run({.op = "MaxUnpool",
             .inputs = {{"x", test::f32({1, 1, 2, 2}, {5, 6, 7, 8})}, {"i", test::i64({1, 1, 2, 2}, {5, 7, 13, 15})},
                        {"shape", test::i64({4}, {1, 1, 5, 5})}},
             .constants = {"shape"},
             .attrs = [](::onnx::NodeProto& n) { set_ints(n, "kernel_shape", {2, 2}); set_ints(n, "strides", {2, 2}); }});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> want(25, 0);
  want[6] = 5;
  want[8] = 6;
  want[16] = 7;
  want[18] = 8;
  EXPECT_EQ(values(out[0]), want);
  // MaxPool of uint8 through f32: exact, the result uint8.
  out = run({.op = "MaxPool", .inputs = {{"x", test::make<uint8_t>(DType::kU8, {1, 1, 2, 2}, {1, 200, 3, 4})}},
             .attrs = [](::onnx::NodeProto& n) { set_ints(n, "kernel_shape", {2, 2}); }});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype(), DType::kU8);
  EXPECT_EQ(values(out[0]), (std::vector<double>{200}));
}

// DFT of [1, 2, 3, 4]: [10, -2 + 2i, -2, -2 - 2i]; onesided keeps 3 bins; the inverse gives the
// signal back. STFT of 8 samples in frames of 4 every 4, times a window.
TEST(OnnxDecompositions, DftAndStftAreTheTransformsMatrix) {
  std::vector<HostBuffer> out = run({.op = "DFT", .inputs = {{"x", test::f32({1, 4, 1}, {1, 2, 3, 4})}}, .opset = 17});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), (Shape{1, 4, 2}));
  expect_close(values(out[0]), {10, 0, -2, 2, -2, 0, -2, -2}, 1e-6, 1e-6);
  out = run({.op = "DFT", .inputs = {{"x", test::f32({1, 4, 1}, {1, 2, 3, 4})}}, .opset = 17,
             .attrs = [](::onnx::NodeProto& n) { set_int(n, "onesided", 1); }});
  ASSERT_EQ(out.size(), 1u);
  expect_close(values(out[0]), {10, 0, -2, 2, -2, 0}, 1e-6, 1e-6);
  out = run({.op = "DFT", .inputs = {{"x", test::f32({1, 4, 2}, {10, 0, -2, 2, -2, 0, -2, -2})}}, .opset = 17,
             .attrs = [](::onnx::NodeProto& n) { set_int(n, "inverse", 1); }});
  ASSERT_EQ(out.size(), 1u);
  expect_close(values(out[0]), {1, 0, 2, 0, 3, 0, 4, 0}, 1e-6, 1e-6);
  out = run({.op = "STFT",
             .inputs = {{"x", test::f32({1, 8, 1}, {1, 2, 3, 4, 0, 1, 0, 1})}, {"step", test::i64({}, {4})},
                        {"w", test::f32({4}, {1, 1, 1, 1})}},
             .constants = {"step"}, .opset = 17});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), (Shape{1, 2, 3, 2}));
  // Frame 0 = [1, 2, 3, 4]: bins 10, -2 + 2i, -2; frame 1 = [0, 1, 0, 1]: 2, 0, -2.
  expect_close(values(out[0]), {10, 0, -2, 2, -2, 0, 2, 0, 0, 0, -2, 0}, 1e-6, 1e-6);
}

// GridSample on [1, 1, 2, 2] = [1, 2, 3, 4] at the corners and the centre, as PyTorch's
// grid_sample gives them.
TEST(OnnxDecompositions, GridSampleIsPyTorchsGridSample) {
  HostBuffer x = test::f32({1, 1, 2, 2}, {1, 2, 3, 4});
  HostBuffer grid = test::f32({1, 1, 3, 2}, {-1, -1, 1, 1, 0, 0});
  auto sample = [&](const std::string& mode, int align, const std::string& padding) {
    std::vector<HostBuffer> out = run({.op = "GridSample", .inputs = {{"x", x.clone()}, {"g", grid.clone()}}, .opset = 16,
                                       .attrs = [&](::onnx::NodeProto& n) {
                                         set_string(n, "mode", mode);
                                         set_int(n, "align_corners", align);
                                         set_string(n, "padding_mode", padding);
                                       }});
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? std::vector<double>{} : values(out[0]);
  };
  // align_corners=1: the corners are the pixels' centres; the centre is the mean.
  expect_close(sample("bilinear", 1, "zeros"), {1, 4, 2.5}, 1e-6);
  // align_corners=0: (-1, -1) is the outer corner, half a pixel out on each axis: 1/4 of pixel (0, 0).
  expect_close(sample("bilinear", 0, "zeros"), {0.25, 1, 2.5}, 1e-6);
  expect_close(sample("bilinear", 0, "border"), {1, 4, 2.5}, 1e-6);
  // nearest rounds half to even: the centre (0.5, 0.5) reads pixel (0, 0).
  expect_close(sample("nearest", 1, "zeros"), {1, 4, 1}, 1e-6);
  // bicubic reproduces the bilinear plane's centre exactly (a linear image), and a corner.
  expect_close(sample("bicubic", 1, "border"), {1, 4, 2.5}, 1e-5);
}

// RoiAlign (avg) of the roi [0, 0, 1, 1] on [1, 1, 2, 2] = [1, 2, 3, 4]: half_pixel shifts it by
// -0.5, so its one sample is pixel (0, 0); output_half_pixel samples the centre, 2.5 (with 1 or
// 2 x 2 samples: the image is a plane).
TEST(OnnxDecompositions, RoiAlignAveragesBilinearSamples) {
  for (const auto& [ctm, ratio, want] : std::vector<std::tuple<std::string, int64_t, double>>{
           {"half_pixel", 1, 1.0}, {"output_half_pixel", 1, 2.5}, {"output_half_pixel", 2, 2.5}}) {
    std::vector<HostBuffer> out = run({.op = "RoiAlign",
                                       .inputs = {{"x", test::f32({1, 1, 2, 2}, {1, 2, 3, 4})}, {"rois", test::f32({1, 4}, {0, 0, 1, 1})},
                                                  {"b", test::i64({1}, {0})}},
                                       .constants = {"rois"}, .opset = 16,
                                       .attrs = [c = ctm, k = ratio](::onnx::NodeProto& n) {
                                         set_string(n, "coordinate_transformation_mode", c);
                                         set_int(n, "sampling_ratio", k);
                                       }});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (Shape{1, 1, 1, 1}));
    expect_close(values(out[0]), {want}, 1e-6, 0, ctm);
  }
}

// TfIdfVectorizer on ONNX's example batch: unigrams 2, 3, 5, 4 (columns 0-3) and bigrams (5, 6),
// (7, 8), (6, 7) (columns 4-6), skips up to 5: (7, 8) is 3 apart in the second row.
TEST(OnnxDecompositions, TfIdfVectorizerCountsNGramsAtEverySkip) {
  auto attrs = [](const std::string& mode) {
    return [mode](::onnx::NodeProto& n) {
      set_string(n, "mode", mode);
      set_int(n, "min_gram_length", 1);
      set_int(n, "max_gram_length", 2);
      set_int(n, "max_skip_count", 5);
      set_ints(n, "ngram_counts", {0, 4});
      set_ints(n, "ngram_indexes", {0, 1, 2, 3, 4, 5, 6});
      set_ints(n, "pool_int64s", {2, 3, 5, 4, 5, 6, 7, 8, 6, 7});
      auto* w = n.add_attribute();
      w->set_name("weights");
      w->set_type(::onnx::AttributeProto::FLOATS);
      for (int k = 1; k <= 7; ++k) w->add_floats(0.5f * static_cast<float>(k));
    };
  };
  HostBuffer x = test::i64({2, 6}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8});
  std::vector<HostBuffer> out = run({.op = "TfIdfVectorizer", .inputs = {{"x", x.clone()}}, .opset = 9, .attrs = attrs("TF")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1}));
  out = run({.op = "TfIdfVectorizer", .inputs = {{"x", x.clone()}}, .opset = 9, .attrs = attrs("TFIDF")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{0, 3, 0, 0, 0, 0, 0, 0, 0, 1.5, 0, 2.5, 3, 3.5}));
  out = run({.op = "TfIdfVectorizer", .inputs = {{"x", x.clone()}}, .opset = 9, .attrs = attrs("IDF")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{0, 1, 0, 0, 0, 0, 0, 0, 0, 1.5, 0, 2.5, 3, 3.5}));
}

TEST(OnnxDecompositions, MaxPoolIndicesAndThreeDPools) {
  // [1, 2, 3, 3]: channel 0 is 1..9, channel 1 9..1; kernel 2, stride 1.
  std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  std::vector<HostBuffer> out = run({.op = "MaxPool", .inputs = {{"x", test::f32({1, 2, 3, 3}, v)}}, .outputs = 2,
                                     .attrs = [](::onnx::NodeProto& n) { set_ints(n, "kernel_shape", {2, 2}); }});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{5, 6, 8, 9, 9, 8, 6, 5}));
  EXPECT_EQ(out[1].dtype(), DType::kI64);
  // Flat indices in [1, 2, 3, 3]: channel 1 starts at 9.
  EXPECT_EQ(values(out[1]), (std::vector<double>{4, 5, 7, 8, 9, 10, 12, 13}));
  // storage_order=1: (h, w) counted column-major, h + 3 w.
  out = run({.op = "MaxPool", .inputs = {{"x", test::f32({1, 2, 3, 3}, v)}}, .outputs = 2, .attrs = [](::onnx::NodeProto& n) {
               set_ints(n, "kernel_shape", {2, 2});
               set_int(n, "storage_order", 1);
             }});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(values(out[1]), (std::vector<double>{4, 7, 5, 8, 9, 12, 10, 13}));
  // 3-D pools of [1, 1, 2, 2, 3] = 1..12 with kernel [2, 2, 2]: two windows.
  std::vector<float> c(12);
  for (int k = 0; k < 12; ++k) c[static_cast<size_t>(k)] = static_cast<float>(k + 1);
  auto kernel = [](::onnx::NodeProto& n) { set_ints(n, "kernel_shape", {2, 2, 2}); };
  out = run({.op = "MaxPool", .inputs = {{"x", test::f32({1, 1, 2, 2, 3}, c)}}, .attrs = kernel});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 1, 1, 2}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{11, 12}));
  out = run({.op = "AveragePool", .inputs = {{"x", test::f32({1, 1, 2, 2, 3}, c)}}, .attrs = kernel});
  ASSERT_EQ(out.size(), 1u);
  // (1 + 2 + 4 + 5 + 7 + 8 + 10 + 11) / 8 and the same plus 8 / 8.
  expect_close(values(out[0]), {6, 7}, 1e-6);
}

// If with a constant condition (each branch a Constant), and Loop (3 iterations, a scan output)
// whose body reads an outer value.
TEST(OnnxDecompositions, IfAndLoopAreInlined) {
  auto value_info = [](::onnx::ValueInfoProto* vi, const std::string& name, int elem, std::vector<int64_t> dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  };
  // A branch: one Constant node giving [v, v + 1].
  auto constant_graph = [&](float v) {
    ::onnx::GraphProto g;
    g.set_name("branch" + std::to_string(static_cast<int>(v)));
    auto* n = g.add_node();
    n->set_op_type("Constant");
    n->add_output("c" + std::to_string(static_cast<int>(v)));
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(::onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(::onnx::TensorProto::FLOAT);
    a->mutable_t()->add_dims(2);
    a->mutable_t()->add_float_data(v);
    a->mutable_t()->add_float_data(v + 1);
    value_info(g.add_output(), n->output(0), ::onnx::TensorProto::FLOAT, {2});
    return g;
  };
  for (bool cond : {true, false}) {
    std::vector<HostBuffer> out = run({.op = "If", .inputs = {{"c", test::make<bool>(DType::kBool, {}, {cond})}}, .constants = {"c"},
                                       .attrs = [&](::onnx::NodeProto& n) {
                                         auto* t = n.add_attribute();
                                         t->set_name("then_branch");
                                         t->set_type(::onnx::AttributeProto::GRAPH);
                                         *t->mutable_g() = constant_graph(1);
                                         auto* e = n.add_attribute();
                                         e->set_name("else_branch");
                                         e->set_type(::onnx::AttributeProto::GRAPH);
                                         *e->mutable_g() = constant_graph(5);
                                       }});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(values(out[0]), cond ? (std::vector<double>{1, 2}) : (std::vector<double>{5, 6}));
  }
  // Loop: the body adds the outer "step" to the carried value.
  HostBuffer x = test::f32({2}, {3, -1});
  ::onnx::GraphProto body;
  body.set_name("body");
  value_info(body.add_input(), "i", ::onnx::TensorProto::INT64, {});
  value_info(body.add_input(), "c_in", ::onnx::TensorProto::BOOL, {});
  value_info(body.add_input(), "y_in", ::onnx::TensorProto::FLOAT, {2});
  auto* add = body.add_node();
  add->set_op_type("Add");
  add->add_input("y_in");
  add->add_input("step");
  add->add_output("y_out");
  auto* keep = body.add_node();
  keep->set_op_type("Identity");
  keep->add_input("c_in");
  keep->add_output("c_out");
  auto* copy = body.add_node();
  copy->set_op_type("Identity");
  copy->add_input("y_out");
  copy->add_output("scan");
  value_info(body.add_output(), "c_out", ::onnx::TensorProto::BOOL, {});
  value_info(body.add_output(), "y_out", ::onnx::TensorProto::FLOAT, {2});
  value_info(body.add_output(), "scan", ::onnx::TensorProto::FLOAT, {2});
  std::vector<HostBuffer> out = run({.op = "Loop",
                                     .inputs = {{"m", test::i64({}, {3})}, {"go", test::make<bool>(DType::kBool, {}, {true})},
                                                {"step", x.clone()}},
                                     .constants = {"m", "go"}, .outputs = 2,
                                     .attrs = [&](::onnx::NodeProto& n) {
                                       auto* b = n.add_attribute();
                                       b->set_name("body");
                                       b->set_type(::onnx::AttributeProto::GRAPH);
                                       *b->mutable_g() = body;
                                     }});
  ASSERT_EQ(out.size(), 2u);
  // y starts at step (the third input is the carried value) and adds step 3 times.
  EXPECT_EQ(values(out[0]), (std::vector<double>{12, -4}));
  EXPECT_EQ(out[1].shape(), (Shape{3, 2}));
  EXPECT_EQ(values(out[1]), (std::vector<double>{6, -2, 9, -3, 12, -4}));
}

// ConvTranspose 3-D (strides 2, 1, 2; a dilation; pads; output_padding) against the direct sum
// y[o, d·s + k·dil - pad] += x[i, d] · w[i, o, k] per axis, in double.
TEST(OnnxDecompositions, ConvTranspose3dIsTheDirectSum) {
  const int64_t ci = 2, co = 3, in_d = 2, in_h = 3, in_w = 2, kd = 2, kh = 2, kw = 3;
  const std::array<int64_t, 3> stride = {2, 1, 2}, dil = {1, 2, 1}, pb = {1, 0, 0}, pe = {0, 1, 1}, opad = {1, 0, 1};
  const std::array<int64_t, 3> in = {in_d, in_h, in_w}, k = {kd, kh, kw};
  std::array<int64_t, 3> out{};
  for (size_t a = 0; a < 3; ++a) out[a] = (in[a] - 1) * stride[a] - pb[a] - pe[a] + dil[a] * (k[a] - 1) + opad[a] + 1;
  std::vector<float> x = test::random_values(static_cast<size_t>(ci * in_d * in_h * in_w), 41);
  std::vector<float> w = test::random_values(static_cast<size_t>(ci * co * kd * kh * kw), 42);
  std::vector<float> bias = {0.5f, -1, 2};
  std::vector<HostBuffer> got = run({.op = "ConvTranspose",
                                     .inputs = {{"x", test::f32({1, ci, in_d, in_h, in_w}, x)}, {"w", test::f32({ci, co, kd, kh, kw}, w)},
                                                {"b", test::f32({co}, bias)}},
                                     .attrs = [&](::onnx::NodeProto& n) {
                                       set_ints(n, "strides", {stride[0], stride[1], stride[2]});
                                       set_ints(n, "dilations", {dil[0], dil[1], dil[2]});
                                       set_ints(n, "pads", {pb[0], pb[1], pb[2], pe[0], pe[1], pe[2]});
                                       set_ints(n, "output_padding", {opad[0], opad[1], opad[2]});
                                     }});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].shape(), (Shape{1, co, out[0], out[1], out[2]}));
  std::vector<double> want(static_cast<size_t>(co * out[0] * out[1] * out[2]));
  for (int64_t o = 0; o < co; ++o) {
    for (int64_t j = 0; j < out[0] * out[1] * out[2]; ++j) want[static_cast<size_t>(o * out[0] * out[1] * out[2] + j)] = bias[static_cast<size_t>(o)];
  }
  for (int64_t i = 0; i < ci; ++i) {
    for (int64_t o = 0; o < co; ++o) {
      for (int64_t d = 0; d < in_d; ++d) for (int64_t h = 0; h < in_h; ++h) for (int64_t c = 0; c < in_w; ++c) {
        for (int64_t a = 0; a < kd; ++a) for (int64_t b = 0; b < kh; ++b) for (int64_t e = 0; e < kw; ++e) {
          const int64_t z = d * stride[0] + a * dil[0] - pb[0], y = h * stride[1] + b * dil[1] - pb[1], q = c * stride[2] + e * dil[2] - pb[2];
          if (z < 0 || z >= out[0] || y < 0 || y >= out[1] || q < 0 || q >= out[2]) continue;
          want[static_cast<size_t>(((o * out[0] + z) * out[1] + y) * out[2] + q)] +=
              static_cast<double>(x[static_cast<size_t>(((i * in_d + d) * in_h + h) * in_w + c)]) *
              w[static_cast<size_t>((((i * co + o) * kd + a) * kh + b) * kw + e)];
        }
      }
    }
  }
  expect_close(values(got[0]), want, 1e-5, 1e-6);
}

// ---- recurrent layers -----------------------------------------------------------------------------

// RNN, GRU (both linear_before_reset), LSTM (with peepholes), forward and bidirectional, against
// ONNX's formulas as loops in double.
TEST(OnnxDecompositions, RecurrentLayersMatchTheirFormulas) {
  const int64_t steps = 3, batch = 2, input = 3, hidden = 2;
  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  struct Case {
    std::string op;
    int gates;
    std::string direction;
    int linear_before_reset;
  };
  for (const Case& c : std::vector<Case>{{"RNN", 1, "forward", 0}, {"GRU", 3, "bidirectional", 0}, {"GRU", 3, "reverse", 1},
                                         {"LSTM", 4, "bidirectional", 0}}) {
    const int64_t dirs = c.direction == "bidirectional" ? 2 : 1, gh = c.gates * hidden;
    std::vector<float> x = test::random_values(static_cast<size_t>(steps * batch * input), 31);
    std::vector<float> w = test::random_values(static_cast<size_t>(dirs * gh * input), 32);
    std::vector<float> r = test::random_values(static_cast<size_t>(dirs * gh * hidden), 33);
    std::vector<float> bias = test::random_values(static_cast<size_t>(dirs * 2 * gh), 34);
    std::vector<float> h0 = test::random_values(static_cast<size_t>(dirs * batch * hidden), 35);
    std::vector<float> c0 = test::random_values(static_cast<size_t>(dirs * batch * hidden), 36);
    std::vector<float> peep = test::random_values(static_cast<size_t>(dirs * 3 * hidden), 37);
    OneNode n{.op = c.op,
              .inputs = {{"x", test::f32({steps, batch, input}, x)}, {"w", test::f32({dirs, gh, input}, w)},
                         {"r", test::f32({dirs, gh, hidden}, r)}, {"b", test::f32({dirs, 2 * gh}, bias)},
                         {"", HostBuffer(DType::kI32, Shape{0})}, {"h0", test::f32({dirs, batch, hidden}, h0)}},
              .outputs = c.op == "LSTM" ? 3 : 2,
              .attrs = [&](::onnx::NodeProto& node) {
                set_int(node, "hidden_size", hidden);
                set_string(node, "direction", c.direction);
                if (c.op == "GRU") set_int(node, "linear_before_reset", c.linear_before_reset);
              }};
    if (c.op == "LSTM") {
      n.inputs.emplace_back("c0", test::f32({dirs, batch, hidden}, c0));
      n.inputs.emplace_back("p", test::f32({dirs, 3 * hidden}, peep));
    }
    std::vector<HostBuffer> out = run(n);
    ASSERT_EQ(out.size(), static_cast<size_t>(n.outputs)) << c.op;
    std::vector<double> y(static_cast<size_t>(steps * dirs * batch * hidden)), yh, yc;
    for (int64_t d = 0; d < dirs; ++d) {
      const bool back = c.direction == "reverse" || d == 1;
      for (int64_t bb = 0; bb < batch; ++bb) {
        std::vector<double> h(static_cast<size_t>(hidden)), cell(static_cast<size_t>(hidden));
        for (int64_t k = 0; k < hidden; ++k) {
          h[static_cast<size_t>(k)] = h0[static_cast<size_t>((d * batch + bb) * hidden + k)];
          cell[static_cast<size_t>(k)] = c0[static_cast<size_t>((d * batch + bb) * hidden + k)];
        }
        for (int64_t s = 0; s < steps; ++s) {
          const int64_t t = back ? steps - 1 - s : s;
          // xw[g], hr[g]: the input and recurrent terms of gate row g (with their biases).
          std::vector<double> xw(static_cast<size_t>(gh)), hr(static_cast<size_t>(gh));
          for (int64_t g = 0; g < gh; ++g) {
            double a = bias[static_cast<size_t>(d * 2 * gh + g)], rr = bias[static_cast<size_t>(d * 2 * gh + gh + g)];
            for (int64_t k = 0; k < input; ++k) a += w[static_cast<size_t>((d * gh + g) * input + k)] * x[static_cast<size_t>((t * batch + bb) * input + k)];
            for (int64_t k = 0; k < hidden; ++k) rr += r[static_cast<size_t>((d * gh + g) * hidden + k)] * h[static_cast<size_t>(k)];
            xw[static_cast<size_t>(g)] = a;
            hr[static_cast<size_t>(g)] = rr;
          }
          std::vector<double> next(static_cast<size_t>(hidden));
          for (int64_t k = 0; k < hidden; ++k) {
            const auto u = static_cast<size_t>(k), H = static_cast<size_t>(hidden);
            if (c.op == "RNN") {
              next[u] = std::tanh(xw[u] + hr[u]);
            } else if (c.op == "GRU") {
              const double z = sigmoid(xw[u] + hr[u]), rg = sigmoid(xw[H + u] + hr[H + u]);
              // linear_before_reset: r ⊙ (H Rhᵀ + Rbh); else (r ⊙ H) Rhᵀ + Rbh, r per hidden unit j.
              double rec = rg * hr[2 * H + u];
              if (!c.linear_before_reset) {
                rec = bias[static_cast<size_t>(d * 2 * gh + gh + 2 * hidden + k)];
                for (int64_t j = 0; j < hidden; ++j) {
                  const double rj = sigmoid(xw[H + static_cast<size_t>(j)] + hr[H + static_cast<size_t>(j)]);
                  rec += r[static_cast<size_t>((d * gh + 2 * hidden + k) * hidden + j)] * rj * h[static_cast<size_t>(j)];
                }
              }
              const double cand = std::tanh(xw[2 * H + u] + rec);
              next[u] = (1 - z) * cand + z * h[u];
            } else {
              const double pi = peep[static_cast<size_t>(d * 3 * hidden + k)], po = peep[static_cast<size_t>(d * 3 * hidden + hidden + k)],
                           pf = peep[static_cast<size_t>(d * 3 * hidden + 2 * hidden + k)];
              const double ig = sigmoid(xw[u] + hr[u] + pi * cell[u]);
              const double fg = sigmoid(xw[2 * H + u] + hr[2 * H + u] + pf * cell[u]);
              const double cand = std::tanh(xw[3 * H + u] + hr[3 * H + u]);
              cell[u] = fg * cell[u] + ig * cand;
              const double og = sigmoid(xw[H + u] + hr[H + u] + po * cell[u]);
              next[u] = og * std::tanh(cell[u]);
            }
          }
          h = next;
          for (int64_t k = 0; k < hidden; ++k) y[static_cast<size_t>(((t * dirs + d) * batch + bb) * hidden + k)] = h[static_cast<size_t>(k)];
        }
      }
    }
    // Y_h and Y_c: the last state of each direction and batch entry, from y's last step.
    for (int64_t d = 0; d < dirs; ++d) {
      const bool back = c.direction == "reverse" || d == 1;
      const int64_t last = back ? 0 : steps - 1;
      for (int64_t bb = 0; bb < batch; ++bb) {
        for (int64_t k = 0; k < hidden; ++k) yh.push_back(y[static_cast<size_t>(((last * dirs + d) * batch + bb) * hidden + k)]);
      }
    }
    expect_close(values(out[0]), y, 1e-5, 1e-6, c.op + " " + c.direction + " Y");
    expect_close(values(out[1]), yh, 1e-5, 1e-6, c.op + " " + c.direction + " Y_h");
  }
}

// ---- training and constants -----------------------------------------------------------------------

TEST(OnnxDecompositions, AdamStepAndWindowFunctions) {
  // Adam at T = 2 (bias corrected) with both norm coefficients.
  const double r = 0.1, alpha = 0.9, beta = 0.99, eps = 1e-4, norm = 0.01, post = 0.02;
  const double x = 1.5, g = -0.4, v = 0.2, h = 0.3;
  std::vector<HostBuffer> out = run({.op = "Adam",
                                     .inputs = {{"R", test::f32({}, {0.1f})}, {"T", test::i64({}, {2})}, {"X", test::f32({1}, {1.5f})},
                                                {"G", test::f32({1}, {-0.4f})}, {"V", test::f32({1}, {0.2f})}, {"H", test::f32({1}, {0.3f})}},
                                     .outputs = 3, .domain = "ai.onnx.preview.training",
                                     .attrs = [](::onnx::NodeProto& n) {
                                       set_float(n, "alpha", 0.9f);
                                       set_float(n, "beta", 0.99f);
                                       set_float(n, "epsilon", 1e-4f);
                                       set_float(n, "norm_coefficient", 0.01f);
                                       set_float(n, "norm_coefficient_post", 0.02f);
                                     }});
  ASSERT_EQ(out.size(), 3u);
  const double greg = norm * x + g, v_new = alpha * v + (1 - alpha) * greg, h_new = beta * h + (1 - beta) * greg * greg;
  const double rate = r * std::sqrt(1 - beta * beta) / (1 - alpha * alpha);
  expect_close(values(out[0]), {(1 - post) * (x - rate * v_new / (std::sqrt(h_new) + eps))}, 1e-5, 0, "X");
  expect_close(values(out[1]), {v_new}, 1e-5, 0, "V");
  expect_close(values(out[2]), {h_new}, 1e-5, 0, "H");
  // HannWindow periodic, size 4: [0, 0.5, 1, 0.5]; BlackmanWindow symmetric, size 3: [0, 1, 0].
  out = run({.op = "HannWindow", .inputs = {{"n", test::i64({}, {4})}}, .constants = {"n"}, .opset = 17});
  ASSERT_EQ(out.size(), 1u);
  expect_close(values(out[0]), {0, 0.5, 1, 0.5}, 1e-7, 1e-7);
  out = run({.op = "BlackmanWindow", .inputs = {{"n", test::i64({}, {3})}}, .constants = {"n"}, .opset = 17,
             .attrs = [](::onnx::NodeProto& n) { set_int(n, "periodic", 0); }});
  ASSERT_EQ(out.size(), 1u);
  expect_close(values(out[0]), {0, 1, 0}, 1e-7, 1e-7);
}

}  // namespace
}  // namespace tracecache
