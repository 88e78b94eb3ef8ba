// The model zoo: parameter counts and state_dict names, dtypes and shapes against torchvision
// (fixtures/zoo/*.state_dict, written by scripts/zoo_state_dicts.py) and HuggingFace's BertModel,
// presets and options, weight files checked against a model, and every model traced into a trace
// program and run: the reference evaluator, eager cpu and lazy cpu agree.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "frontend/program/program_runner.h"
#include "capture/reference/reference.h"
#include "frontend/files/safetensors.h"
#include "replay/backends/cpu/cpu_backend.h"
#include "replay/backends/cpu/eager_runner.h"
#include "replay/backends/sim/device_spec.h"
#include "replay/engine/runtime.h"
#include "replay/backends/sim/sim_backend.h"
#include "frontend/zoo/layers.h"
#include "frontend/zoo/model.h"
#include "frontend/zoo/program.h"
#include "tests/test_support.h"

namespace tracecache::zoo {
namespace {

ModelSpec model(std::string_view name, ModelOptions options = {}) {
  Result<ModelSpec> spec = make_model(name, options);
  if (!spec.is_ok()) throw Error(spec.status());
  return std::move(spec).value();
}

ModelOptions small() {
  ModelOptions o;
  o.preset = Preset::kSmall;
  return o;
}

std::string describe(const TensorSpec& t) {
  return fmt::format("{} {} {} {}", t.name, dtype_name(t.dtype), t.shape.to_string(),
                     t.role == TensorSpec::Role::kParameter ? "parameter" : "buffer");
}

TEST(Zoo, ParameterCountsEqualTorchvisionAndHuggingFace) {
  const std::pair<std::string_view, int64_t> expected[] = {
      {"resnet18", 11'689'512},     {"resnet50", 25'557'032},   {"resnext50_32x4d", 25'028'904},
      {"alexnet", 61'100'840},      {"mobilenet_v2", 3'504'872}, {"mnasnet1_0", 4'383'312},
      {"squeezenet1_1", 1'235'496}, {"vgg16", 138'357'544},     {"vit_b_16", 86'567'656},
      {"bert_base", 109'482'240}};
  ASSERT_EQ(zoo_models().size(), std::size(expected));
  for (const auto& [name, count] : expected) {
    EXPECT_EQ(model(name).parameter_count(), count) << name;
  }
}

// Every state_dict entry, in torch's order, with its dtype, shape and parameter/buffer role.
TEST(Zoo, StateDictsEqualTorchvision) {
  for (const ModelInfo& info : zoo_models()) {
    if (info.kind != ModelKind::kImage) continue;
    SCOPED_TRACE(info.name);
    std::ifstream in(std::string(TRACECACHE_SOURCE_DIR) + "/fixtures/zoo/" +
                     std::string(info.name) + ".state_dict");
    ASSERT_TRUE(in) << "missing fixture";
    std::vector<std::string> want;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] != '#') want.push_back(line);
    }
    ModelSpec spec = model(info.name);
    std::vector<std::string> got;
    for (const TensorSpec& t : spec.tensors) got.push_back(describe(t));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "entry " << i;
  }
}

TEST(Zoo, BertUsesHuggingFaceNames) {
  ModelSpec spec = model("bert_base");
  const std::pair<std::string_view, std::string_view> known[] = {
      {"embeddings.word_embeddings.weight", "[30522, 768]"},
      {"embeddings.position_embeddings.weight", "[512, 768]"},
      {"embeddings.token_type_embeddings.weight", "[2, 768]"},
      {"embeddings.LayerNorm.bias", "[768]"},
      {"encoder.layer.0.attention.self.query.weight", "[768, 768]"},
      {"encoder.layer.11.attention.output.LayerNorm.weight", "[768]"},
      {"encoder.layer.5.intermediate.dense.weight", "[3072, 768]"},
      {"encoder.layer.5.output.dense.weight", "[768, 3072]"},
      {"pooler.dense.weight", "[768, 768]"},
      {"pooler.dense.bias", "[768]"}};
  for (const auto& [name, shape] : known) {
    const TensorSpec* t = spec.find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape.to_string(), shape) << name;
    EXPECT_EQ(t->role, TensorSpec::Role::kParameter);
  }
  EXPECT_EQ(spec.tensors.size(), 5u + 12u * 16u + 2u);
  EXPECT_EQ(spec.find_tensor("encoder.layer.12.output.dense.weight"), nullptr);
  ASSERT_EQ(spec.inputs.size(), 3u);
  EXPECT_EQ(spec.input_summary(),
            "input_ids i64[1, 128], token_type_ids i64[1, 128], attention_mask i64[1, 128]");
  EXPECT_EQ(spec.output_names, (std::vector<std::string>{"last_hidden_state", "pooler_output"}));
}

