// Fuzz harness: the safetensors reader (frontend/files/safetensors.h), through its in-memory entry
// point SafetensorsFile::parse. Property: no crash; every entry of a file that parses can be
// read (or fails with a Status), and a readable tensor's byte count matches its range.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "frontend/files/safetensors.h"

using namespace tracecache;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Result<SafetensorsFile> file = SafetensorsFile::parse(std::move(bytes), "fuzz.safetensors");
  if (!file.is_ok()) return 0;
  for (const SafetensorsEntry& e : file.value().entries()) {
    Result<HostBuffer> t = file.value().tensor(e.name);
    if (t.is_ok() && t.value().nbytes() != e.end - e.begin) std::abort();
  }
  return 0;
}
