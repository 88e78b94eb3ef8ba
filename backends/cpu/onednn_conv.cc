// oneDNN's convolution behind OneDnnConvs (onednn_conv.h).
#include "backends/cpu/onednn_conv.h"

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_threads.h"
#include "capture/ops/attr_views.h"
#include "capture/ops/nn_numerics.h"
#include "capture/ops/nn_windows.h"

namespace tracecache::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// Versions of the weight buffers some OneDnnConvs keeps a reordered copy of: bumped by
// note_written_in_place, read when a kept copy is about to be used.
struct WrittenVersions {
  struct Watch {
    int holders = 0;
    uint64_t version = 0;
  };
  std::mutex mu;
  std::unordered_map<const HostBuffer*, Watch> watched;
  std::atomic<size_t> count{0};

  uint64_t watch(const HostBuffer* b) {
    std::lock_guard lock(mu);
    Watch& w = watched[b];
    ++w.holders;
    count.store(watched.size(), std::memory_order_relaxed);
    return w.version;
  }
  void unwatch(const HostBuffer* b) {
    std::lock_guard lock(mu);
    auto it = watched.find(b);
    if (it != watched.end() && --it->second.holders == 0) watched.erase(it);
    count.store(watched.size(), std::memory_order_relaxed);
  }
  uint64_t version(const HostBuffer* b) {
    std::lock_guard lock(mu);
    auto it = watched.find(b);
    return it == watched.end() ? 0 : it->second.version;
  }
  void bump(const HostBuffer* b) {
    if (count.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard lock(mu);
    auto it = watched.find(b);
    if (it != watched.end()) ++it->second.version;
  }
};

WrittenVersions& written_versions() {
  static WrittenVersions* v = new WrittenVersions();  // never destroyed: used by destructors at exit
  return *v;
}

bool same_shape(const nn::ConvShape& a, const nn::ConvShape& b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.o == b.o && a.cg == b.cg && a.kh == b.kh &&
         a.kw == b.kw && a.oh == b.oh && a.ow == b.ow && a.sh == b.sh && a.sw == b.sw && a.ph == b.ph &&
         a.pw == b.pw && a.dh == b.dh && a.dw == b.dw && a.groups == b.groups;
}

// y = batch_norm(x) over row-major [n, c, inner] data, one (image, channel) plane per item;
// x == y is allowed (each element is read before it is written, by the same thread).
void batch_norm_planes(const float* x, float* y, int64_t n, int64_t c, int64_t inner,
                       const std::vector<nn::BatchNormChannel>& ch) {
  parallel_for(n * c, n * c * inner, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const nn::BatchNormChannel k = ch[static_cast<size_t>(plane % c)];
      const float* px = x + plane * inner;
      float* py = y + plane * inner;
      for (int64_t i = 0; i < inner; ++i) py[i] = nn::batch_norm_apply(px[i], k);
    }
  });
}

// dst (row-major [n, c, hw]) = batch_norm(src (row-major [n, hw, c])): the transpose from the
// primitive's NHWC output, with the batch_norm applied on the way, in tiles of hw positions.
void nhwc_to_nchw_batch_norm(const float* src, float* dst, int64_t n, int64_t c, int64_t hw,
                             const std::vector<nn::BatchNormChannel>& ch) {
  constexpr int64_t kTile = 32;
  const int64_t tiles = (hw + kTile - 1) / kTile;
  parallel_for(n * tiles, n * c * hw, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t image = item / tiles, t0 = item % tiles * kTile, t1 = std::min(t0 + kTile, hw);
      const float* s = src + image * hw * c;
      float* d = dst + image * c * hw;
      for (int64_t k = 0; k < c; ++k) {
        const nn::BatchNormChannel chan = ch[static_cast<size_t>(k)];
        for (int64_t i = t0; i < t1; ++i) d[k * hw + i] = nn::batch_norm_apply(s[i * c + k], chan);
      }
    }
  });
}

}  // namespace

