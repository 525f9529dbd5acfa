// The captioning model (vit/caption/model.h): the ViT's features as the memory of the core's
// decoder. Forward, hand-written backward, the attention penalty and the hooks of other loss
// terms, and incremental decoding.
#include "vit/caption/model.h"

#include <algorithm>
#include <optional>
#include <string>

#include "common/error.h"

namespace vitk::caption {

namespace {

// The 2-D sine-cosine code of the memory's patch rows (memory_positions): for the patch in grid
// row r and column c, the core's 1-D sinusoids of width d/2 (nn::sinusoidal_positions) for r in
// the first half of d and for c in the second; the class token's row (memory_class_token) stays 0.
Tensor memory_sincos(const CaptionConfig& c) {
  const int64_t d = c.d_model(), half = d / 2, Wg = c.encoder.grid_width();
  const Tensor rows = nn::sinusoidal_positions(c.encoder.grid_height(), half);  // [Hg, d/2]
  const Tensor cols = nn::sinusoidal_positions(Wg, half);                       // [Wg, d/2]
  const int64_t first = c.memory_class_token ? 1 : 0;
  Tensor table({c.memory_tokens(), d});  // zero-filled: the class token's row stays 0
  for (int64_t n = 0; n < c.encoder.patches(); ++n) {
    float* row = table.f32() + (first + n) * d;
    std::copy_n(rows.f32() + (n / Wg) * half, half, row);
    std::copy_n(cols.f32() + (n % Wg) * half, half, row + half);
  }
  return table;
}

}  // namespace

struct CaptionModel::Impl {
  Impl(ParamStore& params, const CaptionConfig& c)
      : store(params),
        first_param(params.params().size()),
        vit(params, c.encoder),
        encoder_end(params.params().size()),
        embed(&params.add("decoder.embed_tokens.weight", {c.vocab_size, c.d_model()})),
        positions(params, "decoder.embed_positions.weight", c.max_length, c.d_model()),
        decoder(params, "decoder", c.decoder_layer_config(), c.decoder_layers,
                /*final_norm=*/true),
        output(c.tie_embeddings
                   ? embed
                   : &params.add("output_projection.weight", {c.vocab_size, c.d_model()})),
        end_param(params.params().size()),
        drop(c.decoder_dropout),
        memory_code(c.memory_positions ? memory_sincos(c) : Tensor()) {}

  ParamStore& store;
  size_t first_param;
  vit::VisionTransformer vit;
  size_t encoder_end;
  Parameter* embed;                // [V, d]
  nn::LearnedPositions positions;  // [max_length, d]
  nn::Decoder decoder;
  Parameter* output;  // [V, d] (embed when tied)
  size_t end_param;
  nn::Dropout drop;
  Tensor memory_code;  // [Tm, d] added to the memory (memory_positions), else empty

