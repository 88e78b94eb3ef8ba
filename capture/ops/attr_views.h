// Typed views of an op's attributes: named accessors over the positional AttrValues a node
// stores (attrs.h), so that no code outside this header indexes attributes by position.
//
//   const Conv2dAttrs a(attrs);            // attrs: std::span<const AttrValue>
//   a.stride()[0], a.groups()
//
// A view is a span and nothing else: building one decodes nothing and allocates nothing, and
// each accessor is one indexed load, so kernels build one per call. Over a
// std::span<const AttrValue> (the deduced default) accessors return const references; over a
// std::span<AttrValue> (the inference rules in ops.cc, which normalize in place) they return
// mutable ones. Bool attributes are read-only (no rule rewrites one).
//
// Each view names its attributes in declaration order (`kNames`); an accessor finds its slot by
// name at compile time (a misspelt name does not compile), and tests/capture/op_registry_test.cc checks
// every view's kNames against the AttrSpecs of every op it serves, so a view cannot drift from
// its registry row. A new op with attributes gets a view here.
//
// REQUIRES: the span holds the op's declared attributes (op_info(op).attrs.size() values, as
// Graph::attrs and the inference rules give them).
// Thread-safety: as the span viewed.
#pragma once

#include <array>
#include <cassert>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>

#include "capture/ops/attrs.h"

namespace tracecache {

template <size_t N>
using AttrNames = std::array<std::string_view, N>;

// Slot of `name` in `names`; not a constant expression (so a compile error in a consteval
// context) when absent.
template <size_t N>
consteval size_t attr_slot(const AttrNames<N>& names, std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return i;
  }
  throw "no attribute of this name in the view";
}

// The shared part of every view. `A` is AttrValue or const AttrValue.
template <typename A>
class AttrView {
 public:
  static_assert(std::is_same_v<std::remove_const_t<A>, AttrValue>);
  explicit AttrView(std::span<A> attrs) : attrs_(attrs) {}

 protected:
  A& at(size_t slot) const {
    assert(slot < attrs_.size());
    return attrs_[slot];
  }

 private:
  std::span<A> attrs_;
};

// Accessor bodies: the slot of `name` in the view's kNames, then the AttrValue member.
#define TRACECACHE_ATTR(name, member) \
  (this->at(attr_slot(kNames, name)).member)

// parameter
template <typename A>
struct ParameterAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"index"};
  using AttrView<A>::AttrView;
  decltype(auto) index() const { return TRACECACHE_ATTR("index", i); }
};

// cast
template <typename A>
struct CastAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"dtype"};
  using AttrView<A>::AttrView;
  decltype(auto) dtype() const { return TRACECACHE_ATTR("dtype", dtype); }
};

// sum, mean, max, min
template <typename A>
struct ReduceAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"axes", "keepdim"};
  using AttrView<A>::AttrView;
  decltype(auto) axes() const { return TRACECACHE_ATTR("axes", ints); }
  bool keepdim() const { return TRACECACHE_ATTR("keepdim", as_bool()); }
};

// argmax
template <typename A>
struct ArgmaxAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"axis", "keepdim"};
  using AttrView<A>::AttrView;
  decltype(auto) axis() const { return TRACECACHE_ATTR("axis", i); }
  bool keepdim() const { return TRACECACHE_ATTR("keepdim", as_bool()); }
};

// argmin
template <typename A>
struct ArgminAttrs : AttrView<A> {
  static constexpr AttrNames<3> kNames{"axis", "keepdim", "select_last_index"};
  using AttrView<A>::AttrView;
  decltype(auto) axis() const { return TRACECACHE_ATTR("axis", i); }
  bool keepdim() const { return TRACECACHE_ATTR("keepdim", as_bool()); }
  bool select_last_index() const { return TRACECACHE_ATTR("select_last_index", as_bool()); }
};

// reshape, broadcast_to
template <typename A>
struct ShapeAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"shape"};
  using AttrView<A>::AttrView;
  decltype(auto) shape() const { return TRACECACHE_ATTR("shape", ints); }
};

// permute
template <typename A>
struct PermuteAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"perm"};
  using AttrView<A>::AttrView;
  decltype(auto) perm() const { return TRACECACHE_ATTR("perm", ints); }
};