// A fused kernel's batch_norm: its per-channel constants, as the builtin kernel computes them.
struct OneDnnConvs::BatchNorm {
  std::vector<nn::BatchNormChannel> channels;
};

// One conv2d node's primitive, its memories and (for a parameter weight) the kept weights.
struct Prepared {
  nn::ConvShape shape{};
  bool has_bias = false;
  int threads = 0;  // the OpenMP thread count it was made for
  dnnl::convolution_forward conv;
  // The tensors as the graph holds them (row-major NCHW, OIHW or GOIHW); data set per run.
  memory user_src, user_weights, user_dst, bias;
  // In the primitive's layout; equal to the user memory (no reorder) when the layouts agree.
  memory src, weights, dst;
  bool reorder_src = false, reorder_weights = false, reorder_dst = false;
  bool dst_nhwc = false;  // the primitive writes NHWC (a fused batch_norm transposes it itself)
  dnnl::reorder src_in, weights_in, dst_out;
  memory scratchpad;
  std::unordered_map<int, memory> args;  // the primitive's arguments: handles to the above
  // The weight buffer the kept `weights` were reordered from, and its written version then.
  std::weak_ptr<const HostBuffer> weight_owner;
  const HostBuffer* watched = nullptr;
  uint64_t weight_version = 0;
  bool weights_ready = false;

  ~Prepared() { unwatch(); }
  void unwatch() {
    if (watched != nullptr) written_versions().unwatch(watched);
    watched = nullptr;
    weights_ready = false;
  }
};

struct OneDnnConvs::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::pair<GraphKey, NodeId>, std::unique_ptr<Prepared>> prepared;
  uint64_t kept_bytes = 0;

  std::unique_ptr<Prepared> prepare(const nn::ConvShape& s, bool has_bias) {
    auto p = std::make_unique<Prepared>();
    p->shape = s;
    p->has_bias = has_bias;
    const memory::dims src_dims{s.n, s.c, s.h, s.w}, dst_dims{s.n, s.o, s.oh, s.ow};
    const bool grouped = s.groups > 1;
    const memory::dims w_dims = grouped ? memory::dims{s.groups, s.o / s.groups, s.cg, s.kh, s.kw}
                                        : memory::dims{s.o, s.cg, s.kh, s.kw};
    const auto f32 = memory::data_type::f32;
    const memory::desc user_src_md(src_dims, f32, Tag::nchw), user_dst_md(dst_dims, f32, Tag::nchw);
    const memory::desc user_w_md(w_dims, f32, grouped ? Tag::goihw : Tag::oihw);
    const memory::desc bias_md = has_bias ? memory::desc({s.o}, f32, Tag::a) : memory::desc();
    // oneDNN counts dilation from 0 and wants the right/bottom padding that the output size
    // implies (the graph's padding is symmetric; the last window may stop short of it).
    const memory::dims strides{s.sh, s.sw}, dilates{s.dh - 1, s.dw - 1}, pad_l{s.ph, s.pw};
    const memory::dims pad_r{(s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1 - s.h - s.ph,
                             (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1 - s.w - s.pw};
    // A 1x1, stride-1, ungrouped, unpadded convolution is one GEMM per image on NCHW data:
    // asked for NCHW, oneDNN runs it as that GEMM (x64:gemm:jit) with no reorder of the
    // activations before and after, which costs less than its NHWC kernel plus the two reorders
    // (bench/results/conv-epilogue-2026-11-23.md). Other shapes take oneDNN's layout.
    const bool pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.groups == 1 && s.ph == 0 && s.pw == 0;
    const Tag act = pointwise ? Tag::nchw : Tag::any;
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                         memory::desc(src_dims, f32, act), memory::desc(w_dims, f32, Tag::any),
                                         bias_md, memory::desc(dst_dims, f32, act), strides, dilates, pad_l,
                                         pad_r);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, engine);
    p->conv = dnnl::convolution_forward(pd);
    p->user_src = memory(user_src_md, engine, DNNL_MEMORY_NONE);
    p->user_weights = memory(user_w_md, engine, DNNL_MEMORY_NONE);
    p->user_dst = memory(user_dst_md, engine, DNNL_MEMORY_NONE);
    if (has_bias) p->bias = memory(bias_md, engine, DNNL_MEMORY_NONE);
    p->scratchpad = memory(pd.scratchpad_desc(), engine);
    p->reorder_src = pd.src_desc() != user_src_md;
    p->reorder_weights = pd.weights_desc() != user_w_md;
    p->reorder_dst = pd.dst_desc() != user_dst_md;
    p->dst_nhwc = pd.dst_desc() == memory::desc(dst_dims, f32, Tag::nhwc);
    p->src = p->reorder_src ? memory(pd.src_desc(), engine) : p->user_src;
    p->weights = p->reorder_weights ? memory(pd.weights_desc(), engine) : p->user_weights;
    p->dst = p->reorder_dst ? memory(pd.dst_desc(), engine) : p->user_dst;
    if (p->reorder_src) p->src_in = dnnl::reorder(p->user_src, p->src);
    if (p->reorder_weights) p->weights_in = dnnl::reorder(p->user_weights, p->weights);
    if (p->reorder_dst) p->dst_out = dnnl::reorder(p->dst, p->user_dst);
    p->args = {{DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->weights}, {DNNL_ARG_DST, p->dst},
               {DNNL_ARG_SCRATCHPAD, p->scratchpad}};
    if (has_bias) p->args.emplace(DNNL_ARG_BIAS, p->bias);
    return p;
  }

  // Makes p->weights hold `w` in the primitive's layout, reusing the kept copy when it was made
  // from this very buffer at its current version.
  void ready_weights(Prepared& p, const HostBuffer& w, const std::shared_ptr<const HostBuffer>* owner) {
    p.user_weights.set_data_handle(const_cast<std::byte*>(w.bytes()));
    if (!p.reorder_weights) return;
    if (owner != nullptr && p.weights_ready) {
      const bool same_buffer = !p.weight_owner.owner_before(*owner) && !owner->owner_before(p.weight_owner) &&
                               !p.weight_owner.expired();
      if (same_buffer && written_versions().version(p.watched) == p.weight_version) return;
    }
    p.unwatch();
    p.weights_in.execute(stream, p.user_weights, p.weights);
    if (owner == nullptr) return;  // computed in the graph: a new value every run
    p.weight_owner = *owner;
    p.watched = owner->get();
    p.weight_version = written_versions().watch(p.watched);
    p.weights_ready = true;
  }
};

