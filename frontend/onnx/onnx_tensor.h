// ONNX tensors (onnx::TensorProto) as HostBuffers: the importer's initializers and Constant
// values, and the conformance test's inputs and expected outputs.
//
// The proto is untrusted: the dims are checked (non-negative, rank <= kMaxRank, element count
// within kMaxElements) and the data's length against them (raw_data bytes, or the count of the
// typed field, or an external file's byte range) before anything is allocated. External data
// (data_location EXTERNAL) is read from `location` relative to `model_dir` only: an absolute
// path, a ".." component, or a path that leaves the directory through a symlink is refused;
// offset and length must lie inside the file.
// Readable element types: FLOAT, INT32, INT64, BOOL (tracecache's four dtypes).
// Errors: kUnsupported (another element type, segments, rank above kMaxRank; `unsupported`
// receives "dtype NAME"), kInvalidArgument (dims or data that do not fit, external data outside
// the directory or the file), kNotFound / kIOError (the external file). Messages start with `what`.
// Thread-safety: pure functions (files aside).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <onnx/onnx_pb.h>

#include "capture/core/buffer.h"
#include "capture/core/dtype.h"
#include "capture/core/status.h"

namespace tracecache::onnx_import {

// The dtype of ONNX element type `elem_type` (TensorProto::DataType), if tracecache has it.
std::optional<DType> dtype_from_onnx(int32_t elem_type);
// "float", "double", "float16", ... ("type 42" for a number ONNX does not name).
std::string onnx_type_name(int32_t elem_type);
// ONNX's element type for `dtype`.
int32_t onnx_from_dtype(DType dtype);

Result<HostBuffer> tensor_to_buffer(const ::onnx::TensorProto& tensor, std::string_view what,
                                    const std::string& model_dir, std::string* unsupported = nullptr);

}  // namespace tracecache::onnx_import
