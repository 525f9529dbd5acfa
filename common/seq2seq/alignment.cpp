// Cross-attention weights of a translation, from one teacher-forced forward.
#include "common/seq2seq/alignment.h"

#include "common/error.h"

namespace vitk::seq2seq {
namespace {

int resolve_layer(const TransformerConfig& c, const AlignmentOptions& o) {
  const int layers = c.decoder_layers;
  const int layer = o.layer < 0 ? layers - 1 : o.layer;
  if (layer >= layers)
    throw UsageError("--attention-layer " + std::to_string(o.layer) + ": the model has " +
                     std::to_string(layers) + " decoder layers (0 to " +
                     std::to_string(layers - 1) + ")");
  if (o.head >= c.heads)
    throw UsageError("--attention-head " + std::to_string(o.head) + ": the model has " +
                     std::to_string(c.heads) + " heads (0 to " + std::to_string(c.heads - 1) + ")");
  return layer;
}

// keep_weights set for the lifetime of the guard, whatever happens in between.
struct KeepWeights {
  nn::MultiHeadAttention& attention;
  explicit KeepWeights(nn::MultiHeadAttention& a) : attention(a) { attention.keep_weights = true; }
  ~KeepWeights() { attention.keep_weights = false; }
};

}  // namespace

std::string describe(const Transformer& model, const AlignmentOptions& options) {
  const TransformerConfig& c = model.config();
  const int layer = resolve_layer(c, options);
  std::string s = "decoder layer " + std::to_string(layer) + " of " +
                  std::to_string(c.decoder_layers) +
                  (layer == c.decoder_layers - 1 ? " (the last), " : ", ");
  if (options.head < 0) return s + "mean of " + std::to_string(c.heads) + " heads";
  return s + "head " + std::to_string(options.head) + " of " + std::to_string(c.heads);
}

Tensor cross_attention(Transformer& model, const std::vector<int>& source,
                       const std::vector<int32_t>& target, bool with_eos,
                       const AlignmentOptions& options) {
  const TransformerConfig& c = model.config();
  const int layer = resolve_layer(c, options);
  if (source.empty()) throw Error("alignment: empty source");
  const int64_t Ts = static_cast<int64_t>(source.size());
  // The decoder reads BOS and the target; position t predicts target[t] (EOS after the last).
  const int64_t rows = static_cast<int64_t>(target.size()) + (with_eos ? 1 : 0);
  if (rows < 1) throw Error("alignment: a target without tokens has no row to show");
  Tensor src({1, Ts}, DType::i32), src_len({1}, DType::i32);
  Tensor tgt({1, rows}, DType::i32), tgt_len({1}, DType::i32);
  for (int64_t j = 0; j < Ts; ++j) src.i32()[j] = source[static_cast<size_t>(j)];
  tgt.i32()[0] = kBosId;
  for (int64_t t = 1; t < rows; ++t) tgt.i32()[t] = target[static_cast<size_t>(t - 1)];
  src_len.i32()[0] = static_cast<int32_t>(Ts);
  tgt_len.i32()[0] = static_cast<int32_t>(rows);

  nn::MultiHeadAttention& attention = model.decoder().layers()[layer].cross_attention();
  KeepWeights keep(attention);
  Arena arena;
  nn::Context ctx;
  ctx.training = false;
  ctx.arena = &arena;
  nn::set_inference_precision(ctx, options.precision);
  ctx.one_copy_of_weights = options.precision == ops::Precision::int8;
  model.forward(ctx, src, src_len, tgt, tgt_len);
  const Tensor& w = attention.weights();  // [1, H, rows, Ts]
  const int64_t H = c.heads;
  if (w.shape() != Shape{1, H, rows, Ts})
    throw Error("alignment: decoder layer " + std::to_string(layer) + " kept weights of " +
                shape_str(w.shape()) + ", expected " + shape_str({1, H, rows, Ts}));
  Tensor out({rows, Ts});  // [rows, Ts]
  const float* p = w.f32();
  for (int64_t k = 0; k < rows * Ts; ++k) {
    if (options.head >= 0) {
      out.f32()[k] = p[options.head * rows * Ts + k];
      continue;
    }
    double sum = 0;
    for (int64_t h = 0; h < H; ++h) sum += p[h * rows * Ts + k];
    out.f32()[k] = static_cast<float>(sum / static_cast<double>(H));
  }
  return out;
}

}  // namespace vitk::seq2seq
