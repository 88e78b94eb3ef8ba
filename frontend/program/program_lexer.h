// The `.trace` format's lexer (docs/trace-format.md): one line at a time into tokens, and the
// errors of the format, "FILE:LINE:COL: message". Internal to frontend/program/ (the parser,
// program_parser.cc, is its one user; program.h is the public interface).
// Errors: fail_at throws Error (kParseError) with the position; parse_program catches it.
// Thread-safety: pure functions. Ownership: tokens own their text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "frontend/program/program.h"

namespace tracecache::lexer {

struct Token {
  enum class Kind : uint8_t { kName, kInt, kFloat, kString, kPunct, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // as written (kString: the unquoted contents)
  int64_t i = 0;
  double f = 0;
  SourcePos pos;

  bool is(char punct) const { return kind == Kind::kPunct && text.size() == 1 && text[0] == punct; }
  bool is_name(std::string_view w) const { return kind == Kind::kName && text == w; }
  std::string describe() const {
    switch (kind) {
      case Kind::kEnd: return "end of line";
      case Kind::kString: return fmt::format("string \"{}\"", text);
      default: return fmt::format("'{}'", text);
    }
  }
};

// Throws the format's error (kParseError) "FILE:LINE:COL: msg".
[[noreturn]] void fail_at(std::string_view file, SourcePos pos, const std::string& msg);

// True for the words a program reserves (a name may not be one).
bool is_reserved(std::string_view w);

// Splits one line (without its newline) into tokens ending with a kEnd token; throws (fail_at)
// on a malformed token.
std::vector<Token> tokenize_line(std::string_view file, std::string_view line, int line_no);

}  // namespace tracecache::lexer
