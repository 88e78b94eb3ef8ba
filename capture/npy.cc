// .npy reading and writing. The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (8, 4), }
// padded with spaces and a final '\n' so the data starts at a multiple of 64 bytes.
#include "capture/npy.h"

#include <fmt/format.h>

#include <bit>
#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace tracecache {

// Data is copied byte for byte: the host must store numbers little-endian, as the files do.
static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

std::string_view descr_of(DType t) {
  switch (t) {
    case DType::kBool: return "|b1";
    case DType::kI32: return "<i4";
    case DType::kI64: return "<i8";
    case DType::kF32: return "<f4";
  }
  return "?";
}

// A minimal reader for the one dict shape numpy writes: string keys; values that are strings,
// True/False, or tuples of non-negative integers.
class HeaderReader {
 public:
  HeaderReader(std::string_view text, std::string_view name) : text_(text), name_(name) {}

  Status read(std::string* descr, std::optional<bool>* fortran, std::optional<Shape>* shape) {
    skip_space();
    if (!eat('{')) return bad("expected '{' at the start of the header");
    while (true) {
      skip_space();
      if (eat('}')) break;
      std::string key;
      if (!read_string(&key)) return bad("expected a quoted key");
      skip_space();
      if (!eat(':')) return bad(fmt::format("expected ':' after key '{}'", key));
      skip_space();
      if (key == "descr") {
        if (!read_string(descr)) return bad("'descr' must be a string");
      } else if (key == "fortran_order") {
        if (text_.substr(at_, 4) == "True") {
          *fortran = true;
          at_ += 4;
        } else if (text_.substr(at_, 5) == "False") {
          *fortran = false;
          at_ += 5;
        } else
          return bad("'fortran_order' must be True or False");
      } else if (key == "shape") {
        Shape s;
        Status st = read_shape(&s);
        if (!st.is_ok()) return st;
        *shape = s;
      } else {
        return bad(fmt::format("unexpected key '{}'", key));
      }
      skip_space();
      if (eat(',')) continue;
      skip_space();
      if (eat('}')) break;
      return bad("expected ',' or '}' in the header");
    }
    skip_space();
    if (at_ != text_.size()) return bad("unexpected text after the header dictionary");
    return Status::ok();
  }

 private:
  Status bad(const std::string& what) const {
    return parse_error(fmt::format("{}: malformed npy header: {}", name_, what));
  }
  void skip_space() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool eat(char c) {
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool read_string(std::string* out) {
    if (at_ >= text_.size() || (text_[at_] != '\'' && text_[at_] != '"')) return false;
    char quote = text_[at_];
    size_t end = text_.find(quote, at_ + 1);
    if (end == std::string_view::npos) return false;
    *out = std::string(text_.substr(at_ + 1, end - at_ - 1));
    at_ = end + 1;
    return true;
  }
  Status read_shape(Shape* out) {
    if (!eat('(')) return bad("'shape' must be a tuple");
    while (true) {
      skip_space();
      if (eat(')')) return Status::ok();
      int64_t d = 0;
      auto r = std::from_chars(text_.data() + at_, text_.data() + text_.size(), d);
      if (r.ec != std::errc() || d < 0) return bad("'shape' entries must be non-negative integers");
      at_ = static_cast<size_t>(r.ptr - text_.data());
      if (out->rank() == kMaxRank) {
        return unsupported(
            fmt::format("{}: arrays of rank above {} are not supported", name_, kMaxRank));
      }
      out->push_back(d);
      skip_space();
      if (eat(')')) return Status::ok();
      if (!eat(',')) return bad("expected ',' or ')' in 'shape'");
    }
  }

  std::string_view text_;
  std::string_view name_;
  size_t at_ = 0;
};

uint32_t read_le(std::string_view bytes, size_t at, size_t width) {
  uint32_t v = 0;
  for (size_t k = 0; k < width; ++k) {
    v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + k])) << (8 * k);
  }
  return v;
}

}  // namespace

