// Fuzz harness: executable loading and validation (replay/executable.h parse_executable, which
// validates). Property: no crash; an executable that loads still validates and round-trips
// through serialize_executable to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "replay/executable.h"

using namespace tracecache;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<Executable> exe = parse_executable(bytes);
  if (!exe.is_ok()) return 0;
  if (!exe.value().validate().is_ok()) std::abort();
  const std::string encoded = serialize_executable(exe.value());
  Result<Executable> again = parse_executable(encoded);
  if (!again.is_ok() || serialize_executable(again.value()) != encoded) std::abort();
  return 0;
}
