// Test support shared by the test files: a temporary directory that removes itself (TempDir),
// and reading one integer from an SQLite file by SQL (sqlite_int).
//
// Thread-safety: constructing TempDirs from several threads at once is safe (names come from the
// pid, a random number and an atomic counter); one TempDir's const members may be called from any
// thread. sqlite_int opens its own connection per call and shares nothing.
// Ownership: a TempDir owns its directory and everything in it, and removes them recursively when
// destroyed; the paths it hands out are plain strings, valid as long as the TempDir lives. It is
// neither copyable nor movable, so exactly one object removes each directory. A forked child
// that inherits a TempDir must leave with _exit (as every forking test here does), or it would
// remove the parent's directory.
// Not gtest's ::testing::TempDir() (a function returning the system's temporary folder).
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace tracecache::testing {

// A fresh directory below the system's temporary folder, named
// tracecache-test-<pid>-<random>-<counter>: unique across processes (ctest runs tests in
// parallel) and within one. Created by the constructor, removed with its contents by the
// destructor, which first gives the owner back full permissions on the directory itself (tests
// make it read-only) and never throws.
class TempDir {
 public:
  TempDir() {
    static std::atomic<uint64_t> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("tracecache-test-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()) + "-" +
             std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the directory (the file is not created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // The cache database most tests use: file("c.db").
  std::string db() const { return file("c.db"); }

 private:
  std::filesystem::path path_;
};

// Runs `sql` on the SQLite file at `path` through a separate, raw connection and returns column 0
// of the first row as an integer; -1 when the statement fails or returns no row. A failure to
// open the file is a test failure. Bypasses the store, so tests can see what is really on disk.
inline int64_t sqlite_int(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK) << path;
  sqlite3_stmt* s = nullptr;
  int64_t v = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
    v = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

}  // namespace tracecache::testing