Result<HostBuffer> parse_npy(std::string_view bytes, std::string_view name) {
  if (bytes.size() < kMagic.size() + 2 || bytes.substr(0, kMagic.size()) != kMagic) {
    return parse_error(fmt::format("{}: not an npy file (bad magic string)", name));
  }
  int major = static_cast<uint8_t>(bytes[6]);
  int minor = static_cast<uint8_t>(bytes[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return parse_error(
        fmt::format("{}: npy format version {}.{} is not supported", name, major, minor));
  }
  size_t len_width = major == 1 ? 2 : 4;
  size_t header_at = 8 + len_width;
  if (bytes.size() < header_at) return parse_error(fmt::format("{}: truncated npy header", name));
  size_t header_len = read_le(bytes, 8, len_width);
  if (bytes.size() < header_at + header_len) {
    return parse_error(fmt::format("{}: truncated npy header ({} bytes declared, {} present)", name,
                                   header_len, bytes.size() - header_at));
  }
  std::string descr;
  std::optional<bool> fortran;
  std::optional<Shape> shape;
  Status st =
      HeaderReader(bytes.substr(header_at, header_len), name).read(&descr, &fortran, &shape);
  if (!st.is_ok()) return st;
  if (descr.empty() || !fortran || !shape) {
    return parse_error(fmt::format(
        "{}: malformed npy header: 'descr', 'fortran_order' and 'shape' are required", name));
  }
  if (*fortran) {
    return unsupported(
        fmt::format("{}: Fortran-order arrays are not supported; save with C order", name));
  }
  std::optional<DType> dtype;
  for (DType t : {DType::kBool, DType::kI32, DType::kI64, DType::kF32}) {
    if (descr == descr_of(t)) dtype = t;
  }
  if (!dtype) {
    return unsupported(fmt::format(
        "{}: element type '{}' is not supported (use '<f4', '<i4', '<i8' or '|b1')", name, descr));
  }
  HostBuffer out(*dtype, *shape);
  std::string_view data = bytes.substr(header_at + header_len);
  if (data.size() < out.nbytes()) {
    return corruption(fmt::format("{}: truncated data: {} holds {} bytes, the file has {}", name,
                                  fmt::format("{}{}", dtype_name(*dtype), shape->to_string()),
                                  out.nbytes(), data.size()));
  }
  if (data.size() > out.nbytes()) {
    return corruption(
        fmt::format("{}: {} unexpected bytes after the data", name, data.size() - out.nbytes()));
  }
  if (*dtype == DType::kBool) {
    for (size_t k = 0; k < out.nbytes(); ++k) {
      auto raw = static_cast<uint8_t>(data[k]);
      if (raw > 1) {
        return corruption(fmt::format("{}: bool element {} is {}, not 0 or 1", name, k, raw));
      }
    }
  }
  std::memcpy(out.bytes(), data.data(), out.nbytes());
  return out;
}

std::string encode_npy(const HostBuffer& buffer) {
  // Python tuple syntax: (), (5,), (2, 3).
  std::string shape;
  for (int i = 0; i < buffer.shape().rank(); ++i) shape += fmt::format("{}, ", buffer.shape()[i]);
  if (buffer.shape().rank() > 1) {
    shape.resize(shape.size() - 2);
  } else if (buffer.shape().rank() == 1) {
    shape.resize(shape.size() - 1);
  }
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                   descr_of(buffer.dtype()), shape);
  // Pad so magic + version + length + header (ending in '\n') is a multiple of 64.
  size_t total = kMagic.size() + 2 + 2 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(buffer.bytes()), buffer.nbytes());
  return out;
}

Result<HostBuffer> read_npy(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found(fmt::format("{}: no such file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot open for reading", path));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) return io_error(fmt::format("{}: read failed", path));
  return parse_npy(bytes.str(), path);
}

Status write_npy(const std::string& path, const HostBuffer& buffer) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error(fmt::format("{}: cannot open for writing", path));
  std::string bytes = encode_npy(buffer);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return io_error(fmt::format("{}: write failed", path));
  return Status::ok();
}

}  // namespace tracecache
