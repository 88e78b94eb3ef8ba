// The arguments of one call of a compiled function (replay/engine/compiled_function.h), how a dim
// of a tensor argument is named (DynamicDim), and an argument's in-place update (ArgumentUpdate). Plain values: thread-compatible, no errors; a
// CallArgs shares its tensors' data with the caller (Tensor handles).
#pragma once

#include <cstddef>
#include <cstdint>
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

// Output `output` of a compiled function is the new value of tensor argument `argument`: the
// function may write it into the argument's storage (donation) when the caller gives the
// argument up (CompiledFunctionOptions::updates).
struct ArgumentUpdate {
  uint32_t output = 0;
  uint32_t argument = 0;
  friend bool operator==(const ArgumentUpdate&, const ArgumentUpdate&) = default;
};

}  // namespace tracecache
