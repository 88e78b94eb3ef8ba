#include "capture/core/text_escape.h"

#include <fmt/format.h>

namespace tracecache {

size_t utf8_length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  auto cont = [&](size_t k) { return k < s.size() && (byte(k) & 0xC0) == 0x80; };
  unsigned char b = byte(i);
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (b >= 0xE0 && b <= 0xEF) {
    if (!cont(i + 1) || !cont(i + 2)) return 0;
    if (b == 0xE0 && byte(i + 1) < 0xA0) return 0;   // overlong
    if (b == 0xED && byte(i + 1) >= 0xA0) return 0;  // surrogates
    return 3;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    if (b == 0xF0 && byte(i + 1) < 0x90) return 0;
    if (b == 0xF4 && byte(i + 1) >= 0x90) return 0;
    return 4;
  }
  return 0;
}

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  append_utf8_escaped(out, s, [](std::string& o, char c) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          o += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          o.push_back(c);
        }
    }
  });
  out.push_back('"');
}

}  // namespace tracecache
