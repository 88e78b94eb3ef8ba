// The plain convolutional stacks: AlexNet (torchvision.models.alexnet) and VGG-16
// (torchvision.models.vgg16, configuration "D", no batch norm). Module indices in the names
// ("features.3.weight", "classifier.6.bias") are the positions in torchvision's nn.Sequential,
// ReLU, pooling and dropout included.
#include <fmt/format.h>

#include "frontend/zoo/layers.h"
#include "frontend/zoo/models.h"

namespace tracecache::zoo::detail {

namespace {

// ---- AlexNet ----------------------------------------------------------------------------------

struct AlexNetConfig {
  std::array<int64_t, 5> channels{64, 192, 384, 256, 256};
  int64_t hidden = 4096;
  int64_t num_classes = 1000;
};

// features: conv (index, kernel, stride, padding) with a ReLU after each and a max pool after
// convs 0, 1 and 4.
struct AlexConv {
  int index;
  int64_t kernel, stride, padding;
  bool pool_after;
};
constexpr AlexConv kAlexConvs[] = {
    {0, 11, 4, 2, true}, {3, 5, 1, 2, true}, {6, 3, 1, 1, false}, {8, 3, 1, 1, false},
    {10, 3, 1, 1, true}};

void declare_alexnet(const AlexNetConfig& c, SpecBuilder& b) {
  int64_t in = 3;
  for (size_t i = 0; i < 5; ++i) {
    b.conv(fmt::format("features.{}", kAlexConvs[i].index), c.channels[i], in,
           kAlexConvs[i].kernel, 1, true);
    in = c.channels[i];
  }
  b.linear("classifier.1", c.hidden, in * 6 * 6);
  b.linear("classifier.4", c.hidden, c.hidden);
  b.linear("classifier.6", c.num_classes, c.hidden);
}

Tensor alexnet_forward(const Weights& w, const Tensor& image) {
  Tensor x = image;
  for (const AlexConv& k : kAlexConvs) {
    x = relu(conv_layer(w, fmt::format("features.{}", k.index), x, k.stride, k.padding, 1, true));
    if (k.pool_after) x = max_pool2d(x, {3, 3}, {2, 2});
  }
  x = flatten(adaptive_avg_pool2d(x, {6, 6}), 1);
  x = relu(linear_layer(w, "classifier.1", dropout_layer(w, x, 0.5)));
  x = relu(linear_layer(w, "classifier.4", dropout_layer(w, x, 0.5)));
  return linear_layer(w, "classifier.6", x);
}

// ---- VGG-16 -----------------------------------------------------------------------------------

constexpr int64_t kPool = 0;  // a max pool in the configuration list
constexpr int64_t kVgg16[] = {64,  64,  kPool, 128, 128, kPool, 256, 256, 256, kPool,
                              512, 512, 512,   kPool, 512, 512, 512, kPool};

struct VggConfig {
  int64_t width_divisor = 1;
  int64_t hidden = 4096;
  int64_t num_classes = 1000;
};

void declare_vgg(const VggConfig& c, SpecBuilder& b) {
  int64_t in = 3;
  int index = 0;
  for (int64_t v : kVgg16) {
    if (v == kPool) {
      index += 1;
      continue;
    }
    int64_t out = v / c.width_divisor;
    b.conv(fmt::format("features.{}", index), out, in, 3, 1, true);
    in = out;
    index += 2;  // the conv and its ReLU
  }
  b.linear("classifier.0", c.hidden, in * 7 * 7);
  b.linear("classifier.3", c.hidden, c.hidden);
  b.linear("classifier.6", c.num_classes, c.hidden);
}

Tensor vgg_forward(const Weights& w, const Tensor& image) {
  Tensor x = image;
  int index = 0;
  for (int64_t v : kVgg16) {
    if (v == kPool) {
      x = max_pool2d(x, {2, 2}, {2, 2});
      index += 1;
      continue;
    }
    x = relu(conv_layer(w, fmt::format("features.{}", index), x, 1, 1, 1, true));
    index += 2;
  }
  x = flatten(adaptive_avg_pool2d(x, {7, 7}), 1);
  x = dropout_layer(w, relu(linear_layer(w, "classifier.0", x)), 0.5);
  x = dropout_layer(w, relu(linear_layer(w, "classifier.3", x)), 0.5);
  return linear_layer(w, "classifier.6", x);
}

}  // namespace

Result<ModelSpec> make_alexnet(const ModelOptions& options) {
  AlexNetConfig c;
  if (options.preset == Preset::kSmall) {
    c.channels = {8, 24, 48, 32, 32};
    c.hidden = 64;
    c.num_classes = 10;
  }
  // Three stride-2 pools after a stride-4 conv: the smallest input that still has one pixel.
  Result<ImageShape> shape = image_shape("alexnet", options, 64, 63);
  if (!shape.is_ok()) return shape.status();
  ModelSpec spec = image_classifier("alexnet", options, *shape);
  SpecBuilder b(&spec.tensors);
  declare_alexnet(c, b);
  spec.forward = [](LazyContext&, std::span<const Tensor> in, const Weights& w) {
    return std::vector<Tensor>{alexnet_forward(w, in[0])};
  };
  return spec;
}

Result<ModelSpec> make_vgg16(const ModelOptions& options) {
  VggConfig c;
  if (options.preset == Preset::kSmall) {
    c.width_divisor = 8;
    c.hidden = 64;
    c.num_classes = 10;
  }
  Result<ImageShape> shape = image_shape("vgg16", options, 32, 32);
  if (!shape.is_ok()) return shape.status();
  ModelSpec spec = image_classifier("vgg16", options, *shape);
  SpecBuilder b(&spec.tensors);
  declare_vgg(c, b);
  spec.forward = [](LazyContext&, std::span<const Tensor> in, const Weights& w) {
    return std::vector<Tensor>{vgg_forward(w, in[0])};
  };
  return spec;
}

}  // namespace tracecache::zoo::detail
