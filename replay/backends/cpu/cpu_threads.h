// The cpu backend's one thread team. The kernels' own parallel loops (run_chunks), OpenBLAS
// (Debian's OpenMP build, libopenblas0-openmp) and oneDNN (Debian builds it on OpenMP) all run
// on the calling thread's OpenMP team of GCC's runtime, libgomp, so they never oversubscribe the
// cores: the workers that wait between kernels are the ones the next kernel uses, whichever
// library runs it. One runtime for both compilers: the loops enter libgomp through its ABI
// (GOMP_parallel, the call GCC emits for `#pragma omp parallel`), so a clang build links the
// same libgomp rather than LLVM's libomp.
//
// The thread count is process-wide (set_threads); OpenMP keeps it per calling thread, so every
// entry into the kernels calls bind_threads() first, which costs one thread-local read when the
// count is already in place. The default, used by the backends when no count is given, is
// available_cpus(): the CPUs this process may run on (sched_getaffinity), not the machine's.
//
// The team is fork-join: a loop ends when every member has finished its chunks. Chunks are
// claimed from one atomic counter, so a member that starts late takes fewer of them, but the
// loop still waits for it to start (libgomp's idle members spin briefly before sleeping:
// OMP_WAIT_POLICY and GOMP_SPINCOUNT tune that). A loop started inside another parallel region
// (or with one thread) runs on the calling thread alone.
//
// Thread-safety: all functions are thread-safe. Concurrent callers each get their own team from
// libgomp (so two threads running kernels at once use up to twice the count).
// Errors: none; `body` must not throw (an exception leaving a team member terminates).
#pragma once

#include <cstdint>
#include <string>

namespace tracecache::cpu {

// The CPUs this process may run on (sched_getaffinity), at least 1.
int available_cpus();

// Sets the process-wide thread count (values below 1 count as 1) and binds it on the calling
// thread.
void set_threads(int n);

// The process-wide thread count (1 until set_threads is called).
int threads();

// Makes the calling thread's OpenMP thread count (read by OpenBLAS and oneDNN when they start a
// team) equal to threads().
void bind_threads();

// Calls body(context, c) once for every c in [0, chunks), on the calling thread's team of at most
// min(threads(), chunks) threads, the calling thread included.
void run_chunks(int64_t chunks, void (*body)(void* context, int64_t chunk), void* context);

// Calls fn(c) for every c in [0, chunks), as run_chunks.
template <typename Fn>
void run_chunks(int64_t chunks, Fn& fn) {
  run_chunks(chunks, [](void* context, int64_t c) { (*static_cast<Fn*>(context))(c); }, &fn);
}

// What this process's BLAS is, as run --json and the benches print it: "OpenBLAS 0.3.21
// (OpenMP)" (from openblas_get_config and openblas_get_parallel).
std::string blas_description();

// openblas_get_parallel() of the OpenBLAS this process loaded: 0 sequential, 1 pthreads,
// 2 OpenMP. The build links Debian's OpenMP one; another one with the same soname loaded first
// (by another library in the same process, e.g. PyTorch's) wins, which this tells.
int blas_parallel_kind();

}  // namespace tracecache::cpu
