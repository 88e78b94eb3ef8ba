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
// Tensor names: a state_dict key becomes a program name with every '.' replaced by '_'
// ("layer1.0.conv1.weight" -> layer1_0_conv1_weight); op results are t1, t2, ...
// Thread-safety: pure functions of their arguments (files aside).
#pragma once

#include <string>
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