// transpose
template <typename A>
struct TransposeAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"dim0", "dim1"};
  using AttrView<A>::AttrView;
  decltype(auto) dim0() const { return TRACECACHE_ATTR("dim0", i); }
  decltype(auto) dim1() const { return TRACECACHE_ATTR("dim1", i); }
};

// concat, gather, index_select, softmax, log_softmax
template <typename A>
struct AxisAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"axis"};
  using AttrView<A>::AttrView;
  decltype(auto) axis() const { return TRACECACHE_ATTR("axis", i); }
};

// slice
template <typename A>
struct SliceAttrs : AttrView<A> {
  static constexpr AttrNames<4> kNames{"axis", "start", "end", "step"};
  using AttrView<A>::AttrView;
  decltype(auto) axis() const { return TRACECACHE_ATTR("axis", i); }
  decltype(auto) start() const { return TRACECACHE_ATTR("start", i); }
  decltype(auto) end() const { return TRACECACHE_ATTR("end", i); }
  decltype(auto) step() const { return TRACECACHE_ATTR("step", i); }
};

// full
template <typename A>
struct FullAttrs : AttrView<A> {
  static constexpr AttrNames<3> kNames{"shape", "value", "dtype"};
  using AttrView<A>::AttrView;
  decltype(auto) shape() const { return TRACECACHE_ATTR("shape", ints); }
  decltype(auto) value() const { return TRACECACHE_ATTR("value", f); }
  decltype(auto) dtype() const { return TRACECACHE_ATTR("dtype", dtype); }
};

// arange
template <typename A>
struct ArangeAttrs : AttrView<A> {
  static constexpr AttrNames<4> kNames{"start", "end", "step", "dtype"};
  using AttrView<A>::AttrView;
  decltype(auto) start() const { return TRACECACHE_ATTR("start", f); }
  decltype(auto) end() const { return TRACECACHE_ATTR("end", f); }
  decltype(auto) step() const { return TRACECACHE_ATTR("step", f); }
  decltype(auto) dtype() const { return TRACECACHE_ATTR("dtype", dtype); }
};

// uniform
template <typename A>
struct UniformAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"shape", "low", "high", "seed", "dtype"};
  using AttrView<A>::AttrView;
  decltype(auto) shape() const { return TRACECACHE_ATTR("shape", ints); }
  decltype(auto) low() const { return TRACECACHE_ATTR("low", f); }
  decltype(auto) high() const { return TRACECACHE_ATTR("high", f); }
  decltype(auto) seed() const { return TRACECACHE_ATTR("seed", i); }
  decltype(auto) dtype() const { return TRACECACHE_ATTR("dtype", dtype); }
};

// normal
template <typename A>
struct NormalAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"shape", "mean", "std", "seed", "dtype"};
  using AttrView<A>::AttrView;
  decltype(auto) shape() const { return TRACECACHE_ATTR("shape", ints); }
  decltype(auto) mean() const { return TRACECACHE_ATTR("mean", f); }
  decltype(auto) stddev() const { return TRACECACHE_ATTR("std", f); }
  decltype(auto) seed() const { return TRACECACHE_ATTR("seed", i); }
  decltype(auto) dtype() const { return TRACECACHE_ATTR("dtype", dtype); }
};

// gelu
template <typename A>
struct GeluAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"tanh"};
  using AttrView<A>::AttrView;
  bool tanh() const { return TRACECACHE_ATTR("tanh", as_bool()); }
};

// clamp
template <typename A>
struct ClampAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"min", "max"};
  using AttrView<A>::AttrView;
  decltype(auto) min() const { return TRACECACHE_ATTR("min", f); }
  decltype(auto) max() const { return TRACECACHE_ATTR("max", f); }
};

// batch_norm
template <typename A>
struct BatchNormAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"eps"};
  using AttrView<A>::AttrView;
  decltype(auto) eps() const { return TRACECACHE_ATTR("eps", f); }
};

// layer_norm
template <typename A>
struct LayerNormAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"normalized_dims", "eps"};
  using AttrView<A>::AttrView;
  decltype(auto) normalized_dims() const { return TRACECACHE_ATTR("normalized_dims", i); }
  decltype(auto) eps() const { return TRACECACHE_ATTR("eps", f); }
};

