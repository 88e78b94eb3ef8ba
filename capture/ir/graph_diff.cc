#include "capture/ir/graph_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace tracecache {

namespace {

std::string node_list(std::span<const NodeId> ids) {
  std::vector<std::string> parts;
  for (NodeId id : ids) parts.push_back(fmt::format("%{}", id));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string donation_list(std::span<const Donation> ds) {
  std::vector<std::string> parts;
  for (const Donation& d : ds) parts.push_back(fmt::format("output {} -> param {}", d.output, d.param));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// Node ids of `a` aligned to `b` (kNoDiffNode: none) and back.
struct Alignment {
  std::vector<NodeId> ab, ba;
  bool by_index = true;
};

Alignment align(const Graph& a, const Graph& b) {
  const size_t n = a.size(), m = b.size();
  Alignment al{std::vector<NodeId>(n, kNoDiffNode), std::vector<NodeId>(m, kNoDiffNode), true};
  const bool table_fits = n != 0 && m != 0 && (n + 1) <= kMaxAlignmentCells / (m + 1);
  if (n == m || !table_fits) {
    for (NodeId i = 0; i < std::min(n, m); ++i) {
      al.ab[i] = i;
      al.ba[i] = i;
    }
    return al;
  }
  // Longest common subsequence of the op sequences; lcs[i][j] over the suffixes a[i..], b[j..].
  al.by_index = false;
  std::vector<uint32_t> lcs((n + 1) * (m + 1), 0);
  auto at = [&](size_t i, size_t j) -> uint32_t& { return lcs[i * (m + 1) + j]; };
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      at(i, j) = a.node(static_cast<NodeId>(i)).op == b.node(static_cast<NodeId>(j)).op
                     ? at(i + 1, j + 1) + 1
                     : std::max(at(i + 1, j), at(i, j + 1));
    }
  }
  size_t i = 0, j = 0;
  while (i < n && j < m) {
    if (a.node(static_cast<NodeId>(i)).op == b.node(static_cast<NodeId>(j)).op && at(i, j) == at(i + 1, j + 1) + 1) {
      al.ab[i] = static_cast<NodeId>(j);
      al.ba[j] = static_cast<NodeId>(i);
      ++i;
      ++j;
    } else if (at(i + 1, j) >= at(i, j + 1)) {
      ++i;
    } else {
      ++j;
    }
  }
  return al;
}

class Differ {
 public:
  Differ(const Graph& a, const Graph& b, const GraphSources* sa, const GraphSources* sb)
      : a_(a), b_(b), sa_(sa), sb_(sb) {}

  GraphDiff run() {
    Alignment al = align(a_, b_);
    out_.nodes_a = a_.size();
    out_.nodes_b = b_.size();
    out_.by_index = al.by_index;
    for (NodeId i = 0; i < a_.size(); ++i) {
      const NodeId j = al.ab[i];
      if (j == kNoDiffNode) {
        add(NodeDifference::Kind::kOnlyInA, i, kNoDiffNode, "node", type_to_string(a_.node(i).type()), "");
        continue;
      }
      ++out_.aligned;
      compare(i, j, al);
    }
    for (NodeId j = 0; j < b_.size(); ++j) {
      if (al.ba[j] == kNoDiffNode) {
        add(NodeDifference::Kind::kOnlyInB, kNoDiffNode, j, "node", "", type_to_string(b_.node(j).type()));
      }
    }
    std::vector<NodeId> mapped_outputs;
    for (NodeId o : a_.outputs()) mapped_outputs.push_back(al.ab[o]);
    const std::span<const NodeId> outs_b = b_.outputs();
    if (!std::equal(mapped_outputs.begin(), mapped_outputs.end(), outs_b.begin(), outs_b.end())) {
      add(NodeDifference::Kind::kOutputs, kNoDiffNode, kNoDiffNode, "outputs", node_list(a_.outputs()),
          node_list(outs_b));
    }
    const std::span<const Donation> da = a_.donations(), db = b_.donations();
    if (!std::equal(da.begin(), da.end(), db.begin(), db.end())) {
      add(NodeDifference::Kind::kDonations, kNoDiffNode, kNoDiffNode, "donations", donation_list(da),
          donation_list(db));
    }
    return std::move(out_);
  }