OneDnnConvs::OneDnnConvs() = default;
OneDnnConvs::~OneDnnConvs() = default;

bool OneDnnConvs::conv2d(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
                         const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out) {
  return conv2d_into(key, g, node, inputs, weight, nullptr, out);
}

bool OneDnnConvs::conv2d_into(const GraphKey& key, const Graph& g, NodeId node,
                              std::span<const HostBuffer* const> inputs,
                              const std::shared_ptr<const HostBuffer>* weight, const BatchNorm* bn,
                              HostBuffer& out) {
  const Node& n = g.node(node);
  const nn::ConvShape s = nn::conv_shape(inputs[0]->shape(), inputs[1]->shape(), out.shape(), Conv2dAttrs(g.attrs(n)));
  if (out.numel() == 0 || s.cg == 0) return false;  // nothing to convolve: the builtin kernel's bias fill
  const bool has_bias = inputs.size() == 3;
  try {
    if (!state_) state_ = std::make_unique<State>();
    State& st = *state_;
    // A primitive sizes its scratchpad and splits its work for the thread count it was made
    // with, so it is made again when the count changes.
    const int threads = cpu::threads();
    bind_threads();
    std::unique_ptr<Prepared>& slot = st.prepared[{key, node}];
    if (!slot || !same_shape(slot->shape, s) || slot->has_bias != has_bias || slot->threads != threads) {
      if (slot && slot->weights_ready) st.kept_bytes -= slot->weights.get_desc().get_size();
      slot = st.prepare(s, has_bias);
      slot->threads = threads;
    }
    Prepared& p = *slot;

    const bool was_kept = p.weights_ready;
    st.ready_weights(p, *inputs[1], weight);
    if (p.weights_ready && !was_kept) st.kept_bytes += p.weights.get_desc().get_size();
    p.user_src.set_data_handle(const_cast<std::byte*>(inputs[0]->bytes()));
    p.user_dst.set_data_handle(out.bytes());
    if (has_bias) p.bias.set_data_handle(const_cast<std::byte*>(inputs[2]->bytes()));
    if (p.reorder_src) p.src_in.execute(st.stream, p.user_src, p.src);
    p.conv.execute(st.stream, p.args);
    const int64_t inner = s.oh * s.ow;
    if (bn != nullptr && p.dst_nhwc) {
      st.stream.wait();
      nhwc_to_nchw_batch_norm(static_cast<const float*>(p.dst.get_data_handle()), out.data<float>(), s.n, s.o,
                              inner, bn->channels);
    } else {
      if (p.reorder_dst) p.dst_out.execute(st.stream, p.dst, p.user_dst);
      st.stream.wait();
      if (bn != nullptr) batch_norm_planes(out.data<float>(), out.data<float>(), s.n, s.o, inner, bn->channels);
    }
    if (st.kept_bytes > kKeptBytes) {
      st.prepared.clear();
      st.kept_bytes = 0;
    }
    return true;
  } catch (const dnnl::error&) {
    if (state_) state_->prepared.erase({key, node});
    return false;
  } catch (const std::bad_alloc&) {
    if (state_) state_->prepared.erase({key, node});
    return false;
  }
}

