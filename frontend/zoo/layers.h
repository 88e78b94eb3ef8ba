// Building blocks shared by the zoo's models (internal to zoo/): declaring a module's tensors
// with their state_dict names and initializers, and recording the module's ops on its weights.
// Each declaring helper has a recording twin that reads the same names, so a model's
// declaration and its forward walk one structure.
// Thread-safety: plain functions; a SpecBuilder belongs to one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "capture/trace/nn.h"
#include "frontend/zoo/model.h"

namespace tracecache::zoo::detail {

// The seed of a tensor's initializer: FNV-1a (64-bit) of its name, top bit cleared so it is a
// valid trace-program integer.
uint64_t name_seed(std::string_view name);

// "prefix.name", or "name" for an empty prefix.
std::string join(std::string_view prefix, std::string_view name);

// Appends TensorSpecs in state_dict order.
class SpecBuilder {
 public:
  explicit SpecBuilder(std::vector<TensorSpec>* out) : out_(out) {}

  void parameter(const std::string& name, const Shape& shape, Generator init);
  void buffer(const std::string& name, DType dtype, const Shape& shape, Generator init);

  // nn.Conv2d: prefix.weight [out, in / groups, k, k], uniform(+-sqrt(6 / fan_in)) (He
  // uniform: activations keep their scale through deep ReLU stacks), + prefix.bias [out],
  // uniform(+-1/sqrt(fan_in)); fan_in = in / groups * k * k.
  void conv(const std::string& prefix, int64_t out, int64_t in, int64_t kernel, int64_t groups,
            bool bias);
  // nn.Linear: prefix.weight [out, in] (+ prefix.bias [out]), uniform(+-1/sqrt(in)).
  void linear(const std::string& prefix, int64_t out, int64_t in, bool bias = true);
  // nn.BatchNorm2d: weight 1, bias 0 (parameters); running_mean 0, running_var 1,
  // num_batches_tracked 0 (i64 scalar) (buffers).
  void batch_norm(const std::string& prefix, int64_t channels);
  // nn.LayerNorm: weight 1, bias 0.
  void layer_norm(const std::string& prefix, int64_t dim);
  // nn.Embedding: prefix.weight [num, dim], normal(0, 0.02).
  void embedding(const std::string& prefix, int64_t num, int64_t dim);

 private:
  std::vector<TensorSpec>* out_;
};

Generator full_init(double value);
Generator uniform_init(std::string_view name, double bound);  // U[-bound, bound)
Generator normal_init(std::string_view name, double stddev);  // N(0, stddev^2)

// The recording twins. `prefix` names the module as in SpecBuilder.
Tensor conv_layer(const Weights& w, const std::string& prefix, const Tensor& x, int64_t stride,
                  int64_t padding, int64_t groups, bool bias);
// Inference: batch_norm on the running statistics. Training (w.training()): as PyTorch's
// train-mode BatchNorm2d, normalizes with the batch mean and biased variance over every dim but
// 1 (computed by mean/sub/mul ops, so grad() differentiates through them) and appends
//   running_mean' = (1 - momentum) * running_mean + momentum * mean
//   running_var'  = (1 - momentum) * running_var + momentum * var * n / (n - 1)
// (n = values per channel; the unbiased running variance) to the training state's
// buffer_updates. Throws Error in training mode when n < 2, as PyTorch does.
Tensor batch_norm_layer(const Weights& w, const std::string& prefix, const Tensor& x,
                        double eps = 1e-5);
// Inference: dropout (the identity, recorded). Training: x * dropout_mask(seed, p, salt) with the
// training state's seed and the next salt; p = 0 is x itself, as PyTorch computes it.
Tensor dropout_layer(const Weights& w, const Tensor& x, double p);
Tensor linear_layer(const Weights& w, const std::string& prefix, const Tensor& x,
                    bool bias = true);
Tensor layer_norm_layer(const Weights& w, const std::string& prefix, const Tensor& x,
                        double eps);

// Checks shared by the image models. kInvalidArgument naming the model and the value.
Status check_batch(std::string_view model, int64_t batch);
Status check_resolution(std::string_view model, int64_t resolution, int64_t minimum,
                        int64_t multiple_of = 1);

// The image input every classifier takes: "image" f32[batch, 3, r, r], normal(seed=1).
InputSpec image_input(int64_t batch, int64_t resolution);

// Fills the fields every image classifier shares, resolving the preset's batch and resolution
// (default 224, small `small_resolution`). Errors as check_batch / check_resolution.
struct ImageShape {
  int64_t batch = 1;
  int64_t resolution = 224;
};
Result<ImageShape> image_shape(std::string_view model, const ModelOptions& options,
                               int64_t small_resolution, int64_t min_resolution,
                               int64_t multiple_of = 1);

// The ModelSpec for ops with image input and "logits" output.
ModelSpec image_classifier(std::string_view name, const ModelOptions& options,
                           const ImageShape& shape);

}  // namespace tracecache::zoo::detail
