// Op attributes: the non-tensor parameters of an op (axes, a shape, a dtype, a seed...).
//
// Each op declares its attributes positionally in the op registry (ops.h) as AttrSpecs; a node
// stores exactly one AttrValue per declared attribute, in declaration order, with defaults
// filled and values normalized by the op's inference rule. That positional, normalized form is
// what canonicalization compares and what the graph hash encodes. Plain values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "capture/core/dtype.h"
#include "capture/core/shape.h"

namespace tracecache {

// Persisted (hash encoding): append only.
enum class AttrKind : uint8_t { kInt = 0, kFloat = 1, kBool = 2, kDType = 3, kInts = 4 };

std::string_view attr_kind_name(AttrKind k);

struct AttrValue {
  AttrKind kind = AttrKind::kInt;
  int64_t i = 0;      // kInt; kBool as 0/1
  double f = 0;       // kFloat
  DType dtype = DType::kF32;  // kDType
  IntList ints;       // kInts

  static AttrValue of_int(int64_t v) { AttrValue a; a.kind = AttrKind::kInt; a.i = v; return a; }
  static AttrValue of_float(double v) { AttrValue a; a.kind = AttrKind::kFloat; a.f = v; return a; }
  static AttrValue of_bool(bool v) { AttrValue a; a.kind = AttrKind::kBool; a.i = v; return a; }
  static AttrValue of_dtype(DType v) { AttrValue a; a.kind = AttrKind::kDType; a.dtype = v; return a; }
  static AttrValue of_ints(IntList v) { AttrValue a; a.kind = AttrKind::kInts; a.ints = v; return a; }

  bool as_bool() const { return i != 0; }

  // Structural equality; floats compare by their normalized bits (every NaN equals every
  // NaN; -0.0 and 0.0 differ, since a constant's sign of zero is observable).
  friend bool operator==(const AttrValue& a, const AttrValue& b);
  // Trace-format spelling: 3, 0.5, true, f32, [1, 2].
  std::string to_string() const;
};

// Bits of `v` with every NaN folded to one quiet NaN: the form in which floats enter hashes
// and comparisons. Zeros keep their sign (see docs/graph-hash.md).
uint64_t normalized_float_bits(double v);

struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  bool required;          // if false, `default_value` fills it when absent
  AttrValue default_value;
};

}  // namespace tracecache
