// oneDNN's matmul behind OneDnnMatmuls (onednn_matmul.h).
#include "replay/backends/cpu/onednn_matmul.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "replay/backends/cpu/onednn_kept.h"

namespace tracecache::cpu {

namespace {

using dnnl::memory;

// Row-major strides of `dims`.
memory::dims row_major(const memory::dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

// The primitive's view of one node: src x weights (+ bias) -> dst, all dims as oneDNN takes them.
struct MatmulDims {
  memory::dims src, weights, weights_strides, dst;
  bool has_bias = false;
};

// The dims of matmul a x b -> out. REQUIRES: a non-empty out and K > 0.
void matmul_dims(const Shape& a, const Shape& b, MatmulDims* d) {
  Shape sa = a, sb = b;
  if (sa.rank() == 1) sa.insert(0, 1);
  if (sb.rank() == 1) sb.push_back(1);
  const int ra = sa.rank(), rb = sb.rank();
  const int64_t m = sa[ra - 2], k = sa[ra - 1], n = sb[rb - 1];
  if (rb == 2) {  // b unbatched: a's batches stacked along M, one GEMM
    const int64_t rows = sa.numel() / k;
    d->src = {rows, k};
    d->weights = {k, n};
    d->dst = {rows, n};
  } else {
    // Both padded with leading 1s to the output's batch rank; oneDNN broadcasts the 1s.
    const int batch = std::max(ra, rb) - 2;
    d->src.assign(static_cast<size_t>(batch - (ra - 2)), 1);
    d->weights.assign(static_cast<size_t>(batch - (rb - 2)), 1);
    d->dst.clear();
    for (int i = 0; i < ra; ++i) d->src.push_back(sa[i]);
    for (int i = 0; i < rb; ++i) d->weights.push_back(sb[i]);
    for (int i = 0; i < batch; ++i) d->dst.push_back(std::max(d->src[static_cast<size_t>(i)], d->weights[static_cast<size_t>(i)]));
    d->dst.push_back(m);
    d->dst.push_back(n);
  }
  d->weights_strides = row_major(d->weights);
  d->has_bias = false;
}

// The dims of linear with weight w [N, K] -> out (the input x [.., K] has out.numel() / N rows).
// REQUIRES: a non-empty out and K > 0.
void linear_dims(const Shape& w, const Shape& out, bool has_bias, MatmulDims* d) {
  const int64_t n = w[0], k = w[1];
  const int64_t rows = out.numel() / n;
  d->src = {rows, k};
  d->weights = {k, n};
  d->weights_strides = {1, k};  // the weight [N, K] read transposed
  d->dst = {rows, n};
  d->has_bias = has_bias;
}

// What a node's primitive was made for: its operands' and output's shapes (the primitive's dims
// follow from them) and whether it has a bias.
struct Operands {
  Shape a, b, out;
  bool has_bias = false;
  bool operator==(const Operands&) const = default;
};

// One node's primitive and its memories (data handles set per run).
struct Prepared {
  Operands operands;
  int threads = 0;  // the OpenMP thread count it was made for (onednn_kept.h)
  dnnl::matmul matmul;
  memory src, weights, bias, dst, scratchpad;
  std::unordered_map<int, memory> args;

  Prepared(const dnnl::engine& engine, const MatmulDims& d) {
    const auto f32 = memory::data_type::f32;
    const memory::desc src_md(d.src, f32, row_major(d.src)), w_md(d.weights, f32, d.weights_strides);
    const memory::desc dst_md(d.dst, f32, row_major(d.dst));
    const memory::desc bias_md = d.has_bias ? memory::desc({1, d.dst[1]}, f32, memory::dims{d.dst[1], 1})
                                            : memory::desc();
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, w_md, bias_md, dst_md), attr, engine);
    matmul = dnnl::matmul(pd);
    src = memory(src_md, engine, DNNL_MEMORY_NONE);
    weights = memory(w_md, engine, DNNL_MEMORY_NONE);
    dst = memory(dst_md, engine, DNNL_MEMORY_NONE);
    scratchpad = memory(pd.scratchpad_desc(), engine);
    args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratchpad}};
    if (d.has_bias) {
      bias = memory(bias_md, engine, DNNL_MEMORY_NONE);
      args.emplace(DNNL_ARG_BIAS, bias);
    }
  }
};

}  // namespace

struct OneDnnMatmuls::State {
  KeptPrimitives<Prepared> kept;
};

OneDnnMatmuls::OneDnnMatmuls() = default;
OneDnnMatmuls::~OneDnnMatmuls() = default;

bool OneDnnMatmuls::run(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
                        HostBuffer& out) {
  const Node& n = g.node(node);
  const bool has_bias = n.op == OpKind::kLinear && inputs.size() == 3;
  // K is a's last dim (after lifting a 1-D a, still its last).
  if (out.numel() == 0 || inputs[0]->shape()[inputs[0]->shape().rank() - 1] == 0) return false;
  const Operands operands{inputs[0]->shape(), inputs[1]->shape(), out.shape(), has_bias};
  if (!state_) state_ = std::make_unique<State>();
  KeptPrimitives<Prepared>& kept = state_->kept;
  const bool done = kept.run(
      key, node, [&](const Prepared& p) { return p.operands == operands; },
      [&](const dnnl::engine& engine) {
        // The dims (vectors) only when a primitive is made: a kept one is found by the shapes.
        MatmulDims d;
        if (n.op == OpKind::kLinear) {
          linear_dims(operands.b, out.shape(), has_bias, &d);
        } else {
          matmul_dims(operands.a, operands.b, &d);
        }
        auto p = std::make_unique<Prepared>(engine, d);
        p->operands = operands;
        return p;
      },
      [&](Prepared& p, dnnl::stream& stream) {
        p.src.set_data_handle(const_cast<std::byte*>(inputs[0]->bytes()));
        p.weights.set_data_handle(const_cast<std::byte*>(inputs[1]->bytes()));
        if (has_bias) p.bias.set_data_handle(const_cast<std::byte*>(inputs[2]->bytes()));
        p.dst.set_data_handle(out.bytes());
        p.matmul.execute(stream, p.args);
        stream.wait();
      });
  if (kept.size() > kKeptPrimitives) kept.clear();
  return done;
}

}  // namespace tracecache::cpu
