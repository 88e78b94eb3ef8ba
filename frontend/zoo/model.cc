#include "frontend/zoo/model.h"

#include <fmt/format.h>

#include "frontend/zoo/models.h"

namespace tracecache::zoo {

namespace {

constexpr ModelInfo kModels[] = {
    {"resnet18", "ResNet-18 (torchvision)", ModelKind::kImage},
    {"resnet50", "ResNet-50 v1.5 (torchvision)", ModelKind::kImage},
    {"resnext50_32x4d", "ResNeXt-50 32x4d (torchvision)", ModelKind::kImage},
    {"alexnet", "AlexNet (torchvision)", ModelKind::kImage},
    {"mobilenet_v2", "MobileNetV2 (torchvision)", ModelKind::kImage},
    {"mnasnet1_0", "MNASNet 1.0 (torchvision)", ModelKind::kImage},
    {"squeezenet1_1", "SqueezeNet 1.1 (torchvision)", ModelKind::kImage},
    {"vgg16", "VGG-16 (torchvision)", ModelKind::kImage},
    {"vit_b_16", "ViT-B/16 (torchvision)", ModelKind::kImage},
    {"bert_base", "BERT-base encoder with pooler (bert-base-uncased, HuggingFace BertModel)",
     ModelKind::kText},
};

}  // namespace

std::optional<Preset> parse_preset(std::string_view name) {
  if (name == "default") return Preset::kDefault;
  if (name == "small") return Preset::kSmall;
  return std::nullopt;
}

std::string_view preset_name(Preset preset) {
  return preset == Preset::kSmall ? "small" : "default";
}

Weights::Weights(std::span<const TensorSpec> specs, std::span<const Tensor> tensors,
                 TrainingState* training)
    : specs_(specs), tensors_(tensors), used_(specs.size(), false), training_(training) {}

const Tensor& Weights::operator[](std::string_view name) const {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].name == name) {
      used_[i] = true;
      return tensors_[i];
    }
  }
  throw Error(not_found(fmt::format("the model has no tensor '{}'", name)));
}

std::vector<std::string> Weights::unused() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!used_[i]) out.push_back(specs_[i].name);
  }
  return out;
}

int64_t ModelSpec::parameter_count() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors) {
    if (t.role == TensorSpec::Role::kParameter) n += t.shape.numel();
  }
  return n;
}

const TensorSpec* ModelSpec::find_tensor(std::string_view tensor) const {
  for (const TensorSpec& t : tensors) {
    if (t.name == tensor) return &t;
  }
  return nullptr;
}

std::string ModelSpec::input_summary() const {
  std::string out;
  for (const InputSpec& in : inputs) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {}", in.name, type_to_string({in.dtype, in.shape}));
  }
  return out;
}

std::span<const ModelInfo> zoo_models() { return kModels; }

Result<ModelSpec> make_model(std::string_view name, const ModelOptions& options) {
  using namespace detail;
  if (name == "resnet18" || name == "resnet50" || name == "resnext50_32x4d") {
    return make_resnet(name, options);
  }
  if (name == "alexnet") return make_alexnet(options);
  if (name == "vgg16") return make_vgg16(options);
  if (name == "squeezenet1_1") return make_squeezenet1_1(options);
  if (name == "mobilenet_v2") return make_mobilenet_v2(options);
  if (name == "mnasnet1_0") return make_mnasnet1_0(options);
  if (name == "vit_b_16") return make_vit_b_16(options);
  if (name == "bert_base") return make_bert_base(options);
  std::vector<std::string_view> names;
  for (const ModelInfo& m : kModels) names.push_back(m.name);
  return not_found(fmt::format("no model '{}' in the zoo (available: {})", name,
                               fmt::join(names, ", ")));
}

}  // namespace tracecache::zoo
