// ResNet (torchvision.models.resnet): resnet18 (BasicBlock [2, 2, 2, 2]), resnet50 (Bottleneck
// [3, 4, 6, 3]) and resnext50_32x4d (Bottleneck, 32 groups of width 4). The stride of a
// Bottleneck sits on its 3x3 conv (ResNet v1.5), as in torchvision.
#include <fmt/format.h>

#include <array>

#include "frontend/zoo/layers.h"
#include "frontend/zoo/models.h"

namespace tracecache::zoo::detail {

namespace {

struct ResNetConfig {
  bool bottleneck = false;
  std::array<int64_t, 4> blocks{2, 2, 2, 2};
  int64_t stem = 64;             // channels after the stem; stage i has stem << i planes
  int64_t groups = 1;
  int64_t width_per_group = 64;  // torchvision's base_width
  int64_t num_classes = 1000;

  int64_t expansion() const { return bottleneck ? 4 : 1; }
  // The 3x3 conv's width in a Bottleneck: int(planes * (base_width / 64.)) * groups, with the
  // stem width in place of torchvision's constant 64 (equal at the default preset).
  int64_t width(int64_t planes) const { return planes * width_per_group / stem * groups; }
};

struct Block {
  std::string prefix;  // "layer2.0"
  int64_t inplanes, planes, stride;
  bool downsample;
};

std::vector<Block> blocks_of(const ResNetConfig& c) {
  std::vector<Block> out;
  int64_t inplanes = c.stem;
  for (int stage = 0; stage < 4; ++stage) {
    int64_t planes = c.stem << stage;
    for (int64_t i = 0; i < c.blocks[static_cast<size_t>(stage)]; ++i) {
      int64_t stride = stage > 0 && i == 0 ? 2 : 1;
      bool downsample = stride != 1 || inplanes != planes * c.expansion();
      out.push_back({fmt::format("layer{}.{}", stage + 1, i), inplanes, planes, stride, downsample});
      inplanes = planes * c.expansion();
    }
  }
  return out;
}

void declare(const ResNetConfig& c, SpecBuilder& b) {
  b.conv("conv1", c.stem, 3, 7, 1, false);
  b.batch_norm("bn1", c.stem);
  for (const Block& k : blocks_of(c)) {
    const std::string& p = k.prefix;
    int64_t out = k.planes * c.expansion();
    if (c.bottleneck) {
      int64_t width = c.width(k.planes);
      b.conv(p + ".conv1", width, k.inplanes, 1, 1, false);
      b.batch_norm(p + ".bn1", width);
      b.conv(p + ".conv2", width, width, 3, c.groups, false);
      b.batch_norm(p + ".bn2", width);
      b.conv(p + ".conv3", out, width, 1, 1, false);
      b.batch_norm(p + ".bn3", out);
    } else {
      b.conv(p + ".conv1", k.planes, k.inplanes, 3, 1, false);
      b.batch_norm(p + ".bn1", k.planes);
      b.conv(p + ".conv2", k.planes, k.planes, 3, 1, false);
      b.batch_norm(p + ".bn2", k.planes);
    }
    if (k.downsample) {
      b.conv(p + ".downsample.0", out, k.inplanes, 1, 1, false);
      b.batch_norm(p + ".downsample.1", out);
    }
  }
  b.linear("fc", c.num_classes, c.stem * 8 * c.expansion());
}

Tensor forward(const ResNetConfig& c, const Weights& w, const Tensor& image) {
  Tensor x = relu(batch_norm_layer(w, "bn1", conv_layer(w, "conv1", image, 2, 3, 1, false)));
  x = max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  for (const Block& k : blocks_of(c)) {
    const std::string& p = k.prefix;
    Tensor identity = x;
    Tensor y;
    if (c.bottleneck) {
      y = relu(batch_norm_layer(w, p + ".bn1", conv_layer(w, p + ".conv1", x, 1, 0, 1, false)));
      y = relu(batch_norm_layer(w, p + ".bn2",
                                conv_layer(w, p + ".conv2", y, k.stride, 1, c.groups, false)));
      y = batch_norm_layer(w, p + ".bn3", conv_layer(w, p + ".conv3", y, 1, 0, 1, false));
    } else {
      y = relu(batch_norm_layer(w, p + ".bn1", conv_layer(w, p + ".conv1", x, k.stride, 1, 1, false)));
      y = batch_norm_layer(w, p + ".bn2", conv_layer(w, p + ".conv2", y, 1, 1, 1, false));
    }
    if (k.downsample) {
      identity = batch_norm_layer(w, p + ".downsample.1",
                                  conv_layer(w, p + ".downsample.0", x, k.stride, 0, 1, false));
    }
    x = relu(y + identity);
  }
  x = flatten(adaptive_avg_pool2d(x, {1, 1}), 1);
  return linear_layer(w, "fc", x);
}

}  // namespace

Result<ModelSpec> make_resnet(std::string_view name, const ModelOptions& options) {
  ResNetConfig c;
  if (name == "resnet50" || name == "resnext50_32x4d") {
    c.bottleneck = true;
    c.blocks = {3, 4, 6, 3};
  }
  if (name == "resnext50_32x4d") {
    c.groups = 32;
    c.width_per_group = 4;
  }
  if (options.preset == Preset::kSmall) {
    c.blocks = {1, 1, 1, 1};
    c.stem = 8;
    c.num_classes = 10;
    // Keep each model's ratio of 3x3 width to planes: ResNet-50 1x, ResNeXt 2x.
    if (c.groups > 1) {
      c.groups = 4;
    } else {
      c.width_per_group = c.stem;
    }
  }
  Result<ImageShape> shape = image_shape(name, options, 32, 32);
  if (!shape.is_ok()) return shape.status();
  ModelSpec spec = image_classifier(name, options, *shape);
  SpecBuilder b(&spec.tensors);
  declare(c, b);
  spec.forward = [c](LazyContext&, std::span<const Tensor> in, const Weights& w) {
    return std::vector<Tensor>{forward(c, w, in[0])};
  };
  return spec;
}

}  // namespace tracecache::zoo::detail
