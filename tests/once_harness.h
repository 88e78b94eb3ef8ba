// Shared by the trace-once tests: a harness owning a cpu runtime and a context, and the oracle
// (the same function traced afresh on copies of the arguments).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "replay/engine/compiled_function.h"
#include "replay/backends/cpu/cpu_backend.h"

namespace tracecache {

inline HostBuffer filled(DType dtype, Shape shape, double start, double step = 1) {
  HostBuffer b(dtype, shape);
  dispatch_dtype(dtype, [&]<typename T>() {
    for (int64_t i = 0; i < b.numel(); ++i) b.data<T>()[i] = static_cast<T>(start + step * static_cast<double>(i));
  });
  return b;
}

struct Harness {
  CpuBackend cpu;
  Metrics metrics;
  Runtime runtime{&cpu, nullptr, &metrics};
  LazyContext ctx{&runtime};

  Tensor tensor(HostBuffer b) { return ctx.from_buffer(std::move(b)); }

  // Calls `f` and returns its outputs as vectors of doubles.
  std::vector<std::vector<double>> call(CompiledFunction& f, const CallArgs& args) {
    auto r = f(ctx, args);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    std::vector<std::vector<double>> out;
    if (!r.is_ok()) return out;
    for (const Tensor& t : *r) out.push_back(t.to_vector<double>());
    return out;
  }
};

// The oracle: the same function traced afresh (a new CompiledFunction on a new runtime, whose
// first call always traces), on copies of the same argument data.
inline std::vector<std::vector<double>> eager(const TracedFn& fn, const CallArgs& args,
                                       CompiledFunctionOptions options = {}) {
  CpuBackend cpu;
  Runtime runtime(&cpu, nullptr, nullptr);
  CompiledFunction f("fresh", fn, &runtime, options);
  LazyContext ctx(&runtime);
  CallArgs copy;
  for (const Tensor& t : args.tensors) copy.tensors.push_back(ctx.from_buffer(t.buffer()));
  copy.scalars = args.scalars;
  auto r = f(ctx, copy);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(f.stats().traces, 1);
  std::vector<std::vector<double>> out;
  if (r.is_ok()) {
    for (const Tensor& t : *r) out.push_back(t.to_vector<double>());
  }
  return out;
}

}  // namespace tracecache
