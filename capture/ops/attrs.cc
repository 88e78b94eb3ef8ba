#include "capture/ops/attrs.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>

namespace tracecache {

std::string_view attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::kInt: return "int";
    case AttrKind::kFloat: return "float";
    case AttrKind::kBool: return "bool";
    case AttrKind::kDType: return "dtype";
    case AttrKind::kInts: return "int list";
  }
  return "?";
}

uint64_t normalized_float_bits(double v) {
  if (std::isnan(v)) return 0x7ff8000000000000ULL;
  // -0.0 keeps its sign: as a baked constant it is observable (1 / -0.0 is -inf).
  return std::bit_cast<uint64_t>(v);
}

bool operator==(const AttrValue& a, const AttrValue& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case AttrKind::kInt:
    case AttrKind::kBool: return a.i == b.i;
    case AttrKind::kFloat: return normalized_float_bits(a.f) == normalized_float_bits(b.f);
    case AttrKind::kDType: return a.dtype == b.dtype;
    case AttrKind::kInts: return a.ints == b.ints;
  }
  return false;
}

std::string AttrValue::to_string() const {
  switch (kind) {
    case AttrKind::kInt: return fmt::format("{}", i);
    case AttrKind::kFloat: {
      // Shortest round-trip spelling; always with a '.', 'e', "inf" or "nan" so it reads back
      // as a float.
      std::string s = fmt::format("{}", f);
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    case AttrKind::kBool: return i ? "true" : "false";
    case AttrKind::kDType: return std::string(dtype_name(dtype));
    case AttrKind::kInts: return ints.to_string();
  }
  return "?";
}

}  // namespace tracecache
