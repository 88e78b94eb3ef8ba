// NumPy .npy files: how trace programs load weights and how tests and the CLI save outputs.
//
// Reads format versions 1.0, 2.0 and 3.0 (3.0 differs only in the header's text encoding);
// writes 1.0. Supported element types are the little-endian '<f4', '<i4', '<i8' and '|b1'
// (f32, i32, i64, bool), C order only, up to kMaxRank dims.
//
// The file is untrusted: read_npy() opens regular files only (input_file.h), reads the header
// first and checks what it declares (a shape within kMaxElements, data exactly as long as the
// shape needs, given the file's size) before it allocates or reads the data.
//
// Errors (nothing is ever partially returned); all but kIOError are the user's bad input:
//   kNotFound         the file does not exist
//   kIOError          the file cannot be opened, read or written
//   kParseError       bad magic string, unknown version, malformed header dictionary (including
//                     a duplicate key, a header above 1 MiB)
//   kUnsupported      fortran_order True, an element type other than the four above, big-endian
//   kInvalidArgument  not a regular file; a shape above kMaxElements; the data is shorter or
//                     longer than the header says; a bool byte is not 0/1
// Messages start with the file name. Thread-safe: pure functions (files aside).
#pragma once

#include <string>
#include <string_view>

#include "capture/core/buffer.h"
#include "capture/core/status.h"

namespace tracecache {

// Parses the bytes of an .npy file; `name` prefixes error messages.
Result<HostBuffer> parse_npy(std::string_view bytes, std::string_view name);
// The bytes of `buffer` as an .npy file, format 1.0. REQUIRES: npy_can_hold(buffer.dtype()).
std::string encode_npy(const HostBuffer& buffer);
// False for bf16, which numpy has no type for (write_npy refuses it: use safetensors).
bool npy_can_hold(DType dtype);

Result<HostBuffer> read_npy(const std::string& path);
// Writes `buffer` to `path`, replacing any file there.
Status write_npy(const std::string& path, const HostBuffer& buffer);

}  // namespace tracecache
