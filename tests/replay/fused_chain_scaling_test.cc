// Long fused chains (issue 10): run_fused compiles a chain of n elementwise ops in O(n) time and
// memory. Checked through sizes, never wall-clock time: the compiled plan's scratch (per thread,
// per tile) does not grow with n, its instruction and register lists grow linearly with a small
// constant per op, and a 100k-op chain still gives bitwise the reference evaluator's result.
#include <gtest/gtest.h>

#include <vector>

#include "capture/core/buffer.h"
#include "capture/ir/graph.h"
#include "capture/ops/ops.h"
#include "replay/backends/cpu/cpu_kernels.h"

namespace tracecache {
namespace {

struct Chain {
  Graph graph;
  std::vector<NodeId> members;
  std::vector<HostBuffer> params;  // one per parameter node, in parameter order
};

NodeId member(Chain& c, OpKind op, std::vector<NodeId> inputs, std::vector<AttrValue> attrs = {}) {
  std::vector<TensorType> types;
  for (NodeId id : inputs) types.push_back(c.graph.node(id).type());
  const TensorType t = infer_op(op, types, attrs).value_or_throw();
  const NodeId id = c.graph.add_node(op, inputs, attrs, t);
  c.members.push_back(id);
  return id;
}

// x:f32[rows, 8], b:f32[8] (a broadcast leaf), s:i32[] (a leaf converted to f32 on every use),
// then `length` members cycling through add, mul, neg, a cast to i64 and back (conversions),
// a compare and a where that reads a value computed three members earlier.
Chain long_chain(int64_t rows, int length) {
  Chain c;
  const Shape root{rows, 8};
  const NodeId x = c.graph.add_parameter({DType::kF32, root});
  const NodeId b = c.graph.add_parameter({DType::kF32, {8}});
  const NodeId s = c.graph.add_parameter({DType::kI32, {}});
  HostBuffer xb(DType::kF32, root), bb(DType::kF32, {8}), sb(DType::kI32, {});
  for (int64_t i = 0; i < xb.numel(); ++i) xb.data<float>()[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
  for (int64_t i = 0; i < 8; ++i) bb.data<float>()[i] = 0.125f * static_cast<float>(i) - 0.5f;
  *sb.data<int32_t>() = 1;
  c.params.push_back(std::move(xb));
  c.params.push_back(std::move(bb));
  c.params.push_back(std::move(sb));
  NodeId v = x;
  std::vector<NodeId> recent;
  while (static_cast<int>(c.members.size()) < length) {
    switch (c.members.size() % 6) {
      case 0: v = member(c, OpKind::kAdd, {v, b}); break;
      case 1: v = member(c, OpKind::kMul, {v, s}); break;  // i32 leaf, converted to f32
      case 2: v = member(c, OpKind::kNeg, {v}); break;
      case 3: v = member(c, OpKind::kCast, {v}, {AttrValue::of_dtype(DType::kI64)}); break;
      case 4: v = member(c, OpKind::kCast, {v}, {AttrValue::of_dtype(DType::kF32)}); break;
      case 5: {
        const NodeId older = recent.size() >= 3 ? recent[recent.size() - 3] : x;
        const NodeId cond = member(c, OpKind::kGt, {v, b});
        v = member(c, OpKind::kWhere, {cond, v, older});
        break;
      }
    }
    if (c.graph.node(v).dtype == DType::kF32) recent.push_back(v);
  }
  return c;
}

HostBuffer reference(const Chain& c) {
  std::vector<HostBuffer> value(c.graph.size());
  for (NodeId id = 0; id < c.graph.size(); ++id) {
    const Node& n = c.graph.node(id);
    if (n.op == OpKind::kParameter) {
      value[id] = c.params[static_cast<size_t>(c.graph.attr(n, "index").i)].clone();
      continue;
    }
    std::vector<const HostBuffer*> in;
    for (NodeId i : c.graph.inputs(n)) in.push_back(&value[i]);
    value[id] = HostBuffer(n.dtype, n.shape);
    op_info(n.op).reference(in, c.graph.attrs(n), value[id]);
    // Only the previous few values are read again: free the rest as we go.
    if (id >= 16 && c.graph.node(id - 16).op != OpKind::kParameter) value[id - 16] = HostBuffer();
  }
  return std::move(value[c.members.back()]);
}

cpu::FusedPlanSize plan(Chain& c, HostBuffer& out) {
  return cpu::plan_fused(c.graph, c.members,
                         [&](NodeId leaf) { return &c.params[static_cast<size_t>(c.graph.attr(c.graph.node(leaf), "index").i)]; },
                         out);
}

TEST(FusedChainScaling, ScratchIsBoundedAndTheProgramLinear) {
  size_t scratch = 0;
  for (int length : {60, 600, 6000, 60000}) {
    Chain c = long_chain(4, length);
    const Node& r = c.graph.node(c.members.back());
    HostBuffer out(r.dtype, r.shape);
    const cpu::FusedPlanSize p = plan(c, out);
    if (scratch == 0) scratch = p.scratch_bytes;
    EXPECT_EQ(p.scratch_bytes, scratch) << "scratch must not grow with the chain (" << length << " ops)";
    EXPECT_LE(p.instructions, 2 * c.members.size() + 4);
    EXPECT_LE(p.registers, 2 * c.members.size() + 4);
    EXPECT_LE(p.program_bytes, 160 * c.members.size()) << "bytes per op";
  }
  // A few tiles' worth: the values live at once, not one tile per member.
  EXPECT_LE(scratch, size_t{16} * static_cast<size_t>(cpu::kTileElements) * 8);
}

TEST(FusedChainScaling, AHundredThousandOpChainMatchesTheReference) {
  for (int64_t rows : {1, 200}) {  // one tile; several tiles
    Chain c = long_chain(rows, 100000);
    const HostBuffer want = reference(c);
    const Node& r = c.graph.node(c.members.back());
    HostBuffer got(r.dtype, r.shape);
    cpu::run_fused(c.graph, c.members,
                   [&](NodeId leaf) { return &c.params[static_cast<size_t>(c.graph.attr(c.graph.node(leaf), "index").i)]; },
                   got);
    ASSERT_EQ(got.nbytes(), want.nbytes());
    EXPECT_EQ(got.checksum(), want.checksum()) << rows << " rows";
  }
}

}  // namespace
}  // namespace tracecache
