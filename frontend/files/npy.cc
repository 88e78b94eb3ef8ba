// .npy reading and writing. The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (8, 4), }
// padded with spaces and a final '\n' so the data starts at a multiple of 64 bytes.
#include "frontend/files/npy.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

#include "frontend/files/input_file.h"

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
    case DType::kF64: return "<f8";
    case DType::kF16: return "<f2";
    case DType::kI8: return "|i1";
    case DType::kU8: return "|u1";
    case DType::kI16: return "<i2";
    case DType::kBF16: break;  // numpy has no bfloat16
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
    std::vector<std::string> seen;
    while (true) {
      skip_space();
      if (eat('}')) break;
      std::string key;
      if (!read_string(&key)) return bad("expected a quoted key");
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
        return bad(fmt::format("duplicate key '{}'", key));
      }
      seen.push_back(key);
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

// What an npy header declares, validated: the element type, the shape (within kMaxElements)
// and where the data starts and how long it is.
struct NpyLayout {
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t data_at = 0;
  uint64_t data_bytes = 0;
};

// The header's size limit: numpy's own writer pads to 64 bytes and numpy refuses to read
// headers above 10000 bytes by default; anything near this is not an array header.
constexpr uint64_t kMaxNpyHeader = 1 << 20;

// The fixed prefix: magic string, version, header length.
constexpr size_t kNpyPrefix = 12;

// Parses the header at the start of `head` (which holds at least the whole header when the
// file does) for a file of `file_size` bytes, and checks that the data is exactly as long as
// the header declares. Allocates nothing in proportion to what the header claims.
Result<NpyLayout> parse_npy_layout(std::string_view head, uint64_t file_size,
                                   std::string_view name) {
  std::string_view bytes = head;
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
  if (header_len > kMaxNpyHeader) {
    return parse_error(fmt::format("{}: npy header of {} bytes is larger than the limit ({})", name,
                                   header_len, kMaxNpyHeader));
  }
  if (bytes.size() < header_at + header_len) {
    return parse_error(fmt::format("{}: truncated npy header ({} bytes declared, {} present)", name,
                                   header_len, file_size - header_at));
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
  for (int i = 0; i < kDTypeCount; ++i) {
    if (descr == descr_of(static_cast<DType>(i))) dtype = static_cast<DType>(i);
  }
  if (!dtype) {
    return unsupported(fmt::format("{}: element type '{}' is not supported (use '<f4', '<f8', '<f2', '<i4', '<i8', "
                                   "'<i2', '|i1', '|u1' or '|b1'; numpy has no bfloat16: use safetensors)",
                                   name, descr));
  }
  Result<uint64_t> nbytes = checked_nbytes(shape->span(), dtype_size(*dtype));
  if (!nbytes.is_ok()) {
    return invalid_argument(fmt::format("{}: npy header: {}", name, nbytes.status().message()));
  }
  NpyLayout layout{*dtype, *shape, header_at + header_len, *nbytes};
  uint64_t data_size = file_size - layout.data_at;
  std::string type = fmt::format("{}{}", dtype_name(*dtype), shape->to_string());
  if (data_size < layout.data_bytes) {
    return invalid_argument(fmt::format(
        "{}: truncated data: {} holds {} bytes, the file has {} (the file is cut short or its "
        "header is wrong)",
        name, type, layout.data_bytes, data_size));
  }
  if (data_size > layout.data_bytes) {
    return invalid_argument(fmt::format("{}: {} unexpected bytes after the data of {}", name,
                                        data_size - layout.data_bytes, type));
  }
  return layout;
}

Status check_bools(const HostBuffer& b, std::string_view name) {
  if (b.dtype() != DType::kBool) return Status::ok();
  const auto* p = reinterpret_cast<const uint8_t*>(b.bytes());
  for (size_t k = 0; k < b.nbytes(); ++k) {
    if (p[k] > 1) {
      return invalid_argument(fmt::format("{}: bool element {} is {}, not 0 or 1", name, k, p[k]));
    }
  }
  return Status::ok();
}

}  // namespace

Result<HostBuffer> parse_npy(std::string_view bytes, std::string_view name) {
  Result<NpyLayout> layout = parse_npy_layout(bytes, bytes.size(), name);
  if (!layout.is_ok()) return layout.status();
  HostBuffer out(layout->dtype, layout->shape);
  std::memcpy(out.bytes(), bytes.data() + layout->data_at, layout->data_bytes);
  Status st = check_bools(out, name);
  if (!st.is_ok()) return st;
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
  Result<InputFile> file = InputFile::open(path);
  if (!file.is_ok()) return file.status();
  // The header first: what it declares is checked against the file size before the data is
  // allocated, so a short file claiming gigabytes costs nothing.
  std::string head(static_cast<size_t>(std::min<uint64_t>(file->size(), kNpyPrefix)), '\0');
  Status st = file->read_at(0, head.data(), head.size());
  if (!st.is_ok()) return st;
  if (head.size() == kNpyPrefix && head.substr(0, kMagic.size()) == kMagic) {
    size_t len_width = head[6] == 1 ? 2 : 4;
    uint64_t header_end = 8 + len_width + read_le(head, 8, len_width);
    if (header_end <= std::min(file->size(), kNpyPrefix + kMaxNpyHeader)) {
      head.resize(static_cast<size_t>(header_end));
      st = file->read_at(0, head.data(), head.size());
      if (!st.is_ok()) return st;
    }
  }
  Result<NpyLayout> layout = parse_npy_layout(head, file->size(), path);
  if (!layout.is_ok()) return layout.status();
  HostBuffer out(layout->dtype, layout->shape);
  st = file->read_at(layout->data_at, out.bytes(), layout->data_bytes);
  if (!st.is_ok()) return st;
  st = check_bools(out, path);
  if (!st.is_ok()) return st;
  return out;
}

bool npy_can_hold(DType dtype) { return descr_of(dtype) != "?"; }

Status write_npy(const std::string& path, const HostBuffer& buffer) {
  if (!npy_can_hold(buffer.dtype())) {
    return unsupported(fmt::format("{}: numpy has no {} type: save it as safetensors, or cast it to f32 first", path,
                                   dtype_name(buffer.dtype())));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error(fmt::format("{}: cannot open for writing", path));
  std::string bytes = encode_npy(buffer);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return io_error(fmt::format("{}: write failed", path));
  return Status::ok();
}

}  // namespace tracecache
