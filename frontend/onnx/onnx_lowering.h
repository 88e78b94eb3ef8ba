// The ONNX importer's internals, shared by its core (onnx_importer.cc: the values and folding,
// the model walk) and its per-op handlers (onnx_ops_*.cc, one file per op family) and the op
// table (onnx_ops_table.cc). Not a public header: only frontend/onnx/ includes it.
//
// The handler contract: the core calls a node's handler (its OpRow's member function) with
// `node_` and `row_` set and every input that is an initializer already a known value. A
// handler reads its inputs with in(k), its attributes with attr_*() (an attribute no handler
// reads is refused after it returns), records ops with op() (which folds known values), and
// sets every output it produces with out(k, v); an output left unset is an error.
// Errors: handlers throw ImportFailure (through fail, fail_invalid, fail_unsupported,
// node_unsupported, needs_constant); import_model (the core) turns it into its Status.
// Thread-safety: an Importer is one import on one thread; the op table is immutable.
// Ownership: an Importer borrows the model and options for its run(); values are shared
// (V = shared_ptr<Value>) between the value map and the program being built.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

#include "capture/ops/ops.h"
#include "frontend/onnx/onnx_importer.h"
#include "frontend/program/op_call.h"

namespace tracecache::onnx_import::detail {

using ::onnx::AttributeProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

// Values computed at import time (shape arithmetic, constants) up to this many elements are
// kept as values; a larger result is left to the program as an op.
constexpr int64_t kFoldLimit = int64_t{1} << 16;

// An error that ends the import; import_onnx turns it into its Status.
struct ImportFailure {
  Status status;
  std::string reason;  // for kUnsupported: the short reason
};

[[noreturn]] inline void fail(Status status, std::string reason = {}) { throw ImportFailure{std::move(status), std::move(reason)}; }
[[noreturn]] inline void fail_unsupported(std::string reason, std::string message) {
  fail(unsupported(std::move(message)), std::move(reason));
}
[[noreturn]] inline void fail_invalid(std::string message) { fail(invalid_argument(std::move(message))); }

// A value of the ONNX graph: a program tensor, or a value known at import time, or both.
struct Value {
  TensorType type;
  std::shared_ptr<const HostBuffer> known;  // set: its value at import time
  bool weight = false;  // an initializer holding weights: never folded into a computed value
  std::string prog;     // its name in the program, once it is there
  std::string label;    // the safetensors name it gets if it becomes a param
};
using V = std::shared_ptr<Value>;

// An op operand: a value or a number (a scalar constant of the program, as `mul(x, 0.5)`).
struct Arg {
  Arg(V value) : v(std::move(value)) {}  // NOLINT: implicit by design
  Arg(double n) : number(n), is_number(true) {}  // NOLINT
  V v;
  double number = 0;
  bool is_number = false;
};

using Attrs = std::vector<std::pair<std::string_view, AttrValue>>;

// An ints attribute; kUnsupported for a list longer than kMaxRank.
AttrValue ints(const std::vector<int64_t>& v);
inline AttrValue i(int64_t v) { return AttrValue::of_int(v); }
inline AttrValue f(double v) { return AttrValue::of_float(v); }
inline AttrValue b(bool v) { return AttrValue::of_bool(v); }

inline std::vector<int64_t> dims_of(const Shape& s) { return {s.begin(), s.end()}; }

// The broadcast of two shapes; kInvalidArgument naming `what` when they do not broadcast.
std::vector<int64_t> broadcast_dims(std::vector<int64_t> a, std::vector<int64_t> b, std::string_view what);

class Importer;
using Handler = void (Importer::*)();

// The ONNX domain of the optimizer ops (Adagrad, Momentum, Adam); every other row is of the
// default domain ("" or "ai.onnx").
constexpr std::string_view kTrainingDomain = "ai.onnx.preview.training";

struct OpRow {
  std::string_view onnx;
  std::string_view lowering;
  Handler handler;
  OpKind kind = OpKind::kCount;  // the registry op of the generic handlers
  std::string_view domain = {};  // "" the default domain, else kTrainingDomain
};
// The op table (onnx_ops_table.cc), sorted by ONNX op name.
std::span<const OpRow> op_rows();

class Importer {
 public:
  Importer(const ::onnx::ModelProto& model, std::string name, std::string model_dir, const ImportOptions& options)
      : model_(model), name_(std::move(name)), model_dir_(std::move(model_dir)), options_(options) {}

