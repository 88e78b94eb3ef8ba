// The checks of one op call written by its registry name with named attributes: the messages
// the .trace parser (frontend/program/program.cc) reports for such a call, shared with the
// Python package (python/, `tracecache.op`) so that both say the same thing. Each returns the
// message without the parser's "FILE:LINE:COL: " prefix. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "capture/ops/ops.h"

namespace tracecache {

// "unknown op 'NAME'" plus the nearest op name ("(did you mean 'add'?)"), if any is close.
std::string unknown_op_message(std::string_view name);
// The op named `name` (never the internal `parameter`), or nullptr.
const OpInfo* find_callable_op(std::string_view name);
// "op 'OP': unknown attribute 'ATTR' (did you mean ...?); it has A, B".
std::string unknown_attr_message(const OpInfo& info, std::string_view attr);
// "op 'OP': attribute 'ATTR' must be KIND, found FOUND" (`found` as written).
std::string attr_kind_message(const OpInfo& info, const AttrSpec& spec, std::string_view found);
// "op 'OP': missing required attribute 'ATTR'".
std::string missing_attr_message(const OpInfo& info, const AttrSpec& spec);
// "op 'OP' takes 2 operands, got 3", or "" when `operands` fits the op.
std::string operand_count_message(const OpInfo& info, int operands);
// "op 'OP': attribute 'ATTR' has more than 6 entries".
std::string too_many_entries_message(const OpInfo& info, const AttrSpec& spec);
// The dtype of the constant a number operand `v` of an elementwise op becomes: the dtype of the
// op's first tensor operand (`other`; for where, its first value operand) when that holds `v`
// exactly, else f32.
DType number_operand_dtype(std::optional<DType> other, double v);

}  // namespace tracecache
