// ONNX op handlers: the recurrent layers RNN, GRU and LSTM, unrolled over their (static)
// sequence length (the handler contract: onnx_lowering.h).
//
// Per direction, the input projection of every step is one matmul (X · Wᵀ + Wb, [S, B, G·H]);
// each step then adds its recurrent term H · Rᵀ + Rb, applies the gates' activations and updates
// the state, in ONNX's formulas (the operator docs; gates in ONNX's orders: GRU z, r, h; LSTM i,
// o, f, c). The program grows by a few dozen ops per step, so sequences are bounded by
// kMaxUnrolledSteps. Not supported: sequence_lens shorter than the sequence, activations with
// parameters (activation_alpha, activation_beta), LSTM's input_forget.
#include "frontend/onnx/onnx_lowering.h"

#include <fmt/format.h>

namespace tracecache::onnx_import::detail {

namespace {

constexpr int64_t kMaxUnrolledSteps = 1024;

}  // namespace

V Importer::activation(std::string_view name, const V& x) {
  if (name == "Tanh") return op(OpKind::kTanh, {x});
  if (name == "Sigmoid") return op(OpKind::kSigmoid, {x});
  if (name == "Relu") return op(OpKind::kRelu, {x});
  node_unsupported(fmt::format("activation {}", name));
}

void Importer::recurrent() {
  const std::string& type = node_->op_type();
  const int gates = type == "RNN" ? 1 : type == "GRU" ? 3 : 4;
  const int per_direction = type == "RNN" ? 1 : type == "GRU" ? 2 : 3;
  V x = in(0), w = in(1), r = in(2);
  require_floating(x, "X");
  const std::string direction = attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    fail_invalid(where_() + ": direction must be forward, reverse or bidirectional");
  }
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batch_first = attr_int("layout", 0) != 0;
  const int64_t hidden = attr_int("hidden_size", r->type.shape.rank() == 3 ? r->type.shape[2] : 0);
  const float clip = attr_float("clip", 0.0f);
  const bool has_clip = attr("clip") != nullptr;
  const bool linear_before_reset = type == "GRU" && attr_int("linear_before_reset", 0) != 0;
  if (type == "LSTM" && attr_int("input_forget", 0) != 0) node_unsupported("input_forget=1");
  std::vector<std::string> acts;
  if (const AttributeProto* a = attr("activations")) {
    for (const std::string& s : a->strings()) acts.push_back(s);
  } else {
    static const char* const kDefaults[] = {"Sigmoid", "Tanh", "Tanh"};
    for (int64_t d = 0; d < dirs; ++d) {
      if (type == "RNN") acts.push_back("Tanh");
      else for (int k = 0; k < per_direction; ++k) acts.push_back(kDefaults[k]);
    }
  }
  if (static_cast<int64_t>(acts.size()) != per_direction * dirs) {
    fail_invalid(fmt::format("{}: {} activations for {} direction(s)", where_(), acts.size(), dirs));
  }
  if (x->type.shape.rank() != 3 || w->type.shape.rank() != 3 || r->type.shape.rank() != 3) {
    fail_invalid(where_() + ": X, W and R must have rank 3");
  }
  if (batch_first) x = op(OpKind::kTranspose, {x}, {{"dim0", i(0)}, {"dim1", i(1)}});
  const int64_t steps = x->type.shape[0], batch = x->type.shape[1], input = x->type.shape[2];
  if (w->type.shape[0] != dirs || w->type.shape[1] != gates * hidden || w->type.shape[2] != input ||
      dims_of(r->type.shape) != std::vector<int64_t>{dirs, gates * hidden, hidden}) {
    fail_invalid(where_() + ": W or R does not match X, hidden_size and direction");
  }
  if (steps > kMaxUnrolledSteps) {
    node_unsupported(fmt::format("a sequence of {} steps (unrolled: at most {})", steps, kMaxUnrolledSteps));
  }
  if (has_in(4)) {
    V lens = in(4);
    if (!lens->known) node_unsupported("sequence_lens from data (only the full length is supported)");
    for (int64_t k = 0; k < lens->known->numel(); ++k) {
      if (lens->known->element_as_double(k) != static_cast<double>(steps)) node_unsupported("sequence_lens shorter than the sequence");
    }
  }
  // An initial state [dirs, batch, hidden] (batch first: [batch, dirs, hidden]); zeros without one.
  auto initial = [&](int k) -> V {
    if (!has_in(k)) {
      return op(OpKind::kFull, {}, {{"shape", ints({dirs, batch, hidden})}, {"value", f(0)},
                                    {"dtype", AttrValue::of_dtype(x->type.dtype)}});
    }
    V s = in(k);
    return batch_first ? op(OpKind::kTranspose, {s}, {{"dim0", i(0)}, {"dim1", i(1)}}) : s;
  };
  const int h0_input = 5, c0_input = 6, p_input = 7;
  V h0_all = initial(h0_input);
  V c0_all = type == "LSTM" ? initial(c0_input) : nullptr;
  auto take = [&](const V& v, int64_t axis, int64_t start, int64_t len) {
    return op(OpKind::kSlice, {v}, {{"axis", i(axis)}, {"start", i(start)}, {"end", i(start + len)}});
  };
  auto clipped = [&](const V& v) { return has_clip ? op(OpKind::kClamp, {v}, {{"min", f(-clip)}, {"max", f(clip)}}) : v; };
  const int64_t gh = gates * hidden;
  std::vector<V> ys, hs, cs;
  for (int64_t d = 0; d < dirs; ++d) {
    const bool backward = direction == "reverse" || d == 1;
    const std::string* act = &acts[static_cast<size_t>(d * per_direction)];
    V wd = reshape_to(take(w, 0, d, 1), {gh, input});
    V rd = reshape_to(take(r, 0, d, 1), {gh, hidden});
    V wb, rb;
    if (has_in(3)) {
      V bd = reshape_to(take(in(3), 0, d, 1), {2 * gh});
      wb = take(bd, 0, 0, gh);
      rb = take(bd, 0, gh, gh);
    }
    // X · Wᵀ + Wb for every step: [steps, batch, gh].
    V xw = op(OpKind::kMatmul, {x, op(OpKind::kTranspose, {wd}, {{"dim0", i(0)}, {"dim1", i(1)}})});
    if (wb) xw = op(OpKind::kAdd, {xw, wb});
    V rt = op(OpKind::kTranspose, {rd}, {{"dim0", i(0)}, {"dim1", i(1)}});  // [hidden, gh]
    V h = reshape_to(take(h0_all, 0, d, 1), {batch, hidden});
    V c = c0_all ? reshape_to(take(c0_all, 0, d, 1), {batch, hidden}) : nullptr;
    V peep;
    if (type == "LSTM" && has_in(p_input)) peep = reshape_to(take(in(p_input), 0, d, 1), {3 * hidden});
    std::vector<V> y(static_cast<size_t>(steps));
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = backward ? steps - 1 - s : s;
      V xt = reshape_to(take(xw, 0, t, 1), {batch, gh});
      auto gate = [&](const V& v, int k) { return take(v, 1, k * hidden, hidden); };
      if (type == "RNN") {
        V pre = op(OpKind::kAdd, {xt, op(OpKind::kMatmul, {h, rt})});
        if (rb) pre = op(OpKind::kAdd, {pre, rb});
        h = activation(act[0], clipped(pre));
      } else if (type == "GRU") {
        // z and r: x_zr + H R_zrᵀ + Rb_zr.
        V rec = op(OpKind::kMatmul, {h, take(rt, 1, 0, 2 * hidden)});
        if (rb) rec = op(OpKind::kAdd, {rec, take(rb, 0, 0, 2 * hidden)});
        V zr = op(OpKind::kAdd, {take(xt, 1, 0, 2 * hidden), rec});
        V z = activation(act[0], clipped(gate(zr, 0)));
        V rg = activation(act[0], clipped(gate(zr, 1)));
        V rh = take(rt, 1, 2 * hidden, hidden);
        V rbh = rb ? take(rb, 0, 2 * hidden, hidden) : nullptr;
        V hidden_term;
        if (linear_before_reset) {
          V lin = op(OpKind::kMatmul, {h, rh});
          if (rbh) lin = op(OpKind::kAdd, {lin, rbh});
          hidden_term = op(OpKind::kMul, {rg, lin});
        } else {
          hidden_term = op(OpKind::kMatmul, {op(OpKind::kMul, {rg, h}), rh});
          if (rbh) hidden_term = op(OpKind::kAdd, {hidden_term, rbh});
        }
        V candidate = activation(act[1], clipped(op(OpKind::kAdd, {gate(xt, 2), hidden_term})));
        // H = (1 - z) · candidate + z · H
        h = op(OpKind::kAdd, {op(OpKind::kMul, {op(OpKind::kSub, {1.0, z}), candidate}), op(OpKind::kMul, {z, h})});
      } else {
        V pre = op(OpKind::kAdd, {xt, op(OpKind::kMatmul, {h, rt})});
        if (rb) pre = op(OpKind::kAdd, {pre, rb});
        V pi = gate(pre, 0), po = gate(pre, 1), pf = gate(pre, 2), pc = gate(pre, 3);
        if (peep) {
          pi = op(OpKind::kAdd, {pi, op(OpKind::kMul, {take(peep, 0, 0, hidden), c})});
          pf = op(OpKind::kAdd, {pf, op(OpKind::kMul, {take(peep, 0, 2 * hidden, hidden), c})});
        }
        V ig = activation(act[0], clipped(pi));
        V fg = activation(act[0], clipped(pf));
        V cand = activation(act[1], clipped(pc));
        c = op(OpKind::kAdd, {op(OpKind::kMul, {fg, c}), op(OpKind::kMul, {ig, cand})});
        if (peep) po = op(OpKind::kAdd, {po, op(OpKind::kMul, {take(peep, 0, hidden, hidden), c})});
        V og = activation(act[0], clipped(po));
        h = op(OpKind::kMul, {og, activation(act[2], c)});
      }
      y[static_cast<size_t>(t)] = reshape_to(h, {1, 1, batch, hidden});
    }
    if (out_used(0)) {
      std::vector<Arg> parts(y.begin(), y.end());
      ys.push_back(steps == 1 ? y[0] : op(OpKind::kConcat, std::move(parts), {{"axis", i(0)}}));
    }
    hs.push_back(reshape_to(h, {1, batch, hidden}));
    if (c) cs.push_back(reshape_to(c, {1, batch, hidden}));
  }
  auto join = [&](std::vector<V>& parts, int64_t axis) {
    if (parts.size() == 1) return parts[0];
    std::vector<Arg> args(parts.begin(), parts.end());
    return op(OpKind::kConcat, std::move(args), {{"axis", i(axis)}});
  };
  if (out_used(0)) {
    V y = join(ys, 1);  // [steps, dirs, batch, hidden]
    if (batch_first) y = op(OpKind::kPermute, {y}, {{"perm", ints({2, 0, 1, 3})}});
    out(0, y);
  }
  auto state_out = [&](int k, std::vector<V>& parts) {
    V s = join(parts, 0);  // [dirs, batch, hidden]
    if (batch_first) s = op(OpKind::kTranspose, {s}, {{"dim0", i(0)}, {"dim1", i(1)}});
    out(k, s);
  };
  if (out_used(1)) state_out(1, hs);
  if (type == "LSTM" && out_used(2)) state_out(2, cs);
}

}  // namespace tracecache::onnx_import::detail