  ImportedModel run();

  // ---- op handlers (op_rows() lists them) ----
  void unary();        // one registry op on input 0
  void binary();       // one registry op on inputs 0 and 1
  void variadic();     // a registry binary op folded over every input
  void identity();
  void constant();
  void shape();
  void size();
  void constant_of_shape();
  void range();
  void cast();
  void cast_like();
  void div();
  void pow();
  void mod();
  void not_();
  void and_or_xor();
  void less_or_equal();
  void mean_n();
  void reciprocal();
  void is_nan();
  void is_inf();
  void sign();
  void softplus();
  void softsign();
  void elu();
  void selu();
  void celu();
  void leaky_relu();
  void prelu();
  void thresholded_relu();
  void hard_sigmoid();
  void mish();
  void where();
  void matmul();
  void gemm();
  void reduce();
  void arg_extreme();
  void reshape();
  void flatten();
  void squeeze();
  void unsqueeze();
  void transpose();
  void concat();
  void slice();
  void split();
  void expand();
  void tile();
  void pad();
  void gather();
  void gather_elements();
  void gather_nd();
  void scatter_elements();
  void depth_to_space();
  void space_to_depth();
  void conv();
  void conv_transpose();
  void max_pool();
  void average_pool();
  void global_pool();
  void batch_norm();
  void instance_norm();
  void layer_norm();
  void softmax();
  void hardmax();
  void clip();
  void resize();
  void topk();
  void nll_loss();
  void softmax_cross_entropy();
  void dropout();
  void trilu();
  void eye_like();
  void shrink();
  void bit_shift();
  void cumsum();
  void det();
  void one_hot();
  void compress();
  void non_zero();
  void scatter_nd();
  void reverse_sequence();
  void max_unpool();
  void tfidf_vectorizer();
  void window();  // HannWindow, HammingWindow, BlackmanWindow
  void mean_variance_normalization();
  void lrn();
  void tan();  // onnx_ops_trig.cc
  void atan();
  void asin();
  void acos();
  void sinh();
  void cosh();
  void asinh();
  void acosh();
  void atanh();
  void einsum();       // onnx_ops_einsum.cc
  void recurrent();    // RNN, GRU, LSTM: onnx_ops_recurrent.cc
  void dft();          // onnx_ops_signal.cc
  void stft();
  void grid_sample();  // onnx_ops_sampling.cc
  void roi_align();
  void if_();          // onnx_ops_control.cc
  void loop();
  void scan();
  void adagrad();      // onnx_ops_training.cc (domain ai.onnx.preview.training)
  void momentum();
  void adam();
  void quantize_linear();
  void dequantize_linear();
  void dynamic_quantize_linear();

 private:
  // ---- values and the program ----
  // Records `kind` on `args`, or computes it now when every arg is a known non-weight value
  // (and `fold`).
  V op(OpKind kind, std::vector<Arg> args, const Attrs& attrs = {}, bool fold = true);
  V known(HostBuffer buf, std::string label = {});
  std::string materialize(const V& v);
  std::string unique_name(std::string_view base);
  std::string label_for_node();

  // ---- the node being lowered ----
  std::string where_() const;
  [[noreturn]] void node_unsupported(std::string what);
  // An input whose value the lowering needs (a shape, axes, pads) is computed from input data.
  [[noreturn]] void needs_constant(std::string_view input);
  bool has_in(int k) const { return k < node_->input_size() && !node_->input(k).empty(); }
  V in(int k);
  bool out_used(int k) const { return k < node_->output_size() && !node_->output(k).empty(); }
  void out(int k, V v);
  const AttributeProto* attr(std::string_view name);
  int64_t attr_int(std::string_view name, int64_t def);
  float attr_float(std::string_view name, float def);
  std::string attr_string(std::string_view name, std::string def);
  std::optional<std::vector<int64_t>> attr_ints(std::string_view name);
  std::vector<int64_t> ints_of(const V& v, std::string_view what);
  double scalar_of(const V& v, std::string_view what);
  int64_t axis_of(int64_t axis, int rank, std::string_view what = "axis");
  void require_float(const V& v, std::string_view what);
  // f32, f64, f16 or bf16.
  void require_floating(const V& v, std::string_view what);

