// Fuzz harness: guard-entry decoding (parse_entry in replay/compiled_function.cc), bytes as
// read from the functions table of the cache database.
//
// parse_entry has no public entry point: it lives in that file's anonymous namespace. Rather
// than restructure the file, this harness compiles it into its own translation unit (so the
// harness defines the CompiledFunction symbols itself and the library's copy is not linked).
// Property: no crash; a parsed entry's checks index only tensors and dims it declared.
#include "replay/compiled_function.cc"  // NOLINT(bugprone-suspicious-include)

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)tracecache::parse_entry(bytes);
  return 0;
}
