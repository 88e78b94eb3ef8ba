#include "frontend/onnx/onnx_tensor.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "capture/core/shape.h"
#include "frontend/files/input_file.h"

namespace tracecache::onnx_import {

namespace {

namespace fs = std::filesystem;
using ::onnx::TensorProto;

// The bytes of external data: `location` inside `model_dir`, [offset, offset + length).
Result<std::string> read_external(const TensorProto& t, std::string_view what, const std::string& model_dir,
                                  uint64_t nbytes) {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const auto& kv : t.external_data()) {
    auto number = [&](const std::string& text) -> std::optional<uint64_t> {
      if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) {
        return std::nullopt;
      }
      return std::stoull(text);
    };
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset" || kv.key() == "length") {
      std::optional<uint64_t> v = number(kv.value());
      if (!v) {
        return invalid_argument(fmt::format("{}: external data {} '{}' is not a byte count", what, kv.key(), kv.value()));
      }
      if (kv.key() == "offset") offset = *v; else length = *v;
    }
  }
  if (location.empty()) return invalid_argument(fmt::format("{}: external data without a location", what));
  if (model_dir.empty()) {
    return invalid_argument(fmt::format("{}: external data '{}' but the model was not read from a file", what, location));
  }
  const fs::path rel(location);
  bool escapes = rel.is_absolute() || rel.has_root_name() || rel.has_root_directory();
  for (const fs::path& part : rel) escapes = escapes || part == "..";
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(fs::absolute(model_dir, ec), ec);
  const fs::path file = fs::weakly_canonical(dir / rel, ec);
  const fs::path inside = file.lexically_relative(dir);
  if (!escapes && (ec || inside.empty() || *inside.begin() == "..")) escapes = true;
  if (escapes) {
    return invalid_argument(fmt::format(
        "{}: external data location '{}' is outside the model's directory '{}' (only relative paths "
        "inside it are read)", what, location, model_dir));
  }
  Result<InputFile> in = InputFile::open(file.string());
  if (!in.is_ok()) return in.status();
  const uint64_t want = length.value_or(nbytes);
  if (want != nbytes) {
    return invalid_argument(fmt::format("{}: external data length {} but the tensor needs {} bytes", what, want, nbytes));
  }
  if (offset > in->size() || in->size() - offset < nbytes) {
    return invalid_argument(fmt::format("{}: external data [{}, {}) lies outside '{}' ({} bytes)", what, offset,
                                        offset + nbytes, location, in->size()));
  }
  std::string bytes(nbytes, '\0');
  Status st = in->read_at(offset, bytes.data(), bytes.size());
  if (!st.is_ok()) return st;
  return bytes;
}

}  // namespace

std::optional<DType> dtype_from_onnx(int32_t elem_type) {
  switch (elem_type) {
    case TensorProto::FLOAT: return DType::kF32;
    case TensorProto::INT32: return DType::kI32;
    case TensorProto::INT64: return DType::kI64;
    case TensorProto::BOOL: return DType::kBool;
    case TensorProto::DOUBLE: return DType::kF64;
    case TensorProto::FLOAT16: return DType::kF16;
    case TensorProto::BFLOAT16: return DType::kBF16;
    case TensorProto::INT8: return DType::kI8;
    case TensorProto::UINT8: return DType::kU8;
    case TensorProto::INT16: return DType::kI16;
    default: return std::nullopt;
  }
}

int32_t onnx_from_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return TensorProto::FLOAT;
    case DType::kI32: return TensorProto::INT32;
    case DType::kI64: return TensorProto::INT64;
    case DType::kBool: return TensorProto::BOOL;
    case DType::kF64: return TensorProto::DOUBLE;
    case DType::kF16: return TensorProto::FLOAT16;
    case DType::kBF16: return TensorProto::BFLOAT16;
    case DType::kI8: return TensorProto::INT8;
    case DType::kU8: return TensorProto::UINT8;
    case DType::kI16: return TensorProto::INT16;
  }
  return TensorProto::UNDEFINED;
}

std::string onnx_type_name(int32_t elem_type) {
  switch (elem_type) {
    case TensorProto::FLOAT: return "float";
    case TensorProto::UINT8: return "uint8";
    case TensorProto::INT8: return "int8";
    case TensorProto::UINT16: return "uint16";
    case TensorProto::INT16: return "int16";
    case TensorProto::INT32: return "int32";
    case TensorProto::INT64: return "int64";
    case TensorProto::STRING: return "string";
    case TensorProto::BOOL: return "bool";
    case TensorProto::FLOAT16: return "float16";
    case TensorProto::DOUBLE: return "double";
    case TensorProto::UINT32: return "uint32";
    case TensorProto::UINT64: return "uint64";
    case TensorProto::COMPLEX64: return "complex64";
    case TensorProto::COMPLEX128: return "complex128";
    case TensorProto::BFLOAT16: return "bfloat16";
    default: return fmt::format("type {}", elem_type);
  }
}