TEST(Zoo, PresetsAndOptionsShapeTheInputs) {
  EXPECT_EQ(model("resnet50").input_summary(), "image f32[1, 3, 224, 224]");
  EXPECT_EQ(model("resnet50", small()).input_summary(), "image f32[1, 3, 32, 32]");
  EXPECT_EQ(model("alexnet", small()).input_summary(), "image f32[1, 3, 64, 64]");
  ModelOptions o = small();
  o.batch = 3;
  o.resolution = 48;
  EXPECT_EQ(model("vit_b_16", o).input_summary(), "image f32[3, 3, 48, 48]");
  // ViT's position embedding follows the resolution: (48 / 16)^2 patches + the class token.
  EXPECT_EQ(model("vit_b_16", o).find_tensor("encoder.pos_embedding")->shape, (Shape{1, 10, 64}));
  o = {};
  o.seq_len = 384;
  EXPECT_EQ(model("bert_base", o).inputs[0].shape, (Shape{1, 384}));
  // Small variants keep the structure, at a fraction of the size.
  for (const ModelInfo& info : zoo_models()) {
    ModelSpec s = model(info.name, small());
    EXPECT_EQ(s.preset, Preset::kSmall);
    EXPECT_LT(s.parameter_count(), 500'000) << info.name;
    EXPECT_GT(s.parameter_count(), 1'000) << info.name;
  }
}

TEST(Zoo, BadNamesAndOptionsAreClearErrors) {
  auto error_of = [](std::string_view name, ModelOptions o) {
    Result<ModelSpec> r = make_model(name, o);
    EXPECT_FALSE(r.is_ok()) << name;
    return r.is_ok() ? std::string() : r.status().message();
  };
  Result<ModelSpec> unknown = make_model("resnet19");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(),
            "no model 'resnet19' in the zoo (available: resnet18, resnet50, resnext50_32x4d, "
            "alexnet, mobilenet_v2, mnasnet1_0, squeezenet1_1, vgg16, vit_b_16, bert_base)");
  ModelOptions o;
  o.batch = -2;
  EXPECT_EQ(error_of("resnet18", o), "resnet18: batch must be >= 1, got -2");
  o = {};
  o.resolution = 40;
  EXPECT_EQ(error_of("alexnet", o), "alexnet: resolution must be >= 63, got 40");
  EXPECT_EQ(error_of("vit_b_16", o), "vit_b_16: resolution must be a multiple of 16, got 40");
  EXPECT_EQ(error_of("bert_base", o),
            "bert_base is a text model: it takes a sequence length, not a resolution");
  o = {};
  o.seq_len = 16;
  EXPECT_EQ(error_of("vgg16", o),
            "vgg16 is an image model: it takes a resolution, not a sequence length");
  o.seq_len = 513;
  EXPECT_EQ(error_of("bert_base", o), "bert_base: sequence length must be in [1, 512], got 513");
}

TEST(Zoo, InitializersAreFixedRulesSeededByName) {
  ModelSpec spec = model("resnet18");
  const TensorSpec* conv = spec.find_tensor("conv1.weight");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->init.kind, Generator::Kind::kUniform);
  EXPECT_DOUBLE_EQ(conv->init.high, std::sqrt(6 / (3.0 * 7 * 7)));
  EXPECT_DOUBLE_EQ(spec.find_tensor("fc.weight")->init.high, 1 / std::sqrt(512.0));
  EXPECT_DOUBLE_EQ(conv->init.low, -conv->init.high);
  EXPECT_EQ(conv->init.seed, detail::name_seed("conv1.weight"));
  EXPECT_NE(conv->init.seed, spec.find_tensor("fc.weight")->init.seed);
  EXPECT_EQ(detail::name_seed("conv1.weight"), model("resnet50").find_tensor("conv1.weight")->init.seed);
  EXPECT_LT(detail::name_seed("x"), uint64_t{1} << 63);
  EXPECT_EQ(spec.find_tensor("bn1.running_var")->init.kind, Generator::Kind::kFull);
  EXPECT_EQ(spec.find_tensor("bn1.running_var")->init.value, 1);
  EXPECT_EQ(spec.find_tensor("bn1.num_batches_tracked")->dtype, DType::kI64);
  EXPECT_EQ(spec.find_tensor("bn1.num_batches_tracked")->role, TensorSpec::Role::kBuffer);
  EXPECT_EQ(model("bert_base").find_tensor("embeddings.word_embeddings.weight")->init.kind,
            Generator::Kind::kNormal);
}

