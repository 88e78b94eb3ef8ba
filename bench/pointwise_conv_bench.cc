// How close the cpu backend's 1x1 convolutions come to this machine's GEMM peak, and whether
// another oneDNN route would be faster: for the stride-1 1x1 convolution shapes of
// resnext50_32x4d (the bulk of its FLOPs), at batch 8 and 1, in row-major NCHW as the backend
// runs them (replay/backends/cpu/onednn_conv.cc: nchw_gemm), the same product four ways:
//   Conv:   oneDNN's convolution asked for NCHW (it picks its GEMM kernel, x64:gemm:jit), what
//           the backend runs;
//   ConvBlocked: the same with the activations already in oneDNN's own (blocked) layout, no
//           reorder timed, as if they were kept in it from layer to layer (PyTorch reorders
//           around every convolution instead);
//   Matmul: oneDNN's matmul, weights [1, O, C] broadcast over images [N, C, H*W] (brgemm);
//   Sgemm:  dnnl_sgemm once per image.
// and Peak: dnnl_sgemm on square matrices, the GEMM rate this machine reaches at all.
// The flops counter is 2 * N * O * C * H * W per iteration (per second with kIsRate).
// Threads: oneDNN's OpenMP team; set OMP_NUM_THREADS (and OMP_WAIT_POLICY=active to match the
// side-by-side's tracecache runs). Findings: bench/results/resnext50-limits-2026-11-27.md.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <iterator>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

struct Pointwise {
  int64_t n, c, o, hw;
};
// resnext50_32x4d's stride-1 1x1 convolutions (and two at batch 1).
constexpr Pointwise kShapes[] = {{8, 128, 256, 56}, {8, 256, 512, 28},  {8, 1024, 512, 14}, {8, 512, 1024, 14},
                                 {8, 1024, 1024, 14}, {8, 1024, 2048, 7}, {8, 2048, 1024, 7}, {1, 1024, 512, 14},
                                 {1, 256, 64, 56}};

void label(benchmark::State& state, const Pointwise& p, const char* impl) {
  // Appended piece by piece: `"n" + std::to_string(...)` (operator+(const char*, string&&),
  // an insert at the front) makes GCC 12 at -O3 report a bogus -Wrestrict inside libstdc++
  // (GCC bug 105329), which -Werror turns into a failed Release build.
  std::string text = "n";
  text += std::to_string(p.n);
  text += " c";
  text += std::to_string(p.c);
  text += " o";
  text += std::to_string(p.o);
  text += ' ';
  text += std::to_string(p.hw);
  text += 'x';
  text += std::to_string(p.hw);
  text += ' ';
  text += impl;
  state.SetLabel(text);
  state.counters["flops"] = benchmark::Counter(2.0 * static_cast<double>(p.n * p.o * p.c * p.hw * p.hw),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

// Times `primitive` (made on `engine`) on memories of the given descriptors, each run waited for.
void time_runs(benchmark::State& state, const dnnl::engine& engine, const dnnl::primitive& primitive,
               const memory::desc& src, const memory::desc& weights, const memory::desc& dst,
               const memory::desc& scratchpad) {
  dnnl::stream stream(engine);
  const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(src, engine)},
                                             {DNNL_ARG_WEIGHTS, memory(weights, engine)},
                                             {DNNL_ARG_DST, memory(dst, engine)},
                                             {DNNL_ARG_SCRATCHPAD, memory(scratchpad, engine)}};
  for (auto _ : state) {
    primitive.execute(stream, args);
    stream.wait();
  }
}

// The convolution with activations in layout `act` (nchw, or any: oneDNN's choice, a blocked
// layout, with no reorder timed: what keeping activations blocked from layer to layer would cost).
void conv(benchmark::State& state, Tag act) {
  const Pointwise p = kShapes[state.range(0)];
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const memory::desc src({p.n, p.c, p.hw, p.hw}, kF32, act), dst({p.n, p.o, p.hw, p.hw}, kF32, act);
  const memory::desc weights({p.o, p.c, 1, 1}, kF32, Tag::any);
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                             src, weights, dst, {1, 1}, {0, 0}, {0, 0});
  const dnnl::convolution_forward::primitive_desc pd(desc, engine);
  time_runs(state, engine, dnnl::convolution_forward(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(),
            pd.scratchpad_desc());
  label(state, p, pd.impl_info_str());
}
void BM_Conv(benchmark::State& state) { conv(state, Tag::nchw); }
void BM_ConvBlocked(benchmark::State& state) { conv(state, Tag::any); }
BENCHMARK(BM_ConvBlocked)->DenseRange(0, std::size(kShapes) - 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv)->DenseRange(0, std::size(kShapes) - 1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Matmul(benchmark::State& state) {
  const Pointwise p = kShapes[state.range(0)];
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const int64_t hw = p.hw * p.hw;
  const memory::desc a({1, p.o, p.c}, kF32, Tag::abc), b({p.n, p.c, hw}, kF32, Tag::abc),
      c({p.n, p.o, hw}, kF32, Tag::abc);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine);
  time_runs(state, engine, dnnl::matmul(pd), a, b, c, pd.scratchpad_desc());
  label(state, p, pd.impl_info_str());
}
BENCHMARK(BM_Matmul)->DenseRange(0, std::size(kShapes) - 1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Sgemm(benchmark::State& state) {
  const Pointwise p = kShapes[state.range(0)];
  const int64_t hw = p.hw * p.hw;
  std::vector<float> w(static_cast<size_t>(p.o * p.c), 0.5f), x(static_cast<size_t>(p.n * p.c * hw), 0.25f),
      y(static_cast<size_t>(p.n * p.o * hw));
  for (auto _ : state) {
    for (int64_t i = 0; i < p.n; ++i) {
      dnnl_sgemm('N', 'N', p.o, hw, p.c, 1.0f, w.data(), p.c, x.data() + i * p.c * hw, hw, 0.0f,
                 y.data() + i * p.o * hw, hw);
    }
  }
  label(state, p, "dnnl_sgemm per image");
}
BENCHMARK(BM_Sgemm)->DenseRange(0, std::size(kShapes) - 1)->Unit(benchmark::kMillisecond)->UseRealTime();

// Square sgemm: the machine's reachable GEMM rate.
void BM_Peak(benchmark::State& state) {
  const int64_t m = state.range(0);
  std::vector<float> a(static_cast<size_t>(m * m), 0.5f), b(a), c(a.size());
  for (auto _ : state) dnnl_sgemm('N', 'N', m, m, m, 1.0f, a.data(), m, b.data(), m, 0.0f, c.data(), m);
  state.counters["flops"] =
      benchmark::Counter(2.0 * static_cast<double>(m * m * m), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Peak)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