 private:
  void compare(NodeId i, NodeId j, const Alignment& al) {
    const Node& x = a_.node(i);
    const Node& y = b_.node(j);
    const size_t before = out_.differences.size();
    if (x.op != y.op) {
      add(NodeDifference::Kind::kOp, i, j, "op", std::string(op_info(x.op).name), std::string(op_info(y.op).name));
      return;
    }
    if (x.op == OpKind::kParameter) {
      const int64_t index = a_.attrs(x)[0].i;
      if (x.dtype != y.dtype) {
        add(NodeDifference::Kind::kInputType, i, j, fmt::format("input {} dtype", index),
            std::string(dtype_name(x.dtype)), std::string(dtype_name(y.dtype)));
      } else if (x.shape != y.shape) {
        // Name the dims that changed when the rank did not: "input 0 shape (dim 0)".
        std::vector<std::string> dims;
        for (int d = 0; x.shape.rank() == y.shape.rank() && d < x.shape.rank(); ++d) {
          if (x.shape[d] != y.shape[d]) dims.push_back(std::to_string(d));
        }
        add(NodeDifference::Kind::kInputType, i, j,
            dims.empty() ? fmt::format("input {} shape", index)
                         : fmt::format("input {} shape (dim {})", index, fmt::join(dims, ", ")),
            type_to_string(x.type()), type_to_string(y.type()));
      }
      return;
    }
    const OpInfo& info = op_info(x.op);
    const auto ax = a_.attrs(x), ay = b_.attrs(y);
    for (size_t k = 0; k < ax.size() && k < ay.size(); ++k) {
      if (ax[k] == ay[k]) continue;
      const bool constant = x.op == OpKind::kFull && info.attrs[k].name == "value";
      add(constant ? NodeDifference::Kind::kConstant : NodeDifference::Kind::kAttribute, i, j,
          constant ? std::string("value") : fmt::format("attribute '{}'", info.attrs[k].name), ax[k].to_string(),
          ay[k].to_string());
    }
    const auto ix = a_.inputs(x), iy = b_.inputs(y);
    bool input_type_changed = false;
    for (size_t k = 0; k < std::max(ix.size(), iy.size()); ++k) {
      const NodeId from = k < ix.size() ? ix[k] : kNoDiffNode;
      const NodeId to = k < iy.size() ? iy[k] : kNoDiffNode;
      if (from != kNoDiffNode && to != kNoDiffNode && !(a_.node(from).type() == b_.node(to).type())) {
        input_type_changed = true;
      }
      if (from == kNoDiffNode || to == kNoDiffNode || al.ab[from] != to) {
        add(NodeDifference::Kind::kEdge, i, j, fmt::format("input {}", k),
            from == kNoDiffNode ? "" : fmt::format("%{}", from), to == kNoDiffNode ? "" : fmt::format("%{}", to));
      }
    }
    if (x.type() == y.type() || out_.differences.size() != before) return;
    if (input_type_changed) {
      ++out_.derived;
    } else {
      add(NodeDifference::Kind::kType, i, j, "type", type_to_string(x.type()), type_to_string(y.type()));
    }
  }

  void add(NodeDifference::Kind kind, NodeId i, NodeId j, std::string what, std::string in_a, std::string in_b) {
    NodeDifference d;
    d.kind = kind;
    d.a = i;
    d.b = j;
    if (i != kNoDiffNode) d.op = std::string(op_info(a_.node(i).op).name);
    else if (j != kNoDiffNode) d.op = std::string(op_info(b_.node(j).op).name);
    d.what = std::move(what);
    d.in_a = std::move(in_a);
    d.in_b = std::move(in_b);
    if (sa_ && i != kNoDiffNode) d.source_a = std::string(sa_->node(i));
    if (sb_ && j != kNoDiffNode) d.source_b = std::string(sb_->node(j));
    out_.differences.push_back(std::move(d));
  }

  const Graph& a_;
  const Graph& b_;
  const GraphSources* sa_;
  const GraphSources* sb_;
  GraphDiff out_;
};

}  // namespace

std::string_view difference_kind_name(NodeDifference::Kind kind) {
  switch (kind) {
    case NodeDifference::Kind::kInputType: return "input type";
    case NodeDifference::Kind::kAttribute: return "attribute";
    case NodeDifference::Kind::kConstant: return "constant";
    case NodeDifference::Kind::kOp: return "op";
    case NodeDifference::Kind::kEdge: return "edge";
    case NodeDifference::Kind::kType: return "type";
    case NodeDifference::Kind::kOnlyInA: return "only in A";
    case NodeDifference::Kind::kOnlyInB: return "only in B";
    case NodeDifference::Kind::kOutputs: return "outputs";
    case NodeDifference::Kind::kDonations: return "donations";
  }
  return "unknown";
}

std::string NodeDifference::to_string() const {
  std::string node;
  if (a != kNoDiffNode && b != kNoDiffNode) {
    node = a == b ? fmt::format("%{} {} ", a, op) : fmt::format("%{}/%{} {} ", a, b, op);
  } else if (a != kNoDiffNode) {
    node = fmt::format("%{} {} ", a, op);
  } else if (b != kNoDiffNode) {
    node = fmt::format("%{} {} ", b, op);
  }
  std::string text;
  switch (kind) {
    case Kind::kOnlyInA: text = fmt::format("{}only in A: {}", node, in_a); break;
    case Kind::kOnlyInB: text = fmt::format("{}only in B: {}", node, in_b); break;
    default: text = fmt::format("{}{}: {} -> {}", node, what, in_a.empty() ? "none" : in_a, in_b.empty() ? "none" : in_b);
  }
  if (!source_a.empty() && !source_b.empty() && source_a != source_b) {
    text += fmt::format("  (A: {}; B: {})", source_a, source_b);
  } else if (!source_b.empty() || !source_a.empty()) {
    text += fmt::format("  ({})", source_b.empty() ? source_a : source_b);
  }
  return text;
}

std::string GraphDiff::summary(size_t max) const {
  if (differences.empty()) return derived ? fmt::format("{} derived type changes", derived) : "identical";
  std::vector<std::string> parts;
  for (size_t k = 0; k < differences.size() && k < max; ++k) parts.push_back(differences[k].to_string());
  std::string out = fmt::format("{}", fmt::join(parts, "; "));
  if (differences.size() > max) out += fmt::format("; and {} more", differences.size() - max);
  return out;
}

GraphDiff diff_graphs(const Graph& a, const Graph& b, const GraphSources* sa, const GraphSources* sb) {
  return Differ(a, b, sa, sb).run();
}

}  // namespace tracecache