  // Kept by a training forward.
  bool trained = false;
  bool encoder_ran_training = false;
  Tensor target_in, target_lengths;     // the ids, for the embedding gradient and the penalty
  Tensor hidden;                        // decoder output [B, Tt, d]
  Tensor memory;                        // [B, Tm, d], for the loss hooks
  Tensor extra_dmemory, extra_doutput;  // the hooks' gradients, added by backward
  int64_t batch = 0, features_rows = 0;
  ops::Precision precision = ops::Precision::f32;
};

CaptionModel::CaptionModel(ParamStore& params, const CaptionConfig& config) : config_(config) {
  config.validate();
  impl_ = std::make_shared<Impl>(params, config);
}

vit::VisionTransformer& CaptionModel::encoder() {
  return impl_->vit;
}

nn::Decoder& CaptionModel::decoder() {
  return impl_->decoder;
}

std::pair<size_t, size_t> CaptionModel::encoder_params() const {
  return {impl_->first_param, impl_->encoder_end};
}

void CaptionModel::init(ops::Rng& rng) {
  Impl& m = *impl_;
  if (!m.store.finalized()) throw Error("caption: init() needs ParamStore::finalize() first");
  m.vit.init(rng);
  for (size_t i = m.encoder_end; i < m.end_param; ++i) {
    Parameter& p = m.store.params()[i];
    const bool weight = p.name.size() > 7 && p.name.compare(p.name.size() - 7, 7, ".weight") == 0;
    if (&p == m.embed || &p == &m.positions.table || &p == m.output ||
        (weight && p.shape.size() == 2)) {
      nn::init_trunc_normal(p.value, 0.02f, rng);
      if (&p == m.embed) {
        const int64_t d = config_.d_model();
        std::fill_n(p.value.f32() + Vocabulary::kPad * d, d, 0.f);
      }
    } else if (weight) {
      p.value.fill(1.f);  // LayerNorm gains
    } else {
      p.value.zero();  // biases
    }
  }
  m.store.mark_changed();
}

namespace {

// features [B, 1 + N, d] -> memory: itself, or a copy of rows 1.. [B, N, d].
Tensor memory_of(nn::Context& ctx, const Tensor& features, bool class_token) {
  if (class_token) return features;
  const int64_t B = features.dim(0), T = features.dim(1), d = features.dim(2);
  Tensor memory = ctx.alloc_uninit({B, T - 1, d});
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(features.f32() + (b * T + 1) * d, (T - 1) * d, memory.f32() + b * (T - 1) * d);
  return memory;
}

void check_targets(const Tensor& target_in, const Tensor& target_lengths, int64_t batch,
                   int64_t max_length) {
  if (target_in.dtype() != DType::i32 || target_in.rank() != 2 || target_in.dim(0) != batch ||
      target_in.dim(1) < 1)
    throw Error("caption: target_in " + shape_str(target_in.shape()) + " should be i32 [" +
                std::to_string(batch) + ", Tt]");
  const int64_t Tt = target_in.dim(1);
  if (Tt > max_length)
    throw Error("caption: target_in has " + std::to_string(Tt) +
                " positions, more than model.max_length " + std::to_string(max_length));
  if (target_lengths.dtype() != DType::i32 || target_lengths.rank() != 1 ||
      target_lengths.dim(0) != batch)
    throw Error("caption: target_lengths " + shape_str(target_lengths.shape()) +
                " should be i32 [" + std::to_string(batch) + "]");
  for (int64_t b = 0; b < batch; ++b)
    if (target_lengths.i32()[b] < 1 || target_lengths.i32()[b] > Tt)
      throw Error("caption: target_lengths[" + std::to_string(b) +
                  "] = " + std::to_string(target_lengths.i32()[b]) + " is outside [1, " +
                  std::to_string(Tt) + "]");
}

}  // namespace

Tensor CaptionModel::encode(nn::Context& ctx, const Tensor& images) {
  Impl& m = *impl_;
  Tensor features = m.vit.features(ctx, images);  // [B, 1 + N, d]
  m.features_rows = features.dim(1);
  Tensor memory = memory_of(ctx, features, config_.memory_class_token);  // [B, Tm, d]
  if (m.memory_code.empty()) return memory;
  // A new tensor: the features may be the memory itself, and are the encoder's.
  const int64_t B = memory.dim(0), n = m.memory_code.numel();
  Tensor placed = ctx.alloc_uninit(memory.shape());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i)
      placed.f32()[b * n + i] = memory.f32()[b * n + i] + m.memory_code.f32()[i];
  return placed;  // the code is constant: the memory's gradient is the features'
}

Tensor CaptionModel::forward(nn::Context& ctx, const Tensor& images, const Tensor& target_in,
                             const Tensor& target_lengths) {
  Impl& m = *impl_;
  m.trained = false;  // until this forward has succeeded
  const int64_t B = images.rank() == 4 ? images.dim(0) : -1, V = config_.vocab_size;
  check_targets(target_in, target_lengths, B, config_.max_length);
  const int64_t Tt = target_in.dim(1);

  // A frozen encoder runs as at inference: nothing kept, no dropout or stochastic depth.
  nn::Context enc = ctx;
  enc.training = ctx.training && train_encoder;
  Tensor memory = encode(enc, images);  // [B, Tm, d]
  m.encoder_ran_training = enc.training;

  Tensor x = nn::embed_tokens(ctx, target_in, m.embed->value, 1.f, m.positions.table.value,
                              0);  // [B, Tt, d]
  x = m.drop.forward(ctx, x);
  // The loss terms on the attention (the penalty, those through the loss hooks) read the last
  // layer's weights (cross_attention() sets keep_weights itself).
  nn::MultiHeadAttention& last = m.decoder.layers().back().cross_attention();
  const bool kept = last.keep_weights;
  if (ctx.training) {
    last.keep_weights = keep_attention_weights;
    last.dweights = Tensor();  // a loss term of an earlier forward that no backward took
  }
  Tensor h = m.decoder.forward(ctx, x, memory, nn::AttentionMask{target_lengths, true},
                               nn::AttentionMask{});  // [B, Tt, d]
  last.keep_weights = kept;
  Tensor logits = ctx.alloc_uninit({B, Tt, V});  // [B, Tt, V]
  ops::linear_forward(h, nn::weight_of(*m.output, ctx), Tensor(), logits, ctx.precision);

  m.trained = ctx.training;
  m.precision = ctx.precision;
  m.batch = B;
  if (ctx.training) {
    m.target_in = target_in, m.target_lengths = target_lengths, m.hidden = h, m.memory = memory;
  } else {
    m.target_in = m.target_lengths = m.hidden = m.memory = Tensor();
  }
  m.extra_dmemory = m.extra_doutput = Tensor();  // a loss of an earlier forward
  return logits;
}

