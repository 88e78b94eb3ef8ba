// The cpu backend's nn-layer kernels (replay/backends/cpu/cpu_nn_layers.h) on layer shapes of the zoo's
// models at 224x224, batch 1: convolutions of resnet50 and vgg16 (im2col + sgemm, the 1x1
// path), a depthwise convolution as in mobilenet, resnet's max pool, and a classifier linear.
// GFLOP/s counts 2 flops per multiply-add of the layer.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "capture/ir/graph.h"
#include "capture/ops/ops.h"
#include "capture/ops/random.h"
#include "replay/backends/cpu/cpu_kernels.h"

namespace tracecache {
namespace {

// One node of `op` on f32 inputs of `shapes` (uniform in [-1, 1]) with named attributes.
struct Layer {
  Graph g;
  NodeId node = 0;
  std::vector<HostBuffer> values;
  std::vector<const HostBuffer*> in;
  HostBuffer out;

  // Inputs are f32 unless `dtypes` names another (index inputs: U[0, `index_high`) floored).
  Layer(OpKind op, const std::vector<Shape>& shapes,
        const std::vector<std::pair<std::string_view, AttrValue>>& named, const std::vector<DType>& dtypes = {},
        double index_high = 0) {
    const OpInfo& info = op_info(op);
    std::vector<AttrValue> attrs;
    for (const AttrSpec& spec : info.attrs) attrs.push_back(spec.default_value);
    for (const auto& [name, value] : named) attrs[static_cast<size_t>(info.attr_index(name))] = value;
    std::vector<NodeId> ids;
    std::vector<TensorType> types;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const DType dtype = i < dtypes.size() ? dtypes[i] : DType::kF32;
      types.push_back({dtype, shapes[i]});
      ids.push_back(g.add_parameter(types.back()));
      values.emplace_back(dtype, shapes[i]);
      if (dtype == DType::kF32) {
        fill_uniform(values.back(), ids.size(), -1.0, 1.0);
      } else {
        fill_uniform(values.back(), ids.size(), 0.0, index_high);
      }
    }
    for (const HostBuffer& v : values) in.push_back(&v);
    const TensorType t = infer_op(op, types, attrs).value_or_throw();
    node = g.add_node(op, ids, attrs, t);
    out = HostBuffer(t.dtype, t.shape);
  }

  void run(benchmark::State& state, double flops) {
    for (auto _ : state) {
      cpu::run_op(g, node, in, out);
      benchmark::DoNotOptimize(out.bytes());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9,
                                                   benchmark::Counter::kIsRate);
  }
};

AttrValue pair(int64_t v) { return AttrValue::of_ints({v, v}); }

// conv2d of x [1, c, hw, hw] with weight [o, c / groups, k, k].
void conv(benchmark::State& state, int64_t c, int64_t hw, int64_t o, int64_t k, int64_t stride,
          int64_t groups = 1) {
  Layer l(OpKind::kConv2d, {{1, c, hw, hw}, {o, c / groups, k, k}, {o}},
          {{"stride", pair(stride)}, {"padding", pair(k / 2)}, {"groups", AttrValue::of_int(groups)}});
  const Shape& s = l.out.shape();
  l.run(state, 2.0 * static_cast<double>(s.numel() * (c / groups) * k * k));
}

void BM_Conv_Resnet50Stem7x7(benchmark::State& state) { conv(state, 3, 224, 64, 7, 2); }
void BM_Conv_Resnet50_3x3_64(benchmark::State& state) { conv(state, 64, 56, 64, 3, 1); }
void BM_Conv_Resnet50_1x1_256to64(benchmark::State& state) { conv(state, 256, 56, 64, 1, 1); }
void BM_Conv_Resnet50_1x1_Stride2(benchmark::State& state) { conv(state, 512, 28, 1024, 1, 2); }
void BM_Conv_Resnet50_3x3_512(benchmark::State& state) { conv(state, 512, 7, 512, 3, 1); }
void BM_Conv_Vgg16_3x3_64at224(benchmark::State& state) { conv(state, 64, 224, 64, 3, 1); }
void BM_Conv_Depthwise3x3_144at56(benchmark::State& state) { conv(state, 144, 56, 144, 3, 1, 144); }
void BM_Conv_Grouped32_3x3_128at56(benchmark::State& state) { conv(state, 128, 56, 128, 3, 1, 32); }
BENCHMARK(BM_Conv_Resnet50Stem7x7)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv_Resnet50_3x3_64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv_Resnet50_1x1_256to64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv_Resnet50_1x1_Stride2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv_Resnet50_3x3_512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv_Vgg16_3x3_64at224)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv_Depthwise3x3_144at56)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv_Grouped32_3x3_128at56)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MaxPool_Resnet50(benchmark::State& state) {
  Layer l(OpKind::kMaxPool2d, {{1, 64, 112, 112}},
          {{"kernel", pair(3)}, {"stride", pair(2)}, {"padding", pair(1)}});
  l.run(state, static_cast<double>(l.out.numel() * 9));
}
BENCHMARK(BM_MaxPool_Resnet50)->Unit(benchmark::kMillisecond)->UseRealTime();

