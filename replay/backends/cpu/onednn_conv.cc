// oneDNN's convolution behind OneDnnConvs (onednn_conv.h).
#include "replay/backends/cpu/onednn_conv.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>

#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/backends/cpu/onednn_kept.h"
#include "replay/backends/cpu/vector_math.h"
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

// dst[0, len) = the conv2d's output elements [start, start + len) of row-major [n, c, hw] `src`,
// with nn::batch_norm_apply of channels `bn` when not null (the batch_norm kernel's own formula,
// so the bits are the unfused kernels'). src may be dst itself (in place).
void epilogue_head(const float* src, int64_t c, int64_t hw, const std::vector<nn::BatchNormChannel>* bn,
                   int64_t start, int64_t len, float* dst) {
  int64_t plane = start / hw, p = start % hw;
  for (int64_t done = 0; done < len; ++plane, p = 0) {
    const int64_t count = std::min(hw - p, len - done);
    const float* s = src + plane * hw + p;
    if (bn != nullptr) {
      batch_norm_f32(s, (*bn)[static_cast<size_t>(plane % c)], dst + done, count);
    } else if (s != dst + done) {
      std::memcpy(dst + done, s, static_cast<size_t>(count) * sizeof(float));
    }
    done += count;
  }
}

// True if an input of the kernel's batch_norm or chain that is not a member (a leaf) shares bytes
// with `out`.
bool chain_reads(const Graph& g, std::span<const NodeId> members,
                 const std::function<const HostBuffer*(NodeId)>& leaf_value, const HostBuffer& out) {
  const std::byte* begin = out.bytes();
  const std::byte* end = begin + out.nbytes();
  for (size_t i = 1; i < members.size(); ++i) {
    for (NodeId in : g.inputs(g.node(members[i]))) {
      if (std::find(members.begin(), members.end(), in) != members.end()) continue;
      const HostBuffer* b = leaf_value(in);
      if (b != nullptr && b->bytes() < end && begin < b->bytes() + b->nbytes()) return true;
    }
  }
  return false;
}

// A 1x1, ungrouped, unpadded convolution: at stride 1, one GEMM per image on NCHW data.
bool pointwise(const nn::ConvShape& s) {
  return s.kh == 1 && s.kw == 1 && s.groups == 1 && s.ph == 0 && s.pw == 0;
}

// Output planes of fewer pixels than this make a conv2d's per-image GEMM too narrow: measured
// on resnext50 at batch 8, oneDNN's GEMM ran a 7x7 plane's (N = 49) at about 245 GFLOP/s
// against 320-370 for 14x14 and larger, and its 1x1 kernel on its own layout, which takes the
// whole batch as the rows of one GEMM, took the 7x7 layers in less time, reorders included
// (13% less); at 14x14 it took 25% more.
constexpr int64_t kGemmMinPlane = 100;

// Whether a conv2d (forward) or a gradient of shape `s` runs as the NCHW GEMM per image: asked
// for NCHW, oneDNN runs a stride-1 pointwise convolution as that GEMM (x64:gemm:jit) with no
// reorder of the activations before and after, which costs less than its NHWC kernel plus the
// two reorders (bench/results/conv-epilogue-2026-11-23.md), except for a conv2d of a batch on
// small planes (kGemmMinPlane; at batch 1 the GEMM is as wide either way). The gradients keep
// it on every plane (not measured otherwise).
bool nchw_gemm(const nn::ConvShape& s, bool forward) {
  return pointwise(s) && (!forward || s.n == 1 || s.oh * s.ow >= kGemmMinPlane);
}

// The activations' layout the primitive is asked for: NCHW for a GEMM (nchw_gemm), else oneDNN's
// choice.
Tag activation_tag(const nn::ConvShape& s, bool forward) {
  return s.sh == 1 && s.sw == 1 && nchw_gemm(s, forward) ? Tag::nchw : Tag::any;
}

// The memory descriptors and geometry oneDNN takes for a convolution of shape `s`: the tensors
// as the graph holds them (row-major NCHW, OIHW or GOIHW) and as the primitive may take them.
struct ConvDescs {
  memory::desc user_src, user_weights, user_dst;  // the graph's layouts
  memory::desc src, weights, dst;                 // the primitive's choice (any) or NCHW
  memory::dims strides, dilates, pad_l, pad_r;

