// Escaping text into HTML, for `tracecache report`'s page (replay/audit/report.h), in the style
// of replay/audit/json.h: everything written into the page may come from the (untrusted) cache
// database, so every text and attribute value goes through html_escape, which makes any bytes
// inert: & < > " ' become entities, invalid UTF-8 bytes and control characters other than tab
// and line feed become U+FFFD, so no text can open a tag, close an attribute or start a script.
// Thread-safety: pure functions. Errors: none.
#pragma once

#include <string>
#include <string_view>

namespace tracecache::audit {

// `s` as HTML text or a quoted attribute value.
std::string html_escape(std::string_view s);

// html_escape of at most `max` bytes of `s` (cut at a character boundary), with "..." when cut.
std::string html_escape_cut(std::string_view s, size_t max);

}  // namespace tracecache::audit
