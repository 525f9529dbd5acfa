// The text classifier: forward, hand-written backward, the pooled attention and its
// initialisation (the translation model's, common/seq2seq/model.cpp).
#include "common/seq2seq/text_model.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "common/seq2seq/model.h"

namespace vitk::seq2seq {

struct TextClassifier::Impl {
  Impl(ParamStore& params, const TextClassifierConfig& c)
      : store(params),
        first_param(params.params().size()),
        embed(&params.add("encoder.embed_tokens.weight", {c.vocab_size, c.d_model})),
        cls(c.pool == TextPool::cls ? &params.add("cls_token", {1, 1, c.d_model}, false) : nullptr),
        encoder(params, "encoder", c.layer_config(), c.layers, c.pre_norm),
        end_encoder(params.params().size()),
        head(params, "head", c.d_model, c.num_classes),
        end_param(params.params().size()),
        embed_drop(c.dropout),
        pooled_drop(c.dropout),
        positions(nn::sinusoidal_positions(c.max_length, c.d_model)),
        scale(static_cast<float>(std::sqrt(static_cast<double>(c.d_model)))) {}

  ParamStore& store;
  size_t first_param;
  Parameter* embed;  // [V, d]
  Parameter* cls;    // [1, 1, d], or null (mean pooling)
  nn::Encoder encoder;
  size_t end_encoder;
  nn::Linear head;  // [C, d]
  size_t end_param;
  nn::Dropout embed_drop, pooled_drop;
  Tensor positions;  // [max_length, d]
  float scale;       // √d

  // Kept by a training forward.
  bool trained = false;
  Tensor ids;          // [B, T], for the embedding's gradient
  Tensor key_lengths;  // [B]: the sentence's positions in the encoder's sequence
  int64_t positions_in = 0;
  Tensor attention;  // [B, T'] with keep_attention
};

TextClassifier::TextClassifier(ParamStore& params, const TextClassifierConfig& config)
    : config_(config) {
  config.validate();
  impl_ = std::make_shared<Impl>(params, config);
}

std::pair<size_t, size_t> TextClassifier::encoder_params() const {
  return {impl_->first_param, impl_->end_encoder};
}

void TextClassifier::init(ops::Rng& rng) {
  Impl& m = *impl_;
  init_like_fairseq(m.store, m.first_param, m.end_param, {{m.embed, true}, {m.cls, false}},
                    config_.d_model, rng);
}

namespace {

void check_inputs(const Tensor& ids, const Tensor& lengths, int64_t max_tokens) {
  if (ids.dtype() != DType::i32 || ids.rank() != 2 || ids.dim(0) < 1 || ids.dim(1) < 1)
    throw Error("text classifier: ids " + shape_str(ids.shape()) + " should be i32 [B, T]");
  if (ids.dim(1) > max_tokens)
    throw Error("text classifier: ids have " + std::to_string(ids.dim(1)) +
                " positions, more than the model's " + std::to_string(max_tokens) +
                " (model.max_length)");
  const int64_t B = ids.dim(0), T = ids.dim(1);
  if (lengths.dtype() != DType::i32 || lengths.rank() != 1 || lengths.dim(0) != B)
    throw Error("text classifier: lengths " + shape_str(lengths.shape()) + " should be i32 [" +
                std::to_string(B) + "]");
  for (int64_t b = 0; b < B; ++b)
    if (lengths.i32()[b] < 1 || lengths.i32()[b] > T)
      throw Error("text classifier: lengths[" + std::to_string(b) + "] = " +
                  std::to_string(lengths.i32()[b]) + " is outside [1, " + std::to_string(T) + "]");
}

// The mean over the heads of attention weights [B, H, Tq, Tk] of the query rows [0, rows[b]) of
// each sentence (one row for a class token) -> [B, Tk].
Tensor mean_attention(const Tensor& w, const Tensor& rows) {
  const int64_t B = w.dim(0), H = w.dim(1), Tq = w.dim(2), Tk = w.dim(3);
  Tensor out({B, Tk});
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = rows.i32()[b];
    float* o = out.f32() + b * Tk;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t q = 0; q < n; ++q) {
        const float* row = w.f32() + ((b * H + h) * Tq + q) * Tk;
        for (int64_t k = 0; k < Tk; ++k) o[k] += row[k];
      }
    const float inv = 1.f / static_cast<float>(H * n);
    for (int64_t k = 0; k < Tk; ++k) o[k] *= inv;
  }
  return out;
}

}  // namespace