  // `forward`: for a conv2d, else for its gradients (activation_tag).
  ConvDescs(const nn::ConvShape& s, bool forward) {
    const memory::dims src_dims{s.n, s.c, s.h, s.w}, dst_dims{s.n, s.o, s.oh, s.ow};
    const bool grouped = s.groups > 1;
    const memory::dims w_dims = grouped ? memory::dims{s.groups, s.o / s.groups, s.cg, s.kh, s.kw}
                                        : memory::dims{s.o, s.cg, s.kh, s.kw};
    const auto f32 = memory::data_type::f32;
    user_src = memory::desc(src_dims, f32, Tag::nchw);
    user_dst = memory::desc(dst_dims, f32, Tag::nchw);
    user_weights = memory::desc(w_dims, f32, grouped ? Tag::goihw : Tag::oihw);
    const Tag act = activation_tag(s, forward);
    src = memory::desc(src_dims, f32, act);
    dst = memory::desc(dst_dims, f32, act);
    weights = memory::desc(w_dims, f32, Tag::any);
    // oneDNN counts dilation from 0 and wants the right/bottom padding that the output size
    // implies (the graph's padding is symmetric; the last window may stop short of it).
    strides = {s.sh, s.sw};
    dilates = {s.dh - 1, s.dw - 1};
    pad_l = {s.ph, s.pw};
    pad_r = {(s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1 - s.h - s.ph,
             (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1 - s.w - s.pw};
  }
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// A weight (OIHW or GOIHW, `user`) in a primitive's layout (`weights`: `user` itself when the
// layouts agree, else memory of its own). For a parameter weight the reordered copy is kept
// while it comes from the same buffer at the same written version (onednn_conv.h); its bytes
// are counted in *kept_bytes while kept.
struct KeptWeights {
  memory user, weights;
  bool reorder = false;
  dnnl::reorder weights_in;
  uint64_t* kept_bytes = nullptr;
  // The weight buffer the kept `weights` were reordered from, and its written version then.
  std::weak_ptr<const HostBuffer> owner;
  const HostBuffer* watched = nullptr;
  uint64_t version = 0;
  bool ready = false;

  KeptWeights() = default;
  KeptWeights(const KeptWeights&) = delete;
  KeptWeights& operator=(const KeptWeights&) = delete;
  ~KeptWeights() { forget(); }

  void init(const memory::desc& user_md, const memory::desc& md, const dnnl::engine& engine, uint64_t* counter) {
    kept_bytes = counter;
    user = memory(user_md, engine, DNNL_MEMORY_NONE);
    reorder = md != user_md;
    weights = reorder ? memory(md, engine) : user;
    if (reorder) weights_in = dnnl::reorder(user, weights);
  }
  void forget() {
    if (watched != nullptr) written_versions().unwatch(watched);
    if (ready) *kept_bytes -= weights.get_desc().get_size();
    watched = nullptr;
    ready = false;
  }
  // Makes `weights` hold `w` in the primitive's layout, reusing the kept copy when it was made
  // from this very buffer (`w_owner`, null for a value computed in the graph) at its current
  // version.
  void prepare(dnnl::stream& stream, const HostBuffer& w, const std::shared_ptr<const HostBuffer>* w_owner) {
    user.set_data_handle(const_cast<std::byte*>(w.bytes()));
    if (!reorder) return;
    if (w_owner != nullptr && ready) {
      const bool same_buffer = !owner.owner_before(*w_owner) && !w_owner->owner_before(owner) && !owner.expired();
      if (same_buffer && written_versions().version(watched) == version) return;
    }
    forget();
    weights_in.execute(stream, user, weights);
    if (w_owner == nullptr) return;  // computed in the graph: a new value every run
    owner = *w_owner;
    watched = w_owner->get();
    version = written_versions().watch(watched);
    ready = true;
    *kept_bytes += weights.get_desc().get_size();
  }
};

// A strided pointwise conv2d reads every sh-th row and sw-th column of its input: it is the
// same convolution at stride 1 of those pixels, gathered into NCHW memory of the output's plane
// size, which runs as the GEMM (nchw_gemm) with no reorder of the input or the output. oneDNN
// would run the strided one on its NHWC kernel with two reorders: at batch 8 the downsample
// layers of resnext50 on 28x28 and 14x14 planes took 6.2 and 5.8 ms gathered against 10.3 and
// 9.2 ms.
bool strided_pointwise(const nn::ConvShape& s) { return (s.sh > 1 || s.sw > 1) && nchw_gemm(s, true); }

// `s` with its input cut to the pixels the strided 1x1 convolution reads, at stride 1.
nn::ConvShape gathered(nn::ConvShape s) {
  s.h = s.oh;
  s.w = s.ow;
  s.sh = s.sw = 1;
  return s;
}

// One conv2d node's primitive, its memories and its weights.
struct Prepared {
  nn::ConvShape shape{};
  bool has_bias = false;
  int threads = 0;  // the OpenMP thread count it was made for (onednn_kept.h)
  dnnl::convolution_forward conv;
  // The activations as the graph holds them (row-major NCHW); data set per run.
  memory user_src, user_dst, bias;
  // In the primitive's layout; equal to the user memory (no reorder) when the layouts agree.
  memory src, dst;
  bool reorder_src = false, reorder_dst = false;
  dnnl::reorder src_in, dst_out;
  KeptWeights weights;
  memory scratchpad;
  std::unordered_map<int, memory> args;  // the primitive's arguments: handles to the above

  // A strided 1x1 convolution run on its gathered input (strided_pointwise): the gathered
  // pixels go to the front of the work buffer.
  bool gather = false;

  Prepared(const dnnl::engine& engine, const nn::ConvShape& shape_in, bool bias_term, uint64_t* kept_bytes)
      : shape(shape_in), has_bias(bias_term), gather(strided_pointwise(shape_in)) {
    const nn::ConvShape s = gather ? gathered(shape_in) : shape_in;
    const ConvDescs d(s, true);
    const auto f32 = memory::data_type::f32;
    const memory::desc bias_md = has_bias ? memory::desc({s.o}, f32, Tag::a) : memory::desc();
    const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::convolution_direct, d.src, d.weights, bias_md,
                                               d.dst, d.strides, d.dilates, d.pad_l, d.pad_r);
    const dnnl::convolution_forward::primitive_desc pd(desc, user_scratchpad(), engine);
    conv = dnnl::convolution_forward(pd);
    user_src = memory(d.user_src, engine, DNNL_MEMORY_NONE);
    user_dst = memory(d.user_dst, engine, DNNL_MEMORY_NONE);
    if (has_bias) bias = memory(bias_md, engine, DNNL_MEMORY_NONE);
    weights.init(d.user_weights, pd.weights_desc(), engine, kept_bytes);
    scratchpad = memory(pd.scratchpad_desc(), engine);
    reorder_src = pd.src_desc() != d.user_src;
    reorder_dst = pd.dst_desc() != d.user_dst;
    src = reorder_src ? memory(pd.src_desc(), engine) : user_src;
    dst = reorder_dst ? memory(pd.dst_desc(), engine) : user_dst;
    if (reorder_src) src_in = dnnl::reorder(user_src, src);
    if (reorder_dst) dst_out = dnnl::reorder(dst, user_dst);
    args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights.weights}, {DNNL_ARG_DST, dst},
            {DNNL_ARG_SCRATCHPAD, scratchpad}};
    if (has_bias) args.emplace(DNNL_ARG_BIAS, bias);
  }
};

