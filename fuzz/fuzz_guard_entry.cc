// Fuzz harness: guard-entry decoding (validate_guard_entry, replay/guards/guard_entry_codec.h), bytes as
// read from the functions table of the cache database.
// Property: no crash, no allocation sized by an unchecked count; a bad entry is an error value.
#include <cstdint>
#include <string>

#include "replay/guards/guard_entry_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)tracecache::validate_guard_entry(bytes);
  return 0;
}