Result<HostBuffer> tensor_to_buffer(const TensorProto& t, std::string_view what, const std::string& model_dir,
                                    std::string* unsupported_reason) {
  std::optional<DType> dtype = dtype_from_onnx(t.data_type());
  if (!dtype) {
    if (unsupported_reason) *unsupported_reason = "dtype " + onnx_type_name(t.data_type());
    return unsupported(fmt::format("{}: element type {} is not supported (tracecache has float, int32, int64, bool)",
                                   what, onnx_type_name(t.data_type())));
  }
  if (t.has_segment()) {
    if (unsupported_reason) *unsupported_reason = "segmented tensor";
    return unsupported(fmt::format("{}: segmented tensors are not supported", what));
  }
  if (t.dims_size() > kMaxRank) {
    if (unsupported_reason) *unsupported_reason = "rank above 8";
    return unsupported(fmt::format("{}: rank {} is above tracecache's limit of {}", what, t.dims_size(), kMaxRank));
  }
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  Result<int64_t> numel = checked_numel(dims);
  if (!numel.is_ok()) return invalid_argument(fmt::format("{}: {}", what, numel.status().message()));
  const uint64_t count = static_cast<uint64_t>(*numel);
  const uint64_t nbytes = count * dtype_size(*dtype);
  auto bad_count = [&](std::string_view field, uint64_t have) {
    return invalid_argument(fmt::format("{}: {} holds {} but the dims [{}] need {}", what, field, have,
                                        fmt::join(dims, ", "), field == "raw_data" ? nbytes : count));
  };
  std::string external;
  const bool is_external = t.data_location() == TensorProto::EXTERNAL;
  if (is_external) {
    // Checked before allocating: the file must hold the bytes.
    Result<std::string> bytes = read_external(t, what, model_dir, nbytes);
    if (!bytes.is_ok()) return bytes.status();
    external = std::move(*bytes);
  } else if (t.has_raw_data()) {
    if (t.raw_data().size() != nbytes) return bad_count("raw_data", t.raw_data().size());
  } else {
    uint64_t have = 0;
    std::string_view field;
    switch (*dtype) {
      case DType::kF32: have = static_cast<uint64_t>(t.float_data_size()); field = "float_data"; break;
      case DType::kI64: have = static_cast<uint64_t>(t.int64_data_size()); field = "int64_data"; break;
      case DType::kF64: have = static_cast<uint64_t>(t.double_data_size()); field = "double_data"; break;
      case DType::kI32:
      case DType::kI8:
      case DType::kU8:
      case DType::kI16:
      case DType::kF16:
      case DType::kBF16:
      case DType::kBool: have = static_cast<uint64_t>(t.int32_data_size()); field = "int32_data"; break;
    }
    if (have != count) return bad_count(field, have);
  }
  HostBuffer buf(*dtype, Shape(IntList(std::span<const int64_t>(dims))));
  if (is_external || t.has_raw_data()) {
    const std::string& raw = is_external ? external : t.raw_data();
    if (*dtype == DType::kBool) {
      bool* out = buf.data<bool>();
      for (uint64_t i = 0; i < count; ++i) out[i] = raw[i] != 0;
    } else if (nbytes > 0) {
      std::memcpy(buf.bytes(), raw.data(), nbytes);
    }
    return buf;
  }
  for (uint64_t i = 0; i < count; ++i) {
    const int k = static_cast<int>(i);
    switch (*dtype) {
      case DType::kF32: buf.data<float>()[i] = t.float_data(k); break;
      case DType::kI64: buf.data<int64_t>()[i] = t.int64_data(k); break;
      case DType::kI32: buf.data<int32_t>()[i] = t.int32_data(k); break;
      case DType::kBool: buf.data<bool>()[i] = t.int32_data(k) != 0; break;
      case DType::kF64: buf.data<double>()[i] = t.double_data(k); break;
      // ONNX keeps these in int32_data: the values (i8, u8, i16) or the 16 bits (f16, bf16).
      case DType::kI8: buf.data<int8_t>()[i] = static_cast<int8_t>(t.int32_data(k)); break;
      case DType::kU8: buf.data<uint8_t>()[i] = static_cast<uint8_t>(t.int32_data(k)); break;
      case DType::kI16: buf.data<int16_t>()[i] = static_cast<int16_t>(t.int32_data(k)); break;
      case DType::kF16: buf.data<Half>()[i] = Half::from_bits(static_cast<uint16_t>(t.int32_data(k))); break;
      case DType::kBF16: buf.data<BFloat16>()[i] = BFloat16::from_bits(static_cast<uint16_t>(t.int32_data(k))); break;
    }
  }
  return buf;
}

}  // namespace tracecache::onnx_import