CaptionModel::LossHooks CaptionModel::loss_hooks() {
  return LossHooks(*impl_);
}

void CaptionModel::LossHooks::require_training_forward(const char* who) const {
  if (!m_->trained) throw Error(std::string("caption: ") + who + " needs a training forward");
}

const Tensor& CaptionModel::LossHooks::attention(const char* who) const {
  const Tensor& w = m_->decoder.layers().back().cross_attention().weights();  // [B, H, Tt, Tm]
  if (!m_->trained || w.empty())
    throw Error(std::string("caption: ") + who +
                " needs a training forward with keep_attention_weights");
  return w;
}

Tensor& CaptionModel::LossHooks::attention_grad(const char* who) const {
  const Tensor& w = attention(who);
  Tensor& dw = m_->decoder.layers().back().cross_attention().dweights;
  if (dw.shape() != w.shape()) dw = Tensor(w.shape());  // zero-filled
  return dw;
}

const Tensor& CaptionModel::LossHooks::target_lengths() const {
  return m_->target_lengths;
}

const Tensor& CaptionModel::LossHooks::memory() const {
  return m_->memory;
}

Tensor& CaptionModel::LossHooks::memory_grad() const {
  if (m_->extra_dmemory.empty()) m_->extra_dmemory = Tensor(m_->memory.shape());
  return m_->extra_dmemory;
}

const Tensor& CaptionModel::LossHooks::output_weight() const {
  return m_->output->value;
}

Tensor& CaptionModel::LossHooks::output_weight_grad() const {
  if (m_->extra_doutput.empty()) m_->extra_doutput = Tensor(m_->output->value.shape());
  return m_->extra_doutput;
}

double CaptionModel::attention_penalty(float lambda, float grad_scale) {
  const LossHooks hooks = loss_hooks();
  Tensor& dw = hooks.attention_grad("attention_penalty");  // pad positions get no gradient
  const Tensor& w = hooks.attention("attention_penalty");  // [B, H, Tt, Tm]
  const int64_t B = w.dim(0), H = w.dim(1), Tt = w.dim(2), Tm = w.dim(3);
  double total = 0;
  std::vector<double> coverage(static_cast<size_t>(Tm));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = hooks.target_lengths().i32()[b];
    // coverage_i = Σ_t α_ti, α the mean over the heads
    std::fill(coverage.begin(), coverage.end(), 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < len; ++t) {
        const float* row = w.f32() + ((b * H + h) * Tt + t) * Tm;
        for (int64_t i = 0; i < Tm; ++i) coverage[static_cast<size_t>(i)] += row[i] / H;
      }
    for (int64_t i = 0; i < Tm; ++i) {
      const double gap = 1.0 - coverage[static_cast<size_t>(i)];
      total += lambda * gap * gap;
      // d/dα_ti of λ(1 − c_i)² is −2λ(1 − c_i), for every t; α is the mean of H heads
      const float g = static_cast<float>(-2.0 * lambda * gap / H * grad_scale);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < len; ++t) dw.f32()[((b * H + h) * Tt + t) * Tm + i] += g;
    }
  }
  return total;
}

void CaptionModel::backward(nn::Context& ctx, const Tensor& dlogits) {
  Impl& m = *impl_;
  if (!m.trained) throw Error("caption: backward without a training forward");
  const int64_t B = m.hidden.dim(0), Tt = m.hidden.dim(1), d = config_.d_model();
  const Shape want{B, Tt, config_.vocab_size};
  if (dlogits.dtype() != DType::f32 || dlogits.shape() != want)
    throw Error("caption: dlogits " + shape_str(dlogits.shape()) + " should be f32 " +
                shape_str(want) + " like the logits of the last forward");
  Tensor dh = ctx.alloc_uninit({B, Tt, d});  // [B, Tt, d]
  Tensor no_bias;
  nn::Context at_forward = ctx;
  at_forward.precision = m.precision;
  ops::linear_backward(m.hidden, nn::weight_of(*m.output, at_forward), dlogits, dh, m.output->grad,
                       no_bias, m.precision);
  if (!m.extra_doutput.empty()) ops::accumulate(m.output->grad, m.extra_doutput);
  Tensor dmemory;  // [B, Tm, d]
  Tensor dx = m.decoder.backward(ctx, dh, m.encoder_ran_training ? &dmemory : nullptr);
  if (!m.extra_dmemory.empty() && m.encoder_ran_training) ops::accumulate(dmemory, m.extra_dmemory);
  dx = m.drop.backward(ctx, dx);  // [B, Tt, d]
  ops::embedding_backward(m.target_in, dx, m.embed->grad, 1.f);
  m.positions.backward(ctx, dx);
  if (!m.encoder_ran_training) return;
  Tensor dfeatures = dmemory;  // [B, 1 + N, d]
  if (!config_.memory_class_token) {
    const int64_t T = m.features_rows;
    dfeatures = ctx.alloc({B, T, d});  // the class token's row: no gradient
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(dmemory.f32() + b * (T - 1) * d, (T - 1) * d, dfeatures.f32() + (b * T + 1) * d);
  }
  m.vit.features_backward(ctx, dfeatures);
}

