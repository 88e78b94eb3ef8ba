#include "frontend/files/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>

#include "frontend/files/input_file.h"
#include "capture/core/suggest.h"

namespace tracecache {

namespace {

// Element sizes of every dtype the format defines; nullopt for an unknown spelling.
std::optional<uint64_t> element_size(std::string_view dtype) {
  static constexpr std::pair<std::string_view, uint64_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},     {"U32", 4},     {"F32", 4},
      {"I64", 8},  {"U64", 8}, {"F64", 8}};
  for (const auto& [name, size] : kSizes) {
    if (name == dtype) return size;
  }
  return std::nullopt;
}

std::optional<DType> readable_dtype(std::string_view dtype) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "I64") return DType::kI64;
  if (dtype == "I32") return DType::kI32;
  if (dtype == "BOOL") return DType::kBool;
  if (dtype == "F64") return DType::kF64;
  if (dtype == "BF16") return DType::kBF16;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "I8") return DType::kI8;
  if (dtype == "U8") return DType::kU8;
  if (dtype == "I16") return DType::kI16;
  return std::nullopt;
}

uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// A JSON reader for the header: one top-level object whose values are objects holding strings,
// arrays of non-negative integers, or (for __metadata__) strings.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  Status parse(std::vector<SafetensorsEntry>* entries,
               std::map<std::string, std::string>* metadata) {
    skip_space();
    if (!eat('{')) return bad("expected '{' at the start of the header");
    std::set<std::string> seen;
    skip_space();
    if (!eat('}')) {
      while (true) {
        skip_space();
        std::string key;
        Status st = read_string(&key);
        if (!st.is_ok()) return st;
        if (!seen.insert(key).second) return bad(fmt::format("duplicate key '{}'", key));
        skip_space();
        if (!eat(':')) return bad(fmt::format("expected ':' after '{}'", key));
        skip_space();
        if (key == "__metadata__") {
          st = read_metadata(metadata);
        } else {
          SafetensorsEntry e;
          e.name = key;
          st = read_entry(&e);
          entries->push_back(std::move(e));
        }
        if (!st.is_ok()) return st;
        skip_space();
        if (eat('}')) break;
        if (!eat(',')) return bad("expected ',' or '}' between header entries");
      }
    }
    skip_space();
    if (at_ != text_.size()) return bad("unexpected text after the header object");
    return Status::ok();
  }

 private:
  Status read_metadata(std::map<std::string, std::string>* metadata) {
    if (!eat('{')) return bad("'__metadata__' must be an object of strings");
    skip_space();
    if (eat('}')) return Status::ok();
    while (true) {
      skip_space();
      std::string key, value;
      Status st = read_string(&key);
      if (!st.is_ok()) return st;
      skip_space();
      if (!eat(':')) return bad(fmt::format("expected ':' after '{}'", key));
      skip_space();
      if (peek() != '"') return bad(fmt::format("metadata value '{}' must be a string", key));
      st = read_string(&value);
      if (!st.is_ok()) return st;
      if (!metadata->emplace(key, value).second) {
        return bad(fmt::format("duplicate metadata key '{}'", key));
      }
      skip_space();
      if (eat('}')) return Status::ok();
      if (!eat(',')) return bad("expected ',' or '}' in '__metadata__'");
    }
  }

  Status read_entry(SafetensorsEntry* e) {
    auto bad_entry = [&](const std::string& what) {
      return bad(fmt::format("tensor '{}': {}", e->name, what));
    };
    if (!eat('{')) return bad_entry("expected an object");
    bool has_dtype = false, has_shape = false, has_offsets = false;
    skip_space();
    if (!eat('}')) {
      while (true) {
        skip_space();
        std::string key;
        Status st = read_string(&key);
        if (!st.is_ok()) return st;
        skip_space();
        if (!eat(':')) return bad_entry(fmt::format("expected ':' after '{}'", key));
        skip_space();
        if (key == "dtype") {
          if (has_dtype) return bad_entry("duplicate key 'dtype'");
          has_dtype = true;
          if (peek() != '"') return bad_entry("'dtype' must be a string");
          st = read_string(&e->dtype_name);
        } else if (key == "shape") {
          if (has_shape) return bad_entry("duplicate key 'shape'");
          has_shape = true;
          std::vector<uint64_t> dims;
          st = read_uint_array(&dims, e->name, "shape");
          for (uint64_t d : dims) {
            if (d > static_cast<uint64_t>(INT64_MAX)) return bad_entry("a shape entry is too large");
            e->shape.push_back(static_cast<int64_t>(d));
          }
        } else if (key == "data_offsets") {
          if (has_offsets) return bad_entry("duplicate key 'data_offsets'");
          has_offsets = true;
          std::vector<uint64_t> offsets;
          st = read_uint_array(&offsets, e->name, "data_offsets");
          if (st.is_ok() && offsets.size() != 2) {
            return bad_entry("'data_offsets' must hold exactly two integers [begin, end]");
          }
          if (st.is_ok()) {
            e->begin = offsets[0];
            e->end = offsets[1];
          }
        } else {
          return bad_entry(fmt::format("unexpected key '{}'", key));
        }
        if (!st.is_ok()) return st;
        skip_space();
        if (eat('}')) break;
        if (!eat(',')) return bad_entry("expected ',' or '}'");
      }
    }
    if (!has_dtype || !has_shape || !has_offsets) {
      return bad_entry("'dtype', 'shape' and 'data_offsets' are required");
    }
    return Status::ok();
  }

  Status read_uint_array(std::vector<uint64_t>* out, const std::string& tensor,
                         std::string_view field) {
    auto bad_array = [&]() {
      return bad(fmt::format("tensor '{}': '{}' must be an array of non-negative integers",
                             tensor, field));
    };
    if (!eat('[')) return bad_array();
    skip_space();
    if (eat(']')) return Status::ok();
    while (true) {
      skip_space();
      size_t start = at_;
      uint64_t v = 0;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
        uint64_t digit = static_cast<uint64_t>(text_[at_] - '0');
        if (v > (UINT64_MAX - digit) / 10) {
          return bad(fmt::format("tensor '{}': '{}' entry out of range", tensor, field));
        }
        v = v * 10 + digit;
        ++at_;
      }
      if (at_ == start) return bad_array();
      // JSON forbids leading zeros; a fraction or exponent makes it a non-integer.
      if (text_[start] == '0' && at_ - start > 1) return bad_array();
      if (at_ < text_.size() && (text_[at_] == '.' || text_[at_] == 'e' || text_[at_] == 'E')) {
        return bad_array();
      }
      out->push_back(v);
      skip_space();
      if (eat(']')) return Status::ok();
      if (!eat(',')) return bad_array();
    }
  }

  Status read_string(std::string* out) {
    if (!eat('"')) return bad("expected a string");
    while (true) {
      if (at_ >= text_.size()) return bad("unterminated string");
      char c = text_[at_++];
      if (c == '"') return Status::ok();
      if (static_cast<unsigned char>(c) < 0x20) return bad("control character in a string");
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (at_ >= text_.size()) return bad("unterminated string");
      char esc = text_[at_++];
      switch (esc) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          Status st = read_hex4(&cp);
          if (!st.is_ok()) return st;
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t low = 0;
            if (!(eat('\\') && eat('u'))) return bad("unpaired surrogate in a string");
            st = read_hex4(&low);
            if (!st.is_ok()) return st;
            if (low < 0xDC00 || low >= 0xE000) return bad("unpaired surrogate in a string");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return bad("unpaired surrogate in a string");
          }
          append_utf8(cp, out);
          break;
        }
        default: return bad(fmt::format("bad escape '\\{}' in a string", esc));
      }
    }
  }

  Status read_hex4(uint32_t* out) {
    if (text_.size() - at_ < 4) return bad("truncated \\u escape");
    for (int i = 0; i < 4; ++i) {
      char c = text_[at_++];
      uint32_t d;
      if (c >= '0' && c <= '9') d = static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<uint32_t>(c - 'A' + 10);
      else return bad("bad \\u escape");
      *out = *out * 16 + d;
    }
    return Status::ok();
  }

  static void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
  bool eat(char c) {
    if (peek() != c || at_ >= text_.size()) return false;
    ++at_;
    return true;
  }
  void skip_space() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r')) {
      ++at_;
    }
  }
  Status bad(const std::string& what) const {
    return parse_error(
        fmt::format("{}: malformed safetensors header at byte {}: {}", file_, at_, what));
  }

  std::string_view text_;
  const std::string& file_;
  size_t at_ = 0;
};

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += fmt::format("\\u{:04x}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kBool: return "BOOL";
    case DType::kF64: return "F64";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kI16: return "I16";
  }
  return "?";
}