  // ---- lowering helpers ----
  V reshape_to(const V& x, const std::vector<int64_t>& dims);
  V cast_to(const V& x, DType dtype);
  V pad2d(const V& x, int64_t top, int64_t bottom, int64_t left, int64_t right, double value);
  V normalize_index(const V& idx, int64_t dim);
  V reduce_with(OpKind kind, const V& x, const std::vector<int64_t>& axes, bool keepdim);
  // i64 [start, end) by step: folded when small, else an arange op (nothing large is allocated
  // at import time).
  V arange(int64_t start, int64_t end, int64_t step);
  // i64 [rows, cols]: column index minus row index.
  V column_minus_row(int64_t rows, int64_t cols);
  // Conv and pool geometry: pads {top, left, bottom, right} from pads/auto_pad.
  std::array<int64_t, 4> spatial_pads(const Shape& x, const std::array<int64_t, 2>& kernel_extent,
                                      const std::array<int64_t, 2>& stride);
  std::array<int64_t, 2> pair_attr(std::string_view name, int64_t def);
  void require_rank4(const V& x, std::string_view what);
  // Lowers a 1-D Conv, ConvTranspose or pool through `handler` as 2-D; false for other ranks.
  bool lowered_as_2d(Handler handler);
  // Lowers a 3-D MaxPool or AveragePool without pads as two 2-D pools; false for other ranks.
  bool pooled_as_two_2d();
  // Lowers a 3-D ConvTranspose (group 1, explicit pads) as 2-D ones; false for other ranks.
  bool conv_transpose_3d();
  // The product over `axis`, kept as a dim of size 1 (onnx_ops_math.cc).
  V product_along(V x, int64_t axis);
  // `x` moved `by` places along `axis`, toward the end (or the start, with `backward`), zeros
  // coming in and what moves past the end dropped.
  V shift_along(const V& x, int64_t axis, int64_t by, bool backward);
  // log(1 + u), e^x - 1 for x >= 0, atan(x), accurate to a few ulp (onnx_ops_trig.cc).
  V log1p_(const V& u);
  V expm1_nonnegative(const V& x);
  V atan_(const V& x);
  // The DFT along the last dim of `re` (and `im`): [..., bins, 2] (onnx_ops_signal.cc).
  V dft_last(const V& re, const V* im, int64_t bins, bool inverse);
  // Lowers subgraph `g` with its inputs bound to `inputs`; its outputs (onnx_ops_control.cc).
  std::vector<V> inline_graph(const ::onnx::GraphProto& g, const std::vector<V>& inputs);
  // An RNN activation by its ONNX name (Tanh, Sigmoid, Relu); kUnsupported for another.
  V activation(std::string_view name, const V& x);
  // Quantization (onnx_ops_quant.cc): a scale or zero point made broadcastable to x (per-channel
  // along the node's axis); input k, or a scalar 0 of `dtype`.
  V quant_param(const V& p, const V& x, std::string_view what);
  V zero_point_or(int k, DType dtype);
  // NegativeLogLikelihoodLoss of log-probabilities `x` (onnx_ops_math.cc); weight: null or [C].
  V nll(const V& x, const V& target, const V* weight);

  void declare_inputs();
  // The table row of `node`'s op; kUnsupported naming node_ for an op it does not have.
  const OpRow* find_row(const NodeProto& node);
  void lower_node(int index, const NodeProto& node);
  void rename_outputs(size_t first_op);

  const ::onnx::ModelProto& model_;
  std::string name_;
  std::string model_dir_;
  const ImportOptions& options_;
  ImportedModel result_;
  std::unordered_map<std::string, V> values_;
  std::unordered_map<std::string, const TensorProto*> initializers_;
  std::set<std::string> names_;          // program names taken
  std::set<std::string> param_labels_;   // safetensors names taken
  std::unordered_map<std::string, size_t> defined_at_;  // op result name -> index in program.ops
  int temp_counter_ = 0;
  int label_counter_ = 0;
  const NodeProto* node_ = nullptr;
  int node_index_ = -1;
  const OpRow* row_ = nullptr;
  std::set<std::string> attrs_read_;
};

}  // namespace tracecache::onnx_import::detail
