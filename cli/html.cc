#include "cli/html.h"

#include "cli/json.h"

namespace tracecache::cli {

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      const size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\ufffd";
      } else {
        out.append(s.substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\n':
      case '\t': out.push_back(c); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += "\ufffd";
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

std::string html_escape_cut(std::string_view s, size_t max) {
  if (s.size() <= max) return html_escape(s);
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;  // a character boundary
  return html_escape(s.substr(0, end)) + "...";
}

}  // namespace tracecache::cli
