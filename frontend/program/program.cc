// Trace programs' structure (program.h): equality, lookups, paths. The format's lexer, parser and
// printer are program_lexer.cc, program_parser.cc and program_printer.cc.
#include "frontend/program/program.h"

#include <algorithm>
#include <filesystem>

namespace tracecache {

namespace {

bool same_double(double a, double b) {
  return normalized_float_bits(a) == normalized_float_bits(b);
}

bool same_doubles(const std::vector<double>& a, const std::vector<double>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), same_double);
}

}  // namespace

// ---- Literal, Generator, Program -----------------------------------------------------------

bool operator==(const Literal& a, const Literal& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Literal::Kind::kInt:
    case Literal::Kind::kBool: return a.i == b.i;
    case Literal::Kind::kFloat: return same_double(a.f, b.f);
    case Literal::Kind::kName: return a.name == b.name;
    case Literal::Kind::kList: return a.items == b.items;
  }
  return false;
}

bool operator==(const Generator& a, const Generator& b) {
  return a.kind == b.kind && a.seed == b.seed && same_double(a.mean, b.mean) &&
         same_double(a.stddev, b.stddev) && same_double(a.low, b.low) &&
         same_double(a.high, b.high) && same_double(a.value, b.value) &&
         same_doubles(a.values, b.values) && a.path == b.path && a.tensor == b.tensor;
}

bool operator==(const Program& a, const Program& b) {
  return a.version == b.version && a.steps == b.steps && a.dims == b.dims &&
         a.tensors == b.tensors && a.ops == b.ops && a.updates == b.updates &&
         a.outputs == b.outputs;
}

int64_t Program::default_steps() const {
  if (steps) return *steps;
  size_t longest = 1;
  for (const DimDecl& d : dims) longest = std::max(longest, d.values.size());
  return static_cast<int64_t>(longest);
}

const DimDecl* Program::find_dim(std::string_view name) const {
  for (const DimDecl& d : dims) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const TensorDecl* Program::find_tensor(std::string_view name) const {
  for (const TensorDecl& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string Program::resolve_path(const std::string& path) const {
  std::filesystem::path p(path);
  if (p.is_absolute() || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / p).string();
}

std::vector<std::string> program_output_names(const Program& program) {
  std::vector<std::string> names;
  for (const OutputRef& o : program.outputs) names.push_back(o.name);
  return names;
}

}  // namespace tracecache
