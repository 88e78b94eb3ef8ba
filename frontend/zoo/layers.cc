#include "frontend/zoo/layers.h"

#include <fmt/format.h>

#include <cmath>

#include "capture/trace/train_layers.h"

namespace tracecache::zoo::detail {

uint64_t name_seed(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h >> 1;
}

std::string join(std::string_view prefix, std::string_view name) {
  if (prefix.empty()) return std::string(name);
  return fmt::format("{}.{}", prefix, name);
}

Generator full_init(double value) {
  Generator g;
  g.kind = Generator::Kind::kFull;
  g.value = value;
  return g;
}

Generator uniform_init(std::string_view name, double bound) {
  Generator g;
  g.kind = Generator::Kind::kUniform;
  g.seed = name_seed(name);
  g.low = -bound;
  g.high = bound;
  return g;
}

Generator normal_init(std::string_view name, double stddev) {
  Generator g;
  g.kind = Generator::Kind::kNormal;
  g.seed = name_seed(name);
  g.mean = 0;
  g.stddev = stddev;
  return g;
}

void SpecBuilder::parameter(const std::string& name, const Shape& shape, Generator init) {
  out_->push_back({name, DType::kF32, shape, TensorSpec::Role::kParameter, std::move(init)});
}

void SpecBuilder::buffer(const std::string& name, DType dtype, const Shape& shape, Generator init) {
  out_->push_back({name, dtype, shape, TensorSpec::Role::kBuffer, std::move(init)});
}

void SpecBuilder::conv(const std::string& prefix, int64_t out, int64_t in, int64_t kernel,
                       int64_t groups, bool bias) {
  double fan_in = static_cast<double>(in / groups * kernel * kernel);
  std::string w = join(prefix, "weight");
  parameter(w, Shape{out, in / groups, kernel, kernel}, uniform_init(w, std::sqrt(6 / fan_in)));
  if (bias) {
    std::string b = join(prefix, "bias");
    parameter(b, Shape{out}, uniform_init(b, 1 / std::sqrt(fan_in)));
  }
}

void SpecBuilder::linear(const std::string& prefix, int64_t out, int64_t in, bool bias) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  std::string w = join(prefix, "weight");
  parameter(w, Shape{out, in}, uniform_init(w, bound));
  if (bias) {
    std::string b = join(prefix, "bias");
    parameter(b, Shape{out}, uniform_init(b, bound));
  }
}

void SpecBuilder::batch_norm(const std::string& prefix, int64_t channels) {
  parameter(join(prefix, "weight"), Shape{channels}, full_init(1));
  parameter(join(prefix, "bias"), Shape{channels}, full_init(0));
  buffer(join(prefix, "running_mean"), DType::kF32, Shape{channels}, full_init(0));
  buffer(join(prefix, "running_var"), DType::kF32, Shape{channels}, full_init(1));
  buffer(join(prefix, "num_batches_tracked"), DType::kI64, Shape{}, full_init(0));
}

void SpecBuilder::layer_norm(const std::string& prefix, int64_t dim) {
  parameter(join(prefix, "weight"), Shape{dim}, full_init(1));
  parameter(join(prefix, "bias"), Shape{dim}, full_init(0));
}

void SpecBuilder::embedding(const std::string& prefix, int64_t num, int64_t dim) {
  std::string w = join(prefix, "weight");
  parameter(w, Shape{num, dim}, normal_init(w, 0.02));
}

Tensor conv_layer(const Weights& w, const std::string& prefix, const Tensor& x, int64_t stride,
                  int64_t padding, int64_t groups, bool bias) {
  return conv2d(x, w[join(prefix, "weight")], bias ? w[join(prefix, "bias")] : Tensor(),
                {stride, stride}, {padding, padding}, {1, 1}, groups);
}

