// Issue 10: several processes opening one NEW cache database at the same moment. Each must get a
// working cache (never "not a tracecache database", never a silent uncached run). Children are
// released together by closing a pipe; nothing here depends on timing, only on the outcomes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "store/sqlite/cache_db.h"
#include "tests/test_support.h"

namespace tracecache::store {
namespace {

namespace fs = std::filesystem;

// In the child: open, store one executable, read it back. Writes the failure to `report`.
int child_body(const std::string& path, int index, const std::string& report) {
  auto fail = [&](const std::string& why) {
    std::ofstream(report) << why;
    return 1;
  };
  Result<std::unique_ptr<CacheDb>> db = CacheDb::open({.path = path, .busy_timeout_ms = 60000});
  if (!db.is_ok()) return fail("open: " + db.status().to_string());
  if ((*db)->read_only()) return fail("opened read-only");
  ExecutableKey key{GraphKey{static_cast<uint64_t>(index) + 1, 7}, "cpu", "", 1};
  std::string blob = fmt::format("executable {}", index);
  Status st = (*db)->put_executable(key, blob, 1.0);
  if (!st.is_ok()) return fail("put: " + st.to_string());
  auto got = (*db)->get_executable(key);
  if (!got.is_ok() || !got->has_value() || (*got)->blob != blob) return fail("get: wrong result");
  return 0;
}

TEST(StoreConcurrency, EightProcessesCreateOneNewDatabase) {
  testing::TempDir tmp;
  const fs::path& dir = tmp.path();
  constexpr int kRounds = 40, kProcesses = 8;
  for (int round = 0; round < kRounds; ++round) {
    const std::string path = (dir / fmt::format("round{}.db", round)).string();
    int gate[2];
    ASSERT_EQ(::pipe(gate), 0);
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p) {
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(gate[1]);
        char c;
        while (::read(gate[0], &c, 1) > 0) {
        }
        ::_exit(child_body(path, p, (dir / fmt::format("round{}.{}.err", round, p)).string()));
      }
      children.push_back(pid);
    }
    ::close(gate[0]);
    ::close(gate[1]);  // releases every child at once
    for (int p = 0; p < kProcesses; ++p) {
      int status = 0;
      ASSERT_EQ(::waitpid(children[p], &status, 0), children[p]);
      std::ostringstream why;
      why << std::ifstream(dir / fmt::format("round{}.{}.err", round, p)).rdbuf();
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "round " << round << " process " << p << ": " << why.str();
    }
    auto db = CacheDb::open({.path = path});
    ASSERT_TRUE(db.is_ok()) << db.status().to_string();
    auto problems = (*db)->verify();
    ASSERT_TRUE(problems.is_ok());
    EXPECT_TRUE(problems->empty());
    auto list = (*db)->list_executables();
    ASSERT_TRUE(list.is_ok());
    EXPECT_EQ(list->size(), static_cast<size_t>(kProcesses));
  }
}

}  // namespace
}  // namespace tracecache::store