// ---- weight files -----------------------------------------------------------------------------

// A safetensors file (in memory) holding every tensor of `spec`, zero-filled, after `edit`.
SafetensorsFile weights_file(const ModelSpec& spec,
                             const std::function<void(std::map<std::string, HostBuffer>&)>& edit) {
  std::map<std::string, HostBuffer> buffers;
  for (const TensorSpec& t : spec.tensors) buffers.emplace(t.name, HostBuffer(t.dtype, t.shape));
  edit(buffers);
  std::vector<NamedBuffer> named;
  for (const auto& [name, b] : buffers) named.push_back({name, &b});
  return SafetensorsFile::parse(encode_safetensors(named).value_or_throw(), "w.safetensors")
      .value_or_throw();
}

TEST(ZooWeights, AFileWithExactlyTheModelsTensorsFits) {
  ModelSpec spec = model("resnet18", small());
  Status st = check_weights(spec, weights_file(spec, [](auto&) {}));
  EXPECT_TRUE(st.is_ok()) << st.to_string();
}

TEST(ZooWeights, EveryMisfitIsNamedInOneError) {
  ModelSpec spec = model("resnet18", small());
  Status st = check_weights(spec, weights_file(spec, [](std::map<std::string, HostBuffer>& b) {
    b.erase("fc.bias");
    b.erase("layer1.0.bn1.num_batches_tracked");
    b.emplace("fc.extra", HostBuffer(DType::kF32, Shape{1}));
    b.insert_or_assign("conv1.weight", HostBuffer(DType::kF32, Shape{8, 3, 3, 3}));
    b.insert_or_assign("bn1.running_mean", HostBuffer(DType::kI32, Shape{8}));
  }));
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "w.safetensors: the weights do not fit resnet18 (small preset): 2 missing: "
            "layer1.0.bn1.num_batches_tracked; fc.bias. 1 unexpected: fc.extra. 2 mismatched: "
            "conv1.weight is F32 [8, 3, 3, 3] in the file, F32 [8, 3, 7, 7] in the model; "
            "bn1.running_mean is I32 [8] in the file, F32 [8] in the model.");
}

TEST(ZooWeights, SavedInitialWeightsFitAndHoldTheInitializersValues) {
  ModelSpec spec = model("mnasnet1_0", small());
  const testing::TempDir dir;  // its own folder: ctest may run this test in two processes at once
  const std::string path = dir.file("mnas.safetensors");
  ASSERT_TRUE(write_initial_weights(spec, path).is_ok());
  Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_TRUE(check_weights(spec, *file).is_ok());
  EXPECT_EQ(file->metadata().at("model"), "mnasnet1_0");
  for (const char* name : {"layers.0.weight", "layers.1.running_var", "classifier.1.bias",
                           "layers.15.num_batches_tracked"}) {
    Result<HostBuffer> b = file->tensor(name);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    EXPECT_EQ(b->checksum(), initial_value(*spec.find_tensor(name)).checksum()) << name;
  }
  HostBuffer w = initial_value(*spec.find_tensor("layers.0.weight"));
  double bound = spec.find_tensor("layers.0.weight")->init.high;
  double largest = 0;
  for (float x : w.span<float>()) largest = std::max(largest, std::abs(static_cast<double>(x)));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, bound / 2);
}