// The work buffer of the gradient kernels (their reordered activations and scratchpads) and of
// the strided 1x1 convolutions (their gathered input), one kernel at a time. 64-byte aligned
// (oneDNN's kernels load whole cache lines).
class WorkBuffer {
 public:
  static constexpr std::align_val_t kAlign{64};
  WorkBuffer() = default;
  WorkBuffer(const WorkBuffer&) = delete;
  WorkBuffer& operator=(const WorkBuffer&) = delete;
  ~WorkBuffer() { release(); }
  // At least `bytes` bytes (contents unspecified). Throws std::bad_alloc.
  std::byte* at_least(size_t bytes) {
    if (bytes > size_) {
      release();
      data_ = static_cast<std::byte*>(::operator new(bytes, kAlign));
      size_ = bytes;
    }
    return data_;
  }

 private:
  void release() {
    if (data_ != nullptr) ::operator delete(data_, kAlign);
    data_ = nullptr;
    size_ = 0;
  }
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// One tensor of a gradient primitive: `user` as the graph holds it (row-major), `inner` in the
// primitive's layout: `user` itself, or a range of the work buffer at `offset`, reordered from
// (an operand) or to (the result) `user`.
struct Operand {
  memory user, inner;
  bool reorder = false;
  dnnl::reorder convert;
  size_t offset = 0;

