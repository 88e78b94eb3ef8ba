// The cpu backend's one thread team (replay/backends/cpu/cpu_threads.h): every chunk runs once at every
// thread count, a loop inside a loop runs alone, the count reaches OpenMP, and the process loaded
// one OpenMP runtime (libgomp) shared by the loops, OpenBLAS and oneDNN.
#include "replay/backends/cpu/cpu_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" int omp_get_max_threads(void);

namespace tracecache::cpu {
namespace {

class CpuThreads : public ::testing::Test {
 protected:
  void TearDown() override { set_threads(saved_); }
  int saved_ = threads();
};

TEST_F(CpuThreads, EveryChunkRunsOnceAtEveryCount) {
  for (int n : {1, 2, 3, 7}) {
    set_threads(n);
    EXPECT_EQ(threads(), n);
    EXPECT_EQ(omp_get_max_threads(), n);
    for (int64_t chunks : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{5}, int64_t{1000}}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(chunks));
      auto body = [&](int64_t c) { runs[static_cast<size_t>(c)].fetch_add(1); };
      run_chunks(chunks, body);
      for (int64_t c = 0; c < chunks; ++c) {
        EXPECT_EQ(runs[static_cast<size_t>(c)].load(), 1) << "threads " << n << " chunks " << chunks << " chunk " << c;
      }
    }
  }
}

TEST_F(CpuThreads, UsesUpToTheCountOfThreads) {
  set_threads(2);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Chunks that wait for each other a little, so both members take some.
  std::atomic<int> started{0};
  auto body = [&](int64_t) {
    started.fetch_add(1);
    for (int spin = 0; spin < 1000000 && started.load() < 2; ++spin) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  };
  run_chunks(64, body);
  EXPECT_GE(ids.size(), 1u);
  EXPECT_LE(ids.size(), 2u);
}

TEST_F(CpuThreads, ALoopInsideALoopRunsOnItsCaller) {
  set_threads(2);
  std::atomic<int> inner_total{0};
  std::atomic<bool> inner_left_its_thread{false};
  auto outer = [&](int64_t) {
    const std::thread::id me = std::this_thread::get_id();
    auto inner = [&](int64_t) {
      inner_total.fetch_add(1);
      if (std::this_thread::get_id() != me) inner_left_its_thread = true;
    };
    run_chunks(8, inner);
  };
  run_chunks(4, outer);
  EXPECT_EQ(inner_total.load(), 32);
  EXPECT_FALSE(inner_left_its_thread.load());
}

TEST_F(CpuThreads, BindSetsTheCallingThreadsCount) {
  set_threads(3);
  int seen = 0;
  std::thread other([&] {
    bind_threads();
    seen = omp_get_max_threads();
  });
  other.join();
  EXPECT_EQ(seen, 3);
}

TEST_F(CpuThreads, OneOpenMpRuntimeAndOpenMpOpenBlas) {
  EXPECT_EQ(blas_parallel_kind(), 2) << blas_description();
  EXPECT_NE(blas_description().find("(OpenMP)"), std::string::npos) << blas_description();
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool gomp = false, llvm_omp = false, openmp_blas = false;
  while (std::getline(maps, line)) {
    if (line.find("/libgomp.so") != std::string::npos) gomp = true;
    if (line.find("/libomp.so") != std::string::npos || line.find("/libiomp5.so") != std::string::npos) llvm_omp = true;
    if (line.find("openblas-openmp/libopenblas") != std::string::npos) openmp_blas = true;
  }
  EXPECT_TRUE(gomp);
  EXPECT_FALSE(llvm_omp);
  EXPECT_TRUE(openmp_blas);
  EXPECT_GE(available_cpus(), 1);
}

}  // namespace
}  // namespace tracecache::cpu
