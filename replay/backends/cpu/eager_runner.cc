#include "replay/backends/cpu/eager_runner.h"


#include <array>
#include <vector>

#include <fmt/format.h>

#include "replay/backends/cpu/cpu_dtypes.h"
#include "replay/backends/cpu/cpu_kernels.h"
#include "replay/backends/cpu/cpu_threads.h"
#include "replay/compile/compiler.h"
#include "replay/compile/widen.h"

namespace tracecache {

Result<BufferRef> CpuOpRunner::run_op(OpKind op, std::span<const BufferRef> inputs,
                                      std::span<const AttrValue> attrs, const TensorType& out) {
  if (op == OpKind::kParameter) {
    return invalid_argument("eager mode: 'parameter' is not an op that runs");
  }
  // The dtypes the backend holds (cpu_dtypes.h); eager has no reference fallback to hide in.
  DType declined = out.dtype;
  bool storage = storage_dtype(out.dtype);
  for (const BufferRef& b : inputs) {
    if (b && !cpu::holds(b->dtype())) declined = b->dtype();
    if (b) storage = storage || storage_dtype(b->dtype());
  }
  if (!cpu::holds(declined)) {
    return unsupported(fmt::format("backend 'cpu' does not support op '{}' on {} (it computes bool, i32, i64 and "
                                   "f32, and bf16, f16, i8, u8 and i16 through them; --backend reference "
                                   "computes every dtype)",
                                   op_info(op).name, dtype_name(declined)));
  }
  if (storage && !reads_storage_types(op)) return run_widened(op, inputs, attrs, out);
  constexpr size_t kInline = 4;
  std::array<NodeId, kInline> inline_ids;
  std::array<const HostBuffer*, kInline> inline_ptrs;
  std::vector<NodeId> heap_ids;
  std::vector<const HostBuffer*> heap_ptrs;
  std::span<NodeId> ids(inline_ids.data(), std::min(inputs.size(), kInline));
  std::span<const HostBuffer*> ptrs(inline_ptrs.data(), ids.size());
  if (inputs.size() > kInline) {
    heap_ids.resize(inputs.size());
    heap_ptrs.resize(inputs.size());
    ids = heap_ids;
    ptrs = heap_ptrs;
  }
  node_.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ids[i] = node_.add_parameter({inputs[i]->dtype(), inputs[i]->shape()});
    ptrs[i] = inputs[i].get();
  }
  NodeId id = node_.add_node(op, ids, attrs, out);
  auto result = std::make_shared<HostBuffer>(out.dtype, out.shape);
  {
    ScopedTimer timer(metrics_, timers::kRun);
    cpu::bind_threads();
    // f32 conv2d, its gradients, matmul and linear on oneDNN, as compiled replay runs them
    // (the same primitive for the same shapes).
    const Node& n = node_.node(id);
    bool done = false;
    if (onednn_conv_node(node_, n) || onednn_conv_grad_node(node_, n)) {
      // Input 1 is the weight of conv2d and conv2d_input_grad: its reordered copy is kept.
      done = onednn_.run(hash_graph(node_), node_, id, ptrs, op == OpKind::kConv2dWeightGrad ? nullptr : &inputs[1],
                         *result);
    } else if (onednn_matmul_node(node_, n)) {
      done = onednn_matmuls_.run(hash_graph(node_), node_, id, ptrs, *result);
    }
    if (!done) cpu::run_op(node_, id, ptrs, *result);
  }
  return BufferRef(std::move(result));
}

// As the compiler's widening does for a graph (replay/compile/widen.h): the operands of a
// storage type cast to their wide type, the op there, its result cast back.
Result<BufferRef> CpuOpRunner::run_widened(OpKind op, std::span<const BufferRef> inputs,
                                           std::span<const AttrValue> attrs, const TensorType& out) {
  auto cast = [&](const BufferRef& b, DType to) -> Result<BufferRef> {
    const AttrValue a = AttrValue::of_dtype(to);
    return run_op(OpKind::kCast, std::span(&b, 1), std::span(&a, 1), {to, b->shape()});
  };
  std::vector<BufferRef> wide;
  wide.reserve(inputs.size());
  for (const BufferRef& b : inputs) {
    if (!b || !storage_dtype(b->dtype())) {
      wide.push_back(b);
      continue;
    }
    Result<BufferRef> w = cast(b, widened_dtype(b->dtype()));
    if (!w.is_ok()) return w.status();
    wide.push_back(std::move(*w));
  }
  std::vector<AttrValue> wide_attrs(attrs.begin(), attrs.end());
  widen_dtype_attrs(wide_attrs, out.dtype);
  Result<BufferRef> r = run_op(op, wide, wide_attrs, {widened_dtype(out.dtype), out.shape});
  if (!r.is_ok() || !storage_dtype(out.dtype)) return r;
  return cast(*r, out.dtype);
}

}  // namespace tracecache
