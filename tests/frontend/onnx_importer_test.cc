// The ONNX importer (frontend/onnx/onnx_importer.h) on small models built here with ONNX's
// protobuf API: what a model becomes (params by ONNX name, inputs, folded shape sub-graphs), ONNX
// semantics that need lowering (negative gather indices, integer Div, Clip bounds as inputs,
// asymmetric pads), and hostile or unsupported models (truncated, huge dims, external data
// outside the model's directory, an unknown op, opset 18; an opset 12 model is converted). docs/onnx.md's op table is checked
// against the importer's (it cannot drift).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "capture/core/metrics.h"
#include "frontend/files/npy.h"
#include "frontend/onnx/onnx_importer.h"
#include "frontend/program/program.h"
#include "replay/engine/program_session.h"

namespace tracecache {
namespace {

namespace fs = std::filesystem;
using onnx_import::ImportedModel;
using onnx_import::ImportOptions;

struct ModelBuilder {
  ::onnx::ModelProto m;
  explicit ModelBuilder(int64_t opset = 13) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("g");
  }
  ::onnx::GraphProto& g() { return *m.mutable_graph(); }
  // dims: >= 0 a fixed size, -1 a symbolic dim "N".
  void value(google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto>* where, const std::string& name, int elem,
             std::vector<int64_t> dims) {
    auto* vi = where->Add();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = shape->add_dim();
      if (d >= 0) dim->set_dim_value(d); else dim->set_dim_param("N");
    }
  }
  void input(const std::string& name, std::vector<int64_t> dims, int elem = ::onnx::TensorProto::FLOAT) {
    value(g().mutable_input(), name, elem, std::move(dims));
  }
  void output(const std::string& name, std::vector<int64_t> dims, int elem = ::onnx::TensorProto::FLOAT) {
    value(g().mutable_output(), name, elem, std::move(dims));
  }
  ::onnx::TensorProto* floats(const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
    return t;
  }
  ::onnx::TensorProto* int64s(const std::string& name, std::vector<int64_t> dims, std::vector<int64_t> v) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t x : v) t->add_int64_data(x);
    return t;
  }
  ::onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                          const std::string& name = "") {
    auto* n = g().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& s : in) n->add_input(s);
    for (auto& s : out) n->add_output(s);
    return n;
  }
  std::string bytes() const { return m.SerializeAsString(); }
};

