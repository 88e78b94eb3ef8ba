// Trace programs: the `.trace` text format (docs/trace-format.md) and its syntax tree.
//
// A trace program declares symbolic dims with per-step values, inputs (regenerated every step)
// and parameters (fixed across steps unless updated) with their generators, an SSA op stream
// written with the op registry's names and attributes (and `grad` statements, the one kind of
// line with several results), the params' updates for the next step, its outputs, and how many
// steps to run. The runner
// (program_runner.h) replays it through a LazyContext.
//
// parse_program() checks everything that does not depend on a step's dim values: syntax, the
// header, names (defined once, before use), op names, operand counts, attribute names and kinds,
// generator arguments, the shape of grad statements (names only, one result per tensor after
// the loss) and of updates (a param, updated once, never an output or another update's value);
// a call written as an operand (`relu(neg(x))`) is an error that shows the
// two-statement form. Shapes (and the types of grad statements and updates) depend on the dims
// and are checked per step by check_program() or at run time. Every error is a Status whose message starts with "FILE:LINE:COL: " (1-based; the
// column of the offending token).
//
// print_program() emits the canonical spelling: parse(print(p)) == p and print is idempotent.
// Comments and layout are not kept.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capture/core/dtype.h"
#include "capture/ops/ops.h"
#include "capture/core/status.h"

namespace tracecache {

// The format version this build reads and writes (the `tracecache N` header).
inline constexpr int kTraceFormatVersion = 1;

// Where a construct was written (1-based line and byte column). Positions are not part of a
// program's structure: every SourcePos compares equal to every other, so a program and its
// reprinted, reparsed form compare equal.
struct SourcePos {
  int line = 0;
  int col = 0;
  friend bool operator==(const SourcePos&, const SourcePos&) { return true; }
};

// A literal as written: an attribute value, or an op operand (a tensor name or a number).
struct Literal {
  enum class Kind : uint8_t {
    kInt,    // 3, -1
    kFloat,  // 0.5, 1e-05, inf, -inf, nan
    kBool,   // true, false
    kName,   // an identifier: a tensor (as an operand), a dim or a dtype (as an attribute)
    kList,   // [1, B, -1]: items are kInt or kName (dims)
  };
  Kind kind = Kind::kInt;
  int64_t i = 0;               // kInt; kBool as 0/1
  double f = 0;                // kFloat
  std::string name;            // kName
  std::vector<Literal> items;  // kList
  SourcePos pos;

  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  // The value of a kInt or kFloat literal.
  double number() const { return kind == Kind::kInt ? static_cast<double>(i) : f; }
  // Canonical spelling; reads back as the same literal.
  std::string to_string() const;

  friend bool operator==(const Literal& a, const Literal& b);
};

// One dim of a declared tensor type: a number or the name of a symbolic dim.
struct DimRef {
  std::string name;  // empty: the dim is `value`
  int64_t value = 0;
  SourcePos pos;
  friend bool operator==(const DimRef&, const DimRef&) = default;
};

// `dim B = [8, 16]`: the value of B at step s is values[s % values.size()].
struct DimDecl {
  std::string name;
  std::vector<int64_t> values;  // never empty
  SourcePos pos;
  int64_t value_at(int step) const { return values[static_cast<size_t>(step) % values.size()]; }
  friend bool operator==(const DimDecl&, const DimDecl&) = default;
};

// How an input's or a parameter's value is made. Fields a kind does not use keep their defaults.
struct Generator {
  enum class Kind : uint8_t {
    kNormal,    // normal(seed, mean=0, std=1); floating dtypes
    kUniform,   // uniform(seed, low=0, high=1); integers: floor of U[low, high)
    kFull,      // full(value)
    kSchedule,  // schedule([v0, v1, ...]): full(v[step % n])
    kNpy,       // npy("path"): a NumPy file, relative paths against the program's directory
    kSafetensors,  // safetensors("path", "tensor"): one tensor of a .safetensors file, by name
  };
  Kind kind = Kind::kFull;
  uint64_t seed = 0;
  double mean = 0, stddev = 1;  // kNormal
  double low = 0, high = 1;     // kUniform
  double value = 0;             // kFull
  std::vector<double> values;   // kSchedule, never empty
  std::string path;             // kNpy and kSafetensors, as written
  std::string tensor;           // kSafetensors: the tensor's name in the file
  SourcePos pos;

