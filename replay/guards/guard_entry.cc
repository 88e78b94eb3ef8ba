#include "replay/guards/guard_entry.h"

namespace tracecache {

XXH128_hash_t value_hash(const HostBuffer& b) {
  uint64_t type[kMaxRank + 2] = {static_cast<uint64_t>(b.dtype()), static_cast<uint64_t>(b.shape().rank())};
  for (int d = 0; d < b.shape().rank(); ++d) type[2 + d] = static_cast<uint64_t>(b.shape()[d]);
  uint64_t seed = XXH3_64bits(type, sizeof type);
  return XXH3_128bits_withSeed(b.bytes(), b.nbytes(), seed);
}

}  // namespace tracecache
