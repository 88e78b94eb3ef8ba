// The `.trace` format's lexer (program_lexer.h).
#include "frontend/program/program_lexer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace tracecache::lexer {

namespace {

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool digit(char c) { return c >= '0' && c <= '9'; }

constexpr std::string_view kReservedWords[] = {"tracecache", "steps", "dim",   "input", "param",
                                               "output",     "true",  "false", "inf",   "nan",
                                               "bool",       "i32",   "i64",   "f32"};

}  // namespace

bool is_reserved(std::string_view w) {
  return std::find(std::begin(kReservedWords), std::end(kReservedWords), w) !=
         std::end(kReservedWords);
}

[[noreturn]] void fail_at(std::string_view file, SourcePos pos, const std::string& msg) {
  throw Error(parse_error(fmt::format("{}:{}:{}: {}", file, pos.line, pos.col, msg)));
}

std::vector<Token> tokenize_line(std::string_view file, std::string_view line, int line_no) {
  std::vector<Token> out;
  size_t i = 0;
  auto pos_of = [&](size_t at) { return SourcePos{line_no, static_cast<int>(at) + 1}; };
  while (i < line.size()) {
    char c = line[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '#') break;
    Token t;
    t.pos = pos_of(i);
    size_t start = i;
    bool negative = c == '-';
    size_t body = negative ? i + 1 : i;
    if (negative && body < line.size() && name_start(line[body])) {
      // "-inf" and "-nan" are the only signed words.
      size_t e = body;
      while (e < line.size() && name_char(line[e])) ++e;
      std::string_view word = line.substr(body, e - body);
      if (word != "inf" && word != "nan") fail_at(file, t.pos, "unexpected character '-'");
      t.kind = Token::Kind::kFloat;
      t.text = std::string(line.substr(start, e - start));
      t.f = word == "inf" ? -std::numeric_limits<double>::infinity()
                          : -std::numeric_limits<double>::quiet_NaN();
      i = e;
    } else if (digit(c) || (negative && body < line.size() && digit(line[body]))) {
      size_t e = body;
      bool is_float = false;
      while (e < line.size() && digit(line[e])) ++e;
      if (e < line.size() && line[e] == '.') {
        is_float = true;
        ++e;
        while (e < line.size() && digit(line[e])) ++e;
      }
      if (e < line.size() && (line[e] == 'e' || line[e] == 'E')) {
        size_t x = e + 1;
        if (x < line.size() && (line[x] == '+' || line[x] == '-')) ++x;
        if (x < line.size() && digit(line[x])) {
          is_float = true;
          e = x;
          while (e < line.size() && digit(line[e])) ++e;
        }
      }
      if (e < line.size() && name_char(line[e])) {
        fail_at(file, pos_of(e), fmt::format("unexpected character '{}' in a number", line[e]));
      }
      t.text = std::string(line.substr(start, e - start));
      const char* first = line.data() + start;
      const char* last = line.data() + e;
      std::from_chars_result r;
      if (is_float) {
        t.kind = Token::Kind::kFloat;
        r = std::from_chars(first, last, t.f);
      } else {
        t.kind = Token::Kind::kInt;
        r = std::from_chars(first, last, t.i);
      }
      if (r.ec != std::errc() || r.ptr != last) {
        fail_at(file, t.pos, fmt::format("number {} is out of range", t.text));
      }
      i = e;
    } else if (name_start(c)) {
      size_t e = i;
      while (e < line.size() && name_char(line[e])) ++e;
      t.text = std::string(line.substr(i, e - i));
      if (t.text == "inf" || t.text == "nan") {
        t.kind = Token::Kind::kFloat;
        t.f = t.text == "inf" ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
      } else {
        t.kind = Token::Kind::kName;
      }
      i = e;
    } else if (c == '"') {
      size_t e = i + 1;
      std::string s;
      while (e < line.size() && line[e] != '"') {
        if (line[e] == '\\' && e + 1 < line.size() && (line[e + 1] == '"' || line[e + 1] == '\\')) {
          ++e;
        }
        s += line[e++];
      }
      if (e >= line.size()) fail_at(file, t.pos, "unterminated string");
      t.kind = Token::Kind::kString;
      t.text = std::move(s);
      i = e + 1;
    } else if (std::string_view("=:,()[]").find(c) != std::string_view::npos) {
      t.kind = Token::Kind::kPunct;
      t.text = std::string(1, c);
      ++i;
    } else {
      fail_at(file, t.pos, fmt::format("unexpected character '{}'", c));
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.pos = SourcePos{line_no, static_cast<int>(std::min(i, line.size())) + 1};
  out.push_back(std::move(end));
  return out;
}

}  // namespace tracecache::lexer
