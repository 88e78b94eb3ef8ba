// The model zoo: reference architectures written with the Tensor API (capture/trace/tensor.h,
// capture/trace/nn.h), for benchmarks, tests and the `tracecache zoo` command.
//
// A ModelSpec describes one model at one configuration: its inputs, its named tensors (the
// parameters and buffers of the PyTorch state_dict it mirrors, with the same names, dtypes and
// shapes, each with a deterministic initializer), the names of its outputs, and its forward
// function. The architectures follow torchvision 0.14 and HuggingFace's BertModel exactly at
// the `default` preset; the `small` preset keeps every code path and module structure but
// shrinks widths, depths, class counts and the input size so that a step runs in milliseconds
// (see docs/zoo.md for each model's small configuration).
//
// Building a spec allocates no tensor data and needs no ops: parameter counts and names can be
// read without a forward. Running one is done by turning it into a trace program
// (frontend/zoo/program.h), which the program runner and `tracecache run` execute.
//
// Errors: make_model returns kNotFound for an unknown name (listing the known ones) and
// kInvalidArgument for options the model cannot take. Forward functions throw Error (like every
// Tensor op) on a missing weight or a shape mismatch.
// Thread-safety: specs are plain values; forward functions are reentrant (one context each).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/core/dtype.h"
#include "frontend/program/program.h"
#include "capture/core/shape.h"
#include "capture/core/status.h"
#include "capture/trace/tensor.h"

namespace tracecache::zoo {

enum class Preset { kDefault, kSmall };
std::optional<Preset> parse_preset(std::string_view name);  // "default", "small"
std::string_view preset_name(Preset preset);

// What a model consumes: images [N, 3, H, W] or token ids [N, L].
enum class ModelKind { kImage, kText };

struct ModelOptions {
  Preset preset = Preset::kDefault;
  int64_t batch = 0;       // 0: the preset's (1)
  int64_t resolution = 0;  // images, H = W; 0: the preset's (default 224)
  int64_t seq_len = 0;     // text; 0: the preset's (default 128)
};

// A state_dict entry. Parameters are what torch's model.parameters() yields; buffers are the
// rest (BatchNorm's running_mean, running_var and num_batches_tracked).
struct TensorSpec {
  enum class Role : uint8_t { kParameter, kBuffer };
  std::string name;  // the state_dict key, e.g. "layer1.0.bn1.running_var"
  DType dtype = DType::kF32;
  Shape shape;
  Role role = Role::kParameter;
  Generator init;  // the deterministic initializer (docs/zoo.md); never kNpy or kSafetensors
};

struct InputSpec {
  std::string name;  // a trace-program name: "image", "input_ids", ...
  DType dtype = DType::kF32;
  Shape shape;
  Generator init;  // how `zoo run` and `zoo emit` make the input's values
  // Index inputs (token ids): every value must be in [0, index_limit), the rows of the table
  // the model looks them up in; 0 for other inputs. `zoo run --input` checks files against it
  // (inside a graph, gather clamps out-of-range indices, which would hide the mistake).
  int64_t index_limit = 0;
};

// What a forward does differently in training mode (PyTorch's model.train()): batch norm
// normalizes with the batch's statistics and yields new running statistics instead of reading
// them, dropout draws a mask from `dropout_seed` (an i64 scalar fed every step; each dropout
// layer mixes its own salt, its position in the forward).
struct TrainingState {
  Tensor dropout_seed;
  double batch_norm_momentum = 0.1;  // torch.nn.BatchNorm2d's default
  // The new value of each running-statistic buffer, by state_dict name, in forward order.
  std::vector<std::pair<std::string, Tensor>> buffer_updates;
  int64_t dropout_layers = 0;  // salts handed out so far
};

// The model's tensors by name, handed to a forward function. Records which ones the forward
// read, so tests can check that every parameter is used.
class Weights {
 public:
  // REQUIRES: one tensor per spec entry, in spec order. `tensors` (and `training`, when given)
  // must outlive this. With `training`, the forward runs in training mode.
  Weights(std::span<const TensorSpec> specs, std::span<const Tensor> tensors,
          TrainingState* training = nullptr);
  // Null in inference mode.
  TrainingState* training() const { return training_; }
  // Throws Error(kNotFound) naming the tensor if the model has no tensor `name`.
  const Tensor& operator[](std::string_view name) const;
  // The names of the spec entries never read, in spec order.
  std::vector<std::string> unused() const;

 private:
  std::span<const TensorSpec> specs_;
  std::span<const Tensor> tensors_;
  mutable std::vector<bool> used_;
  TrainingState* training_;
};

// Records the model's ops on `inputs` (one per ModelSpec::inputs entry, all of `ctx`) and
// returns its outputs (one per ModelSpec::output_names entry).
using ForwardFn = std::function<std::vector<Tensor>(LazyContext& ctx, std::span<const Tensor> inputs,
                                                    const Weights& weights)>;

struct ModelSpec {
  std::string name;
  std::string description;
  ModelKind kind = ModelKind::kImage;
  Preset preset = Preset::kDefault;
  std::vector<InputSpec> inputs;
  std::vector<std::string> output_names;  // "logits"; BERT: "last_hidden_state", "pooler_output"
  std::vector<TensorSpec> tensors;        // state_dict order
  ForwardFn forward;

  // Elements of all parameters (what torch's sum(p.numel() for p in model.parameters()) gives).
  int64_t parameter_count() const;
  const TensorSpec* find_tensor(std::string_view tensor) const;
  // "f32[1, 3, 224, 224]" for each input, comma-separated.
  std::string input_summary() const;
};

struct ModelInfo {
  std::string_view name;
  std::string_view description;
  ModelKind kind;
};
// Every model in the zoo, in listing order.
std::span<const ModelInfo> zoo_models();

// The spec of model `name` under `options`. Errors: kNotFound (unknown name),
// kInvalidArgument (a batch < 1, a resolution the model cannot take, --seq-len for an image
// model or --resolution for a text model, a sequence longer than the model's positions).
Result<ModelSpec> make_model(std::string_view name, const ModelOptions& options = {});

}  // namespace tracecache::zoo