TEST(ZooWeights, LongListsAreCut) {
  ModelSpec spec = model("resnet50");
  Status st = check_weights(spec, weights_file(model("resnet18", small()), [](auto&) {}));
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(": 246 missing: layer1.0.conv3.weight; "), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("; and 238 more. 62 mismatched: conv1.weight is F32 [8, 3, 7, 7]"),
            std::string::npos)
      << st.message();
}

// ---- programs ---------------------------------------------------------------------------------

TEST(ZooPrograms, EveryDefaultModelTracesToAProgramThatChecks) {
  for (const ModelInfo& info : zoo_models()) {
    SCOPED_TRACE(info.name);
    ModelSpec spec = model(info.name);
    Result<Program> p = model_program(spec);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    Result<std::vector<TensorType>> types = infer_output_types(*p, 0);
    ASSERT_TRUE(types.is_ok()) << types.status().to_string();
    if (info.kind == ModelKind::kImage) {
      ASSERT_EQ(types->size(), 1u);
      EXPECT_EQ(type_to_string((*types)[0]), "f32[1, 1000]");
    } else {
      ASSERT_EQ(types->size(), 2u);
      EXPECT_EQ(type_to_string((*types)[0]), "f32[1, 128, 768]");
      EXPECT_EQ(type_to_string((*types)[1]), "f32[1, 768]");
    }
    // Every parameter is read by the forward; of the buffers, only BN's running statistics.
    for (const TensorSpec& t : spec.tensors) {
      bool declared = p->find_tensor(program_name(t.name)) != nullptr;
      EXPECT_EQ(declared, !t.name.ends_with("num_batches_tracked")) << t.name;
    }
    std::string text = print_program(*p);
    Result<Program> again = parse_program(text, "again.trace");
    ASSERT_TRUE(again.is_ok()) << again.status().to_string();
    EXPECT_TRUE(*again == *p);
  }
}

TEST(ZooPrograms, WeightsComeFromTheFileByStateDictName) {
  ProgramOptions o;
  o.weights_path = "weights/r18.safetensors";
  Result<Program> p = model_program(model("resnet18", small()), o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  const TensorDecl* w = p->find_tensor("layer2_0_downsample_0_weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->init.kind, Generator::Kind::kSafetensors);
  EXPECT_EQ(w->init.path, "weights/r18.safetensors");
  EXPECT_EQ(w->init.tensor, "layer2.0.downsample.0.weight");
  EXPECT_EQ(p->tensors[0].name, "image");
  EXPECT_EQ(p->tensors[0].init.kind, Generator::Kind::kNormal);
  EXPECT_EQ(program_output_names(*p), (std::vector<std::string>{"logits"}));
}

std::vector<StepResult> run(const Program& p, LazyContext& ctx) {
  return std::move(run_program(p, ctx)).value_or_throw();
}

TEST(ZooPrograms, WeightsFromAFileGiveTheSeededOutputs) {
  ModelSpec spec = model("bert_base", small());
  const testing::TempDir dir;  // its own folder: ctest may run this test in two processes at once
  const std::string path = dir.file("bert.safetensors");
  ASSERT_TRUE(write_initial_weights(spec, path).is_ok());
  ProgramOptions o;
  o.weights_path = path;
  Program from_file = model_program(spec, o).value_or_throw();
  Program seeded = model_program(spec).value_or_throw();
  ReferenceExecutor a, b;
  LazyContext ctx_a(&a), ctx_b(&b);
  std::vector<StepResult> x = run(from_file, ctx_a), y = run(seeded, ctx_b);
  ASSERT_EQ(x[0].outputs.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(x[0].outputs[k].second->checksum(), y[0].outputs[k].second->checksum());
  }
}

// BERT's attention mask: a masked token changes no other token's output; unmasked, it does.
TEST(ZooPrograms, BertMaskedTokensDoNotReachTheOthers) {
  ModelSpec spec = model("bert_base", small());
  const int64_t len = spec.inputs[0].shape[1];
  ReferenceExecutor executor;
  LazyContext ctx(&executor);
  std::vector<Tensor> weights;
  for (const TensorSpec& t : spec.tensors) weights.push_back(ctx.from_buffer(initial_value(t)));
  auto hidden = [&](int64_t last_id, bool mask_last) {
    HostBuffer ids(DType::kI64, Shape{1, len}), types(DType::kI64, Shape{1, len}),
        mask(DType::kI64, Shape{1, len});
    for (int64_t i = 0; i < len; ++i) {
      ids.data<int64_t>()[i] = i == len - 1 ? last_id : (i * 37) % 1000;
      mask.data<int64_t>()[i] = mask_last && i == len - 1 ? 0 : 1;
    }
    std::vector<Tensor> in = {ctx.from_buffer(std::move(ids)), ctx.from_buffer(std::move(types)),
                              ctx.from_buffer(std::move(mask))};
    Weights w(spec.tensors, weights);
    return spec.forward(ctx, in, w)[0].to_vector<float>();
  };
  const size_t hidden_size = 64;
  std::vector<float> a = hidden(5, true), b = hidden(900, true);
  ASSERT_EQ(a.size(), static_cast<size_t>(len) * hidden_size);
  size_t masked_start = static_cast<size_t>(len - 1) * hidden_size;
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(masked_start), b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + static_cast<std::ptrdiff_t>(masked_start), a.end(),
                          b.begin() + static_cast<std::ptrdiff_t>(masked_start)));
  std::vector<float> c = hidden(5, false), d = hidden(900, false);
  EXPECT_FALSE(std::equal(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(hidden_size), d.begin()));
}

