// The loops the cpu kernels share (cpu_kernels.cc, cpu_fused.cc, cpu_reductions.cc): the split of
// work over the thread team and the strided index spaces of layout copies and broadcast loads.
// Internal to replay/backends/cpu/.
// Thread-safety: pure functions of their arguments; parallel_chunks runs fn concurrently on
// disjoint ranges (cpu_kernels.h, "Threading"). Errors: none (REQUIRES are asserted by callers).
// Ownership: nothing is kept. Inline: they were one translation unit with their callers, and the
// tile loops call them per tile.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "capture/core/buffer.h"
#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/cpu_threads.h"

namespace tracecache::cpu {

// ---- threading --------------------------------------------------------------------------------

// Calls fn(begin, end) on disjoint ranges covering [0, items). Split over threads when `work`
// (elements touched in total) reaches kParallelThreshold, in chunks of about kGrain elements of
// work so threads balance dynamically; one call on this thread otherwise.
template <typename Fn>
void parallel_chunks(int64_t items, int64_t work, Fn&& fn) {
  if (items <= 0) return;
  constexpr int64_t kGrain = int64_t{1} << 14;
  if (work < kParallelThreshold || items < 2) {
    fn(int64_t{0}, items);
    return;
  }
  const int64_t chunks = std::min(items, work / kGrain);
  auto chunk = [&](int64_t c) {
    const int64_t begin = items * c / chunks, end = items * (c + 1) / chunks;
    if (begin < end) fn(begin, end);
  };
  run_chunks(chunks, chunk);
}

// ---- shapes and strided copies ----------------------------------------------------------------

// A row-major iteration space with one strided operand, simplified: dims of size 1 dropped and
// neighbours merged where the operand's strides allow, so the innermost dim is as long as
// possible. Strides in elements.
struct StridedSpace {
  int rank = 0;
  std::array<int64_t, kMaxRank> dims{};
  std::array<int64_t, kMaxRank> strides{};
};

inline StridedSpace simplify(const Shape& shape, const IntList& strides) {
  StridedSpace s;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (s.rank > 0 && s.strides[s.rank - 1] == strides[d] * shape[d]) {
      s.dims[s.rank - 1] *= shape[d];
      s.strides[s.rank - 1] = strides[d];
    } else {
      s.dims[s.rank] = shape[d];
      s.strides[s.rank] = strides[d];
      ++s.rank;
    }
  }
  if (s.rank == 0) {  // a single element
    s.dims[0] = 1;
    s.strides[0] = 0;
    s.rank = 1;
  }
  return s;
}

// Copies `count` elements of `elem` bytes, reading src with stride `stride` (elements).
inline void copy_run(std::byte* dst, const std::byte* src, int64_t stride, int64_t count, size_t elem) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(count) * elem);
    return;
  }
  auto run = [&]<typename U>() {
    U* d = reinterpret_cast<U*>(dst);
    const U* s = reinterpret_cast<const U*>(src);
    if (stride == 0) {
      std::fill_n(d, count, *s);  // vectorized: the library's cost model (CMakeLists.txt)
    } else {
      for (int64_t i = 0; i < count; ++i) d[i] = s[i * stride];
    }
  };
  switch (elem) {
    case 1: return run.operator()<uint8_t>();
    case 4: return run.operator()<uint32_t>();
    default: return run.operator()<uint64_t>();
  }
}

// Writes elements [start, start + count) of the row-major iteration over `space` into dst,
// reading src[offset] (offset per `space`'s strides, plus `base`).
inline void gather_range(const StridedSpace& space, const std::byte* src, int64_t base, size_t elem,
                  int64_t start, int64_t count, std::byte* dst) {
  const int last = space.rank - 1;
  std::array<int64_t, kMaxRank> idx{};
  int64_t off = base;
  int64_t rem = start;
  for (int d = last; d >= 0; --d) {
    idx[d] = rem % space.dims[d];
    rem /= space.dims[d];
    off += idx[d] * space.strides[d];
  }
  int64_t done = 0;
  while (done < count) {
    const int64_t run = std::min(space.dims[last] - idx[last], count - done);
    copy_run(dst + static_cast<size_t>(done) * elem, src + static_cast<size_t>(off) * elem,
             space.strides[last], run, elem);
    done += run;
    idx[last] += run;
    off += run * space.strides[last];
    if (idx[last] < space.dims[last]) continue;
    off -= space.strides[last] * space.dims[last];
    idx[last] = 0;
    for (int d = last - 1; d >= 0; --d) {
      off += space.strides[d];
      if (++idx[d] < space.dims[d]) break;
      off -= space.strides[d] * space.dims[d];
      idx[d] = 0;
    }
  }
}

// A transpose's copy: out[o][a][b] = src[base + o * outer_stride + a + b * b_stride] over
// `outer` x `rows` x `cols`. Read row by row, every output row would read a column of src, one
// element per cache line; in blocks of kBlock x kBlock, the lines a block reads are used whole

}  // namespace tracecache::cpu
