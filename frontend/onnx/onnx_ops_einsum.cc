// ONNX op handler: Einsum, lowered to layout ops, sums and batched matmuls (the handler
// contract: onnx_lowering.h).
//
// Each operand's labels are its letters, and for "..." one label per broadcast dim (aligned at
// the right across the operands, as NumPy). A label repeated within an operand takes the
// diagonal (index_select on the two dims flattened); a label no other operand and not the output
// has is summed at once; then the operands are combined left to right, two at a time, as one
// matmul: the labels both have and a later operand or the output needs are its batch, the other
// shared labels its contraction. What is left is summed and permuted into the output's order.
#include "frontend/onnx/onnx_lowering.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

namespace {

constexpr int kEllipsisLabel = 1000;  // broadcast dim k of "..." is label kEllipsisLabel + k

struct Term {
  V v;
  std::vector<int> labels;  // one per dim
};

bool has_label(const std::vector<int>& labels, int l) { return std::find(labels.begin(), labels.end(), l) != labels.end(); }

int64_t product(const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= d;
  return p;
}

}  // namespace

void Importer::einsum() {
  std::string eq;
  for (char c : attr_string("equation", "")) {
    if (c != ' ') eq += c;
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> specs;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    specs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(specs.size()) != node_->input_size()) {
    fail_invalid(fmt::format("{}: the equation '{}' names {} operands, the node has {}", where_(), eq, specs.size(),
                             node_->input_size()));
  }
  // The letters of a spec, and where its "..." is (-1: none).
  auto parse = [&](const std::string& spec, int& ellipsis_at) {
    std::vector<int> letters;
    ellipsis_at = -1;
    for (size_t k = 0; k < spec.size(); ++k) {
      if (spec.compare(k, 3, "...") == 0 && ellipsis_at < 0) {
        ellipsis_at = static_cast<int>(letters.size());
        k += 2;
      } else if (std::isalpha(static_cast<unsigned char>(spec[k]))) {
        letters.push_back(spec[k]);
      } else {
        fail_invalid(fmt::format("{}: the equation '{}' is not valid", where_(), eq));
      }
    }
    return letters;
  };
  std::vector<Term> terms;
  std::vector<std::vector<int>> letters(specs.size());
  std::vector<int> ellipsis_at(specs.size());
  int broadcast_rank = 0;
  for (size_t k = 0; k < specs.size(); ++k) {
    letters[k] = parse(specs[k], ellipsis_at[k]);
    V v = in(static_cast<int>(k));
    const int extra = v->type.shape.rank() - static_cast<int>(letters[k].size());
    if (extra < 0 || (extra > 0 && ellipsis_at[k] < 0)) {
      fail_invalid(fmt::format("{}: operand {} has rank {}, its term '{}' another", where_(), k, v->type.shape.rank(), specs[k]));
    }
    broadcast_rank = std::max(broadcast_rank, extra);
    terms.push_back({v, {}});
  }
  for (size_t k = 0; k < specs.size(); ++k) {
    const int extra = terms[k].v->type.shape.rank() - static_cast<int>(letters[k].size());
    std::vector<int>& labels = terms[k].labels;
    labels = letters[k];
    if (ellipsis_at[k] >= 0) {
      std::vector<int> dots;
      for (int j = 0; j < extra; ++j) dots.push_back(kEllipsisLabel + broadcast_rank - extra + j);
      labels.insert(labels.begin() + ellipsis_at[k], dots.begin(), dots.end());
    }
  }
  std::vector<int> output;
  if (arrow != std::string::npos) {
    int at = -1;
    output = parse(eq.substr(arrow + 2), at);
    if (at >= 0) {
      std::vector<int> dots;
      for (int j = 0; j < broadcast_rank; ++j) dots.push_back(kEllipsisLabel + j);
      output.insert(output.begin() + at, dots.begin(), dots.end());
    }
  } else {
    // Implicit: the broadcast dims, then the letters used once, in alphabetical order.
    std::map<int, int> count;
    for (const auto& l : letters) for (int c : l) ++count[c];
    for (int j = 0; j < broadcast_rank; ++j) output.push_back(kEllipsisLabel + j);
    for (const auto& [c, n] : count) if (n == 1) output.push_back(c);
  }
  for (size_t k = 0; k < output.size(); ++k) {
    if (std::count(output.begin(), output.end(), output[k]) > 1) fail_invalid(where_() + ": an output label is repeated");
  }

  // Diagonals: a label twice in one term keeps the elements where both indices agree.
  for (Term& t : terms) {
    for (;;) {
      int p = -1, q = -1;
      for (size_t a = 0; a < t.labels.size() && p < 0; ++a) {
        for (size_t b = a + 1; b < t.labels.size(); ++b) {
          if (t.labels[a] == t.labels[b]) { p = static_cast<int>(a); q = static_cast<int>(b); break; }
        }
      }
      if (p < 0) break;
      const int64_t n = t.v->type.shape[p];
      if (t.v->type.shape[q] != n) fail_invalid(where_() + ": a repeated label's dims differ in size");
      std::vector<int64_t> perm;
      std::vector<int> labels;
      std::vector<int64_t> dims;
      for (int a = 0; a < t.v->type.shape.rank(); ++a) {
        if (a == p || a == q) continue;
        perm.push_back(a);
        labels.push_back(t.labels[static_cast<size_t>(a)]);
        dims.push_back(t.v->type.shape[a]);
      }
      perm.push_back(p);
      perm.push_back(q);
      labels.push_back(t.labels[static_cast<size_t>(p)]);
      V moved = op(OpKind::kPermute, {t.v}, {{"perm", ints(perm)}});
      dims.push_back(n * n);
      V flat = reshape_to(moved, dims);
      t.v = op(OpKind::kIndexSelect, {flat, arange(0, n * n, n + 1)}, {{"axis", i(static_cast<int64_t>(dims.size()) - 1)}});
      t.labels = labels;
    }
  }
  // Sums out of `t` the labels that `keep` does not list.
  auto sum_unneeded = [&](Term& t, const std::vector<int>& keep) {
    std::vector<int64_t> axes;
    std::vector<int> labels;
    for (size_t a = 0; a < t.labels.size(); ++a) {
      if (has_label(keep, t.labels[a])) labels.push_back(t.labels[a]);
      else axes.push_back(static_cast<int64_t>(a));
    }
    if (axes.empty()) return;
    t.v = cast_to(reduce_with(OpKind::kSum, t.v, axes, false), t.v->type.dtype);
    t.labels = labels;
  };
  // The labels of output and of terms [from, end).
  auto needed_after = [&](size_t from) {
    std::vector<int> need = output;
    for (size_t k = from; k < terms.size(); ++k) need.insert(need.end(), terms[k].labels.begin(), terms[k].labels.end());
    return need;
  };
  for (size_t k = 0; k < terms.size(); ++k) {
    std::vector<int> keep = output;
    for (size_t j = 0; j < terms.size(); ++j) {
      if (j != k) keep.insert(keep.end(), terms[j].labels.begin(), terms[j].labels.end());
    }
    sum_unneeded(terms[k], keep);
  }
  Term acc = terms[0];
  for (size_t k = 1; k < terms.size(); ++k) {
    Term& b = terms[k];
    const std::vector<int> need = needed_after(k + 1);
    std::vector<int> batch, contracted, a_only, b_only;
    for (int l : acc.labels) {
      if (!has_label(b.labels, l)) a_only.push_back(l);
      else if (has_label(need, l)) batch.push_back(l);
      else contracted.push_back(l);
    }
    for (int l : b.labels) {
      if (!has_label(acc.labels, l)) b_only.push_back(l);
    }
    auto size_of = [](const Term& t, int l) {
      const auto at = std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin();
      return t.v->type.shape[static_cast<int>(at)];
    };
    // Each operand permuted into `order` and broadcast where a shared dim is 1 in it only.
    auto arrange = [&](const Term& t, const std::vector<int>& order) {
      std::vector<int64_t> perm, dims;
      for (int l : order) {
        perm.push_back(std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin());
        const int64_t own = size_of(t, l);
        const int64_t other = has_label(acc.labels, l) && has_label(b.labels, l) ? std::max(size_of(acc, l), size_of(b, l)) : own;
        if (own != other && own != 1) fail_invalid(where_() + ": the operands' dims of one label differ in size");
        dims.push_back(other);
      }
      bool identity = true;
      for (size_t a = 0; a < perm.size(); ++a) identity = identity && perm[a] == static_cast<int64_t>(a);
      V v = identity ? t.v : op(OpKind::kPermute, {t.v}, {{"perm", ints(perm)}});
      if (dims_of(v->type.shape) != dims) v = op(OpKind::kBroadcastTo, {v}, {{"shape", ints(dims)}});
      return v;
    };
    std::vector<int> a_order = batch, b_order = batch;
    a_order.insert(a_order.end(), a_only.begin(), a_only.end());
    a_order.insert(a_order.end(), contracted.begin(), contracted.end());
    b_order.insert(b_order.end(), contracted.begin(), contracted.end());
    b_order.insert(b_order.end(), b_only.begin(), b_only.end());
    V av = arrange(acc, a_order), bv = arrange(b, b_order);
    std::vector<int64_t> batch_dims, a_dims, k_dims, b_dims;
    for (size_t a = 0; a < batch.size(); ++a) batch_dims.push_back(av->type.shape[static_cast<int>(a)]);
    for (size_t a = 0; a < a_only.size(); ++a) a_dims.push_back(av->type.shape[static_cast<int>(batch.size() + a)]);
    for (size_t a = 0; a < contracted.size(); ++a) k_dims.push_back(bv->type.shape[static_cast<int>(batch.size() + a)]);
    for (size_t a = 0; a < b_only.size(); ++a) b_dims.push_back(bv->type.shape[static_cast<int>(batch.size() + contracted.size() + a)]);
    const int64_t nb = product(batch_dims), m = product(a_dims), kk = product(k_dims), n = product(b_dims);
    V prod = op(OpKind::kMatmul, {reshape_to(av, {nb, m, kk}), reshape_to(bv, {nb, kk, n})});
    std::vector<int64_t> dims = batch_dims;
    dims.insert(dims.end(), a_dims.begin(), a_dims.end());
    dims.insert(dims.end(), b_dims.begin(), b_dims.end());
    acc.v = reshape_to(prod, dims);
    acc.labels = batch;
    acc.labels.insert(acc.labels.end(), a_only.begin(), a_only.end());
    acc.labels.insert(acc.labels.end(), b_only.begin(), b_only.end());
  }
  sum_unneeded(acc, output);
  std::vector<int64_t> perm;
  for (int l : output) {
    auto at = std::find(acc.labels.begin(), acc.labels.end(), l);
    if (at == acc.labels.end()) fail_invalid(fmt::format("{}: the output label '{}' is in no operand", where_(), static_cast<char>(l)));
    perm.push_back(at - acc.labels.begin());
  }
  bool identity = true;
  for (size_t a = 0; a < perm.size(); ++a) identity = identity && perm[a] == static_cast<int64_t>(a);
  out(0, identity ? acc.v : op(OpKind::kPermute, {acc.v}, {{"perm", ints(perm)}}));
}

}  // namespace tracecache::onnx_import::detail