Result<SafetensorsFile> SafetensorsFile::from_header(std::string_view header, uint64_t data_size,
                                                     std::string name) {
  SafetensorsFile f;
  f.name_ = std::move(name);
  Status st = HeaderParser(header, f.name_).parse(&f.entries_, &f.metadata_);
  if (!st.is_ok()) return st;
  for (SafetensorsEntry& e : f.entries_) {
    auto bad = [&](const std::string& what) {
      return invalid_argument(fmt::format("{}: tensor '{}': {}", f.name_, e.name, what));
    };
    std::optional<uint64_t> size = element_size(e.dtype_name);
    if (!size) {
      return parse_error(
          fmt::format("{}: tensor '{}': unknown dtype '{}'", f.name_, e.name, e.dtype_name));
    }
    e.dtype = readable_dtype(e.dtype_name);
    Result<uint64_t> checked = checked_nbytes(e.shape, static_cast<size_t>(*size));
    if (!checked.is_ok()) return bad(checked.status().message());
    uint64_t bytes = *checked;
    if (e.begin > e.end) {
      return bad(fmt::format("data_offsets [{}, {}] end before they begin", e.begin, e.end));
    }
    if (e.end > data_size) {
      return bad(fmt::format("data_offsets [{}, {}] run past the data section ({} bytes)",
                             e.begin, e.end, data_size));
    }
    if (e.end - e.begin != bytes) {
      return bad(fmt::format("shape [{}] of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                             fmt::join(e.shape, ", "), e.dtype_name, bytes, e.begin, e.end,
                             e.end - e.begin));
    }
  }
  // The ranges must tile the data section: sorted by offset, each starts where the last ended.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : f.entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin < covered) {
      return invalid_argument(fmt::format("{}: tensors '{}' and '{}' overlap (bytes [{}, {}) and [{}, {}))",
                                    f.name_, previous->name, e->name, previous->begin,
                                    previous->end, e->begin, e->end));
    }
    if (e->begin > covered) {
      return invalid_argument(fmt::format("{}: bytes [{}, {}) of the data section belong to no tensor",
                                          f.name_, covered, e->begin));
    }
    covered = e->end;
    previous = e;
  }
  if (covered != data_size) {
    return invalid_argument(fmt::format("{}: bytes [{}, {}) of the data section belong to no tensor",
                                        f.name_, covered, data_size));
  }
  std::sort(f.entries_.begin(), f.entries_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  return f;
}

