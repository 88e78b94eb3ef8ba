// Fuzz harness: the trace-program parser (frontend/program/program.h).
// Property: parse never crashes; a parsed program prints to text that parses back to an equal
// program (parse(print(p)) == p); every declared shape the runner accepts at step 0 has an
// element count (what the runner allocates; UBSan flags an overflow); and its step-0 output
// types infer without crashing when it reads no files.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "frontend/program/program.h"
#include "frontend/program/program_runner.h"

using namespace tracecache;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<Program> program = parse_program(text, "fuzz.trace");
  if (!program.is_ok()) return 0;
  const std::string printed = print_program(program.value());
  Result<Program> reparsed = parse_program(printed, "fuzz.trace");
  if (!reparsed.is_ok() || !(reparsed.value() == program.value()) ||
      print_program(reparsed.value()) != printed) {
    std::abort();  // the printer and the parser disagree
  }
  for (const TensorDecl& t : program.value().tensors) {
    Result<Shape> shape = declared_shape(program.value(), t, 0);
    if (shape.is_ok()) (void)shape.value().numel();
  }
  for (const TensorDecl& t : program.value().tensors) {
    if (t.init.kind == Generator::Kind::kNpy || t.init.kind == Generator::Kind::kSafetensors) return 0;
  }
  (void)infer_output_types(program.value(), 0);
  return 0;
}
