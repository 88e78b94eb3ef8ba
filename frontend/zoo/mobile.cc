// The compact convolutional networks: SqueezeNet 1.1 (torchvision.models.squeezenet1_1),
// MobileNetV2 (torchvision.models.mobilenet_v2) and MNASNet 1.0 (torchvision.models.mnasnet1_0).
// Module indices in the names are positions in torchvision's nn.Sequential containers.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "frontend/zoo/layers.h"
#include "frontend/zoo/models.h"

namespace tracecache::zoo::detail {

namespace {

// ---- SqueezeNet 1.1 ---------------------------------------------------------------------------

struct Fire {
  int index;  // in `features`
  int64_t in, squeeze, expand1x1, expand3x3;
};

struct SqueezeNetConfig {
  int64_t stem = 64;
  std::vector<Fire> fires{{3, 64, 16, 64, 64},     {4, 128, 16, 64, 64},
                          {6, 128, 32, 128, 128},  {7, 256, 32, 128, 128},
                          {9, 256, 48, 192, 192},  {10, 384, 48, 192, 192},
                          {11, 384, 64, 256, 256}, {12, 512, 64, 256, 256}};
  int64_t num_classes = 1000;
};

void declare_squeezenet(const SqueezeNetConfig& c, SpecBuilder& b) {
  b.conv("features.0", c.stem, 3, 3, 1, true);
  for (const Fire& f : c.fires) {
    std::string p = fmt::format("features.{}", f.index);
    b.conv(p + ".squeeze", f.squeeze, f.in, 1, 1, true);
    b.conv(p + ".expand1x1", f.expand1x1, f.squeeze, 1, 1, true);
    b.conv(p + ".expand3x3", f.expand3x3, f.squeeze, 3, 1, true);
  }
  const Fire& last = c.fires.back();
  b.conv("classifier.1", c.num_classes, last.expand1x1 + last.expand3x3, 1, 1, true);
}

Tensor squeezenet_forward(const SqueezeNetConfig& c, const Weights& w, const Tensor& image) {
  auto pool = [](const Tensor& t) { return max_pool2d(t, {3, 3}, {2, 2}, {0, 0}, {1, 1}, true); };
  Tensor x = pool(relu(conv_layer(w, "features.0", image, 2, 0, 1, true)));
  for (const Fire& f : c.fires) {
    std::string p = fmt::format("features.{}", f.index);
    // Max pools sit at features.5 and features.8, before the fires that follow them.
    if (f.index == 6 || f.index == 9) x = pool(x);
    Tensor s = relu(conv_layer(w, p + ".squeeze", x, 1, 0, 1, true));
    Tensor parts[] = {relu(conv_layer(w, p + ".expand1x1", s, 1, 0, 1, true)),
                      relu(conv_layer(w, p + ".expand3x3", s, 1, 1, 1, true))};
    x = concat(parts, 1);
  }
  x = relu(conv_layer(w, "classifier.1", dropout_layer(w, x, 0.5), 1, 0, 1, true));
  return flatten(adaptive_avg_pool2d(x, {1, 1}), 1);
}

// ---- MobileNetV2 ------------------------------------------------------------------------------

// torchvision's _make_divisible: the nearest multiple of `divisor`, never below 90% of v.
int64_t make_divisible(double v, int64_t divisor) {
  int64_t rounded =
      std::max(divisor, static_cast<int64_t>(v + static_cast<double>(divisor) / 2) / divisor * divisor);
  if (static_cast<double>(rounded) < 0.9 * v) rounded += divisor;
  return rounded;
}

struct InvertedResidualSetting {
  int64_t expand, channels, repeats, stride;
};

struct MobileNetV2Config {
  double width_mult = 1.0;
  int64_t last_channel = 1280;  // before the width multiplier
  int64_t max_repeats = 4;      // caps each stage's repeats (the default caps nothing)
  int64_t num_classes = 1000;
  std::array<InvertedResidualSetting, 7> settings{{{1, 16, 1, 1},
                                                   {6, 24, 2, 2},
                                                   {6, 32, 3, 2},
                                                   {6, 64, 4, 2},
                                                   {6, 96, 3, 1},
                                                   {6, 160, 3, 2},
                                                   {6, 320, 1, 1}}};
};

struct MobileBlock {
  std::string prefix;  // "features.3"
  int64_t in, out, hidden, stride, expand;
  bool residual;
};

struct MobileNetLayout {
  int64_t first = 0;  // channels of features.0
  std::vector<MobileBlock> blocks;
  int64_t last_in = 0, last = 0;  // the final 1x1 ConvBNReLU6
};

MobileNetLayout mobilenet_layout(const MobileNetV2Config& c) {
  MobileNetLayout l;
  l.first = make_divisible(32 * c.width_mult, 8);
  l.last = make_divisible(static_cast<double>(c.last_channel) * std::max(1.0, c.width_mult), 8);
  int64_t in = l.first;
  int index = 1;
  for (const InvertedResidualSetting& s : c.settings) {
    int64_t out = make_divisible(static_cast<double>(s.channels) * c.width_mult, 8);
    for (int64_t i = 0; i < std::min(s.repeats, c.max_repeats); ++i) {
      int64_t stride = i == 0 ? s.stride : 1;
      int64_t hidden = static_cast<int64_t>(std::round(static_cast<double>(in * s.expand)));
      l.blocks.push_back({fmt::format("features.{}", index++), in, out, hidden, stride, s.expand,
                          stride == 1 && in == out});
      in = out;
    }
  }
  l.last_in = in;
  return l;
}

// Conv2dNormActivation: prefix.0 conv (no bias), prefix.1 batch norm, then ReLU6.
void declare_conv_bn(SpecBuilder& b, const std::string& p, int64_t out, int64_t in,
                     int64_t kernel, int64_t groups) {
  b.conv(p + ".0", out, in, kernel, groups, false);
  b.batch_norm(p + ".1", out);
}

Tensor conv_bn_relu6(const Weights& w, const std::string& p, const Tensor& x, int64_t kernel,
                     int64_t stride, int64_t groups) {
  return relu6(batch_norm_layer(w, p + ".1",
                                conv_layer(w, p + ".0", x, stride, (kernel - 1) / 2, groups, false)));
}

void declare_mobilenet(const MobileNetV2Config& c, SpecBuilder& b) {
  MobileNetLayout l = mobilenet_layout(c);
  declare_conv_bn(b, "features.0", l.first, 3, 3, 1);
  for (const MobileBlock& k : l.blocks) {
    int i = 0;
    if (k.expand != 1) declare_conv_bn(b, fmt::format("{}.conv.{}", k.prefix, i++), k.hidden, k.in, 1, 1);
    declare_conv_bn(b, fmt::format("{}.conv.{}", k.prefix, i++), k.hidden, k.hidden, 3, k.hidden);
    b.conv(fmt::format("{}.conv.{}", k.prefix, i++), k.out, k.hidden, 1, 1, false);
    b.batch_norm(fmt::format("{}.conv.{}", k.prefix, i), k.out);
  }
  declare_conv_bn(b, fmt::format("features.{}", l.blocks.size() + 1), l.last, l.last_in, 1, 1);
  b.linear("classifier.1", c.num_classes, l.last);
}

Tensor mobilenet_forward(const MobileNetV2Config& c, const Weights& w, const Tensor& image) {
  MobileNetLayout l = mobilenet_layout(c);
  Tensor x = conv_bn_relu6(w, "features.0", image, 3, 2, 1);
  for (const MobileBlock& k : l.blocks) {
    int i = 0;
    Tensor y = x;
    if (k.expand != 1) y = conv_bn_relu6(w, fmt::format("{}.conv.{}", k.prefix, i++), y, 1, 1, 1);
    y = conv_bn_relu6(w, fmt::format("{}.conv.{}", k.prefix, i++), y, 3, k.stride, k.hidden);
    y = conv_layer(w, fmt::format("{}.conv.{}", k.prefix, i++), y, 1, 0, 1, false);
    y = batch_norm_layer(w, fmt::format("{}.conv.{}", k.prefix, i), y);
    x = k.residual ? x + y : y;
  }
  x = conv_bn_relu6(w, fmt::format("features.{}", l.blocks.size() + 1), x, 1, 1, 1);
  x = flatten(adaptive_avg_pool2d(x, {1, 1}), 1);
  return linear_layer(w, "classifier.1", dropout_layer(w, x, 0.2));
}

// ---- MNASNet 1.0 ------------------------------------------------------------------------------

// torchvision's _round_to_multiple_of with round_up_bias 0.9.
int64_t round_to_multiple_of(double v, int64_t divisor) {
  int64_t rounded =
      std::max(divisor, static_cast<int64_t>(v + static_cast<double>(divisor) / 2) / divisor * divisor);
  return static_cast<double>(rounded) >= 0.9 * v ? rounded : rounded + divisor;
}

struct MnasStack {
  int64_t kernel, stride, expand, repeats;
};

struct MnasNetConfig {
  double alpha = 1.0;
  int64_t last_channel = 1280;
  int64_t max_repeats = 4;
  int64_t num_classes = 1000;
  std::array<MnasStack, 6> stacks{{{3, 2, 3, 3}, {5, 2, 3, 3}, {5, 2, 6, 3}, {3, 1, 6, 2},
                                    {5, 2, 6, 4}, {3, 1, 6, 1}}};

