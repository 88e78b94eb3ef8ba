// DeviceData: an opaque, immutable handle to one tensor value wherever it lives (host memory, a
// backend's device), with its dtype and shape. Tensors and the GraphExecutor seam speak these
// handles; host bytes are produced only by read(), a value read.
//
// Implementations: HostData (below) is host memory, used by the cpu backend, the reference
// evaluator and for data the program supplies (weights loaded from files); backends derive
// their own device buffers (replay/backends/backend.h). read() of device memory waits for the device
// and copies (the sim backend counts it as a transfer); read() of host memory returns the
// buffer itself.
//
// Ownership: shared by handle (DataRef). A value never changes while anyone else can see it: a
// backend writes a donated output into a parameter's storage only when the parameter's handle
// (and its storage) has no other owner (replay/compile/executable.h, Slot::Kind::kDonated).
// Thread-compatible: like Tensor, a handle belongs to one thread at a time (HostData caches its
// device mirror without locking).
// Errors: read() returns the backend's Status (e.g. the device is gone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "capture/core/buffer.h"
#include "capture/core/dtype.h"
#include "capture/core/shape.h"
#include "capture/core/status.h"

namespace tracecache {

class DeviceData;
using DataRef = std::shared_ptr<const DeviceData>;

class DeviceData {
 public:
  // `identity`: the object holding the bytes (see identity()); null means this handle itself.
  DeviceData(DType dtype, Shape shape, const void* identity = nullptr)
      : dtype_(dtype), shape_(std::move(shape)), identity_(identity ? identity : this) {}
  virtual ~DeviceData() = default;
  DeviceData(const DeviceData&) = delete;
  DeviceData& operator=(const DeviceData&) = delete;

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // The value in host memory: a value read. May wait for the device and copy.
  virtual Result<BufferRef> read() const = 0;
  // True if read() neither waits nor copies (the value already is host memory).
  virtual bool in_host_memory() const = 0;
  // Handles with equal identity hold the same bytes (a tensor's data seen twice is one graph
  // parameter: aliasing). An identity for in-process maps, never persisted; not virtual, as
  // guard checks and op recording read it.
  const void* identity() const { return identity_; }
  // The host buffer holding the value when it is host memory (in_host_memory()), else null: the
  // value read without a virtual call or a Result, for the hot path of Tensor::buffer(). Not
  // virtual for the same reason as identity().
  const BufferRef* host_buffer() const { return host_buffer_; }

 protected:
  // For implementations whose value is host memory: `buffer` must live as long as this handle.
  void set_host_buffer(const BufferRef* buffer) { host_buffer_ = buffer; }

 private:
  DType dtype_;
  Shape shape_;
  const void* identity_;
  const BufferRef* host_buffer_ = nullptr;
};

// A value in host memory. It may carry a mirror: the copy of itself on one device, made by
// whoever runs it there (replay/engine/runtime.h), so data the program supplies is copied to a device
// once and reused while this handle lives; the mirror dies with it. No map keyed by host
// addresses is involved: the mirror hangs off the value.
class HostData final : public DeviceData {
 public:
  // REQUIRES: buffer != nullptr.
  explicit HostData(BufferRef buffer)
      : DeviceData(buffer->dtype(), buffer->shape(), buffer.get()), buffer_(std::move(buffer)) {
    set_host_buffer(&buffer_);
  }

  Result<BufferRef> read() const override { return buffer_; }
  bool in_host_memory() const override { return true; }
  const BufferRef& buffer() const { return buffer_; }

  // The mirror made for `device` (an identity token of the device that made it), or null.
  const DataRef& mirror(uint64_t device) const { return mirror_device_ == device ? mirror_ : kNone; }
  // Sets (replaces) the mirror. REQUIRES: device != 0.
  void set_mirror(uint64_t device, DataRef mirror) const {
    mirror_device_ = device;
    mirror_ = std::move(mirror);
  }
  // Frees the mirror (its device memory, if nothing else holds it).
  void drop_mirror() const {
    mirror_device_ = 0;
    mirror_.reset();
  }

 private:
  static inline const DataRef kNone;
  BufferRef buffer_;
  mutable uint64_t mirror_device_ = 0;
  mutable DataRef mirror_;
};

// Host data holding `buffer`. REQUIRES: buffer != nullptr.
inline DataRef host_data(BufferRef buffer) { return std::make_shared<const HostData>(std::move(buffer)); }
inline DataRef host_data(HostBuffer buffer) {
  return host_data(std::make_shared<const HostBuffer>(std::move(buffer)));
}

// The host buffer behind `data` if it is host memory (no copy, no wait), else null.
inline const HostData* as_host_data(const DeviceData& data) {
  return data.in_host_memory() ? dynamic_cast<const HostData*>(&data) : nullptr;
}

}  // namespace tracecache
