// The cpu backend's thread team (cpu_threads.h) on libgomp.
#include "replay/backends/cpu/cpu_threads.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <string_view>

#include <fmt/format.h>

// libgomp's entry points. GOMP_parallel is its ABI for a parallel region (libgomp manual, "The
// libgomp ABI"): fn(data) runs on every member of a new team of num_threads threads (0: the
// calling thread's OpenMP thread count), the calling thread included, and returns when all have
// finished. Declared here rather than through <omp.h>, which clang finds only with LLVM's libomp.
extern "C" {
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
int omp_get_max_threads(void);
void omp_set_num_threads(int n);
int omp_in_parallel(void);
}

namespace tracecache::cpu {

namespace {

std::atomic<int> thread_count{1};

struct Job {
  void (*body)(void*, int64_t);
  void* context;
  int64_t chunks;
  std::atomic<int64_t> next{0};
};

void member(void* data) {
  Job& job = *static_cast<Job*>(data);
  for (int64_t c = job.next.fetch_add(1, std::memory_order_relaxed); c < job.chunks;
       c = job.next.fetch_add(1, std::memory_order_relaxed)) {
    job.body(job.context, c);
  }
}

}  // namespace

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

void set_threads(int n) {
  n = std::max(n, 1);
  thread_count.store(n, std::memory_order_relaxed);
  // OpenBLAS's OpenMP build follows the calling thread's OpenMP count; a pthreads build loaded
  // first by another library (cpu_threads.h) keeps a count of its own.
  openblas_set_num_threads(n);
  bind_threads();
}

int threads() { return thread_count.load(std::memory_order_relaxed); }

void bind_threads() {
  const int n = threads();
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

void run_chunks(int64_t chunks, void (*body)(void*, int64_t), void* context) {
  if (chunks <= 0) return;
  const int64_t team = std::min<int64_t>(threads(), chunks);
  Job job{body, context, chunks};
  if (team <= 1 || omp_in_parallel()) {
    member(&job);
    return;
  }
  GOMP_parallel(member, &job, static_cast<unsigned>(team), 0);
}

int blas_parallel_kind() { return openblas_get_parallel(); }

std::string blas_description() {
  std::string_view config = openblas_get_config();
  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64": name and version first.
  size_t end = config.find(' ');
  end = end == std::string_view::npos ? config.size() : config.find(' ', end + 1);
  std::string_view name = config.substr(0, std::min(end, config.size()));
  const int kind = blas_parallel_kind();
  return fmt::format("{} ({})", name, kind == 2 ? "OpenMP" : kind == 1 ? "pthreads" : "sequential");
}

}  // namespace tracecache::cpu