void OneDnnConvs::run_fused(const GraphKey& key, const Graph& g, std::span<const NodeId> members,
                            const std::function<const HostBuffer*(NodeId)>& leaf_value,
                            const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out) {
  const NodeId conv = members[0];
  const bool has_bn = members.size() > 1 && g.node(members[1]).op == OpKind::kBatchNorm;
  const size_t heads = has_bn ? 2 : 1;
  const NodeId head = members[heads - 1];
  const std::span<const NodeId> chain = members.subspan(heads);
  const Shape& shape = g.node(head).shape;

  std::optional<BatchNorm> bn;
  if (has_bn) {
    const Node& b = g.node(members[1]);
    const std::span<const NodeId> in = g.inputs(b);
    const double eps = BatchNormAttrs(g.attrs(b)).eps();
    const float *mean = leaf_value(in[1])->data<float>(), *var = leaf_value(in[2])->data<float>();
    const float *w = leaf_value(in[3])->data<float>(), *bias = leaf_value(in[4])->data<float>();
    bn.emplace();
    bn->channels.resize(static_cast<size_t>(shape[1]));
    for (size_t c = 0; c < bn->channels.size(); ++c) {
      bn->channels[c] = nn::batch_norm_channel(mean[c], var[c], w[c], bias[c], eps);
    }
  }
  // The conv2d's (or batch_norm's) value: the root's buffer when it is the root, else scratch.
  HostBuffer staged;
  HostBuffer* target = &out;
  if (!chain.empty()) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    staged = HostBuffer::view(DType::kF32, shape, scratch_.data());
    target = &staged;
  }
  std::vector<const HostBuffer*> ins;
  for (NodeId in : g.inputs(g.node(conv))) ins.push_back(leaf_value(in));
  if (!conv2d_into(key, g, conv, ins, weight, bn ? &*bn : nullptr, *target)) {
    run_op(g, conv, ins, *target);
    if (bn) {
      batch_norm_planes(target->data<float>(), target->data<float>(), shape[0], shape[1],
                        shape.numel() / std::max<int64_t>(shape[0] * shape[1], 1), bn->channels);
    }
  }
  if (chain.empty()) return;
  cpu::run_fused(g, chain, [&](NodeId id) { return id == head ? static_cast<const HostBuffer*>(&staged) : leaf_value(id); },
                 out);
}

void note_written_in_place(const HostBuffer* storage) { written_versions().bump(storage); }

}  // namespace tracecache::cpu
