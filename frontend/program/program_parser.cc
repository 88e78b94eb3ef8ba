// The `.trace` format's parser: parse_program and load_program (program.h has the contract;
// the tokens come from program_lexer.h).
#include "frontend/program/program.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "capture/core/suggest.h"
#include "frontend/files/input_file.h"
#include "frontend/program/op_call.h"
#include "frontend/program/program_lexer.h"

namespace tracecache {

namespace {

using lexer::fail_at;
using lexer::is_reserved;
using lexer::Token;
using lexer::tokenize_line;

// ---- parser --------------------------------------------------------------------------------

// Generator arguments by kind: name and whether it may be given positionally, in order.
struct GenArg {
  std::string_view name;
  bool required;
};
constexpr GenArg kNormalArgs[] = {{"seed", true}, {"mean", false}, {"std", false}};
constexpr GenArg kUniformArgs[] = {{"seed", true}, {"low", false}, {"high", false}};
constexpr GenArg kFullArgs[] = {{"value", true}};
constexpr GenArg kScheduleArgs[] = {{"values", true}};
constexpr GenArg kNpyArgs[] = {{"path", true}};
constexpr GenArg kSafetensorsArgs[] = {{"path", true}, {"tensor", true}};

struct GenSpec {
  std::string_view name;
  Generator::Kind kind;
  std::span<const GenArg> args;
};
constexpr GenSpec kGenerators[] = {
    {"normal", Generator::Kind::kNormal, kNormalArgs},
    {"uniform", Generator::Kind::kUniform, kUniformArgs},
    {"full", Generator::Kind::kFull, kFullArgs},
    {"schedule", Generator::Kind::kSchedule, kScheduleArgs},
    {"npy", Generator::Kind::kNpy, kNpyArgs},
    {"safetensors", Generator::Kind::kSafetensors, kSafetensorsArgs},
};

const GenSpec& gen_spec(Generator::Kind kind) {
  for (const GenSpec& g : kGenerators) {
    if (g.kind == kind) return g;
  }
  return kGenerators[0];
}

// True if a tensor of `dtype` can hold `v`: exactly for integers and bool, rounded for f32.
bool fits_dtype(double v, DType dtype) {
  switch (dtype) {
    case DType::kF32: return true;  // rounds to the nearest f32, like any float literal
    case DType::kBool: return v == 0 || v == 1;
    case DType::kI32: return v == std::trunc(v) && v >= -2147483648.0 && v <= 2147483647.0;
    case DType::kI64:
      return v == std::trunc(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    case DType::kI8: return v == std::trunc(v) && v >= -128 && v <= 127;
    case DType::kU8: return v == std::trunc(v) && v >= 0 && v <= 255;
    case DType::kI16: return v == std::trunc(v) && v >= -32768 && v <= 32767;
    case DType::kF64: case DType::kBF16: case DType::kF16: return true;  // rounds, like any float literal
  }
  return false;
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  Program parse() {
    program_.file_name = std::string(file_);
    bool seen_header = false;
    bool seen_output = false;
    int line_no = 0;
    size_t start = 0;
    while (start <= text_.size()) {
      size_t nl = text_.find('\n', start);
      if (nl == std::string_view::npos) nl = text_.size();
      ++line_no;
      line_ = text_.substr(start, nl - start);
      tokens_ = tokenize_line(file_, line_, line_no);
      at_ = 0;
      start = nl + 1;
      if (peek().kind == Token::Kind::kEnd) continue;
      if (!seen_header) {
        parse_header();
        seen_header = true;
        continue;
      }
      const Token& t = peek();
      if (t.is_name("tracecache")) fail_at(file_, t.pos, "duplicate 'tracecache' header");
      if (t.is_name("steps")) {
        parse_steps();
      } else if (t.is_name("dim")) {
        parse_dim();
      } else if (t.is_name("input") || t.is_name("param")) {
        parse_tensor_decl();
      } else if (t.is_name("output")) {
        if (seen_output) fail_at(file_, t.pos, "duplicate 'output' statement");
        seen_output = true;
        parse_output();
      } else if (t.is_name("update") && peek(1).kind == Token::Kind::kName) {
        parse_update();
      } else {
        parse_op();
      }
      expect_end();
    }
    if (!seen_header) {
      fail_at(
          file_, SourcePos{line_no, 1},
          fmt::format("expected 'tracecache {}' header, found end of file", kTraceFormatVersion));
    }
    if (!seen_output) {
      fail_at(file_, SourcePos{line_no, 1}, "expected an 'output' statement, found end of file");
    }
    check_update_values();
    return std::move(program_);
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(at_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = peek();
    if (at_ + 1 < tokens_.size()) ++at_;
    return t;
  }
  [[noreturn]] void expected(std::string_view what, const Token& found) const {
    fail_at(file_, found.pos, fmt::format("expected {}, found {}", what, found.describe()));
  }
  void expect_punct(char c) {
    if (!peek().is(c)) expected(fmt::format("'{}'", c), peek());
    next();
  }
  void expect_end() {
    if (peek().kind != Token::Kind::kEnd) expected("end of line", peek());
  }
  const Token& expect_name(std::string_view what) {
    if (peek().kind != Token::Kind::kName) expected(what, peek());
    return next();
  }
  int64_t expect_int(std::string_view what) {
    if (peek().kind != Token::Kind::kInt) expected(what, peek());
    return next().i;
  }
  double expect_number(std::string_view what) {
    const Token& t = peek();
    if (t.kind == Token::Kind::kInt) return static_cast<double>(next().i);
    if (t.kind == Token::Kind::kFloat) return next().f;
    expected(what, t);
  }

  // A fresh name for a dim or a tensor: not reserved, not defined before.
  std::string define(const Token& t, std::string_view what) {
    if (is_reserved(t.text)) {
      fail_at(file_, t.pos,
              fmt::format("'{}' is a reserved word and cannot name a {}", t.text, what));
    }
    auto [it, inserted] = defined_.emplace(t.text, t.pos);
    if (!inserted) {
      fail_at(file_, t.pos,
              fmt::format("name '{}' is already defined at line {}", t.text, it->second.line));
    }
    return t.text;
  }

  void parse_header() {
    const Token& t = peek();
    std::string want = fmt::format("'tracecache {}' header", kTraceFormatVersion);
    if (!t.is_name("tracecache")) expected(want, t);
    next();
    const Token& v = peek();
    if (v.kind != Token::Kind::kInt) expected("a format version number", v);
    if (v.i != kTraceFormatVersion) {
      throw Error(unsupported(
          fmt::format("{}:{}:{}: format version {} is not supported (this build reads version {})",
                      file_, v.pos.line, v.pos.col, v.i, kTraceFormatVersion)));
    }
    next();
    expect_end();
  }

  void parse_steps() {
    const Token& kw = next();
    if (program_.steps) fail_at(file_, kw.pos, "duplicate 'steps' directive");
    SourcePos p = peek().pos;
    int64_t n = expect_int("a step count");
    if (n < 1) fail_at(file_, p, fmt::format("step count must be >= 1, got {}", n));
    program_.steps = n;
  }

  void parse_dim() {
    next();
    DimDecl d;
    const Token& name = expect_name("a dim name");
    d.pos = name.pos;
    d.name = define(name, "dim");
    expect_punct('=');
    auto value = [&] {
      SourcePos p = peek().pos;
      int64_t v = expect_int("a dim value");
      if (v < 0) fail_at(file_, p, fmt::format("dim value must be >= 0, got {}", v));
      d.values.push_back(v);
    };
    if (peek().is('[')) {
      next();
      value();
      while (peek().is(',')) {
        next();
        value();
      }
      expect_punct(']');
    } else {
      value();
    }
    program_.dims.push_back(std::move(d));
  }

  void parse_tensor_decl() {
    TensorDecl decl;
    decl.role = next().text == "param" ? TensorDecl::Role::kParam : TensorDecl::Role::kInput;
    std::string_view role = decl.role == TensorDecl::Role::kParam ? "param" : "input";
    const Token& name =
        expect_name(fmt::format("{} name", role == "param" ? "a parameter" : "an input"));
    decl.pos = name.pos;
    decl.name = define(name, "tensor");
    expect_punct(':');
    const Token& dt = peek();
    if (dt.kind != Token::Kind::kName || !parse_dtype(dt.text)) {
      expected("a dtype (bool, i8, u8, i16, i32, i64, f16, bf16, f32, f64)", dt);
    }
    decl.dtype = *parse_dtype(next().text);
    expect_punct('[');
    if (!peek().is(']')) {
      decl.dims.push_back(parse_dim_ref(decl));
      while (peek().is(',')) {
        next();
        decl.dims.push_back(parse_dim_ref(decl));
      }
    }
    if (decl.dims.size() > static_cast<size_t>(kMaxRank)) {
      fail_at(file_, decl.dims.back().pos, fmt::format("rank above {} is not supported", kMaxRank));
    }
    expect_punct(']');
    expect_punct('=');
    decl.init = parse_generator(decl);
    defined_tensors_.insert(decl.name);
    program_.tensors.push_back(std::move(decl));
  }

  DimRef parse_dim_ref(const TensorDecl& decl) {
    DimRef r;
    const Token& t = peek();
    r.pos = t.pos;
    if (t.kind == Token::Kind::kInt) {
      if (t.i < 0) fail_at(file_, t.pos, fmt::format("dim must be >= 0, got {}", t.i));
      r.value = next().i;
      return r;
    }
    if (t.kind != Token::Kind::kName) expected("a dim (a number or a dim name)", t);
    const DimDecl* d = program_.find_dim(t.text);
    if (!d) fail_at(file_, t.pos, fmt::format("undefined dim '{}'", t.text));
    if (decl.role == TensorDecl::Role::kParam &&
        std::adjacent_find(d->values.begin(), d->values.end(), std::not_equal_to<>()) !=
            d->values.end()) {
      fail_at(file_, t.pos,
              fmt::format("parameter '{}' uses dim '{}', whose value varies across steps; "
                          "parameters are fixed",
                          decl.name, t.text));
    }
    r.name = next().text;
    return r;
  }

  Generator parse_generator(const TensorDecl& decl) {
    const Token& name = peek();
    if (name.kind != Token::Kind::kName) {
      expected("a generator (normal, uniform, full, schedule, npy, safetensors)", name);
    }
    const GenSpec* spec = nullptr;
    for (const GenSpec& g : kGenerators) {
      if (g.name == name.text) spec = &g;
    }
    if (!spec) {
      std::vector<std::string_view> names;
      for (const GenSpec& g : kGenerators) names.push_back(g.name);
      fail_at(file_, name.pos,
              fmt::format("unknown generator '{}'{}", name.text, did_you_mean(name.text, names)));
    }
    next();
    Generator g;
    g.kind = spec->kind;
    g.pos = name.pos;
    expect_punct('(');
    std::vector<bool> given(spec->args.size(), false);
    size_t positional = 0;
    bool named_seen = false;
    bool first = true;
    while (!peek().is(')')) {
      if (!first) expect_punct(',');
      first = false;
      size_t index;
      SourcePos arg_pos = peek().pos;
      if (peek().kind == Token::Kind::kName && peek(1).is('=')) {
        const Token& arg = next();
        next();
        auto it = std::find_if(spec->args.begin(), spec->args.end(),
                               [&](const GenArg& a) { return a.name == arg.text; });
        if (it == spec->args.end()) {
          std::vector<std::string_view> names;
          for (const GenArg& a : spec->args) names.push_back(a.name);
          fail_at(file_, arg.pos,
                  fmt::format("generator '{}' has no argument '{}'{}", spec->name, arg.text,
                              did_you_mean(arg.text, names)));
        }
        index = static_cast<size_t>(it - spec->args.begin());
        named_seen = true;
      } else {
        if (named_seen) fail_at(file_, arg_pos, "positional argument after a named argument");
        if (positional >= spec->args.size()) {
          fail_at(file_, arg_pos,
                  fmt::format("generator '{}' takes at most {} arguments", spec->name,
                              spec->args.size()));
        }
        index = positional++;
      }
      if (given[index]) {
        fail_at(file_, arg_pos,
                fmt::format("argument '{}' of generator '{}' is given twice",
                            spec->args[index].name, spec->name));
      }
      given[index] = true;
      parse_generator_arg(g, spec->args[index].name);
    }
    next();
    for (size_t k = 0; k < spec->args.size(); ++k) {
      if (spec->args[k].required && !given[k]) {
        fail_at(file_, g.pos,
                fmt::format("generator '{}' needs argument '{}'", spec->name, spec->args[k].name));
      }
    }
    check_generator(g, decl);
    return g;
  }

  void parse_generator_arg(Generator& g, std::string_view arg) {
    if (arg == "seed") {
      SourcePos p = peek().pos;
      int64_t s = expect_int("an integer seed");
      if (s < 0) fail_at(file_, p, fmt::format("seed must be >= 0, got {}", s));
      g.seed = static_cast<uint64_t>(s);
    } else if (arg == "path") {
      if (peek().kind != Token::Kind::kString) expected("a quoted path", peek());
      g.path = next().text;
    } else if (arg == "tensor") {
      if (peek().kind != Token::Kind::kString) expected("a quoted tensor name", peek());
      g.tensor = next().text;
    } else if (arg == "values") {
      expect_punct('[');
      g.values.push_back(expect_number("a number"));
      while (peek().is(',')) {
        next();
        g.values.push_back(expect_number("a number"));
      }
      expect_punct(']');
    } else {
      double* field = arg == "mean"   ? &g.mean
                      : arg == "std"  ? &g.stddev
                      : arg == "low"  ? &g.low
                      : arg == "high" ? &g.high
                                      : &g.value;
      *field = expect_number("a number");
    }
  }

  void check_generator(const Generator& g, const TensorDecl& decl) {
    auto fail = [&](const std::string& msg) {
      fail_at(file_, g.pos,
              fmt::format("generator '{}' for '{}': {}", gen_spec(g.kind).name, decl.name, msg));
    };
    std::string_view dtype = dtype_name(decl.dtype);
    switch (g.kind) {
      case Generator::Kind::kNormal:
        if (!is_floating(decl.dtype)) fail(fmt::format("needs a floating dtype, not {}", dtype));
        if (!std::isfinite(g.mean) || !std::isfinite(g.stddev) || g.stddev < 0) {
          fail(fmt::format("mean {} and std {} must be finite, std >= 0", g.mean, g.stddev));
        }
        break;
      case Generator::Kind::kUniform:
        if (!std::isfinite(g.low) || !std::isfinite(g.high) || g.low > g.high) {
          fail(fmt::format("low {} and high {} must be finite, low <= high", g.low, g.high));
        }
        if (decl.dtype == DType::kBool && (g.low < 0 || g.high > 2)) {
          fail(fmt::format("bool values need 0 <= low <= high <= 2, got [{}, {})", g.low, g.high));
        }
        break;
      case Generator::Kind::kFull:
        if (!fits_dtype(g.value, decl.dtype)) {
          fail(fmt::format("{} does not fit {}", g.value, dtype));
        }
        break;
      case Generator::Kind::kSchedule:
        for (double v : g.values) {
          if (!fits_dtype(v, decl.dtype)) fail(fmt::format("{} does not fit {}", v, dtype));
        }
        break;
      case Generator::Kind::kNpy:
        if (g.path.empty()) fail("the path is empty");
        break;
      case Generator::Kind::kSafetensors:
        if (g.path.empty()) fail("the path is empty");
        if (g.tensor.empty()) fail("the tensor name is empty");
        break;
    }
  }

  // Checks that `t` names a tensor defined so far.
  void check_tensor_name(const Token& t) const {
    if (defined_tensors_.count(t.text)) return;
    if (program_.find_dim(t.text)) {
      fail_at(file_, t.pos, fmt::format("'{}' is a dim, not a tensor", t.text));
    }
    fail_at(file_, t.pos, fmt::format("undefined name '{}'", t.text));
  }

  void parse_op() {
    OpStmt op;
    const Token& result =
        expect_name("a statement (steps, dim, input, param, output or NAME = op(...))");
    op.result_pos = result.pos;
    std::vector<Token> more;  // `a, b = grad(...)`: the names after the first
    while (peek().is(',')) {
      next();
      more.push_back(expect_name("a result name"));
    }
    expect_punct('=');
    const Token& op_name = expect_name("an op name");
    op.pos = op_name.pos;
    if (op_name.text == "grad") return parse_grad(result, more, std::move(op));
    if (!more.empty()) {
      fail_at(file_, more.front().pos,
              fmt::format("op '{}' has one result, but {} names are written; only grad(...) has "
                          "several results", op_name.text, more.size() + 1));
    }
    const OpInfo* info = find_callable_op(op_name.text);
    if (!info) fail_at(file_, op_name.pos, unknown_op_message(op_name.text));
    op.op = info->kind;
    expect_punct('(');
    bool first = true;
    while (!peek().is(')')) {
      if (!first) expect_punct(',');
      first = false;
      const Token& t = peek();
      if (t.kind == Token::Kind::kName && peek(1).is('=')) {
        parse_attr(*info, op);
      } else {
        if (!op.attrs.empty()) {
          fail_at(file_, t.pos, "operand after an attribute; operands come first");
        }
        op.operands.push_back(parse_operand(*info));
      }
    }
    next();
    check_op(*info, op);
    op.result = define(result, "tensor");
    defined_tensors_.insert(op.result);
    program_.ops.push_back(std::move(op));
  }

  // `gw, gb = grad(loss, w, b)`: tensor names only, one result per name after the loss.
  void parse_grad(const Token& result, const std::vector<Token>& more, OpStmt op) {
    op.is_grad = true;
    expect_punct('(');
    bool first = true;
    while (!peek().is(')')) {
      if (!first) expect_punct(',');
      first = false;
      const Token& t = peek();
      if (t.kind == Token::Kind::kName && peek(1).is('=')) {
        fail_at(file_, t.pos, "grad takes no attributes: write grad(LOSS, X1, X2, ...)");
      }
      if (t.kind == Token::Kind::kName && peek(1).is('(')) nested_call(t);
      if (t.kind != Token::Kind::kName) {
        expected("a tensor name (grad(LOSS, X1, X2, ...) takes tensor names only)", t);
      }
      check_tensor_name(t);
      Literal l;
      l.kind = Literal::Kind::kName;
      l.name = t.text;
      l.pos = t.pos;
      op.operands.push_back(std::move(l));
      next();
    }
    next();
    if (op.operands.size() < 2) {
      fail_at(file_, op.pos,
              "grad takes the loss and at least one tensor to differentiate it by: grad(LOSS, X1, "
              "X2, ...)");
    }
    const size_t names = more.size() + 1;
    if (names != op.operands.size() - 1) {
      fail_at(file_, result.pos,
              fmt::format("grad({}, ...) gives {} result{} (one per tensor after the loss), but {} "
                          "name{} written", op.operands[0].name, op.operands.size() - 1,
                          op.operands.size() == 2 ? "" : "s", names, names == 1 ? " is" : "s are"));
    }
    op.result = define(result, "tensor");
    defined_tensors_.insert(op.result);
    for (const Token& t : more) {
      op.more_results.push_back(ResultRef{define(t, "tensor"), t.pos});
      defined_tensors_.insert(t.text);
    }
    program_.ops.push_back(std::move(op));
  }

  // `update w = w2`: `w` a param not updated yet, `w2` any tensor defined so far.
  void parse_update() {
    next();
    const Token& param = next();
    const TensorDecl* decl = program_.find_tensor(param.text);
    if (!decl) {
      check_tensor_name(param);
      fail_at(file_, param.pos,
              fmt::format("'{}' is not a param: only params can be updated", param.text));
    }
    if (decl->role != TensorDecl::Role::kParam) {
      fail_at(file_, param.pos,
              fmt::format("'{}' is an input, made anew every step: only params can be updated",
                          param.text));
    }
    for (const UpdateStmt& u : program_.updates) {
      if (u.param == param.text) {
        fail_at(file_, param.pos,
                fmt::format("param '{}' is already updated at line {}; a param is updated at most "
                            "once per step", param.text, u.pos.line));
      }
    }
    UpdateStmt u;
    u.param = param.text;
    u.pos = param.pos;
    expect_punct('=');
    if (peek().kind == Token::Kind::kName && peek(1).is('(')) {
      fail_at(file_, peek().pos,
              fmt::format("update takes a tensor name; write 't = {}(...)' on its own line, then "
                          "'update {} = t'", peek().text, param.text));
    }
    const Token& value = expect_name("the name of the param's new value");
    check_tensor_name(value);
    u.value = value.text;
    u.value_pos = value.pos;
    program_.updates.push_back(std::move(u));
  }

  // An updated param can be neither an update's value nor an output, and two params cannot take
  // the same value: what they would see would depend on the order the updates are applied in,
  // and differ between modes.
  void check_update_values() const {
    for (size_t i = 0; i < program_.updates.size(); ++i) {
      const UpdateStmt& u = program_.updates[i];
      for (size_t j = 0; j < program_.updates.size(); ++j) {
        const UpdateStmt& other = program_.updates[j];
        if (u.value == other.param) {
          fail_at(file_, u.value_pos,
                  fmt::format("the new value of '{}' is param '{}', which is itself updated at line "
                              "{}; name the value through an op", u.param, u.value, other.pos.line));
        }
        if (j < i && u.value == other.value) {
          fail_at(file_, u.value_pos,
                  fmt::format("'{}' is already the new value of '{}' (line {}); each update needs "
                              "its own value", u.value, other.param, other.pos.line));
        }
      }
      for (const OutputRef& o : program_.outputs) {
        if (o.name == u.param) {
          fail_at(file_, o.pos,
                  fmt::format("param '{}' is updated at line {}: output its new value '{}' instead",
                              u.param, u.pos.line, u.value));
        }
      }
    }
  }

  // `y = relu(neg(x))`: an operand that is itself a call. The format is SSA, one op per line;
  // the error shows the same statement split in two.
  [[noreturn]] void nested_call(const Token& callee) const {
    size_t depth = 0;
    size_t close = at_ + 1;
    for (; close < tokens_.size() && tokens_[close].kind != Token::Kind::kEnd; ++close) {
      if (tokens_[close].is('(')) ++depth;
      if (tokens_[close].is(')') && --depth == 0) break;
    }
    std::string message = fmt::format(
        "nested calls are not supported: '{}(...)' is an operand of another op", callee.text);
    if (close < tokens_.size() && tokens_[close].is(')')) {
      size_t begin = static_cast<size_t>(callee.pos.col - 1);
      size_t end = static_cast<size_t>(tokens_[close].pos.col);
      std::string inner(line_.substr(begin, end - begin));
      std::string temp = "t";
      auto taken = [&](const std::string& name) {
        return defined_.count(name) > 0 || is_reserved(name) ||
               std::any_of(tokens_.begin(), tokens_.end(), [&](const Token& tok) {
                 return tok.kind == Token::Kind::kName && tok.text == name;
               });
      };
      for (int k = 1; taken(temp); ++k) temp = fmt::format("t{}", k);
      std::string_view statement = line_.substr(0, line_.find('#'));
      while (!statement.empty() && (statement.back() == ' ' || statement.back() == '\t' ||
                                    statement.back() == '\r')) {
        statement.remove_suffix(1);
      }
      size_t lead = statement.find_first_not_of(" \t");
      statement.remove_prefix(lead == std::string_view::npos ? statement.size() : lead);
      std::string outer(statement);
      size_t at = outer.find(inner);
      if (at != std::string::npos) {
        outer.replace(at, inner.size(), temp);
        message = fmt::format(
            "nested calls are not supported; write '{} = {}' on its own line, then '{}'", temp,
            inner, outer);
      }
    }
    fail_at(file_, callee.pos, message);
  }

  Literal parse_operand(const OpInfo& info) {
    const Token& t = peek();
    Literal l;
    l.pos = t.pos;
    if (t.kind == Token::Kind::kName && peek(1).is('(')) nested_call(t);
    if (t.kind == Token::Kind::kName) {
      check_tensor_name(t);
      l.kind = Literal::Kind::kName;
      l.name = next().text;
      return l;
    }
    if (t.kind == Token::Kind::kInt || t.kind == Token::Kind::kFloat) {
      bool scalars_ok = info.op_class == OpClass::kBinary || info.op_class == OpClass::kCompare ||
                        info.op_class == OpClass::kWhere;
      if (!scalars_ok) {
        fail_at(file_, t.pos,
                fmt::format("op '{}': operand {} must be a tensor name; number operands "
                            "are allowed only in elementwise binary ops and where",
                            info.name, t.text));
      }
      l.kind = t.kind == Token::Kind::kInt ? Literal::Kind::kInt : Literal::Kind::kFloat;
      l.i = t.i;
      l.f = t.f;
      next();
      return l;
    }
    expected("an operand (a tensor name or a number) or an attribute (name=value)", t);
  }

  void parse_attr(const OpInfo& info, OpStmt& op) {
    const Token& name = next();
    next();  // '='
    int index = info.attr_index(name.text);
    if (index < 0) fail_at(file_, name.pos, unknown_attr_message(info, name.text));
    for (const NamedAttr& a : op.attrs) {
      if (a.name == name.text) {
        fail_at(file_, name.pos,
                fmt::format("op '{}': attribute '{}' is given twice", info.name, name.text));
      }
    }
    NamedAttr attr;
    attr.name = name.text;
    attr.pos = name.pos;
    attr.value = parse_value();
    check_attr_kind(info, info.attrs[static_cast<size_t>(index)], attr.value);
    op.attrs.push_back(std::move(attr));
  }

  Literal parse_value() {
    const Token& t = peek();
    Literal l;
    l.pos = t.pos;
    switch (t.kind) {
      case Token::Kind::kInt:
        l.kind = Literal::Kind::kInt;
        l.i = t.i;
        break;
      case Token::Kind::kFloat:
        l.kind = Literal::Kind::kFloat;
        l.f = t.f;
        break;
      case Token::Kind::kName:
        if (t.text == "true" || t.text == "false") {
          l.kind = Literal::Kind::kBool;
          l.i = t.text == "true";
        } else {
          l.kind = Literal::Kind::kName;
          l.name = t.text;
        }
        break;
      case Token::Kind::kPunct:
        if (t.is('[')) {
          next();
          l.kind = Literal::Kind::kList;
          bool first = true;
          while (!peek().is(']')) {
            if (!first) expect_punct(',');
            first = false;
            const Token& item = peek();
            if (item.kind != Token::Kind::kInt && item.kind != Token::Kind::kName) {
              expected("a list item (an integer or a dim name)", item);
            }
            Literal li;
            li.pos = item.pos;
            li.kind = item.kind == Token::Kind::kInt ? Literal::Kind::kInt : Literal::Kind::kName;
            li.i = item.i;
            li.name = item.kind == Token::Kind::kName ? item.text : std::string();
            next();
            l.items.push_back(std::move(li));
          }
          next();
          return l;
        }
        [[fallthrough]];
      default: expected("an attribute value", t);
    }
    next();
    return l;
  }

  void check_dim_name(const Literal& l) const {
    if (!program_.find_dim(l.name)) {
      fail_at(file_, l.pos, fmt::format("undefined dim '{}'", l.name));
    }
  }

  void check_attr_kind(const OpInfo& info, const AttrSpec& spec, const Literal& v) const {
    auto mismatch = [&] { fail_at(file_, v.pos, attr_kind_message(info, spec, v.to_string())); };
    switch (spec.kind) {
      case AttrKind::kInt:
        if (v.kind == Literal::Kind::kName) {
          check_dim_name(v);
        } else if (v.kind != Literal::Kind::kInt) {
          mismatch();
        }
        break;
      case AttrKind::kFloat:
        if (v.kind == Literal::Kind::kName) {
          check_dim_name(v);
        } else if (!v.is_number()) {
          mismatch();
        }
        break;
      case AttrKind::kBool:
        if (v.kind != Literal::Kind::kBool) mismatch();
        break;
      case AttrKind::kDType:
        if (v.kind != Literal::Kind::kName || !parse_dtype(v.name)) mismatch();
        break;
      case AttrKind::kInts:
        if (v.kind != Literal::Kind::kList) mismatch();
        if (v.items.size() > static_cast<size_t>(kMaxRank)) {
          fail_at(file_, v.pos, too_many_entries_message(info, spec));
        }
        for (const Literal& item : v.items) {
          if (item.kind == Literal::Kind::kName) check_dim_name(item);
        }
        break;
    }
  }

  void check_op(const OpInfo& info, OpStmt& op) const {
    int n = static_cast<int>(op.operands.size());
    if (std::string message = operand_count_message(info, n); !message.empty()) fail_at(file_, op.pos, message);
    if (n > 0 && std::none_of(op.operands.begin(), op.operands.end(),
                              [](const Literal& l) { return l.kind == Literal::Kind::kName; })) {
      fail_at(file_, op.pos, fmt::format("op '{}' needs at least one tensor operand", info.name));
    }
    for (const AttrSpec& spec : info.attrs) {
      if (!spec.required) continue;
      bool given = std::any_of(op.attrs.begin(), op.attrs.end(),
                               [&](const NamedAttr& a) { return a.name == spec.name; });
      if (!given) fail_at(file_, op.pos, missing_attr_message(info, spec));
    }
    std::stable_sort(op.attrs.begin(), op.attrs.end(), [&](const NamedAttr& a, const NamedAttr& b) {
      return info.attr_index(a.name) < info.attr_index(b.name);
    });
  }

  void parse_output() {
    next();
    auto one = [&] {
      const Token& t = expect_name("an output name");
      check_tensor_name(t);
      program_.outputs.push_back(OutputRef{t.text, t.pos});
    };
    one();
    while (peek().is(',')) {
      next();
      one();
    }
  }

  std::string_view text_;
  std::string_view file_;
  Program program_;
  std::string_view line_;  // the line being parsed, as written
  std::vector<Token> tokens_;
  size_t at_ = 0;
  std::map<std::string, SourcePos, std::less<>> defined_;  // dims and tensors
  std::set<std::string, std::less<>> defined_tensors_;
};


}  // namespace

// ---- entry points --------------------------------------------------------------------------

Result<Program> parse_program(std::string_view text, std::string_view file_name) {
  try {
    return Parser(text, file_name).parse();
  } catch (const Error& e) {
    return e.status();
  }
}

Result<Program> load_program(const std::string& path) {
  Result<InputFile> file = InputFile::open(path);
  if (!file.is_ok()) return file.status();
  if (file->size() > kMaxProgramBytes) {
    return invalid_argument(fmt::format(
        "{}: program is {} bytes; the limit is {} bytes (split it, or keep weights in npy or "
        "safetensors files)", path, file->size(), kMaxProgramBytes));
  }
  Result<std::string> text = file->read_all();
  if (!text.is_ok()) return text.status();
  Result<Program> p = parse_program(*text, path);
  if (p.is_ok()) p->base_dir = std::filesystem::path(path).parent_path().string();
  return p;
}

}  // namespace tracecache