void attr_int(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
void attr_ints(::onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void attr_string(::onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}

struct Imported {
  Result<ImportedModel> model;
  std::string reason;
};
Imported import_bytes(const ModelBuilder& b, const ImportOptions& options = {}, const std::string& dir = "") {
  Imported out{internal_error("not imported"), ""};
  out.model = onnx_import::import_onnx_bytes(b.bytes(), "m.onnx", dir, options, &out.reason);
  return out;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "onnx-importer-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs the imported program once (lazy, cpu) with `inputs` (by ONNX name) and returns its outputs.
std::vector<HostBuffer> run(ImportedModel model, const TempDir& dir,
                            const std::vector<std::pair<std::string, const HostBuffer*>>& inputs = {}) {
  const std::string weights = (dir.path() / "w.safetensors").string();
  for (TensorDecl& t : model.program.tensors) {
    if (t.role == TensorDecl::Role::kParam) t.init.path = weights;
    for (const auto& [name, buf] : inputs) {
      if (t.role != TensorDecl::Role::kInput || t.name != name) continue;
      const std::string path = (dir.path() / (name + ".npy")).string();
      EXPECT_TRUE(write_npy(path, *buf).is_ok());
      t.init.kind = Generator::Kind::kNpy;
      t.init.path = path;
    }
  }
  EXPECT_TRUE(onnx_import::write_params(model, weights).is_ok());
  Metrics metrics;
  ProgramSessionOptions po;
  po.session.metrics = &metrics;
  auto session = ProgramSession::create(model.program, po);
  EXPECT_TRUE(session.is_ok());
  auto step = (*session)->prepare(0);
  EXPECT_TRUE(step.is_ok()) << step.status().message();
  auto outs = (*session)->run(*step);
  EXPECT_TRUE(outs.is_ok()) << outs.status().message();
  std::vector<HostBuffer> result;
  for (const BufferRef& o : *outs) result.push_back(o->clone());
  return result;
}

HostBuffer i64s(std::vector<int64_t> dims, std::vector<int64_t> v) {
  HostBuffer b(DType::kI64, Shape(IntList(std::span<const int64_t>(dims))));
  std::copy(v.begin(), v.end(), b.data<int64_t>());
  return b;
}
HostBuffer f32s(std::vector<int64_t> dims, std::vector<float> v) {
  HostBuffer b(DType::kF32, Shape(IntList(std::span<const int64_t>(dims))));
  std::copy(v.begin(), v.end(), b.data<float>());
  return b;
}
std::vector<double> values(const HostBuffer& b) {
  std::vector<double> v;
  for (int64_t k = 0; k < b.numel(); ++k) v.push_back(b.element_as_double(k));
  return v;
}

// x [N, 4] (symbolic N) -> MatMul with the initializer "lin.w" [4, 3] -> Reshape to
// [Shape(x)[0], -1] through Shape -> Gather -> Unsqueeze -> Concat.
ModelBuilder linear_model() {
  ModelBuilder b;
  b.input("x", {-1, 4});
  b.output("y", {-1, 3});
  std::vector<float> w(12);
  for (int k = 0; k < 12; ++k) w[static_cast<size_t>(k)] = static_cast<float>(k) * 0.5f;
  b.floats("lin.w", {4, 3}, w);
  b.int64s("zero", {}, {0});
  b.int64s("axes0", {1}, {0});
  b.int64s("minus1", {1}, {-1});
  b.node("MatMul", {"x", "lin.w"}, {"h"}, "mm");
  b.node("Shape", {"x"}, {"s"});
  attr_int(b.node("Gather", {"s", "zero"}, {"n"}), "axis", 0);
  b.node("Unsqueeze", {"n", "axes0"}, {"n1"});
  attr_int(b.node("Concat", {"n1", "minus1"}, {"shape"}), "axis", 0);
  b.node("Reshape", {"h", "shape"}, {"y"});
  return b;
}

TEST(OnnxImporter, InitializersAreParamsByNameAndShapeSubgraphsFold) {
  ImportOptions o;
  o.shapes.push_back({"x", DType::kF32, {2, 4}});
  Imported r = import_bytes(linear_model(), o);
  ASSERT_TRUE(r.model.is_ok()) << r.model.status().message();
  const Program& p = r.model->program;
  const TensorDecl* x = p.find_tensor("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->role, TensorDecl::Role::kInput);
  ASSERT_EQ(x->dims.size(), 2u);
  EXPECT_EQ(x->dims[0].value, 2);
  const TensorDecl* w = p.find_tensor("lin_w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->role, TensorDecl::Role::kParam);
  EXPECT_EQ(w->init.kind, Generator::Kind::kSafetensors);
  EXPECT_EQ(w->init.tensor, "lin.w");
  ASSERT_EQ(r.model->params.size(), 1u);  // the shape constants were folded, not made params
  EXPECT_EQ(r.model->params[0].first, "lin.w");
  // MatMul and nothing else: the shape sub-graph folded, and the reshape is the identity.
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].op, OpKind::kMatmul);
  EXPECT_EQ(p.ops[0].result, "y");
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.outputs[0].name, "y");
  // The program prints and parses back to itself.
  Result<Program> again = parse_program(print_program(p), "m.trace");
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(*again, p);
}

TEST(OnnxImporter, ASymbolicDimNeedsItsSizeAndAContradictionIsRefused) {
  Imported r = import_bytes(linear_model());
  ASSERT_FALSE(r.model.is_ok());
  EXPECT_EQ(r.model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.model.status().message().find("symbolic dim 0 ('N')"), std::string::npos) << r.model.status().message();
  ImportOptions o;
  o.shapes.push_back({"x", DType::kF32, {2, 5}});
  r = import_bytes(linear_model(), o);
  ASSERT_FALSE(r.model.is_ok());
  EXPECT_NE(r.model.status().message().find("dim 1 of size 4"), std::string::npos) << r.model.status().message();
}

TEST(OnnxImporter, RunsGivePyTorchAndOnnxValues) {
  ImportOptions o;
  o.shapes.push_back({"x", DType::kF32, {1, 4}});
  Imported r = import_bytes(linear_model(), o);
  ASSERT_TRUE(r.model.is_ok()) << r.model.status().message();
  TempDir dir;
  HostBuffer x = f32s({1, 4}, {1, 2, 3, 4});
  std::vector<HostBuffer> out = run(std::move(*r.model), dir, {{"x", &x}});
  ASSERT_EQ(out.size(), 1u);
  // y[j] = sum_k x[k] * 0.5 * (3k + j)
  EXPECT_EQ(values(out[0]), (std::vector<double>{30, 35, 40}));
}

TEST(OnnxImporter, NegativeGatherIndicesIntegerDivAndClipBoundsFromInputs) {
  ModelBuilder b;
  b.input("data", {5});
  b.input("idx", {3}, ::onnx::TensorProto::INT64);
  b.input("a", {4}, ::onnx::TensorProto::INT64);
  b.input("lo", {}, ::onnx::TensorProto::FLOAT);
  b.output("picked", {3});
  b.output("quot", {4}, ::onnx::TensorProto::INT64);
  b.output("clipped", {5});
  b.int64s("divisor", {4}, {2, -2, 3, -3});
  b.floats("hi", {}, {2.5f});
  attr_int(b.node("Gather", {"data", "idx"}, {"picked"}), "axis", 0);
  b.node("Div", {"a", "divisor"}, {"quot"});
  b.node("Clip", {"data", "lo", "hi"}, {"clipped"});
  Imported r = import_bytes(b);
  ASSERT_TRUE(r.model.is_ok()) << r.model.status().message();
  TempDir dir;
  HostBuffer data = f32s({5}, {10, 11, 12, 13, 14}), idx = i64s({3}, {-1, 0, -5});
  HostBuffer a = i64s({4}, {7, 7, -7, -7}), lo = f32s({}, {10.5f});
  std::vector<HostBuffer> out = run(std::move(*r.model), dir, {{"data", &data}, {"idx", &idx}, {"a", &a}, {"lo", &lo}});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(values(out[0]), (std::vector<double>{14, 10, 10}));  // negative indices count from the end
  EXPECT_EQ(out[1].dtype(), DType::kI64);
  EXPECT_EQ(values(out[1]), (std::vector<double>{3, -3, -2, 2}));  // truncated toward zero
  // min from data (10.5) above max (2.5): ONNX's min(max(x, lo), hi) gives hi.
  EXPECT_EQ(values(out[2]), (std::vector<double>{2.5, 2.5, 2.5, 2.5, 2.5}));
}

TEST(OnnxImporter, AsymmetricConvPadsArePaddedFirst) {
  ModelBuilder b;
  b.input("x", {1, 1, 3, 3});
  b.output("y", {1, 1, 3, 2});
  b.floats("w", {1, 1, 2, 2}, {1, 1, 1, 1});
  attr_ints(b.node("Conv", {"x", "w"}, {"y"}, "c"), "pads", {1, 0, 0, 0});  // top 1, nothing else
  Imported r = import_bytes(b);
  ASSERT_TRUE(r.model.is_ok()) << r.model.status().message();
  ASSERT_EQ(r.model->program.ops.size(), 2u);
  EXPECT_EQ(r.model->program.ops[0].op, OpKind::kPad);
  TempDir dir;
  HostBuffer x = f32s({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  std::vector<HostBuffer> out = run(std::move(*r.model), dir, {{"x", &x}});
  EXPECT_EQ(values(out[0]), (std::vector<double>{3, 5, 12, 16, 24, 28}));
}

TEST(OnnxImporter, AnUnsupportedOpNamesTheNode) {
  ModelBuilder b;
  b.input("x", {2});
  b.output("y", {2});
  b.node("Relu", {"x"}, {"r"}, "first");
  attr_int(b.node("Unique", {"r"}, {"y"}, "the_unique"), "sorted", 1);
  Imported r = import_bytes(b);
  ASSERT_FALSE(r.model.is_ok());
  EXPECT_EQ(r.model.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.model.status().message().find("node 'the_unique' (#1, Unique): op Unique is not supported"),
            std::string::npos) << r.model.status().message();
  EXPECT_EQ(r.reason, "op Unique");
}

TEST(OnnxImporter, AnUnsupportedAttributeValueOrAttributeNamesIt) {
  ModelBuilder b;
  b.input("x", {2});
  b.output("y", {4});
  b.int64s("pads", {2}, {1, 1});
  attr_string(b.node("Pad", {"x", "pads"}, {"y"}, "p"), "mode", "wrap");
  Imported r = import_bytes(b);
  ASSERT_FALSE(r.model.is_ok());
  EXPECT_EQ(r.model.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(r.reason, "Pad mode=wrap");
  EXPECT_NE(r.model.status().message().find("node 'p' (#0, Pad)"), std::string::npos);
}

TEST(OnnxImporter, AnUnsupportedDtypeNamesTheNodeAndTheTensor) {
  ModelBuilder b;
  b.input("x", {2});
  b.output("y", {2});
  auto* t = b.g().add_initializer();
  t->set_name("w64");
  t->set_data_type(::onnx::TensorProto::UINT16);
  t->add_dims(2);
  t->add_int32_data(1);
  t->add_int32_data(2);
  b.node("Add", {"x", "w64"}, {"y"}, "adder");
  Imported r = import_bytes(b);
  ASSERT_FALSE(r.model.is_ok());
  EXPECT_EQ(r.model.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(r.reason, "dtype uint16");
  EXPECT_NE(r.model.status().message().find("node 'adder' (#0, Add): initializer 'w64': element type uint16"),
            std::string::npos) << r.model.status().message();
}

TEST(OnnxImporter, OpsetsBefore13AreConvertedByOnnxsVersionConverter) {
  for (int64_t opset : {7, 11, 12}) {
    ModelBuilder b(opset);
    b.input("x", {2});
    b.output("y", {2});
    b.node("Relu", {"x"}, {"y"});
    Imported r = import_bytes(b);
    ASSERT_TRUE(r.model.is_ok()) << opset << ": " << r.model.status().message();
    EXPECT_EQ(r.model->converted_from_opset, opset);
    EXPECT_EQ(r.model->opset, 13);
    ASSERT_EQ(r.model->program.ops.size(), 1u);
    EXPECT_EQ(r.model->program.ops[0].op, OpKind::kRelu);
  }
  ModelBuilder current(13);
  current.input("x", {2});
  current.output("y", {2});
  current.node("Relu", {"x"}, {"y"});
  Imported r = import_bytes(current);
  ASSERT_TRUE(r.model.is_ok());
  EXPECT_EQ(r.model->converted_from_opset, 0);
}

TEST(OnnxImporter, OpsetsAfter17AreRefusedClearly) {
  for (int64_t opset : {18, 19}) {
    ModelBuilder b(opset);
    b.input("x", {2});
    b.output("y", {2});
    b.node("Relu", {"x"}, {"y"});
    Imported r = import_bytes(b);
    ASSERT_FALSE(r.model.is_ok()) << opset;
    EXPECT_EQ(r.model.status().code(), StatusCode::kUnsupported);
    EXPECT_EQ(r.reason, fmt::format("opset {}", opset));
    EXPECT_NE(r.model.status().message().find("opsets 13 to 17"), std::string::npos) << r.model.status().message();
  }
}

TEST(OnnxImporter, TruncatedOrForeignBytesAreAParseError) {
  const std::string bytes = linear_model().bytes();
  for (size_t cut : {size_t{1}, bytes.size() / 2, bytes.size() - 1}) {
    Result<ImportedModel> r = onnx_import::import_onnx_bytes(bytes.substr(0, cut), "m.onnx", "", {});
    ASSERT_FALSE(r.is_ok()) << cut;
    EXPECT_TRUE(r.status().code() == StatusCode::kParseError || r.status().code() == StatusCode::kInvalidArgument)
        << r.status().message();
  }
  Result<ImportedModel> r = onnx_import::import_onnx_bytes("tracecache 1\ninput x : f32[2] = full(1)\n", "m.onnx", "", {});
  EXPECT_FALSE(r.is_ok());
}

TEST(OnnxImporter, HugeDimsAndShortDataAreRefusedBeforeAllocating) {
  {
    ModelBuilder b;
    b.input("x", {2});
    b.output("y", {2});
    auto* t = b.g().add_initializer();
    t->set_name("huge");
    t->set_data_type(::onnx::TensorProto::FLOAT);
    t->add_dims(int64_t{1} << 30);
    t->add_dims(int64_t{1} << 30);
    t->set_raw_data("abcd");
    b.node("Add", {"x", "huge"}, {"y"}, "add");
    Imported r = import_bytes(b);
    ASSERT_FALSE(r.model.is_ok());
    EXPECT_NE(r.model.status().message().find("elements"), std::string::npos) << r.model.status().message();
  }
  {
    ModelBuilder b;
    b.input("x", {2});
    b.output("y", {2});
    auto* t = b.g().add_initializer();
    t->set_name("short");
    t->set_data_type(::onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->set_raw_data("abcd");  // 4 bytes for 2 floats
    b.node("Add", {"x", "short"}, {"y"}, "add");
    Imported r = import_bytes(b);
    ASSERT_FALSE(r.model.is_ok());
    EXPECT_EQ(r.model.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.model.status().message().find("raw_data holds 4"), std::string::npos) << r.model.status().message();
  }
}

// An initializer "w" [2] stored as external data at `location` (offset 0, 8 bytes).
ModelBuilder external_model(const std::string& location, const std::string& offset = "0") {
  ModelBuilder b;
  b.input("x", {2});
  b.output("y", {2});
  auto* t = b.g().add_initializer();
  t->set_name("w");
  t->set_data_type(::onnx::TensorProto::FLOAT);
  t->add_dims(2);
  t->set_data_location(::onnx::TensorProto::EXTERNAL);
  auto* kv = t->add_external_data();
  kv->set_key("location");
  kv->set_value(location);
  kv = t->add_external_data();
  kv->set_key("offset");
  kv->set_value(offset);
  b.node("Add", {"x", "w"}, {"y"}, "add");
  return b;
}

TEST(OnnxImporter, ExternalDataIsReadOnlyInsideTheModelsDirectory) {
  TempDir dir;
  const fs::path model_dir = dir.path() / "model";
  fs::create_directories(model_dir);
  const float w[2] = {1.5f, -2.0f};
  std::ofstream(model_dir / "w.bin", std::ios::binary).write(reinterpret_cast<const char*>(w), sizeof w);
  std::ofstream(dir.path() / "secret.bin", std::ios::binary).write(reinterpret_cast<const char*>(w), sizeof w);
  fs::create_symlink(dir.path() / "secret.bin", model_dir / "link.bin");

  Imported ok = import_bytes(external_model("w.bin"), {}, model_dir.string());
  ASSERT_TRUE(ok.model.is_ok()) << ok.model.status().message();
  HostBuffer x = f32s({2}, {1, 1});
  EXPECT_EQ(values(run(std::move(*ok.model), dir, {{"x", &x}})[0]), (std::vector<double>{2.5, -1}));

  for (const std::string& escape : {std::string("../secret.bin"), (dir.path() / "secret.bin").string(),
                                    std::string("link.bin")}) {
    Imported r = import_bytes(external_model(escape), {}, model_dir.string());
    ASSERT_FALSE(r.model.is_ok()) << escape;
    EXPECT_NE(r.model.status().message().find("outside the model's directory"), std::string::npos)
        << escape << ": " << r.model.status().message();
  }
  Imported past_end = import_bytes(external_model("w.bin", "4"), {}, model_dir.string());
  ASSERT_FALSE(past_end.model.is_ok());
  EXPECT_NE(past_end.model.status().message().find("lies outside"), std::string::npos) << past_end.model.status().message();
  Imported in_memory = import_bytes(external_model("w.bin"));
  EXPECT_FALSE(in_memory.model.is_ok());
}

// docs/onnx.md's table between its markers is exactly the importer's op table, row for row.
TEST(OnnxImporter, TheDocsOpTableIsTheImportersMapping) {
  std::ifstream in(fs::path(TRACECACHE_SOURCE_DIR) / "docs" / "onnx.md");
  ASSERT_TRUE(in.good());
  std::vector<std::string> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find("<!-- op table begin") != std::string::npos) { inside = true; continue; }
    if (line.find("<!-- op table end") != std::string::npos) break;
    if (inside && line.rfind("| `", 0) == 0) rows.push_back(line);
  }
  std::vector<std::string> want;
  for (const onnx_import::SupportedOp& op : onnx_import::supported_ops()) {
    want.push_back(fmt::format("| `{}` | {} |", op.onnx, op.lowering));
  }
  std::string expected;
  for (const std::string& w : want) expected += w + "\n";
  EXPECT_EQ(rows, want) << "docs/onnx.md's op table differs from the importer's; it should read:\n" << expected;
  for (size_t k = 1; k < want.size(); ++k) EXPECT_LT(onnx_import::supported_ops()[k - 1].onnx, onnx_import::supported_ops()[k].onnx);
}

}  // namespace
}  // namespace tracecache