  friend bool operator==(const Generator& a, const Generator& b);
};

// `input x : f32[B, 64] = normal(seed=1)` or `param w : ... = ...`.
struct TensorDecl {
  enum class Role : uint8_t {
    kInput,  // regenerated every step; random generators mix the step into the seed
    kParam,  // made once and reused by every step
  };
  Role role = Role::kInput;
  std::string name;
  DType dtype = DType::kF32;
  std::vector<DimRef> dims;
  Generator init;
  SourcePos pos;  // of the name
  friend bool operator==(const TensorDecl&, const TensorDecl&) = default;
};

struct NamedAttr {
  std::string name;
  Literal value;
  SourcePos pos;  // of the name
  friend bool operator==(const NamedAttr&, const NamedAttr&) = default;
};

// A name written on the left of `=` after the first (`gw, gb = grad(loss, w, b)`).
struct ResultRef {
  std::string name;
  SourcePos pos;
  friend bool operator==(const ResultRef&, const ResultRef&) = default;
};

// `y = add(h, b)`: one op of the stream. Operands are kName (tensors) or numbers (scalar
// constants); attributes are kept in registry order, only those the program wrote.
// `gw, gb = grad(loss, w, b)` is a gradient statement (is_grad; `op` is unused): operands are the
// loss and then the tensors to differentiate it by (names only), one result per such tensor:
// `result` is the first, `more_results` the others.
struct OpStmt {
  std::string result;
  OpKind op = OpKind::kAdd;
  std::vector<Literal> operands;
  std::vector<NamedAttr> attrs;
  SourcePos result_pos;
  SourcePos pos;  // of the op name: where errors about this op point
  bool is_grad = false;
  std::vector<ResultRef> more_results;
  friend bool operator==(const OpStmt&, const OpStmt&) = default;
};

// `update w = w2`: from the next step on, param `w` takes the value `w2` has at the end of this
// step (the types must match; each param is updated at most once per step).
struct UpdateStmt {
  std::string param;
  std::string value;
  SourcePos pos;        // of the param's name
  SourcePos value_pos;  // of the value's name
  friend bool operator==(const UpdateStmt&, const UpdateStmt&) = default;
};

struct OutputRef {
  std::string name;
  SourcePos pos;
  friend bool operator==(const OutputRef&, const OutputRef&) = default;
};

struct Program {
  int version = kTraceFormatVersion;
  std::optional<int64_t> steps;  // the `steps` directive, if written
  std::vector<DimDecl> dims;
  std::vector<TensorDecl> tensors;  // inputs and params, in written order
  std::vector<OpStmt> ops;
  std::vector<UpdateStmt> updates;  // in written order; applied after the step's ops
  std::vector<OutputRef> outputs;

  // Not structure (ignored by ==, not printed): where the program came from.
  std::string file_name;  // prefix of error messages
  std::string base_dir;   // relative npy and safetensors paths are resolved against it ("" = the working dir)

  // `steps` if written, else the longest dim value list, else 1.
  int64_t default_steps() const;
  const DimDecl* find_dim(std::string_view name) const;
  const TensorDecl* find_tensor(std::string_view name) const;
  // The path an npy or safetensors generator reads: absolute paths as written, relative ones under base_dir.
  std::string resolve_path(const std::string& path) const;

  friend bool operator==(const Program& a, const Program& b);
};

// Parses `text`; `file_name` prefixes error messages. Errors: kParseError (syntax, names, ops,
// attributes, generators), kUnsupported (a header with another format version).
Result<Program> parse_program(std::string_view text, std::string_view file_name);
// Reads and parses the file at `path` and sets base_dir to its directory. kNotFound/kIOError if
// it cannot be read, kInvalidArgument if it is not a regular file (input_file.h) or is larger
// than kMaxProgramBytes (it is read whole); otherwise as parse_program.
inline constexpr uint64_t kMaxProgramBytes = uint64_t{256} << 20;
Result<Program> load_program(const std::string& path);

// The canonical text of `program`.
std::string print_program(const Program& program);

// The names the program outputs, in order.
std::vector<std::string> program_output_names(const Program& program);

}  // namespace tracecache