Tensor batch_norm_layer(const Weights& w, const std::string& prefix, const Tensor& x, double eps) {
  const std::string mean_name = join(prefix, "running_mean"), var_name = join(prefix, "running_var");
  TrainingState* training = w.training();
  if (!training) {
    return batch_norm(x, w[mean_name], w[var_name], w[join(prefix, "weight")], w[join(prefix, "bias")],
                      eps);
  }
  const Shape& s = x.shape();
  IntList axes{0}, stat_shape;
  for (int d = 0; d < s.rank(); ++d) stat_shape.push_back(1);
  for (int d = 2; d < s.rank(); ++d) axes.push_back(d);
  stat_shape[1] = s[1];
  const int64_t n = s.numel() / s[1];
  if (n < 2) {
    throw Error(invalid_argument(fmt::format(
        "{}: training batch norm needs more than 1 value per channel, got input {} (use a larger "
        "--batch)", prefix, s.to_string())));
  }
  Tensor mu = mean(x, axes);
  Tensor dev = x - reshape(mu, stat_shape);
  Tensor var = mean(dev * dev, axes);
  Tensor y = batch_norm(x, mu, var, w[join(prefix, "weight")], w[join(prefix, "bias")], eps);
  const double m = training->batch_norm_momentum;
  const double unbias = static_cast<double>(n) / static_cast<double>(n - 1);
  training->buffer_updates.emplace_back(mean_name, w[mean_name] * (1 - m) + mu * m);
  training->buffer_updates.emplace_back(var_name, w[var_name] * (1 - m) + var * (m * unbias));
  return y;
}

Tensor dropout_layer(const Weights& w, const Tensor& x, double p) {
  TrainingState* training = w.training();
  if (!training) return dropout(x, p);
  if (p == 0) return x;
  return dropout_train(x, p, training->dropout_seed, training->dropout_layers++);
}

Tensor linear_layer(const Weights& w, const std::string& prefix, const Tensor& x, bool bias) {
  return linear(x, w[join(prefix, "weight")], bias ? w[join(prefix, "bias")] : Tensor());
}

Tensor layer_norm_layer(const Weights& w, const std::string& prefix, const Tensor& x, double eps) {
  return layer_norm(x, 1, w[join(prefix, "weight")], w[join(prefix, "bias")], eps);
}

Status check_batch(std::string_view model, int64_t batch) {
  if (batch < 1) return invalid_argument(fmt::format("{}: batch must be >= 1, got {}", model, batch));
  return Status::ok();
}

Status check_resolution(std::string_view model, int64_t resolution, int64_t minimum,
                        int64_t multiple_of) {
  if (resolution < minimum) {
    return invalid_argument(
        fmt::format("{}: resolution must be >= {}, got {}", model, minimum, resolution));
  }
  if (resolution % multiple_of != 0) {
    return invalid_argument(fmt::format("{}: resolution must be a multiple of {}, got {}", model,
                                        multiple_of, resolution));
  }
  return Status::ok();
}

InputSpec image_input(int64_t batch, int64_t resolution) {
  Generator g;
  g.kind = Generator::Kind::kNormal;
  g.seed = 1;
  return {"image", DType::kF32, Shape{batch, 3, resolution, resolution}, g};
}

Result<ImageShape> image_shape(std::string_view model, const ModelOptions& options,
                               int64_t small_resolution, int64_t min_resolution,
                               int64_t multiple_of) {
  if (options.seq_len != 0) {
    return invalid_argument(fmt::format(
        "{} is an image model: it takes a resolution, not a sequence length", model));
  }
  ImageShape s;
  if (options.preset == Preset::kSmall) s.resolution = small_resolution;
  if (options.batch != 0) s.batch = options.batch;
  if (options.resolution != 0) s.resolution = options.resolution;
  Status st = check_batch(model, s.batch);
  if (st.is_ok()) st = check_resolution(model, s.resolution, min_resolution, multiple_of);
  if (!st.is_ok()) return st;
  return s;
}

ModelSpec image_classifier(std::string_view name, const ModelOptions& options,
                           const ImageShape& shape) {
  ModelSpec spec;
  spec.name = std::string(name);
  for (const ModelInfo& m : zoo_models()) {
    if (m.name == name) spec.description = std::string(m.description);
  }
  spec.kind = ModelKind::kImage;
  spec.preset = options.preset;
  spec.inputs.push_back(image_input(shape.batch, shape.resolution));
  spec.output_names = {"logits"};
  return spec;
}

}  // namespace tracecache::zoo::detail
