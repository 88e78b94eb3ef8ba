// The transformer encoders: ViT-B/16 (torchvision.models.vit_b_16; attention is torch's
// nn.MultiheadAttention with one packed in_proj) and a BERT-base encoder with pooler
// (HuggingFace transformers' BertModel at the bert-base-uncased configuration).
#include <fmt/format.h>

#include <cmath>

#include "frontend/zoo/layers.h"
#include "frontend/zoo/models.h"

namespace tracecache::zoo::detail {

namespace {

// [N, L, heads * d] -> [N, heads, L, d].
Tensor split_heads(const Tensor& x, int64_t heads) {
  const Shape& s = x.shape();
  return permute(reshape(x, {s[0], s[1], heads, s[2] / heads}), {0, 2, 1, 3});
}

// [N, heads, L, d] -> [N, L, heads * d].
Tensor merge_heads(const Tensor& x) {
  const Shape& s = x.shape();
  return reshape(permute(x, {0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
}

// x[:, 0] of [N, L, E]: [N, E].
Tensor first_token(const Tensor& x) {
  return reshape(slice(x, 1, 0, 1), {x.shape()[0], x.shape()[2]});
}

// ---- ViT-B/16 ---------------------------------------------------------------------------------

struct VitConfig {
  int64_t patch = 16;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t hidden = 768;
  int64_t mlp = 3072;
  int64_t num_classes = 1000;
  double eps = 1e-6;
};

std::string vit_layer(int64_t i) { return fmt::format("encoder.layers.encoder_layer_{}", i); }

void declare_vit(const VitConfig& c, int64_t resolution, SpecBuilder& b) {
  int64_t seq = (resolution / c.patch) * (resolution / c.patch) + 1;
  b.parameter("class_token", Shape{1, 1, c.hidden}, full_init(0));
  b.conv("conv_proj", c.hidden, 3, c.patch, 1, true);
  b.parameter("encoder.pos_embedding", Shape{1, seq, c.hidden},
              normal_init("encoder.pos_embedding", 0.02));
  double bound = 1.0 / std::sqrt(static_cast<double>(c.hidden));
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string p = vit_layer(i);
    b.layer_norm(p + ".ln_1", c.hidden);
    b.parameter(p + ".self_attention.in_proj_weight", Shape{3 * c.hidden, c.hidden},
                uniform_init(p + ".self_attention.in_proj_weight", bound));
    b.parameter(p + ".self_attention.in_proj_bias", Shape{3 * c.hidden},
                uniform_init(p + ".self_attention.in_proj_bias", bound));
    b.linear(p + ".self_attention.out_proj", c.hidden, c.hidden);
    b.layer_norm(p + ".ln_2", c.hidden);
    b.linear(p + ".mlp.0", c.mlp, c.hidden);
    b.linear(p + ".mlp.3", c.hidden, c.mlp);
  }
  b.layer_norm("encoder.ln", c.hidden);
  b.linear("heads.head", c.num_classes, c.hidden);
}

// torch.nn.MultiheadAttention(batch_first=True) on (x, x, x), no mask, inference.
Tensor self_attention(const VitConfig& c, const Weights& w, const std::string& p, const Tensor& x) {
  Tensor qkv = linear(x, w[p + ".in_proj_weight"], w[p + ".in_proj_bias"]);
  int64_t e = c.hidden;
  Tensor q = split_heads(slice(qkv, 2, 0, e), c.heads);
  Tensor k = split_heads(slice(qkv, 2, e, 2 * e), c.heads);
  Tensor v = split_heads(slice(qkv, 2, 2 * e, 3 * e), c.heads);
  return linear_layer(w, p + ".out_proj", merge_heads(scaled_dot_product_attention(q, k, v)));
}

Tensor vit_forward(const VitConfig& c, const Weights& w, const Tensor& image) {
  int64_t n = image.shape()[0];
  Tensor x = conv_layer(w, "conv_proj", image, c.patch, 0, 1, true);
  const Shape& s = x.shape();
  x = permute(reshape(x, {n, c.hidden, s[2] * s[3]}), {0, 2, 1});
  Tensor parts[] = {broadcast_to(w["class_token"], {n, 1, c.hidden}), x};
  x = concat(parts, 1);
  x = dropout_layer(w, x + w["encoder.pos_embedding"], 0.0);
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string p = vit_layer(i);
    Tensor y = layer_norm_layer(w, p + ".ln_1", x, c.eps);
    y = dropout_layer(w, self_attention(c, w, p + ".self_attention", y), 0.0);
    x = x + y;
    Tensor z = layer_norm_layer(w, p + ".ln_2", x, c.eps);
    z = dropout_layer(w, gelu(linear_layer(w, p + ".mlp.0", z)), 0.0);
    z = dropout_layer(w, linear_layer(w, p + ".mlp.3", z), 0.0);
    x = x + z;
  }
  x = layer_norm_layer(w, "encoder.ln", x, c.eps);
  return linear_layer(w, "heads.head", first_token(x));
}

// ---- BERT-base --------------------------------------------------------------------------------

struct BertConfig {
  int64_t vocab = 30522;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  int64_t max_positions = 512;
  int64_t type_vocab = 2;
  double eps = 1e-12;
  double dropout = 0.1;
};

std::string bert_layer(int64_t i) { return fmt::format("encoder.layer.{}", i); }

void declare_bert(const BertConfig& c, SpecBuilder& b) {
  b.embedding("embeddings.word_embeddings", c.vocab, c.hidden);
  b.embedding("embeddings.position_embeddings", c.max_positions, c.hidden);
  b.embedding("embeddings.token_type_embeddings", c.type_vocab, c.hidden);
  b.layer_norm("embeddings.LayerNorm", c.hidden);
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string p = bert_layer(i);
    b.linear(p + ".attention.self.query", c.hidden, c.hidden);
    b.linear(p + ".attention.self.key", c.hidden, c.hidden);
    b.linear(p + ".attention.self.value", c.hidden, c.hidden);
    b.linear(p + ".attention.output.dense", c.hidden, c.hidden);
    b.layer_norm(p + ".attention.output.LayerNorm", c.hidden);
    b.linear(p + ".intermediate.dense", c.intermediate, c.hidden);
    b.linear(p + ".output.dense", c.hidden, c.intermediate);
    b.layer_norm(p + ".output.LayerNorm", c.hidden);
  }
  b.linear("pooler.dense", c.hidden, c.hidden);
}

std::vector<Tensor> bert_forward(const BertConfig& c, LazyContext& ctx, std::span<const Tensor> in,
                                 const Weights& w) {
  const Tensor& ids = in[0];
  const Tensor& token_types = in[1];
  const Tensor& mask = in[2];
  int64_t n = ids.shape()[0], len = ids.shape()[1];
  Tensor positions = reshape(arange(ctx, 0, static_cast<double>(len)), {1, len});
  Tensor x = embedding(w["embeddings.word_embeddings.weight"], ids) +
             embedding(w["embeddings.token_type_embeddings.weight"], token_types);
  x = x + embedding(w["embeddings.position_embeddings.weight"], positions);
  x = dropout_layer(w, layer_norm_layer(w, "embeddings.LayerNorm", x, c.eps), c.dropout);
  // HuggingFace's extended mask: (1 - mask) * finfo(float32).min, broadcast over heads and
  // queries.
  Tensor additive = (cast(mask, DType::kF32) - 1.0) * 3.4028234663852886e38;
  additive = reshape(additive, {n, 1, 1, len});
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string p = bert_layer(i);
    Tensor q = split_heads(linear_layer(w, p + ".attention.self.query", x), c.heads);
    Tensor k = split_heads(linear_layer(w, p + ".attention.self.key", x), c.heads);
    Tensor v = split_heads(linear_layer(w, p + ".attention.self.value", x), c.heads);
    Tensor context = merge_heads(scaled_dot_product_attention(q, k, v, additive));
    Tensor a = dropout_layer(w, linear_layer(w, p + ".attention.output.dense", context), c.dropout);
    a = layer_norm_layer(w, p + ".attention.output.LayerNorm", a + x, c.eps);
    Tensor h = gelu(linear_layer(w, p + ".intermediate.dense", a));
    h = dropout_layer(w, linear_layer(w, p + ".output.dense", h), c.dropout);
    x = layer_norm_layer(w, p + ".output.LayerNorm", h + a, c.eps);
  }
  Tensor pooled = tanh(linear_layer(w, "pooler.dense", first_token(x)));
  return {x, pooled};
}

}  // namespace