// scaled_dot_product_attention
template <typename A>
struct AttentionAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"causal", "scale"};
  using AttrView<A>::AttrView;
  bool causal() const { return TRACECACHE_ATTR("causal", as_bool()); }
  decltype(auto) scale() const { return TRACECACHE_ATTR("scale", f); }
};

// conv2d. Pairs are {height, width} once normalized.
template <typename A>
struct Conv2dAttrs : AttrView<A> {
  static constexpr AttrNames<4> kNames{"stride", "padding", "dilation", "groups"};
  using AttrView<A>::AttrView;
  decltype(auto) stride() const { return TRACECACHE_ATTR("stride", ints); }
  decltype(auto) padding() const { return TRACECACHE_ATTR("padding", ints); }
  decltype(auto) dilation() const { return TRACECACHE_ATTR("dilation", ints); }
  decltype(auto) groups() const { return TRACECACHE_ATTR("groups", i); }
};

// max_pool2d
template <typename A>
struct MaxPool2dAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"kernel", "stride", "padding", "dilation", "ceil_mode"};
  using AttrView<A>::AttrView;
  decltype(auto) kernel() const { return TRACECACHE_ATTR("kernel", ints); }
  decltype(auto) stride() const { return TRACECACHE_ATTR("stride", ints); }
  decltype(auto) padding() const { return TRACECACHE_ATTR("padding", ints); }
  decltype(auto) dilation() const { return TRACECACHE_ATTR("dilation", ints); }
  bool ceil_mode() const { return TRACECACHE_ATTR("ceil_mode", as_bool()); }
};

// avg_pool2d
template <typename A>
struct AvgPool2dAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"kernel", "stride", "padding", "ceil_mode",
                                       "count_include_pad"};
  using AttrView<A>::AttrView;
  decltype(auto) kernel() const { return TRACECACHE_ATTR("kernel", ints); }
  decltype(auto) stride() const { return TRACECACHE_ATTR("stride", ints); }
  decltype(auto) padding() const { return TRACECACHE_ATTR("padding", ints); }
  bool ceil_mode() const { return TRACECACHE_ATTR("ceil_mode", as_bool()); }
  bool count_include_pad() const { return TRACECACHE_ATTR("count_include_pad", as_bool()); }
};

// adaptive_avg_pool2d
template <typename A>
struct AdaptiveAvgPool2dAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"output_size"};
  using AttrView<A>::AttrView;
  decltype(auto) output_size() const { return TRACECACHE_ATTR("output_size", ints); }
};

// flatten
template <typename A>
struct FlattenAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"start_dim", "end_dim"};
  using AttrView<A>::AttrView;
  decltype(auto) start_dim() const { return TRACECACHE_ATTR("start_dim", i); }
  decltype(auto) end_dim() const { return TRACECACHE_ATTR("end_dim", i); }
};

// pad
template <typename A>
struct PadAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"pads", "value"};
  using AttrView<A>::AttrView;
  decltype(auto) pads() const { return TRACECACHE_ATTR("pads", ints); }
  decltype(auto) value() const { return TRACECACHE_ATTR("value", f); }
};

// dropout
template <typename A>
struct DropoutAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"p"};
  using AttrView<A>::AttrView;
  decltype(auto) p() const { return TRACECACHE_ATTR("p", f); }
};

// dropout_mask
template <typename A>
struct DropoutMaskAttrs : AttrView<A> {
  static constexpr AttrNames<3> kNames{"shape", "p", "salt"};
  using AttrView<A>::AttrView;
  decltype(auto) shape() const { return TRACECACHE_ATTR("shape", ints); }
  decltype(auto) p() const { return TRACECACHE_ATTR("p", f); }
  decltype(auto) salt() const { return TRACECACHE_ATTR("salt", i); }
};