Result<SafetensorsFile> SafetensorsFile::parse(std::string bytes, std::string_view name) {
  std::string file(name);
  if (bytes.size() < 8) {
    return invalid_argument(fmt::format("{}: {} bytes is too short for a safetensors file", file,
                                        bytes.size()));
  }
  uint64_t n = read_le64(bytes.data());
  if (n > kMaxSafetensorsHeader || n > bytes.size() - 8) {
    return invalid_argument(fmt::format("{}: header length {} does not fit the file ({} bytes)",
                                        file, n, bytes.size()));
  }
  Result<SafetensorsFile> f = from_header(std::string_view(bytes).substr(8, n),
                                          bytes.size() - 8 - n, std::move(file));
  if (!f.is_ok()) return f;
  f->data_start_ = 8 + n;
  f->bytes_ = std::move(bytes);
  return f;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  Result<InputFile> opened = InputFile::open(path);
  if (!opened.is_ok()) return opened.status();
  auto file = std::make_shared<const InputFile>(std::move(opened).value());
  uint64_t size = file->size();
  if (size < 8) {
    return invalid_argument(
        fmt::format("{}: {} bytes is too short for a safetensors file", path, size));
  }
  char prefix[8];
  Status st = file->read_at(0, prefix, 8);
  if (!st.is_ok()) return st;
  uint64_t n = read_le64(prefix);
  if (n > kMaxSafetensorsHeader || n > size - 8) {
    return invalid_argument(
        fmt::format("{}: header length {} does not fit the file ({} bytes)", path, n, size));
  }
  std::string header(n, '\0');
  st = file->read_at(8, header.data(), header.size());
  if (!st.is_ok()) return st;
  Result<SafetensorsFile> f = from_header(header, size - 8 - n, path);
  if (!f.is_ok()) return f;
  f->data_start_ = 8 + n;
  f->file_ = std::move(file);
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view tensor) const {
  auto it = std::lower_bound(
      entries_.begin(), entries_.end(), tensor,
      [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == tensor ? &*it : nullptr;
}

std::string SafetensorsFile::did_you_mean(std::string_view tensor) const {
  std::vector<std::string_view> names;
  names.reserve(entries_.size());
  for (const SafetensorsEntry& e : entries_) names.push_back(e.name);
  return tracecache::did_you_mean(tensor, names);
}

Result<HostBuffer> SafetensorsFile::tensor(std::string_view tensor) const {
  const SafetensorsEntry* e = find(tensor);
  if (!e) return not_found(fmt::format("{}: no tensor '{}'{}", name_, tensor, did_you_mean(tensor)));
  if (!e->dtype) {
    return unsupported(fmt::format("{}: tensor '{}' has dtype {}; readable dtypes are F32, F64, "
                                   "BF16, F16, I64, I32, I16, I8, U8 and BOOL",
                                   name_, e->name, e->dtype_name));
  }
  if (e->shape.size() > static_cast<size_t>(kMaxRank)) {
    return unsupported(fmt::format("{}: tensor '{}' has rank {}; at most {} is supported", name_,
                                   e->name, e->shape.size(), kMaxRank));
  }
  Shape shape;
  for (int64_t d : e->shape) shape.push_back(d);
  HostBuffer b(*e->dtype, shape);
  uint64_t n = e->end - e->begin;
  if (!file_) {
    std::memcpy(b.bytes(), bytes_.data() + data_start_ + e->begin, n);
  } else {
    Status st = file_->read_at(data_start_ + e->begin, b.bytes(), static_cast<size_t>(n));
    if (!st.is_ok()) return st;
  }
  if (*e->dtype == DType::kBool) {
    const auto* p = reinterpret_cast<const unsigned char*>(b.bytes());
    for (uint64_t i = 0; i < n; ++i) {
      if (p[i] > 1) {
        return invalid_argument(fmt::format("{}: tensor '{}': bool element {} is {}, not 0 or 1",
                                            name_, e->name, i, p[i]));
      }
    }
  }
  return b;
}

Result<std::string> encode_safetensors(std::span<const NamedBuffer> tensors,
                                       const std::map<std::string, std::string>& metadata) {
  std::vector<const NamedBuffer*> sorted;
  for (const NamedBuffer& t : tensors) {
    if (t.name.empty()) return invalid_argument("safetensors: a tensor name is empty");
    if (t.name.starts_with("__metadata__")) {
      return invalid_argument(fmt::format("safetensors: '{}' is a reserved name", t.name));
    }
    sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const NamedBuffer* a, const NamedBuffer* b) { return a->name < b->name; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->name == sorted[i - 1]->name) {
      return invalid_argument(fmt::format("safetensors: tensor '{}' is given twice", sorted[i]->name));
    }
  }
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ",";
      first = false;
      header += json_string(k) + ":" + json_string(v);
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const NamedBuffer* t : sorted) {
    if (header.size() > 1) header += ",";
    uint64_t n = t->buffer->nbytes();
    header += fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          json_string(t->name), safetensors_dtype_name(t->buffer->dtype()),
                          fmt::join(t->buffer->shape(), ","), offset, offset + n);
    offset += n;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xFF);
  out += header;
  out.reserve(out.size() + offset);
  for (const NamedBuffer* t : sorted) {
    out.append(reinterpret_cast<const char*>(t->buffer->bytes()), t->buffer->nbytes());
  }
  return out;
}

Status write_safetensors(const std::string& path, std::span<const NamedBuffer> tensors,
                         const std::map<std::string, std::string>& metadata) {
  Result<std::string> bytes = encode_safetensors(tensors, metadata);
  if (!bytes.is_ok()) return bytes.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error(fmt::format("{}: cannot open for writing", path));
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return io_error(fmt::format("{}: write failed", path));
  return Status::ok();
}

}  // namespace tracecache
