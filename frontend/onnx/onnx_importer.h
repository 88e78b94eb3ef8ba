// The ONNX importer: an ONNX model (a ModelProto file) as a trace program (docs/trace-format.md)
// plus its weights, by name, for a .safetensors file (docs/onnx.md).
//
// import_onnx() reads the model, runs ONNX's checker, and lowers every node of the main graph to
// registry ops (capture/ops/ops.h) for concrete input shapes:
//  - graph inputs become `input` declarations with their declared dtype and shape; a symbolic
//    (or unknown) dim must be given by the caller (ImportOptions::shapes or an input file), and a
//    given shape that contradicts a fixed declared dim is an error: never a wrong shape;
//  - initializers become `param` declarations read from the safetensors file by their ONNX names
//    (ImportedModel::params), never constants baked into the graph; a Constant node's value that
//    the program reads is a param too, named by the node's output;
//  - whatever depends only on shapes and constants (Shape -> Gather -> Concat -> Reshape, Range,
//    ConstantOfShape, the axes of Unsqueeze...) is computed at import time with the reference
//    kernels (folded), so such sub-graphs leave no ops behind.
// Opsets 13 to 17 of the default domain. ONNX semantics are kept exactly by lowering: negative
// gather indices, integer Div, asymmetric pads (an explicit pad before the conv or pool),
// ceil_mode, Clip bounds given as inputs, Gemm's transposes and scales, and the rest per op
// (docs/onnx.md, "Known differences", lists what is not exact).
//
// The model file is untrusted: its size is limited (kMaxOnnxModelBytes) before it is read, the
// protobuf parse is bounded, ONNX's checker must accept it, every tensor's dims are checked
// (overflow, kMaxElements) and its data length against them before anything is allocated;
// external data must be a relative path inside the model's directory (no "..", no absolute path,
// no symlink leading out), and its offset and length are checked against the file.
//
// Errors (Status, the message names the model file; a node's errors name the node as
// "node 'NAME' (#INDEX, OP_TYPE)"):
//   kUnsupported      an op, dtype, attribute value or opset the importer does not support;
//                     `unsupported` (if non-null) receives a short reason such as "op Einsum",
//                     "dtype double", "opset 12", "Resize mode=cubic" for summaries
//   kInvalidArgument  a model the checker refuses, a tensor whose data does not fit its dims,
//                     external data outside the model's directory, a missing or contradicting
//                     input shape, a shape error while lowering
//   kParseError       the file is not a ModelProto
//   kNotFound, kIOError  the file (or an external data file) cannot be found or read
// Thread-safety: pure functions of their arguments (files aside).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/core/buffer.h"
#include "capture/core/dtype.h"
#include "capture/core/status.h"
#include "frontend/program/program.h"

namespace tracecache::onnx_import {

// Larger model files are refused (protobuf's own limit is 2 GiB; weights beyond it must be
// external data).
inline constexpr uint64_t kMaxOnnxModelBytes = (uint64_t{1} << 31) - 1;

// `--shape NAME=f32[1, 3, 224, 224]`: the type graph input NAME has in the program.
struct InputShape {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;
};
// Parses "NAME=DTYPE[d0, d1, ...]" (DTYPE: f32, i64, i32, bool; "NAME=f32[]" is a scalar).
Result<InputShape> parse_input_shape(std::string_view spec);

struct ImportOptions {
  // Types of graph inputs, by ONNX name (symbolic dims need one).
  std::vector<InputShape> shapes;
  // (graph input name, .npy path as the program spells it): that input reads the file (its
  // type is the file's); the file is read for its dtype and shape. Other inputs are generated
  // (f32: normal(seed=<input index>), integers and bool: full(0)).
  std::vector<std::pair<std::string, std::string>> input_files;
  // Graph inputs (each with an input file) whose values become constants of the program: known
  // at import time, so shape arithmetic on them folds (inputs that give a Reshape's shape, a
  // Slice's starts, a Resize's sizes...). They are params read from the safetensors file, not
  // inputs.
  std::vector<std::string> constant_inputs;
  // How the program spells the safetensors file its params read (relative paths resolve
  // against the program's directory when it is loaded).
  std::string weights_path = "model.safetensors";
  // Program::file_name (error messages); empty: the model file's name with ".trace".
  std::string file_name;
};

struct ImportedModel {
  Program program;
  // Every param's data, keyed by the safetensors name its declaration reads (the ONNX name).
  std::vector<std::pair<std::string, HostBuffer>> params;
  // The graph's output names, in order (the program's outputs are these names made into
  // identifiers: program.outputs[i] is outputs[i]'s).
  std::vector<std::string> outputs;
  int64_t opset = 0;
  // The model's opset when it was before 13 and ONNX's version converter took it to opset 13
  // first (`opset` is then 13); else 0.
  int64_t converted_from_opset = 0;
};

// Imports the model file at `path` (external data resolves against its directory).
Result<ImportedModel> import_onnx(const std::string& path, const ImportOptions& options,
                                  std::string* unsupported = nullptr);
// Imports a model held in memory; `name` prefixes messages; external data resolves against
// `model_dir` ("" refuses external data).
Result<ImportedModel> import_onnx_bytes(std::string_view bytes, std::string_view name,
                                        const std::string& model_dir, const ImportOptions& options,
                                        std::string* unsupported = nullptr);

// Writes the params of `model` to the safetensors file `path`.
Status write_params(const ImportedModel& model, const std::string& path);

// One row of the importer's op table: the ONNX op type and what it becomes.
struct SupportedOp {
  std::string_view onnx;      // "Conv"
  std::string_view lowering;  // "conv2d (pad first when pads are asymmetric or auto_pad)"
};
// Every op type the importer accepts, sorted by name (docs/onnx.md's table is this list).
std::span<const SupportedOp> supported_ops();

}  // namespace tracecache::onnx_import