// Its gradient in a training step at batch 8: grad_out [8, 64, 56, 56] back onto the input.
void BM_MaxPoolGrad_Resnet18Batch8(benchmark::State& state) {
  Layer l(OpKind::kMaxPool2dGrad, {{8, 64, 56, 56}, {8, 64, 112, 112}},
          {{"kernel", pair(3)}, {"stride", pair(2)}, {"padding", pair(1)}});
  l.run(state, static_cast<double>(8 * 64 * 56 * 56 * 9));
}
BENCHMARK(BM_MaxPoolGrad_Resnet18Batch8)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Linear_Vgg16Fc(benchmark::State& state) {
  Layer l(OpKind::kLinear, {{1, 25088}, {4096, 25088}, {4096}}, {});
  l.run(state, 2.0 * 25088 * 4096);
}
BENCHMARK(BM_Linear_Vgg16Fc)->Unit(benchmark::kMillisecond)->UseRealTime();

// The transposes of bert_base's backward at batch 8, sequence 128: activation gradients
// [1024, 3072] and [1024, 768] for weight gradients' matmuls, and the heads' keys [96, 128, 64]. Counts bytes
// moved (read + write) as "GFLOP/s".
void BM_Transpose_Bert1024x3072(benchmark::State& state) {
  Layer l(OpKind::kTranspose, {{1024, 3072}}, {{"dim0", AttrValue::of_int(0)}, {"dim1", AttrValue::of_int(1)}});
  l.run(state, 8.0 * 1024 * 3072);
}
BENCHMARK(BM_Transpose_Bert1024x3072)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_Transpose_Bert1024x768(benchmark::State& state) {
  Layer l(OpKind::kTranspose, {{1024, 768}}, {{"dim0", AttrValue::of_int(0)}, {"dim1", AttrValue::of_int(1)}});
  l.run(state, 8.0 * 1024 * 768);
}
BENCHMARK(BM_Transpose_Bert1024x768)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_Transpose_BertHeads(benchmark::State& state) {
  Layer l(OpKind::kTranspose, {{96, 128, 64}}, {{"dim0", AttrValue::of_int(1)}, {"dim1", AttrValue::of_int(2)}});
  l.run(state, 8.0 * 96 * 128 * 64);
}
BENCHMARK(BM_Transpose_BertHeads)->Unit(benchmark::kMillisecond)->UseRealTime();

// bert_base's word-embedding gradient at batch 8, sequence 128: the rows of 1,024 tokens
// scattered into the [30522, 768] table (the index broadcast across the row, as the gradient
// rule builds it). Counts one add per src element.
void BM_ScatterAdd_BertEmbeddingGrad(benchmark::State& state) {
  Layer l(OpKind::kScatterAdd, {{30522, 768}, {1024, 768}, {1024, 768}}, {{"axis", AttrValue::of_int(0)}},
          {DType::kF32, DType::kI64, DType::kF32}, 30522);
  int64_t* index = l.values[1].data<int64_t>();
  for (int64_t r = 0; r < 1024; ++r) std::fill_n(index + r * 768 + 1, 767, index[r * 768]);
  l.run(state, 1024.0 * 768);
}
BENCHMARK(BM_ScatterAdd_BertEmbeddingGrad)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tracecache

BENCHMARK_MAIN();