  // *work_bytes grows by the range this operand needs in the work buffer.
  void init(const memory::desc& user_md, const memory::desc& md, const dnnl::engine& engine, bool result,
            size_t* work_bytes) {
    user = memory(user_md, engine, DNNL_MEMORY_NONE);
    reorder = md != user_md;
    if (!reorder) {
      inner = user;
      return;
    }
    inner = memory(md, engine, DNNL_MEMORY_NONE);
    convert = result ? dnnl::reorder(inner, user) : dnnl::reorder(user, inner);
    offset = *work_bytes;
    *work_bytes += round_up(md.get_size());
  }
  void bind(const void* data, std::byte* work) {
    user.set_data_handle(const_cast<void*>(data));
    if (reorder) inner.set_data_handle(work + offset);
  }
  static size_t round_up(size_t bytes) { return (bytes + 63) / 64 * 64; }
};

// One conv2d_input_grad (backward data: grad_out, weight -> dx) or conv2d_weight_grad
// (backward weights: grad_out, x -> dw) node's primitive and its memories.
struct GradPrepared {
  OpKind op;
  nn::ConvShape shape{};
  int threads = 0;  // the OpenMP thread count it was made for (onednn_kept.h)
  dnnl::primitive primitive;
  Operand grad_out, input, result;  // input: x of conv2d_weight_grad (unused by the other)
  KeptWeights weights;              // conv2d_input_grad's weight
  memory scratchpad;
  size_t scratchpad_offset = 0;  // in the work buffer, after the reordered operands
  size_t work_bytes = 0;
  std::unordered_map<int, memory> args;

  GradPrepared(const dnnl::engine& engine, OpKind kind, const nn::ConvShape& s, uint64_t* kept_bytes)
      : op(kind), shape(s) {
    const ConvDescs d(s, false);
    const auto direct = dnnl::algorithm::convolution_direct;
    // oneDNN's backward primitives take the forward one of the same shapes as a hint.
    const dnnl::convolution_forward::desc forward(dnnl::prop_kind::forward_training, direct, d.src, d.weights,
                                                  memory::desc(), d.dst, d.strides, d.dilates, d.pad_l, d.pad_r);
    const dnnl::convolution_forward::primitive_desc hint(forward, engine);
    memory::desc scratchpad_md;
    if (op == OpKind::kConv2dInputGrad) {
      const dnnl::convolution_backward_data::desc desc(direct, d.src, d.weights, d.dst, d.strides, d.dilates, d.pad_l,
                                                       d.pad_r);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad(), engine, hint);
      primitive = dnnl::convolution_backward_data(pd);
      grad_out.init(d.user_dst, pd.diff_dst_desc(), engine, false, &work_bytes);
      result.init(d.user_src, pd.diff_src_desc(), engine, true, &work_bytes);
      weights.init(d.user_weights, pd.weights_desc(), engine, kept_bytes);
      scratchpad_md = pd.scratchpad_desc();
      args = {{DNNL_ARG_DIFF_DST, grad_out.inner}, {DNNL_ARG_WEIGHTS, weights.weights},
              {DNNL_ARG_DIFF_SRC, result.inner}};
    } else {
      const dnnl::convolution_backward_weights::desc desc(direct, d.src, d.weights, d.dst, d.strides, d.dilates,
                                                          d.pad_l, d.pad_r);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad(), engine, hint);
      primitive = dnnl::convolution_backward_weights(pd);
      grad_out.init(d.user_dst, pd.diff_dst_desc(), engine, false, &work_bytes);
      input.init(d.user_src, pd.src_desc(), engine, false, &work_bytes);
      result.init(d.user_weights, pd.diff_weights_desc(), engine, true, &work_bytes);
      scratchpad_md = pd.scratchpad_desc();
      args = {{DNNL_ARG_DIFF_DST, grad_out.inner}, {DNNL_ARG_SRC, input.inner},
              {DNNL_ARG_DIFF_WEIGHTS, result.inner}};
    }
    scratchpad = memory(scratchpad_md, engine, DNNL_MEMORY_NONE);
    args.emplace(DNNL_ARG_SCRATCHPAD, scratchpad);
    scratchpad_offset = work_bytes;
    work_bytes += Operand::round_up(scratchpad_md.get_size());
  }
};

}  // namespace

