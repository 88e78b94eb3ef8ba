// Fuzz harness: the .npy reader (frontend/files/npy.h), through its in-memory entry point parse_npy.
// Property: no crash; a parsed buffer encodes to a file that parses back to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "frontend/files/npy.h"

using namespace tracecache;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<HostBuffer> parsed = parse_npy(bytes, "fuzz.npy");
  if (!parsed.is_ok()) return 0;
  const std::string encoded = encode_npy(parsed.value());
  Result<HostBuffer> reparsed = parse_npy(encoded, "fuzz.npy");
  if (!reparsed.is_ok() || encode_npy(reparsed.value()) != encoded) std::abort();
  return 0;
}