// The small variant of every model, on the reference evaluator, the cpu op runner (eager) and
// the cpu runtime (lazy) and the sim:h100 runtime: eager, lazy cpu and sim agree bit for bit; the
// reference agrees closely.
TEST(ZooPrograms, EverySmallModelRunsTheSameEagerLazyAndOnSim) {
  for (const ModelInfo& info : zoo_models()) {
    SCOPED_TRACE(info.name);
    Program p = model_program(model(info.name, small())).value_or_throw();

    ReferenceExecutor reference;
    LazyContext reference_ctx(&reference);
    std::vector<StepResult> want = run(p, reference_ctx);

    CpuOpRunner runner;
    ReferenceExecutor unused;
    LazyOptions eager_options;
    eager_options.eager = &runner;
    LazyContext eager_ctx(&unused, eager_options);
    std::vector<StepResult> eager = run(p, eager_ctx);

    CpuBackend cpu;
    Runtime runtime(&cpu, nullptr, nullptr);
    LazyContext lazy_ctx(&runtime);
    std::vector<StepResult> lazy = run(p, lazy_ctx);

    // The simulated accelerator computes with the cpu kernels: the same bits (issue 6).
    SimBackend sim(*find_device_preset("h100"));
    Runtime sim_runtime(&sim, nullptr, nullptr);
    LazyContext sim_ctx(&sim_runtime);
    std::vector<StepResult> simulated = run(p, sim_ctx);
    for (const store::Event& e : sim_runtime.events()) {
      EXPECT_NE(e.kind, store::EventKind::kFallback) << "sim fell back: " << e.detail;
    }

    ASSERT_EQ(want[0].outputs.size(), p.outputs.size());
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      const HostBuffer& r = *want[0].outputs[k].second;
      const HostBuffer& e = *eager[0].outputs[k].second;
      const HostBuffer& l = *lazy[0].outputs[k].second;
      EXPECT_EQ(e.checksum(), l.checksum()) << p.outputs[k].name;
      EXPECT_EQ(simulated[0].outputs[k].second->checksum(), l.checksum()) << p.outputs[k].name << " on sim";
      ASSERT_EQ(r.shape(), e.shape());
      double scale = 0;
      for (int64_t i = 0; i < r.numel(); ++i) scale = std::max(scale, std::abs(r.element_as_double(i)));
      EXPECT_GT(scale, 0) << "all-zero outputs would hide errors";
      for (int64_t i = 0; i < r.numel(); ++i) {
        ASSERT_NEAR(e.element_as_double(i), r.element_as_double(i), 1e-4 * scale + 1e-6)
            << p.outputs[k].name << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tracecache::zoo
