// The arguments of one call of a compiled function (runtime/compiled_function.h), and how a dim
// of a tensor argument is named (DynamicDim). Plain values: thread-compatible, no errors; a
// CallArgs shares its tensors' data with the caller (Tensor handles).
#pragma once

#include <cstddef>
#include <vector>

#include "capture/trace/tensor.h"

namespace tracecache {

struct CallArgs {
  std::vector<Tensor> tensors;  // must be materialized (device data)
  std::vector<double> scalars;
};

// Dim `dim` of tensor argument `input`.
struct DynamicDim {
  size_t input = 0;  // tensor argument index
  int dim = 0;
  friend bool operator==(const DynamicDim&, const DynamicDim&) = default;
};

}  // namespace tracecache
