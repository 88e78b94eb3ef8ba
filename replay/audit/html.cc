#include "replay/audit/html.h"

#include "capture/core/text_escape.h"

namespace tracecache::audit {

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  append_utf8_escaped(out, s, [](std::string& o, char c) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      case '\n':
      case '\t': o.push_back(c); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          o += "\ufffd";
        } else {
          o.push_back(c);
        }
    }
  });
  return out;
}

std::string html_escape_cut(std::string_view s, size_t max) {
  if (s.size() <= max) return html_escape(s);
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;  // a character boundary
  return html_escape(s.substr(0, end)) + "...";
}

}  // namespace tracecache::audit