Tensor TextClassifier::forward(nn::Context& ctx, const Tensor& ids, const Tensor& lengths) {
  Impl& m = *impl_;
  m.trained = false;  // until this forward has succeeded
  m.attention = Tensor();
  const int64_t o = first_token();
  check_inputs(ids, lengths, config_.max_length - o);
  const int64_t B = ids.dim(0), T = ids.dim(1), d = config_.d_model, Tp = T + o;
  Tensor x = nn::embed_tokens(ctx, ids, m.embed->value, m.scale, m.positions, o);  // [B, T, d]
  Tensor key_lengths = lengths;
  if (m.cls) {
    Tensor xc = ctx.alloc_uninit({B, Tp, d});  // [B, 1 + T, d]
    key_lengths = Tensor({B}, DType::i32);
    for (int64_t b = 0; b < B; ++b) {
      float* row = xc.f32() + b * Tp * d;
      for (int64_t j = 0; j < d; ++j) row[j] = m.cls->value.f32()[j] + m.positions.f32()[j];
      std::copy(x.f32() + b * T * d, x.f32() + (b + 1) * T * d, row + d);
      key_lengths.i32()[b] = lengths.i32()[b] + 1;
    }
    x = xc;
  }
  x = m.embed_drop.forward(ctx, x);
  auto& last = m.encoder.layers().back().attention();
  struct KeepWeights {  // set for this forward only, whatever happens in it
    nn::MultiHeadAttention& a;
    ~KeepWeights() { a.keep_weights = false; }
  } keep{last};
  last.keep_weights = keep_attention && !ctx.training;
  Tensor h = m.encoder.forward(ctx, x, nn::AttentionMask{key_lengths, false});  // [B, T', d]

  Tensor pooled = ctx.alloc({B, d});  // [B, d]
  for (int64_t b = 0; b < B; ++b) {
    float* p = pooled.f32() + b * d;
    if (m.cls) {
      std::copy(h.f32() + b * Tp * d, h.f32() + b * Tp * d + d, p);
      continue;
    }
    const int64_t n = lengths.i32()[b];
    for (int64_t t = 0; t < n; ++t) {
      const float* row = h.f32() + (b * Tp + t) * d;
      for (int64_t j = 0; j < d; ++j) p[j] += row[j];
    }
    const float inv = 1.f / static_cast<float>(n);
    for (int64_t j = 0; j < d; ++j) p[j] *= inv;
  }
  pooled = m.pooled_drop.forward(ctx, pooled);
  Tensor logits = m.head.forward(ctx, pooled);  // [B, C]

  if (keep_attention && !ctx.training) {
    Tensor rows({B}, DType::i32);
    for (int64_t b = 0; b < B; ++b) rows.i32()[b] = m.cls ? 1 : lengths.i32()[b];
    m.attention = mean_attention(last.weights(), rows);
  }
  m.trained = ctx.training;
  if (ctx.training) {
    m.ids = ids;
    m.key_lengths = key_lengths;
    m.positions_in = Tp;
  } else {
    m.ids = m.key_lengths = Tensor();
  }
  return logits;
}

void TextClassifier::backward(nn::Context& ctx, const Tensor& dlogits) {
  Impl& m = *impl_;
  if (!m.trained) throw Error("text classifier: backward without a training forward");
  const int64_t B = m.ids.dim(0), T = m.ids.dim(1), d = config_.d_model, Tp = m.positions_in;
  const Shape want{B, config_.num_classes};
  if (dlogits.dtype() != DType::f32 || dlogits.shape() != want)
    throw Error("text classifier: dlogits " + shape_str(dlogits.shape()) + " should be f32 " +
                shape_str(want) + " like the logits of the last forward");
  Tensor dpooled = m.head.backward(ctx, dlogits);  // [B, d]
  if (!train_encoder) return;
  dpooled = m.pooled_drop.backward(ctx, dpooled);

  Tensor dh = ctx.alloc({B, Tp, d});  // [B, T', d], zero on the rows the pooling did not read
  for (int64_t b = 0; b < B; ++b) {
    const float* g = dpooled.f32() + b * d;
    const int64_t n = m.cls ? 1 : m.key_lengths.i32()[b];
    const float share = m.cls ? 1.f : 1.f / static_cast<float>(n);
    for (int64_t t = 0; t < n; ++t) {
      float* row = dh.f32() + (b * Tp + t) * d;
      for (int64_t j = 0; j < d; ++j) row[j] = g[j] * share;
    }
  }
  Tensor dx = m.encoder.backward(ctx, dh);  // [B, T', d]
  dx = m.embed_drop.backward(ctx, dx);
  if (m.cls) {
    Tensor dtokens = ctx.alloc_uninit({B, T, d});  // [B, T, d]
    float* dcls = m.cls->grad.f32();
    for (int64_t b = 0; b < B; ++b) {
      const float* row = dx.f32() + b * Tp * d;
      for (int64_t j = 0; j < d; ++j) dcls[j] += row[j];
      std::copy(row + d, row + Tp * d, dtokens.f32() + b * T * d);
    }
    dx = dtokens;
  }
  ops::embedding_backward(m.ids, dx, m.embed->grad, m.scale);
}

Tensor TextClassifier::pooled_attention() const {
  if (impl_->attention.empty())
    throw Error(
        "text classifier: no attention kept (set keep_attention before an inference "
        "forward)");
  return impl_->attention;
}

ops::CrossEntropyStats text_loss(nn::Context& ctx, const Tensor& logits, const Tensor& labels,
                                 float label_smoothing, Tensor* dlogits, float scale) {
  if (logits.rank() != 2 || labels.rank() != 1 || labels.dtype() != DType::i32 ||
      labels.dim(0) != logits.dim(0))
    throw Error("text classifier: labels " + shape_str(labels.shape()) + " do not fit the logits " +
                shape_str(logits.shape()) + " (want i32 [B], [B, C])");
  if (!(label_smoothing >= 0.f && label_smoothing < 1.f))
    throw Error("text classifier: label smoothing must be in [0, 1), not " +
                std::to_string(label_smoothing));
  if (!dlogits) return ops::cross_entropy_forward(logits, labels, label_smoothing);
  *dlogits = ctx.alloc_uninit(logits.shape());
  return ops::cross_entropy_forward_backward(logits, labels, label_smoothing, -100, scale,
                                             *dlogits);
}

}  // namespace vitk::seq2seq
