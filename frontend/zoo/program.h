// Zoo models as trace programs, and weight files checked against a model.
//
// model_program() traces a model's forward once on lazy tensors whose data is never read (a
// recording executor sees the canonical graph and computes nothing) and writes that graph as a
// trace program (docs/trace-format.md): the model's inputs as `input` declarations with their
// generators, every tensor the graph reads as a `param` with its deterministic initializer or a
// `safetensors("file", "state_dict key")` reference, one line per op, and the outputs named as
// the model names them (`logits`; `last_hidden_state`, `pooler_output`). Such a program is what
// `tracecache zoo emit` prints and what `tracecache zoo run` runs, so both agree with
// `tracecache run` on the emitted file by construction.
//
// train_program() writes the model in training mode: the forward with training batch norm and
// dropout, a cross-entropy loss, a `grad` statement and an optimizer's updates in ops.
//
// Tensor names: a state_dict key becomes a program name with every '.' replaced by '_'
// ("layer1.0.conv1.weight" -> layer1_0_conv1_weight); op results are t1, t2, ...
// Thread-safety: pure functions of their arguments (files aside).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frontend/program/program.h"
#include "frontend/files/safetensors.h"
#include "capture/core/status.h"
#include "frontend/zoo/model.h"

namespace tracecache::zoo {

struct ProgramOptions {
  // Empty: parameters use the spec's initializers. Else every parameter reads the tensor of its
  // state_dict name from this .safetensors file, spelled in the program exactly as given here
  // (relative paths resolve against the program file's directory when it is loaded).
  std::string weights_path;
  // Inputs read from .npy files instead of their generators: (input name, path as spelled in
  // the program). A name the model has no input of is an error.
  std::vector<std::pair<std::string, std::string>> input_files;
  // Prefix of the program's error messages (Program::file_name); empty: "<model>.trace".
  std::string file_name;
};

// The model's forward as a one-step trace program. Errors: a forward that throws (a shape
// mismatch, a missing weight: a bug in the model) as its Status; kUnsupported if the forward
// returns a tensor that is not computed by an op (an input or a weight).
Result<Program> model_program(const ModelSpec& spec, const ProgramOptions& options = {});

enum class Optimizer : uint8_t { kSgd, kAdam, kAdamW };
std::string_view optimizer_name(Optimizer optimizer);            // "sgd", "adam", "adamw"
std::optional<Optimizer> parse_optimizer(std::string_view name);

// A training run: torch.optim's update rules (SGD with momentum/nesterov/weight decay, Adam,
// AdamW; amsgrad, dampening and maximize are not offered).
struct TrainOptions {
  Optimizer optimizer = Optimizer::kSgd;
  double lr = 0.01;
  double momentum = 0;        // sgd
  bool nesterov = false;      // sgd, needs momentum
  double weight_decay = 0;    // sgd, adam: added to the gradient; adamw: decays the weight
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
  int64_t steps = 10;
  // Also output every trained param's and running statistic's new value after the loss (named
  // `<param>_next`), so a run can save the weights each step reaches.
  bool output_params = false;
};

// The model in training mode as a trace program of `train.steps` steps (docs/zoo.md, Training):
//  - one fixed batch: the model's inputs are params with their generators (or --input files),
//    `labels` an i64[N] param of random classes uniform(seed=2) in [0, C) (or the npy file of
//    ProgramOptions::input_files entry "labels"), which the model memorizes;
//  - the forward in training mode (Weights::training): batch norm on batch statistics with its
//    running statistics updated (`update` lines), dropout through dropout_mask with a
//    `dropout_seed` input drawn anew every step;
//  - the mean cross-entropy of the logits (BERT: of the pooler output) as ops, `loss`;
//  - one `grad` statement: d loss / d every parameter the forward reads;
//  - the optimizer's update as ops, its state as params initialized to zeros, the learning rate
//    the input `lr` (a lifted scalar: editing it into a schedule never recompiles).
// Output: `loss` (and the new values, with output_params). Errors: as model_program, and
// kInvalidArgument for hyperparameters torch.optim rejects (negative or non-finite values,
// betas outside [0, 1), nesterov without momentum, momentum for adam, steps < 1) or a forward that cannot
// train at this shape (batch norm over a single value per channel).
Result<Program> train_program(const ModelSpec& spec, const TrainOptions& train,
                              const ProgramOptions& options = {});

// The program name of a state_dict key.
std::string program_name(const std::string& state_dict_key);

// The value `tensor`'s initializer makes: what a program's param declared with it holds.
// REQUIRES: tensor.init is normal, uniform or full.
HostBuffer initial_value(const TensorSpec& tensor);

// Writes every tensor of `spec` with its initial value to a .safetensors file at `path` (a file
// that check_weights accepts and that gives the same outputs as the initializers).
Status write_initial_weights(const ModelSpec& spec, const std::string& path);

// Checks that `file` holds exactly the spec's tensors with the spec's dtypes and shapes. On
// failure one kInvalidArgument error names the file, the model and every missing, unexpected
// and mismatched tensor (at most 8 of each, then a count).
Status check_weights(const ModelSpec& spec, const SafetensorsFile& file);

}  // namespace tracecache::zoo
