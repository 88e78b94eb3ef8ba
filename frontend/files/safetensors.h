// safetensors files: how model weights are loaded by name (frontend/zoo/, trace programs'
// `safetensors("file", "tensor")` initializer) and how tests write them.
//
// The format (https://github.com/huggingface/safetensors): an 8-byte little-endian unsigned
// header length N, then N bytes of JSON (an object: tensor name -> {"dtype", "shape",
// "data_offsets": [begin, end]}, plus an optional "__metadata__" object of strings), then the
// data section; offsets are relative to the data section's start, data is little-endian and
// row-major.
//
// The file is untrusted. open() takes regular files only (input_file.h) and reads the header
// alone; everything is validated before any tensor is handed out: the header length against the
// file size and kMaxSafetensorsHeader, the JSON's syntax and every field's type, unknown or
// duplicate keys, each shape within kMaxElements (shape.h) and its shape x dtype size (checked
// arithmetic) against its byte range, every range inside the data section,
// and that the ranges tile the data section exactly (no overlap, no gap, nothing after the
// last tensor) as the reference implementation requires. Bool bytes are checked to be 0/1 when
// a tensor is read.
//
// Element types: all of the format's dtypes are recognized (sizes are validated), but only
// F32, F64, BF16, F16, I64, I32, I16, I8, U8 and BOOL can be read into a HostBuffer; reading another is kUnsupported.
//
// Errors (messages start with the file name; a tensor's errors name the tensor); all but
// kIOError are the user's bad input:
//   kNotFound         the file does not exist; a tensor name that is not in the file (with the
//                     nearest name in the file, if one is within two edits)
//   kIOError          the file cannot be opened, read or written
//   kParseError       the header is not valid JSON or not the expected structure
//   kInvalidArgument  not a regular file; sizes or offsets that do not fit (header length,
//                     ranges, shape vs range, a shape above kMaxElements), a bool byte that is
//                     not 0/1
//   kUnsupported      reading a tensor of a dtype other than the four above; rank > kMaxRank
// Thread-safety: a SafetensorsFile is immutable after open; concurrent reads of a file-backed
// one use positional reads on the file opened by open(), so they are safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/core/buffer.h"
#include "frontend/files/input_file.h"
#include "capture/core/status.h"

namespace tracecache {

// Headers larger than this are rejected as corrupt (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;       // as written: "F32", "F16", "BOOL", ...
  std::optional<DType> dtype;   // set for the four readable dtypes
  std::vector<int64_t> shape;   // any rank; tensor() needs rank <= kMaxRank
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

class SafetensorsFile {
 public:
  // Parses a whole file held in memory; `name` prefixes error messages.
  static Result<SafetensorsFile> parse(std::string bytes, std::string_view name);
  // Reads and validates the header of the file at `path`; tensor data is read on demand.
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& name() const { return name_; }
  // Every tensor, in name order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // nullptr if the file has no tensor called `tensor`.
  const SafetensorsEntry* find(std::string_view tensor) const;
  // For a name find() does not know: " (did you mean 'NAME'?)" with the file's nearest tensor
  // name within two edits, else "".
  std::string did_you_mean(std::string_view tensor) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The data of `tensor`. Errors: kNotFound, kUnsupported, kIOError, kCorruption (see above).
  Result<HostBuffer> tensor(std::string_view tensor) const;

 private:
  SafetensorsFile() = default;
  static Result<SafetensorsFile> from_header(std::string_view header, uint64_t data_size,
                                             std::string name);

  std::string name_;
  std::string bytes_;          // the whole file when parsed from memory, else empty
  std::shared_ptr<const InputFile> file_;  // the file to read data from when opened from disk
  uint64_t data_start_ = 0;    // offset of the data section in the file
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write. The buffer is borrowed for the call.
struct NamedBuffer {
  std::string name;
  const HostBuffer* buffer = nullptr;
};

// The bytes of a safetensors file holding `tensors` (data in name order, the header padded with
// spaces to a multiple of 8 bytes). Errors (kInvalidArgument): duplicate or empty names, a
// name starting with "__metadata__".
Result<std::string> encode_safetensors(std::span<const NamedBuffer> tensors,
                                       const std::map<std::string, std::string>& metadata = {});
// Writes encode_safetensors() to `path`, replacing any file there.
Status write_safetensors(const std::string& path, std::span<const NamedBuffer> tensors,
                         const std::map<std::string, std::string>& metadata = {});

// "F32", "I64", "I32", "BOOL".
std::string_view safetensors_dtype_name(DType dtype);

}  // namespace tracecache
