// What the backend tests compare with: deterministic inputs, bitwise equality (any NaN matches
// any NaN, cpu_kernels.h), the GEMM bound (cpu_nn_layers.h), and one graph compiled and run on a
// backend with its outputs brought back to the host. Shared by the backend conformance, sim
// and nn-layer tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "replay/backends/backend.h"
#include "capture/core/buffer.h"
#include "capture/ir/hash.h"

namespace tracecache::testing {

// Values in [-2, 2) for f32, random bools, zeros for integers (a valid index for every
// gather-like op and a handled divisor for div).
inline BufferRef filled(DType dtype, const Shape& shape, uint64_t seed) {
  auto b = std::make_shared<HostBuffer>(dtype, shape);
  std::mt19937_64 gen(seed);
  for (int64_t i = 0; i < b->numel(); ++i) {
    switch (dtype) {
      case DType::kF32:
        b->data<float>()[i] = static_cast<float>(static_cast<double>(gen() >> 11) * 0x1.0p-53 * 4.0 - 2.0);
        break;
      case DType::kBool: b->data<bool>()[i] = (gen() & 1) != 0; break;
      case DType::kI32: b->data<int32_t>()[i] = 0; break;
      case DType::kI64: b->data<int64_t>()[i] = 0; break;
      default:  // the other dtypes: zeros, as for the integers
        dispatch_dtype(dtype, [&]<typename T>() { b->data<T>()[i] = static_cast<T>(0.0f); });
        break;
    }
  }
  return b;
}

// Same type and bits, except that any NaN matches any NaN.
inline ::testing::AssertionResult same_bits(const HostBuffer& got, const HostBuffer& want) {
  if (got.dtype() != want.dtype() || !(got.shape() == want.shape())) {
    return ::testing::AssertionFailure() << type_to_string({got.dtype(), got.shape()}) << " vs "
                                         << type_to_string({want.dtype(), want.shape()});
  }
  const size_t elem = dtype_size(got.dtype());
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (got.dtype() == DType::kF32 && std::isnan(got.data<float>()[i]) && std::isnan(want.data<float>()[i])) {
      continue;
    }
    if (std::memcmp(got.bytes() + static_cast<size_t>(i) * elem, want.bytes() + static_cast<size_t>(i) * elem,
                    elem) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got.element_as_double(i)
                                           << ", reference " << want.element_as_double(i);
    }
  }
  return ::testing::AssertionSuccess();
}

// The GEMM bound of cpu_nn_layers.h: |got - ref| <= (K + 3) 2^-24 abs_ref + 2^-23 |ref| +
// denorm_min, where abs_ref is the reference op on the inputs' absolute values.
inline ::testing::AssertionResult within_gemm_bound(const HostBuffer& got, const HostBuffer& want,
                                                    const HostBuffer& abs_ref, int64_t k) {
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    const double bound = static_cast<double>(k + 3) * 0x1.0p-24 * abs_ref.data<float>()[i] +
                         std::fabs(w) * 0x1.0p-23 + std::numeric_limits<float>::denorm_min();
    if (!(std::fabs(g - w) <= bound)) {
      return ::testing::AssertionFailure() << "element " << i << " of " << got.numel() << ": got " << g
                                           << ", reference " << w << ", bound " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

// The erf bound of cpu_kernels.h (libmvec's vector erf, vector_math.h): erf within 2 ulp of the
// reference (ulp at the larger magnitude); gelu's erf form, x = its input (any dtype),
// |got - ref| <= 2^-22 |x| + 2 ulp(ref) (the erf's 2 ulp carried through 1 + erf and the
// product with x / 2, each rounded). Equal values (infinities) and NaN against NaN pass.
inline ::testing::AssertionResult within_erf_bound(const HostBuffer& got, const HostBuffer& want,
                                                   const HostBuffer& x, bool gelu) {
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    const float big = std::max(std::fabs(g), std::fabs(w));
    const double ulp = std::nextafter(big, std::numeric_limits<float>::infinity()) - big;
    const double bound = 2 * ulp + (gelu ? 0x1.0p-22 * std::fabs(x.element_as_double(i)) : 0.0);
    if (!(std::fabs(static_cast<double>(g) - w) <= bound)) {
      return ::testing::AssertionFailure() << "element " << i << " of " << got.numel() << ": input "
                                           << x.element_as_double(i) << ", got " << g << ", reference " << w
                                           << ", bound " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

// Compiles `g` on `backend` (with the backend's compiler version) and runs it on `params`;
// outputs back on the host.
inline std::vector<BufferRef> run_on(Backend& backend, const Graph& g, std::span<const BufferRef> params) {
  Executable exe = std::move(backend.compile(g, hash_graph(g), backend.compiler_version())).value_or_throw();
  std::vector<DeviceRef> dev;
  for (const BufferRef& p : params) dev.push_back(std::move(backend.to_device(host_data(p))).value_or_throw());
  std::vector<DeviceRef> outs = std::move(backend.run(exe, dev)).value_or_throw();
  std::vector<BufferRef> host;
  for (const DeviceRef& d : outs) host.push_back(std::move(backend.to_host(d)).value_or_throw());
  backend.synchronize();
  return host;
}

}  // namespace tracecache::testing