// gradients of the nn layers (capture/ops/grad_nn_layers.h). max_pool2d_grad uses
// MaxPool2dAttrs. `input_size` is the forward input's {height, width}; `kernel` the weight's.
template <typename A>
struct Conv2dInputGradAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"stride", "padding", "dilation", "groups", "input_size"};
  using AttrView<A>::AttrView;
  decltype(auto) stride() const { return TRACECACHE_ATTR("stride", ints); }
  decltype(auto) padding() const { return TRACECACHE_ATTR("padding", ints); }
  decltype(auto) dilation() const { return TRACECACHE_ATTR("dilation", ints); }
  decltype(auto) groups() const { return TRACECACHE_ATTR("groups", i); }
  decltype(auto) input_size() const { return TRACECACHE_ATTR("input_size", ints); }
};

template <typename A>
struct Conv2dWeightGradAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"stride", "padding", "dilation", "groups", "kernel"};
  using AttrView<A>::AttrView;
  decltype(auto) stride() const { return TRACECACHE_ATTR("stride", ints); }
  decltype(auto) padding() const { return TRACECACHE_ATTR("padding", ints); }
  decltype(auto) dilation() const { return TRACECACHE_ATTR("dilation", ints); }
  decltype(auto) groups() const { return TRACECACHE_ATTR("groups", i); }
  decltype(auto) kernel() const { return TRACECACHE_ATTR("kernel", ints); }
};

template <typename A>
struct AvgPool2dGradAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"kernel", "stride", "padding", "count_include_pad",
                                       "input_size"};
  using AttrView<A>::AttrView;
  decltype(auto) kernel() const { return TRACECACHE_ATTR("kernel", ints); }
  decltype(auto) stride() const { return TRACECACHE_ATTR("stride", ints); }
  decltype(auto) padding() const { return TRACECACHE_ATTR("padding", ints); }
  bool count_include_pad() const { return TRACECACHE_ATTR("count_include_pad", as_bool()); }
  decltype(auto) input_size() const { return TRACECACHE_ATTR("input_size", ints); }
};

template <typename A>
struct AdaptiveAvgPool2dGradAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"input_size"};
  using AttrView<A>::AttrView;
  decltype(auto) input_size() const { return TRACECACHE_ATTR("input_size", ints); }
};

// conv_transpose2d
template <typename A>
struct ConvTranspose2dAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"stride", "padding", "output_padding", "dilation", "groups"};
  using AttrView<A>::AttrView;
  decltype(auto) stride() const { return TRACECACHE_ATTR("stride", ints); }
  decltype(auto) padding() const { return TRACECACHE_ATTR("padding", ints); }
  decltype(auto) output_padding() const { return TRACECACHE_ATTR("output_padding", ints); }
  decltype(auto) dilation() const { return TRACECACHE_ATTR("dilation", ints); }
  decltype(auto) groups() const { return TRACECACHE_ATTR("groups", i); }
};

// resize_nearest2d; resize_linear2d has the first four (ResizeLinear2dAttrs)
template <typename A>
struct ResizeNearest2dAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"size", "scale_h", "scale_w", "coordinate_transformation_mode",
                                       "nearest_mode"};
  using AttrView<A>::AttrView;
  decltype(auto) size() const { return TRACECACHE_ATTR("size", ints); }
  decltype(auto) scale_h() const { return TRACECACHE_ATTR("scale_h", f); }
  decltype(auto) scale_w() const { return TRACECACHE_ATTR("scale_w", f); }
  decltype(auto) coordinate_transformation_mode() const { return TRACECACHE_ATTR("coordinate_transformation_mode", i); }
  decltype(auto) nearest_mode() const { return TRACECACHE_ATTR("nearest_mode", i); }
};

template <typename A>
struct ResizeLinear2dAttrs : AttrView<A> {
  static constexpr AttrNames<4> kNames{"size", "scale_h", "scale_w", "coordinate_transformation_mode"};
  using AttrView<A>::AttrView;
  decltype(auto) size() const { return TRACECACHE_ATTR("size", ints); }
  decltype(auto) scale_h() const { return TRACECACHE_ATTR("scale_h", f); }
  decltype(auto) scale_w() const { return TRACECACHE_ATTR("scale_w", f); }
  decltype(auto) coordinate_transformation_mode() const { return TRACECACHE_ATTR("coordinate_transformation_mode", i); }
};

