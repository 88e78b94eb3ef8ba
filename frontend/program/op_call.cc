#include "frontend/program/op_call.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "capture/core/suggest.h"

namespace tracecache {

const OpInfo* find_callable_op(std::string_view name) {
  const OpInfo* info = find_op(name);
  return info && info->kind != OpKind::kParameter ? info : nullptr;
}

std::string unknown_op_message(std::string_view name) {
  std::vector<std::string_view> names;
  for (const OpInfo& o : all_ops()) {
    if (o.kind != OpKind::kParameter) names.push_back(o.name);
  }
  return fmt::format("unknown op '{}'{}", name, did_you_mean(name, names));
}

std::string unknown_attr_message(const OpInfo& info, std::string_view attr) {
  std::vector<std::string_view> names;
  for (const AttrSpec& a : info.attrs) names.push_back(a.name);
  std::string known = names.empty() ? std::string("it has none") : fmt::format("it has {}", fmt::join(names, ", "));
  return fmt::format("op '{}': unknown attribute '{}'{}; {}", info.name, attr, did_you_mean(attr, names), known);
}

std::string attr_kind_message(const OpInfo& info, const AttrSpec& spec, std::string_view found) {
  return fmt::format("op '{}': attribute '{}' must be {}, found {}", info.name, spec.name,
                     attr_kind_name(spec.kind), found);
}

std::string missing_attr_message(const OpInfo& info, const AttrSpec& spec) {
  return fmt::format("op '{}': missing required attribute '{}'", info.name, spec.name);
}

std::string operand_count_message(const OpInfo& info, int operands) {
  if (operands >= info.min_inputs && (info.max_inputs == kVariadic || operands <= info.max_inputs)) return "";
  std::string want = info.max_inputs == kVariadic ? fmt::format("at least {}", info.min_inputs)
                     : info.min_inputs == info.max_inputs
                         ? fmt::format("{}", info.min_inputs)
                         : fmt::format("{} to {}", info.min_inputs, info.max_inputs);
  return fmt::format("op '{}' takes {} operand{}, got {}", info.name, want, want == "1" ? "" : "s", operands);
}

std::string too_many_entries_message(const OpInfo& info, const AttrSpec& spec) {
  return fmt::format("op '{}': attribute '{}' has more than {} entries", info.name, spec.name, kMaxRank);
}

namespace {

bool holds_exactly(DType t, double v) {
  switch (t) {
    case DType::kF32: return true;  // f32 is the only floating dtype: the fallback anyway
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

}  // namespace

DType number_operand_dtype(std::optional<DType> other, double v) {
  return other && holds_exactly(*other, v) ? *other : DType::kF32;
}

}  // namespace tracecache
