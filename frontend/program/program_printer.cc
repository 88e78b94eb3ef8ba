// The `.trace` format's printer: print_program and Literal::to_string (program.h has the
// contract: the canonical spelling, parse(print(p)) == p).
#include "frontend/program/program.h"

#include <fmt/format.h>

#include <cmath>

namespace tracecache {

namespace {

// Float spelling that always reads back as a float: "0.5", "1e-05", "2.0", "inf", "nan".
std::string float_spelling(double v) { return AttrValue::of_float(v).to_string(); }

// Number spelling for generator arguments, where ints and floats are interchangeable: integral
// values print without a fraction ("0", "-3"), others as floats. -0.0 prints as a float
// ("-0.0"): an int literal has no negative zero, and programs keep the sign of a zero (floats
// compare by normalized_float_bits; full(-0.0) is observable, 1 / -0.0 is -inf).
std::string number_spelling(double v) {
  bool negative_zero = v == 0 && std::signbit(v);
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 1e15 && !negative_zero) {
    return fmt::format("{}", static_cast<int64_t>(v));
  }
  return float_spelling(v);
}

// `s` as a string token: in double quotes, with `"` and `\` escaped.
std::string string_token(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

std::string Literal::to_string() const {
  switch (kind) {
    case Kind::kInt: return fmt::format("{}", i);
    case Kind::kFloat: return float_spelling(f);
    case Kind::kBool: return i ? "true" : "false";
    case Kind::kName: return name;
    case Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += ", ";
        out += items[k].to_string();
      }
      return out + "]";
    }
  }
  return "?";
}

std::string print_program(const Program& program) {
  std::string out = fmt::format("tracecache {}\n", program.version);
  if (program.steps) out += fmt::format("steps {}\n", *program.steps);
  for (const DimDecl& d : program.dims) {
    if (d.values.size() == 1) {
      out += fmt::format("dim {} = {}\n", d.name, d.values[0]);
    } else {
      out += fmt::format("dim {} = [{}]\n", d.name, fmt::join(d.values, ", "));
    }
  }
  for (const TensorDecl& t : program.tensors) {
    std::vector<std::string> dims;
    for (const DimRef& d : t.dims) {
      dims.push_back(d.name.empty() ? fmt::format("{}", d.value) : d.name);
    }
    const Generator& g = t.init;
    std::string gen;
    switch (g.kind) {
      case Generator::Kind::kNormal:
        gen = fmt::format("normal(seed={}, mean={}, std={})", g.seed, number_spelling(g.mean),
                          number_spelling(g.stddev));
        break;
      case Generator::Kind::kUniform:
        gen = fmt::format("uniform(seed={}, low={}, high={})", g.seed, number_spelling(g.low),
                          number_spelling(g.high));
        break;
      case Generator::Kind::kFull: gen = fmt::format("full({})", number_spelling(g.value)); break;
      case Generator::Kind::kSchedule: {
        std::vector<std::string> vs;
        for (double v : g.values) vs.push_back(number_spelling(v));
        gen = fmt::format("schedule([{}])", fmt::join(vs, ", "));
        break;
      }
      case Generator::Kind::kNpy:
        gen = fmt::format("npy({})", string_token(g.path));
        break;
      case Generator::Kind::kSafetensors:
        gen = fmt::format("safetensors({}, {})", string_token(g.path), string_token(g.tensor));
        break;
    }
    out +=
        fmt::format("{} {} : {}[{}] = {}\n", t.role == TensorDecl::Role::kParam ? "param" : "input",
                    t.name, dtype_name(t.dtype), fmt::join(dims, ", "), gen);
  }
  for (const OpStmt& op : program.ops) {
    std::vector<std::string> args;
    for (const Literal& l : op.operands) args.push_back(l.to_string());
    for (const NamedAttr& a : op.attrs) {
      args.push_back(fmt::format("{}={}", a.name, a.value.to_string()));
    }
    std::string results = op.result;
    for (const ResultRef& r : op.more_results) results += ", " + r.name;
    out += fmt::format("{} = {}({})\n", results, op.is_grad ? "grad" : op_info(op.op).name,
                       fmt::join(args, ", "));
  }
  for (const UpdateStmt& u : program.updates) out += fmt::format("update {} = {}\n", u.param, u.value);
  std::vector<std::string_view> names;
  for (const OutputRef& o : program.outputs) names.push_back(o.name);
  if (!names.empty()) out += fmt::format("output {}\n", fmt::join(names, ", "));
  return out;
}

}  // namespace tracecache
