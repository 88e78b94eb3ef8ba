// `_tracecache_torch`: the torch side of the torch bridge (python/torch_bridge/torch_bridge.h).
// A plain CPython module with one attribute, `api`, a capsule of torch_bridge::Api. Importing it
// fails with ImportError when the torch it was built against is not the torch Python imported
// (its tensor class is then unset), and tracecache.torch then keeps its Python path.
#include "python/torch_bridge/torch_bridge.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "capture/core/dtype.h"

namespace tracecache::torch_bridge {
namespace {

std::optional<DType> dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return DType::kF32;
    case c10::ScalarType::Int: return DType::kI32;
    case c10::ScalarType::Long: return DType::kI64;
    case c10::ScalarType::Bool: return DType::kBool;
    case c10::ScalarType::Double: return DType::kF64;
    case c10::ScalarType::BFloat16: return DType::kBF16;
    case c10::ScalarType::Half: return DType::kF16;
    case c10::ScalarType::Char: return DType::kI8;
    case c10::ScalarType::Byte: return DType::kU8;
    case c10::ScalarType::Short: return DType::kI16;
    default: return std::nullopt;
  }
}

std::optional<c10::ScalarType> scalar_type_of(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::kF32: return c10::ScalarType::Float;
    case DType::kI32: return c10::ScalarType::Int;
    case DType::kI64: return c10::ScalarType::Long;
    case DType::kBool: return c10::ScalarType::Bool;
    case DType::kF64: return c10::ScalarType::Double;
    case DType::kBF16: return c10::ScalarType::BFloat16;
    case DType::kF16: return c10::ScalarType::Half;
    case DType::kI8: return c10::ScalarType::Char;
    case DType::kU8: return c10::ScalarType::Byte;
    case DType::kI16: return c10::ScalarType::Short;
  }
  return std::nullopt;
}

bool is_tensor(PyObject* object) {
  if (THPVariable_CheckExact(object)) return true;
  const int r = THPVariableClass ? PyObject_IsInstance(object, THPVariableClass) : 0;
  if (r < 0) PyErr_Clear();
  return r == 1;
}

// A dense CPU tensor tracecache can read as it is; the others are left to the Python path.
bool plain(const c10::TensorImpl& impl) {
  return impl.device_type() == c10::DeviceType::CPU && impl.layout() == c10::kStrided && !impl.is_conj() &&
         !impl.is_neg() && !impl.has_symbolic_sizes_strides() && impl.dim() <= kMaxRank &&
         impl.has_storage() && impl.version_counter().enabled();
}

// The version counter's object, for prefetching only: VariableVersion is one intrusive pointer,
// whose bits are the counter's address (checked below; a wrong guess costs a useless prefetch).
const void* counter_address(const c10::TensorImpl& impl) {
  static_assert(sizeof(c10::VariableVersion) == sizeof(void*));
  const void* p = nullptr;
  std::memcpy(&p, &impl.version_counter(), sizeof p);
  return p;
}

TensorSnapshot read(const c10::TensorImpl& impl) {
  TensorSnapshot s;
  s.impl = &impl;
  if (!plain(impl)) return s;
  std::optional<DType> dtype = dtype_of(c10::typeMetaToScalarType(impl.dtype()));
  if (!dtype) return s;
  s.storage = impl.storage().unsafeGetStorageImpl();
  s.offset = impl.storage_offset();
  s.version = impl.version_counter().current_version();
  s.dtype = static_cast<int32_t>(*dtype);
  s.rank = static_cast<int32_t>(impl.dim());
  const c10::IntArrayRef sizes = impl.sizes(), strides = impl.strides();
  std::copy(sizes.begin(), sizes.end(), s.sizes);
  std::copy(strides.begin(), strides.end(), s.strides);
  s.readable = true;
  return s;
}

const void* impl_of(PyObject* tensor) { return THPVariable_Unpack(tensor).unsafeGetTensorImpl(); }

void snapshot(const void* const* tensors, size_t count, TensorSnapshot* out) {
  // Three passes over blocks of tensors: their TensorImpls, their version counters, then the
  // reads, each pass prefetching what the next one loads.
  constexpr size_t kBlock = 64;
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t n = std::min(kBlock, count - begin);
    const auto* const* impls = reinterpret_cast<const c10::TensorImpl* const*>(tensors + begin);
    for (size_t i = 0; i < n; ++i) {
      const char* p = reinterpret_cast<const char*>(impls[i]);
      for (size_t line = 0; line < sizeof(c10::TensorImpl); line += 64) __builtin_prefetch(p + line);
    }
    for (size_t i = 0; i < n; ++i) __builtin_prefetch(counter_address(*impls[i]));
    for (size_t i = 0; i < n; ++i) out[begin + i] = read(*impls[i]);
  }
}

bool view(PyObject* object, TensorView* out) {
  if (!is_tensor(object)) return false;
  const at::Tensor& t = THPVariable_Unpack(object);
  const c10::TensorImpl& impl = *t.unsafeGetTensorImpl();
  if (!plain(impl) || t.requires_grad() || !t.is_contiguous()) return false;
  std::optional<DType> dtype = dtype_of(t.scalar_type());
  if (!dtype) return false;
  void* data = t.data_ptr();
  if (reinterpret_cast<uintptr_t>(data) % t.element_size() != 0) return false;
  out->data = data;
  out->dtype = static_cast<int32_t>(*dtype);
  out->rank = static_cast<int32_t>(t.dim());
  const c10::IntArrayRef sizes = t.sizes();
  std::copy(sizes.begin(), sizes.end(), out->sizes);
  return true;
}

PyObject* wrap(void* data, int32_t dtype, const int64_t* sizes, int32_t rank, void (*release)(void*),
               void* context) {
  std::optional<c10::ScalarType> type = scalar_type_of(dtype);
  if (!type || rank < 0 || rank > kMaxRank) {
    release(context);
    PyErr_SetString(PyExc_ValueError, "tracecache torch bridge: an output of an unknown dtype or rank");
    return nullptr;
  }
  try {
    at::Tensor t = at::from_blob(
        data, c10::IntArrayRef(sizes, static_cast<size_t>(rank)), [release, context](void*) { release(context); },
        at::TensorOptions().dtype(*type));
    return THPVariable_Wrap(std::move(t));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

const Api kApi{kAbiVersion, &is_tensor, &impl_of, &snapshot, &view, &wrap};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tracecache_torch",
                          "tracecache.torch's bridge to libtorch (python/torch_bridge/torch_bridge.h).",
                          -1, nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace tracecache::torch_bridge

PyMODINIT_FUNC PyInit__tracecache_torch() {
  using namespace tracecache::torch_bridge;
  if (THPVariableClass == nullptr) {
    PyErr_SetString(PyExc_ImportError,
                    "tracecache's torch bridge was built against another torch than the one imported (or torch "
                    "is not imported yet)");
    return nullptr;
  }
  PyObject* module = PyModule_Create(&module_def);
  if (!module) return nullptr;
  PyObject* capsule = PyCapsule_New(const_cast<Api*>(&kApi), kCapsuleName, nullptr);
  if (!capsule || PyModule_AddObject(module, "api", capsule) < 0) {
    Py_XDECREF(capsule);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