Result<ModelSpec> make_vit_b_16(const ModelOptions& options) {
  VitConfig c;
  if (options.preset == Preset::kSmall) {
    c.layers = 2;
    c.heads = 4;
    c.hidden = 64;
    c.mlp = 128;
    c.num_classes = 10;
  }
  Result<ImageShape> shape = image_shape("vit_b_16", options, 32, c.patch, c.patch);
  if (!shape.is_ok()) return shape.status();
  ModelSpec spec = image_classifier("vit_b_16", options, *shape);
  SpecBuilder b(&spec.tensors);
  declare_vit(c, shape->resolution, b);
  spec.forward = [c](LazyContext&, std::span<const Tensor> in, const Weights& w) {
    return std::vector<Tensor>{vit_forward(c, w, in[0])};
  };
  return spec;
}

Result<ModelSpec> make_bert_base(const ModelOptions& options) {
  BertConfig c;
  int64_t batch = 1, len = 128;
  if (options.preset == Preset::kSmall) {
    c.vocab = 1000;
    c.hidden = 64;
    c.layers = 2;
    c.heads = 4;
    c.intermediate = 128;
    c.max_positions = 128;
    len = 16;
  }
  if (options.resolution != 0) {
    return invalid_argument(
        "bert_base is a text model: it takes a sequence length, not a resolution");
  }
  if (options.batch != 0) batch = options.batch;
  if (options.seq_len != 0) len = options.seq_len;
  Status st = check_batch("bert_base", batch);
  if (!st.is_ok()) return st;
  if (len < 1 || len > c.max_positions) {
    return invalid_argument(fmt::format("bert_base: sequence length must be in [1, {}], got {}",
                                        c.max_positions, len));
  }
  ModelSpec spec;
  spec.name = "bert_base";
  for (const ModelInfo& m : zoo_models()) {
    if (m.name == spec.name) spec.description = std::string(m.description);
  }
  spec.kind = ModelKind::kText;
  spec.preset = options.preset;
  Generator ids;
  ids.kind = Generator::Kind::kUniform;
  ids.seed = 1;
  ids.low = 0;
  ids.high = static_cast<double>(c.vocab);
  Generator zeros = full_init(0), ones = full_init(1);
  spec.inputs = {{"input_ids", DType::kI64, Shape{batch, len}, ids, c.vocab},
                 {"token_type_ids", DType::kI64, Shape{batch, len}, zeros, c.type_vocab},
                 {"attention_mask", DType::kI64, Shape{batch, len}, ones}};
  spec.output_names = {"last_hidden_state", "pooler_output"};
  SpecBuilder b(&spec.tensors);
  declare_bert(c, b);
  spec.forward = [c](LazyContext& ctx, std::span<const Tensor> in, const Weights& w) {
    return bert_forward(c, ctx, in, w);
  };
  return spec;
}

}  // namespace tracecache::zoo::detail
