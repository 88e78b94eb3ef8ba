// Golden graph keys of the fixture programs. A key may change only together with
// kIrFormatVersion (capture/ir/hash.h): these pin the canonical form and its encoding across
// processes, runs and machines (docs/architecture.md invariant 1).
#include <gtest/gtest.h>

#include <map>

#include "tests/test_graphs.h"

namespace tracecache {
namespace {

// Distinct graph keys of a fixture program's steps, in order of first appearance.
std::vector<std::string> distinct_keys(const std::string& name) {
  std::vector<std::string> keys;
  for (const CanonicalGraph& g : testing::fixture_graphs(name)) {
    std::string hex = g.key.to_hex();
    if (std::find(keys.begin(), keys.end(), hex) == keys.end()) keys.push_back(hex);
  }
  return keys;
}

TEST(GoldenHash, FixturePrograms) {
  const std::map<std::string, std::vector<std::string>> golden = {
      {"mlp.trace", {"03ac38a1c6b40b50685683feb92c12fd"}},
      {"attention.trace", {"2a91d26a2810da80b587e70746198620"}},
      {"lr_schedule.trace", {"bfcefb9f34a419fa4191c0feec5fbc1f"}},
      {"matmul_varying_batch.trace",
       {"53de18fd1d3517131f5bcc00f9936f54", "d08b55eaa5e13ece7229bf17a1413cb9",
        "0af464e1377709906f6778ad2b8bd292"}},
      // rand_uniform and rand_normal: every step's seed is an input, so one key for all steps
      {"random_ops.trace", {"677424df1996cc376f2d270c9bd58037"}},
  };
  for (const auto& [name, keys] : golden) EXPECT_EQ(distinct_keys(name), keys) << name;
}

}  // namespace
}  // namespace tracecache
