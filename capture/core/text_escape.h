// Escaping text for the formats tracecache writes: JSON strings (`run --json`, `audit --json`,
// timelines) and HTML text (`report`). Text may come from untrusted input (program and file
// names, a database's events), so both keep valid UTF-8 as it is and replace every byte that
// does not start a valid sequence with U+FFFD: the output is always valid UTF-8.
// Thread-safety: pure functions. Errors: none.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tracecache {

// The length of the valid UTF-8 sequence that starts at s[i], or 0 if none does (a stray or
// overlong byte, a surrogate). REQUIRES: i < s.size().
size_t utf8_length(std::string_view s, size_t i);

// Appends `s` to `out`: each valid multi-byte UTF-8 sequence as it is, each invalid byte as
// U+FFFD, and each ASCII byte through `ascii(out, c)`.
template <typename Ascii>
void append_utf8_escaped(std::string& out, std::string_view s, Ascii&& ascii) {
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) < 0x80) {
      ascii(out, c);
      continue;
    }
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      out += "\ufffd";
    } else {
      out.append(s.substr(i, n));
      i += n - 1;
    }
  }
}

// `s` as a quoted JSON string appended to `out` (control characters as escapes).
void append_json_string(std::string& out, std::string_view s);

}  // namespace tracecache