struct OneDnnConvs::State {
  uint64_t kept_bytes = 0;  // of reordered weights kept by the Prepared and GradPrepared below
  KeptPrimitives<Prepared> convs;
  KeptPrimitives<GradPrepared> grads;
  WorkBuffer work;
};

OneDnnConvs::OneDnnConvs() = default;
OneDnnConvs::~OneDnnConvs() = default;

bool OneDnnConvs::run(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
                      const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out) {
  if (!state_) state_ = std::make_unique<State>();
  const bool done = g.node(node).op == OpKind::kConv2d ? conv2d_into(key, g, node, inputs, weight, out)
                                                       : gradient(key, g, node, inputs, weight, out);
  bound_kept();
  return done;
}

void OneDnnConvs::bound_kept() {
  if (state_->kept_bytes <= kKeptBytes) return;
  state_->convs.clear();
  state_->grads.clear();
}

bool OneDnnConvs::conv2d_into(const GraphKey& key, const Graph& g, NodeId node,
                              std::span<const HostBuffer* const> inputs,
                              const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out) {
  const Node& n = g.node(node);
  const nn::ConvShape s = nn::conv_shape(inputs[0]->shape(), inputs[1]->shape(), out.shape(), Conv2dAttrs(g.attrs(n)));
  if (out.numel() == 0 || s.cg == 0) return false;  // nothing to convolve: the builtin kernel's bias fill
  const bool has_bias = inputs.size() == 3;
  State& st = *state_;
  return st.convs.run(
      key, node, [&](const Prepared& p) { return same_shape(p.shape, s) && p.has_bias == has_bias; },
      [&](const dnnl::engine& engine) { return std::make_unique<Prepared>(engine, s, has_bias, &st.kept_bytes); },
      [&](Prepared& p, dnnl::stream& stream) {
        p.weights.prepare(stream, *inputs[1], weight);
        if (p.gather) {  // pixels[n, c, y, x] = x[n, c, y * sh, x * sw]: fewer than the input's
          const Shape plane{s.n, s.c, s.oh, s.ow};
          HostBuffer pixels = HostBuffer::view(DType::kF32, plane,
                                               st.work.at_least(static_cast<size_t>(plane.numel()) * sizeof(float)));
          strided_gather(*inputs[0], {s.c * s.h * s.w, s.h * s.w, s.sh * s.w, s.sw}, 0, pixels);
          p.user_src.set_data_handle(pixels.bytes());
        } else {
          p.user_src.set_data_handle(const_cast<std::byte*>(inputs[0]->bytes()));
        }
        p.user_dst.set_data_handle(out.bytes());
        if (has_bias) p.bias.set_data_handle(const_cast<std::byte*>(inputs[2]->bytes()));
        if (p.reorder_src) p.src_in.execute(stream, p.user_src, p.src);
        p.conv.execute(stream, p.args);
        if (p.reorder_dst) p.dst_out.execute(stream, p.dst, p.user_dst);
        stream.wait();
      });
}

bool OneDnnConvs::gradient(const GraphKey& key, const Graph& g, NodeId node, std::span<const HostBuffer* const> inputs,
                           const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out) {
  const Node& n = g.node(node);
  const OpKind op = n.op;
  const HostBuffer& grad_out = *inputs[0];
  const HostBuffer& other = *inputs[1];  // the weight (input grad) or the input x (weight grad)
  // Nothing to compute (an empty batch, plane or channel count): the builtin kernel's zeros.
  if (out.numel() == 0 || grad_out.numel() == 0 || other.numel() == 0) return false;
  const nn::ConvShape s =
      op == OpKind::kConv2dInputGrad
          ? nn::conv_shape(out.shape(), other.shape(), grad_out.shape(), Conv2dInputGradAttrs(g.attrs(n)))
          : nn::conv_shape(other.shape(), out.shape(), grad_out.shape(), Conv2dWeightGradAttrs(g.attrs(n)));
  State& st = *state_;
  return st.grads.run(
      key, node, [&](const GradPrepared& p) { return p.op == op && same_shape(p.shape, s); },
      [&](const dnnl::engine& engine) { return std::make_unique<GradPrepared>(engine, op, s, &st.kept_bytes); },
      [&](GradPrepared& p, dnnl::stream& stream) {
        std::byte* work = st.work.at_least(p.work_bytes);
        p.scratchpad.set_data_handle(work + p.scratchpad_offset);
        p.grad_out.bind(grad_out.bytes(), work);
        p.result.bind(out.bytes(), work);
        if (op == OpKind::kConv2dInputGrad) {
          p.weights.prepare(stream, other, weight);
        } else {
          p.input.bind(other.bytes(), work);
          if (p.input.reorder) p.input.convert.execute(stream, p.input.user, p.input.inner);
        }
        if (p.grad_out.reorder) p.grad_out.convert.execute(stream, p.grad_out.user, p.grad_out.inner);
        p.primitive.execute(stream, p.args);
        if (p.result.reorder) p.result.convert.execute(stream, p.result.inner, p.result.user);
        stream.wait();
      });
}

