// The checksum every stored blob carries (docs/architecture.md invariant 5), and the sealed form
// a tier without a checksum column keeps it in (the remote tier: one value per key).
//
// blob_checksum() is XXH3-64 of the bytes, as a signed 64-bit integer (the SQLite column's type):
// the SQLite tier stores it beside the blob, the remote tier inside the value. Both verify a blob
// read back with this one function before anything parses it.
// A sealed value is kSealMagic (4 bytes), the checksum (8 bytes, little-endian), then the blob.
// unseal_blob() returns the blob only when the magic, the length and the checksum all hold; any
// other value (garbage, truncated, another program's) is kCorruption saying which check failed.
// Thread-safety: pure functions. Ownership: unseal_blob()'s result points into its argument.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <xxhash.h>

#include "capture/core/status.h"

namespace tracecache::store {

inline int64_t blob_checksum(std::string_view blob) {
  return std::bit_cast<int64_t>(static_cast<uint64_t>(XXH3_64bits(blob.data(), blob.size())));
}

inline constexpr std::string_view kSealMagic = "TCB1";
inline constexpr size_t kSealHeaderBytes = 12;

inline std::string seal_blob(std::string_view blob) {
  std::string out;
  out.reserve(kSealHeaderBytes + blob.size());
  out.append(kSealMagic);
  const uint64_t sum = std::bit_cast<uint64_t>(blob_checksum(blob));
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((sum >> (8 * i)) & 0xff));
  out.append(blob);
  return out;
}

inline Result<std::string_view> unseal_blob(std::string_view value) {
  if (value.size() < kSealHeaderBytes) {
    return corruption(fmt::format("value of {} bytes is shorter than its {}-byte header", value.size(),
                                  kSealHeaderBytes));
  }
  if (value.substr(0, kSealMagic.size()) != kSealMagic) return corruption("value does not start with a tracecache header");
  uint64_t sum = 0;
  for (int i = 0; i < 8; ++i) {
    sum |= static_cast<uint64_t>(static_cast<unsigned char>(value[kSealMagic.size() + i])) << (8 * i);
  }
  std::string_view blob = value.substr(kSealHeaderBytes);
  if (std::bit_cast<int64_t>(sum) != blob_checksum(blob)) return corruption("value failed its checksum");
  return blob;
}

}  // namespace tracecache::store