void CaptionModel::start(nn::Context& ctx, const Tensor& memory, const Tensor& memory_lengths,
                         int64_t capacity, nn::Decoder::State& state) {
  if (capacity > config_.max_length)
    throw Error("caption: decoding capacity " + std::to_string(capacity) +
                " is more than model.max_length " + std::to_string(config_.max_length));
  if (memory.rank() != 3 || memory.dim(2) != config_.d_model())
    throw Error("caption: memory " + shape_str(memory.shape()) + " should be [B, Tm, " +
                std::to_string(config_.d_model()) + "]");
  impl_->decoder.start(ctx, memory, memory_lengths, capacity, state);
}

Tensor CaptionModel::step(nn::Context& ctx, const Tensor& tokens, nn::Decoder::State& state) {
  Impl& m = *impl_;
  const int64_t B = state.batch(), V = config_.vocab_size, d = config_.d_model();
  if (B == 0) throw Error("caption: step() before start()");
  if (tokens.dtype() != DType::i32 || tokens.numel() != B)
    throw Error("caption: step tokens " + shape_str(tokens.shape()) + " should be i32 [" +
                std::to_string(B) + "], one per row of the decoding state");
  const int64_t position = state.position();
  if (position >= state.capacity)
    throw Error("caption: decoding step at position " + std::to_string(position) +
                " is past the capacity " + std::to_string(state.capacity) + " given to start()");
  nn::Context inference = ctx;
  inference.training = false;
  Tensor x = nn::embed_tokens(inference, tokens.reshaped({B, 1}), m.embed->value, 1.f,
                              m.positions.table.value, position);  // [B, 1, d]
  Tensor h = m.decoder.step(inference, x, state);                  // [B, 1, d]
  Tensor logits = inference.alloc_uninit({B, V});                  // [B, V]
  ops::linear_forward(h.reshaped({B, d}), nn::weight_of(*m.output, inference), Tensor(), logits,
                      inference.precision);
  return logits;
}

Tensor CaptionModel::cross_attention(nn::Context& ctx, const Tensor& image,
                                     const std::vector<int32_t>& tokens, bool with_eos, int layer,
                                     int head) {
  Impl& m = *impl_;
  const int layers = config_.decoder_layers;
  if (layer < -1 || layer >= layers)
    throw UsageError("--attention-layer " + std::to_string(layer) + ": the decoder has " +
                     std::to_string(layers) + " layers (0.." + std::to_string(layers - 1) +
                     ", or 'last')");
  if (head < -1 || head >= config_.decoder_heads)
    throw UsageError("--attention-head " + std::to_string(head) + ": the decoder has " +
                     std::to_string(config_.decoder_heads) + " heads (0.." +
                     std::to_string(config_.decoder_heads - 1) + ", or 'mean' of them)");
  const int64_t rows = static_cast<int64_t>(tokens.size()) + (with_eos ? 1 : 0);
  if (rows < 1 || rows > config_.max_length)
    throw Error("caption: " + std::to_string(rows) + " attention rows for a model of " +
                std::to_string(config_.max_length) + " positions");
  Tensor target_in({1, rows}, DType::i32);
  target_in.i32()[0] = Vocabulary::kBos;
  for (int64_t t = 1; t < rows; ++t) target_in.i32()[t] = tokens[static_cast<size_t>(t - 1)];
  Tensor lengths({1}, DType::i32);
  lengths.i32()[0] = static_cast<int32_t>(rows);
  nn::Context inference = ctx;
  inference.training = false;
  nn::MultiHeadAttention& attn =
      m.decoder.layers()[static_cast<size_t>(layer < 0 ? layers - 1 : layer)].cross_attention();
  attn.keep_weights = true;
  forward(inference, image, target_in, lengths);
  attn.keep_weights = false;
  const Tensor& w = attn.weights();  // [1, H, rows, Tm]
  const int64_t H = w.dim(1), Tm = w.dim(3);
  Tensor out({rows, Tm});
  for (int64_t h = 0; h < H; ++h) {
    if (head >= 0 && h != head) continue;
    const float scale = head >= 0 ? 1.f : 1.f / static_cast<float>(H);
    for (int64_t i = 0; i < rows * Tm; ++i) out.f32()[i] += scale * w.f32()[h * rows * Tm + i];
  }
  return out;
}

}  // namespace vitk::caption