// topk, topk_indices
template <typename A>
struct TopkAttrs : AttrView<A> {
  static constexpr AttrNames<3> kNames{"k", "axis", "largest"};
  using AttrView<A>::AttrView;
  decltype(auto) k() const { return TRACECACHE_ATTR("k", i); }
  decltype(auto) axis() const { return TRACECACHE_ATTR("axis", i); }
  bool largest() const { return TRACECACHE_ATTR("largest", as_bool()); }
};

// scatter_elements
template <typename A>
struct ScatterElementsAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"axis", "reduction"};
  using AttrView<A>::AttrView;
  decltype(auto) axis() const { return TRACECACHE_ATTR("axis", i); }
  decltype(auto) reduction() const { return TRACECACHE_ATTR("reduction", i); }
};

// gather_nd
template <typename A>
struct GatherNdAttrs : AttrView<A> {
  static constexpr AttrNames<1> kNames{"batch_dims"};
  using AttrView<A>::AttrView;
  decltype(auto) batch_dims() const { return TRACECACHE_ATTR("batch_dims", i); }
};

// resize_nearest2d_grad; resize_linear2d_grad has the first four (ResizeLinear2dGradAttrs)
template <typename A>
struct ResizeNearest2dGradAttrs : AttrView<A> {
  static constexpr AttrNames<5> kNames{"input_size", "scale_h", "scale_w", "coordinate_transformation_mode",
                                       "nearest_mode"};
  using AttrView<A>::AttrView;
  decltype(auto) input_size() const { return TRACECACHE_ATTR("input_size", ints); }
  decltype(auto) scale_h() const { return TRACECACHE_ATTR("scale_h", f); }
  decltype(auto) scale_w() const { return TRACECACHE_ATTR("scale_w", f); }
  decltype(auto) coordinate_transformation_mode() const { return TRACECACHE_ATTR("coordinate_transformation_mode", i); }
  decltype(auto) nearest_mode() const { return TRACECACHE_ATTR("nearest_mode", i); }
};

template <typename A>
struct ResizeLinear2dGradAttrs : AttrView<A> {
  static constexpr AttrNames<4> kNames{"input_size", "scale_h", "scale_w", "coordinate_transformation_mode"};
  using AttrView<A>::AttrView;
  decltype(auto) input_size() const { return TRACECACHE_ATTR("input_size", ints); }
  decltype(auto) scale_h() const { return TRACECACHE_ATTR("scale_h", f); }
  decltype(auto) scale_w() const { return TRACECACHE_ATTR("scale_w", f); }
  decltype(auto) coordinate_transformation_mode() const { return TRACECACHE_ATTR("coordinate_transformation_mode", i); }
};

// rand_uniform, rand_normal
template <typename A>
struct RandAttrs : AttrView<A> {
  static constexpr AttrNames<2> kNames{"shape", "stream"};
  using AttrView<A>::AttrView;
  decltype(auto) shape() const { return TRACECACHE_ATTR("shape", ints); }
  decltype(auto) stream() const { return TRACECACHE_ATTR("stream", i); }
};

#undef TRACECACHE_ATTR

// Deduction: a view over std::span<A> is a view of A (const AttrValue reads, AttrValue writes).
#define TRACECACHE_ATTR_VIEW_GUIDE(View) \
  template <typename A>                  \
  View(std::span<A>) -> View<A>;
TRACECACHE_ATTR_VIEW_GUIDE(ParameterAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(CastAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ReduceAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ArgmaxAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ArgminAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ShapeAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(PermuteAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(TransposeAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(AxisAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(SliceAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(FullAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ArangeAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(UniformAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(NormalAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(GeluAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ClampAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(BatchNormAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(LayerNormAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(AttentionAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(Conv2dAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(MaxPool2dAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(AvgPool2dAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(AdaptiveAvgPool2dAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(FlattenAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(PadAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(DropoutAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(DropoutMaskAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(Conv2dInputGradAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(Conv2dWeightGradAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(AvgPool2dGradAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(AdaptiveAvgPool2dGradAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ConvTranspose2dAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ResizeNearest2dAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ResizeLinear2dAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(TopkAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ScatterElementsAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(GatherNdAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ResizeNearest2dGradAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(ResizeLinear2dGradAttrs)
TRACECACHE_ATTR_VIEW_GUIDE(RandAttrs)
#undef TRACECACHE_ATTR_VIEW_GUIDE

}  // namespace tracecache