void OneDnnConvs::run_fused(const GraphKey& key, const Graph& g, std::span<const NodeId> members,
                            const std::function<const HostBuffer*(NodeId)>& leaf_value,
                            const std::shared_ptr<const HostBuffer>* weight, HostBuffer& out) {
  if (!state_) state_ = std::make_unique<State>();
  const NodeId conv = members[0];
  const bool has_bn = members.size() > 1 && g.node(members[1]).op == OpKind::kBatchNorm;
  const size_t heads = has_bn ? 2 : 1;
  const NodeId head = members[heads - 1];
  const std::span<const NodeId> chain = members.subspan(heads);
  const Shape& shape = g.node(head).shape;

  if (has_bn) {
    const Node& b = g.node(members[1]);
    const std::span<const NodeId> in = g.inputs(b);
    const double eps = BatchNormAttrs(g.attrs(b)).eps();
    const float *mean = leaf_value(in[1])->data<float>(), *var = leaf_value(in[2])->data<float>();
    const float *w = leaf_value(in[3])->data<float>(), *bias = leaf_value(in[4])->data<float>();
    bn_channels_.resize(static_cast<size_t>(shape[1]));
    for (size_t c = 0; c < bn_channels_.size(); ++c) {
      bn_channels_[c] = nn::batch_norm_channel(mean[c], var[c], w[c], bias[c], eps);
    }
  }
  const std::vector<nn::BatchNormChannel>* bn = has_bn ? &bn_channels_ : nullptr;
  if (out.numel() == 0) return;
  fused_inputs_.clear();
  for (NodeId in : g.inputs(g.node(conv))) fused_inputs_.push_back(leaf_value(in));
  // The conv2d's value, in row-major NCHW: in `out`, which the epilogue then rewrites in place,
  // or in scratch when the chain ends in another dtype or reads `out`'s own bytes (a donated
  // parameter updated by the chain, read elementwise: the conv2d must not overwrite it first).
  HostBuffer staged;
  HostBuffer* target = &out;
  if (out.dtype() != DType::kF32 || chain_reads(g, members, leaf_value, out)) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    staged = HostBuffer::view(DType::kF32, shape, scratch_.data());
    target = &staged;
  }
  if (!conv2d_into(key, g, conv, fused_inputs_, weight, *target)) run_op(g, conv, fused_inputs_, *target);
  bound_kept();
  const float* value = target->data<float>();
  const int64_t c = shape[1], hw = shape.numel() / (shape[0] * shape[1]);
  if (chain.empty()) {
    if (bn == nullptr) return;
    const int64_t planes = shape[0] * c;
    parallel_for(planes, shape.numel(), [&](int64_t first, int64_t last) {
      epilogue_head(value, c, hw, bn, first * hw, (last - first) * hw, target->data<float>() + first * hw);
    });
    return;
  }
  // One pass: each tile of the head (the batch_norm's value, or the conv2d's) is made from the
  // conv2d's and goes through the chain while in cache.
  const TileSource source{head, DType::kF32, [&](int64_t start, int64_t len, std::byte* dst) {
                            epilogue_head(value, c, hw, bn, start, len, reinterpret_cast<float*>(dst));
                          }};
  cpu::run_fused(g, chain, leaf_value, out, &source);
}

void note_written_in_place(const HostBuffer* storage) { written_versions().bump(storage); }

}  // namespace tracecache::cpu
