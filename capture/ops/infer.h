// The inference rules of the ops (the `infer` column of the registry table, ops.cc), defined by
// family in infer_*.cc. Internal to capture/ops/: callers use infer_op (ops.h).
//
// Contract of each rule (InferFn in ops.h): `in` holds the op's tensor input types (the arity
// already checked), `attrs` its attributes in registry order (kinds checked, defaults filled),
// which the rule may normalize in place (a negative axis made non-negative, a one-entry pair
// doubled); it sets `*result` and returns nullopt, or returns the error (kInvalidArgument naming
// the op and what is wrong). Thread-safety: pure functions. Ownership: nothing is kept.
// A templated rule is instantiated, in its file, for the ops the table names.
#pragma once

#include <span>

#include "capture/ops/ops.h"

namespace tracecache::infer {

// The outcome of a rule: nullopt if it passed, else its error.
using Check = InferError;

// Declares rule NAME with the InferFn signature (`template TRACECACHE_INFER_RULE(NAME<K>);`
// instantiates a templated one).
#define TRACECACHE_INFER_RULE(...) \
  Check __VA_ARGS__(std::span<const TensorType> in, std::span<AttrValue> attrs, TensorType* result)

// infer_tensor_ops.cc
TRACECACHE_INFER_RULE(infer_parameter);
template <OpKind K>
TRACECACHE_INFER_RULE(infer_unary_same);
TRACECACHE_INFER_RULE(infer_unary_float);
template <OpKind K>
TRACECACHE_INFER_RULE(infer_arith);
template <OpKind K>
TRACECACHE_INFER_RULE(infer_minmax);
template <OpKind K>
TRACECACHE_INFER_RULE(infer_compare);
TRACECACHE_INFER_RULE(infer_where);
TRACECACHE_INFER_RULE(infer_cast);
TRACECACHE_INFER_RULE(infer_matmul);
TRACECACHE_INFER_RULE(infer_sum);
TRACECACHE_INFER_RULE(infer_mean);
template <OpKind K>
TRACECACHE_INFER_RULE(infer_extreme);
template <OpKind K>
TRACECACHE_INFER_RULE(infer_arg_extreme);
TRACECACHE_INFER_RULE(infer_reshape);
TRACECACHE_INFER_RULE(infer_permute);
TRACECACHE_INFER_RULE(infer_transpose);
TRACECACHE_INFER_RULE(infer_broadcast_to);
TRACECACHE_INFER_RULE(infer_concat);
TRACECACHE_INFER_RULE(infer_slice);

// infer_nn_layers.cc
TRACECACHE_INFER_RULE(infer_conv2d);
TRACECACHE_INFER_RULE(infer_max_pool2d);
TRACECACHE_INFER_RULE(infer_avg_pool2d);
TRACECACHE_INFER_RULE(infer_adaptive_avg_pool2d);
TRACECACHE_INFER_RULE(infer_linear);
TRACECACHE_INFER_RULE(infer_flatten);
TRACECACHE_INFER_RULE(infer_pad);
TRACECACHE_INFER_RULE(infer_dropout);
TRACECACHE_INFER_RULE(infer_embedding);
TRACECACHE_INFER_RULE(infer_gather);
TRACECACHE_INFER_RULE(infer_index_select);
TRACECACHE_INFER_RULE(infer_full);
TRACECACHE_INFER_RULE(infer_arange);
TRACECACHE_INFER_RULE(infer_uniform);
TRACECACHE_INFER_RULE(infer_normal);

// infer_nn_ops.cc
TRACECACHE_INFER_RULE(infer_clamp);
TRACECACHE_INFER_RULE(infer_batch_norm);
TRACECACHE_INFER_RULE(infer_layer_norm);
template <OpKind K>
TRACECACHE_INFER_RULE(infer_softmax);
TRACECACHE_INFER_RULE(infer_attention);
TRACECACHE_INFER_RULE(infer_scatter_add);
TRACECACHE_INFER_RULE(infer_dropout_mask);
template <OpKind K>
TRACECACHE_INFER_RULE(infer_rand);

// infer_grad_nn_layers.cc
TRACECACHE_INFER_RULE(infer_conv2d_input_grad);
TRACECACHE_INFER_RULE(infer_conv2d_weight_grad);
TRACECACHE_INFER_RULE(infer_max_pool2d_grad);
TRACECACHE_INFER_RULE(infer_avg_pool2d_grad);
TRACECACHE_INFER_RULE(infer_adaptive_avg_pool2d_grad);

// infer_onnx_ops.cc
TRACECACHE_INFER_RULE(infer_conv_transpose2d);
TRACECACHE_INFER_RULE(infer_resize_nearest2d);
TRACECACHE_INFER_RULE(infer_resize_linear2d);
template <OpKind K, OpKind Forward>
TRACECACHE_INFER_RULE(infer_resize_grad);
template <OpKind K>
TRACECACHE_INFER_RULE(infer_topk);
TRACECACHE_INFER_RULE(infer_scatter_elements);
TRACECACHE_INFER_RULE(infer_gather_nd);
// quantization (issue 37)
TRACECACHE_INFER_RULE(infer_quantize_linear);
TRACECACHE_INFER_RULE(infer_dequantize_linear);

}  // namespace tracecache::infer
