// The one toolkit version string: the release version (CMake's project(VERSION), through the
// generated capture/core/version.h) and every persisted format's version,
//
//   tracecache-0.4.0/ir2/schema4/compiler1/guards4
//
// so that anything keyed by it (persistent guard entries) is never read by a build that would
// encode, store, lower or guard differently. `tracecache --version`, `audit` and every --json
// report print this string. Thread-safety: constants.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "capture/ir/hash.h"
#include "capture/core/version.h"
#include "replay/compile/compiler.h"
#include "replay/guards/guard_entry_codec.h"
#include "store/sqlite/cache_db.h"

namespace tracecache {

namespace detail {

struct VersionText {
  std::array<char, 128> chars{};
  size_t size = 0;
  constexpr void append(std::string_view s) {
    for (char c : s) chars[size++] = c;
  }
  constexpr void append(uint64_t n) {
    char digits[20]{};
    size_t k = 0;
    do {
      digits[k++] = static_cast<char>('0' + n % 10);
      n /= 10;
    } while (n != 0);
    while (k != 0) chars[size++] = digits[--k];
  }
};

consteval VersionText toolkit_version_text() {
  VersionText t;
  t.append("tracecache-");
  t.append(kReleaseVersion);
  t.append("/ir");
  t.append(uint64_t{kIrFormatVersion});
  t.append("/schema");
  t.append(static_cast<uint64_t>(store::kSchemaVersion));
  t.append("/compiler");
  t.append(uint64_t{kCompilerVersion});
  t.append("/guards");
  t.append(uint64_t{kGuardEntryFormat});
  return t;
}

inline constexpr VersionText kToolkitVersionText = toolkit_version_text();

}  // namespace detail

inline constexpr std::string_view kToolkitVersion{detail::kToolkitVersionText.chars.data(),
                                                  detail::kToolkitVersionText.size};

}  // namespace tracecache