  std::array<int64_t, 8> depths() const {
    constexpr int64_t kBase[] = {32, 16, 24, 40, 80, 96, 192, 320};
    std::array<int64_t, 8> d{};
    for (size_t i = 0; i < 8; ++i) d[i] = round_to_multiple_of(static_cast<double>(kBase[i]) * alpha, 8);
    return d;
  }
};

struct MnasBlock {
  std::string prefix;  // "layers.8.0"
  int64_t in, out, mid, kernel, stride;
  bool residual;
};

std::vector<MnasBlock> mnas_blocks(const MnasNetConfig& c) {
  std::array<int64_t, 8> d = c.depths();
  std::vector<MnasBlock> out;
  for (size_t s = 0; s < c.stacks.size(); ++s) {
    const MnasStack& st = c.stacks[s];
    int64_t in = d[s + 1];
    for (int64_t i = 0; i < std::min(st.repeats, c.max_repeats); ++i) {
      int64_t stride = i == 0 ? st.stride : 1;
      out.push_back({fmt::format("layers.{}.{}", 8 + s, i), in, d[s + 2], in * st.expand,
                     st.kernel, stride, in == d[s + 2] && stride == 1});
      in = d[s + 2];
    }
  }
  return out;
}

void declare_mnasnet(const MnasNetConfig& c, SpecBuilder& b) {
  std::array<int64_t, 8> d = c.depths();
  b.conv("layers.0", d[0], 3, 3, 1, false);
  b.batch_norm("layers.1", d[0]);
  b.conv("layers.3", d[0], d[0], 3, d[0], false);
  b.batch_norm("layers.4", d[0]);
  b.conv("layers.6", d[1], d[0], 1, 1, false);
  b.batch_norm("layers.7", d[1]);
  for (const MnasBlock& k : mnas_blocks(c)) {
    b.conv(k.prefix + ".layers.0", k.mid, k.in, 1, 1, false);
    b.batch_norm(k.prefix + ".layers.1", k.mid);
    b.conv(k.prefix + ".layers.3", k.mid, k.mid, k.kernel, k.mid, false);
    b.batch_norm(k.prefix + ".layers.4", k.mid);
    b.conv(k.prefix + ".layers.6", k.out, k.mid, 1, 1, false);
    b.batch_norm(k.prefix + ".layers.7", k.out);
  }
  b.conv("layers.14", c.last_channel, d[7], 1, 1, false);
  b.batch_norm("layers.15", c.last_channel);
  b.linear("classifier.1", c.num_classes, c.last_channel);
}

Tensor mnasnet_forward(const MnasNetConfig& c, const Weights& w, const Tensor& image) {
  std::array<int64_t, 8> d = c.depths();
  Tensor x = relu(batch_norm_layer(w, "layers.1", conv_layer(w, "layers.0", image, 2, 1, 1, false)));
  x = relu(batch_norm_layer(w, "layers.4", conv_layer(w, "layers.3", x, 1, 1, d[0], false)));
  x = batch_norm_layer(w, "layers.7", conv_layer(w, "layers.6", x, 1, 0, 1, false));
  for (const MnasBlock& k : mnas_blocks(c)) {
    const std::string& p = k.prefix;
    Tensor y = relu(batch_norm_layer(w, p + ".layers.1", conv_layer(w, p + ".layers.0", x, 1, 0, 1, false)));
    y = relu(batch_norm_layer(
        w, p + ".layers.4", conv_layer(w, p + ".layers.3", y, k.stride, k.kernel / 2, k.mid, false)));
    y = batch_norm_layer(w, p + ".layers.7", conv_layer(w, p + ".layers.6", y, 1, 0, 1, false));
    x = k.residual ? y + x : y;
  }
  x = relu(batch_norm_layer(w, "layers.15", conv_layer(w, "layers.14", x, 1, 0, 1, false)));
  x = mean(x, {2, 3});
  return linear_layer(w, "classifier.1", dropout_layer(w, x, 0.2));
}

}  // namespace

Result<ModelSpec> make_squeezenet1_1(const ModelOptions& options) {
  SqueezeNetConfig c;
  if (options.preset == Preset::kSmall) {
    c.stem /= 8;
    for (Fire& f : c.fires) {
      f.in /= 8;
      f.squeeze /= 8;
      f.expand1x1 /= 8;
      f.expand3x3 /= 8;
    }
    c.num_classes = 10;
  }
  Result<ImageShape> shape = image_shape("squeezenet1_1", options, 32, 32);
  if (!shape.is_ok()) return shape.status();
  ModelSpec spec = image_classifier("squeezenet1_1", options, *shape);
  SpecBuilder b(&spec.tensors);
  declare_squeezenet(c, b);
  spec.forward = [c](LazyContext&, std::span<const Tensor> in, const Weights& w) {
    return std::vector<Tensor>{squeezenet_forward(c, w, in[0])};
  };
  return spec;
}

Result<ModelSpec> make_mobilenet_v2(const ModelOptions& options) {
  MobileNetV2Config c;
  if (options.preset == Preset::kSmall) {
    c.width_mult = 0.25;
    c.last_channel = 64;
    c.max_repeats = 2;
    c.num_classes = 10;
  }
  Result<ImageShape> shape = image_shape("mobilenet_v2", options, 32, 32);
  if (!shape.is_ok()) return shape.status();
  ModelSpec spec = image_classifier("mobilenet_v2", options, *shape);
  SpecBuilder b(&spec.tensors);
  declare_mobilenet(c, b);
  spec.forward = [c](LazyContext&, std::span<const Tensor> in, const Weights& w) {
    return std::vector<Tensor>{mobilenet_forward(c, w, in[0])};
  };
  return spec;
}

Result<ModelSpec> make_mnasnet1_0(const ModelOptions& options) {
  MnasNetConfig c;
  if (options.preset == Preset::kSmall) {
    c.alpha = 0.25;
    c.last_channel = 64;
    c.max_repeats = 2;
    c.num_classes = 10;
  }
  Result<ImageShape> shape = image_shape("mnasnet1_0", options, 32, 32);
  if (!shape.is_ok()) return shape.status();
  ModelSpec spec = image_classifier("mnasnet1_0", options, *shape);
  SpecBuilder b(&spec.tensors);
  declare_mnasnet(c, b);
  spec.forward = [c](LazyContext&, std::span<const Tensor> in, const Weights& w) {
    return std::vector<Tensor>{mnasnet_forward(c, w, in[0])};
  };
  return spec;
}

}  // namespace tracecache::zoo::detail
