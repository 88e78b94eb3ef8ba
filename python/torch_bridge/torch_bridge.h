// The torch bridge: the C interface between the `_tracecache` module and `_tracecache_torch`, the
// small module that is compiled against libtorch's headers and linked to libtorch (built only
// when they are found; docs/python.md, "The per-call path").
//
// `_tracecache` does not link libtorch (importing tracecache does not load it). tracecache.torch,
// after importing torch, imports `_tracecache_torch` and hands its capsule (kCapsuleName) to
// `_tracecache._TorchFastPath`, which then reads torch tensors directly: their identity, storage
// and version counter (no Python attribute per parameter), their bytes (no NumPy view) and makes
// its outputs as torch tensors over tracecache's buffers (no torch.from_numpy).
//
// Errors: `view` and `snapshot` never raise and never set a Python error; a tensor they cannot
// read says so in its result (the caller then takes the Python path, which reports why). `wrap`
// returns null with a Python error set when torch fails. Thread-safety: every entry point is
// called with the GIL held. Ownership: `wrap`'s tensor calls `release(context)` once, from any
// thread, when torch frees its memory; the other entry points take no references.
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>

namespace tracecache::torch_bridge {

// The bridge's ABI: `_tracecache` refuses a capsule whose Api::abi_version differs.
inline constexpr uint32_t kAbiVersion = 2;
inline constexpr const char* kCapsuleName = "tracecache._tracecache_torch.api";
inline constexpr int kMaxRank = 8;  // tracecache's kMaxRank (capture/core/shape.h)

// A dense CPU tensor's memory as tracecache can view it: C-contiguous, aligned, no autograd
// history wanted (requires_grad is false), of a tracecache dtype (`dtype` holds the DType value of
// capture/core/dtype.h).
struct TensorView {
  void* data;
  int32_t dtype;
  int32_t rank;
  int64_t sizes[kMaxRank];
};

// What identifies a tensor's contents between two calls without reading them: the tensor's
// TensorImpl, its storage, offset, dtype, sizes and strides, and torch's version counter (which
// every in-place write bumps). Equal snapshots of the same tensor object mean the same memory
// holding the same values, as far as torch tracks writes. `readable` is false for an object the
// bridge cannot read (no version counter, as for an inference-mode tensor, or another device or
// layout): it is never the same as another (same_snapshot).
struct TensorSnapshot {
  const void* impl = nullptr;
  const void* storage = nullptr;
  int64_t offset = 0;
  int64_t version = -1;
  int32_t dtype = -1;
  int32_t rank = -1;
  int64_t sizes[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  bool readable = false;
};

// Whether two snapshots are of the same memory holding the same values (written out: this
// header is also compiled as C++17, the standard libtorch 1.13's headers build with).
inline bool same_snapshot(const TensorSnapshot& a, const TensorSnapshot& b) {
  if (!a.readable || !b.readable || a.impl != b.impl || a.storage != b.storage || a.offset != b.offset ||
      a.version != b.version || a.dtype != b.dtype || a.rank != b.rank) {
    return false;
  }
  for (int32_t d = 0; d < a.rank && d < kMaxRank; ++d) {
    if (a.sizes[d] != b.sizes[d] || a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

struct Api {
  uint32_t abi_version;
  // Whether `object` is a torch.Tensor (or a subclass).
  bool (*is_tensor)(PyObject* object);
  // The TensorImpl of a torch tensor (checked with is_tensor before): the same object for as
  // long as the Python object lives (`p.data = t` changes what it holds, not the object), so a
  // caller that holds the Python object may keep it and skip reading the object per call.
  const void* (*impl_of)(PyObject* tensor);
  // The snapshots of `count` tensors by their impl_of() (their Python objects held by the
  // caller), read in passes that prefetch the next level of every tensor first, so the cache
  // misses of a call's many parameters overlap instead of queueing.
  void (*snapshot)(const void* const* impls, size_t count, TensorSnapshot* out);
  // A view of `tensor`'s memory; false if it is not a torch tensor tracecache can view as it is.
  bool (*view)(PyObject* tensor, TensorView* out);
  // A new torch tensor (new reference) over `data`, of DType value `dtype` and `rank` sizes,
  // that calls release(context) when torch frees it; null with a Python error set on failure.
  PyObject* (*wrap)(void* data, int32_t dtype, const int64_t* sizes, int32_t rank, void (*release)(void*),
                    void* context);
};

}  // namespace tracecache::torch_bridge
