// The translation model: forward, hand-written backward, incremental decoding and fairseq's
// initialisation.
//
// Forward (training keeps what backward needs):
//   xs     = dropout(√d · E[source] + pe[0:Ts])                 [B, Ts, d]
//   memory = encoder(xs, mask: source lengths)                  [B, Ts, d]
//   xt     = dropout(√d · E'[target_in] + pe[0:Tt])             [B, Tt, d]
//   h      = decoder(xt, memory, self: causal + target lengths,
//                    cross: source lengths)                     [B, Tt, d]
//   logits = h · Wᵀ                                             [B, Tt, V]
// With tied embeddings E, E' and W are one matrix, so its gradient is the sum of three
// contributions; each backward below adds into it.
#include "common/seq2seq/model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "common/error.h"

namespace vitk::seq2seq {

struct Transformer::Impl {
  Impl(ParamStore& params, const TransformerConfig& c)
      : store(params),
        first_param(params.params().size()),
        source_embed(
            &params.add(c.tied_embeddings ? "embed_tokens.weight" : "encoder.embed_tokens.weight",
                        {c.vocab_size, c.d_model})),
        encoder(params, "encoder", c.layer_config(), c.layers, c.pre_norm),
        target_embed(c.tied_embeddings
                         ? source_embed
                         : &params.add("decoder.embed_tokens.weight", {c.vocab_size, c.d_model})),
        decoder(params, "decoder", c.layer_config(), c.decoder_layers, c.pre_norm),
        output(c.tied_embeddings
                   ? source_embed
                   : &params.add("output_projection.weight", {c.vocab_size, c.d_model})),
        end_param(params.params().size()),
        source_drop(c.dropout),
        target_drop(c.dropout),
        positions(nn::sinusoidal_positions(c.max_length, c.d_model)),
        scale(static_cast<float>(std::sqrt(static_cast<double>(c.d_model)))) {}

  ParamStore& store;
  size_t first_param;
  Parameter* source_embed;  // [V, d]
  nn::Encoder encoder;
  Parameter* target_embed;  // [V, d] (source_embed when tied)
  nn::Decoder decoder;
  Parameter* output;  // [V, d] (source_embed when tied)
  bool tied() const { return output == target_embed || output == source_embed; }
  size_t end_param;
  nn::Dropout source_drop, target_drop;
  Tensor positions;  // [max_length, d]
  float scale;       // √d

  // Kept by a training forward.
  bool trained = false;
  Tensor source, target_in;                        // the ids, for the embedding gradients
  Tensor hidden;                                   // decoder output [B, Tt, d]
  ops::Precision precision = ops::Precision::f32;  // of the forward's products
};

namespace {

// logits = h · Wᵀ (no bias), h [..., d], W the output layer: at int8 inference on the quantised W,
// as CTranslate2 quantises the output layer too; otherwise at ctx's precision. A W tied to an
// embedding, whose rows the next step reads, keeps its f32 value.
void output_layer(nn::Context& ctx, Parameter& w, bool tied, const Tensor& h, Tensor& logits) {
  if (!ctx.int8_weights || ctx.training) {
    ops::linear_forward(h, nn::weight_of(w, ctx), Tensor(), logits, ctx.precision);
    return;
  }
  ops::QuantizedWeight& q = nn::quantized_of(w);
  if (ctx.one_copy_of_weights && !tied && !w.value_released) release_value(w);
  ops::linear_forward_int8(h, q, Tensor(), logits);
}

}  // namespace

Transformer::Transformer(ParamStore& params, const TransformerConfig& config) : config_(config) {
  config.validate();
  impl_ = std::make_shared<Impl>(params, config);
}

nn::Encoder& Transformer::encoder() {
  return impl_->encoder;
}

nn::Decoder& Transformer::decoder() {
  return impl_->decoder;
}

void init_like_fairseq(ParamStore& params, size_t first, size_t end,
                       const std::vector<EmbeddingInit>& embeddings, int64_t d, ops::Rng& rng) {
  if (!params.finalized()) throw Error("seq2seq: init() needs ParamStore::finalize() first");
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (size_t i = first; i < end; ++i) {
    Parameter& p = params.params()[i];
    float* v = p.value.f32();
    const auto embedding = std::find_if(embeddings.begin(), embeddings.end(),
                                        [&](const EmbeddingInit& e) { return e.param == &p; });
    if (embedding != embeddings.end()) {
      const double std = 1.0 / std::sqrt(static_cast<double>(d));
      for (int64_t j = 0; j < p.numel(); ++j) v[j] = static_cast<float>(rng.normal() * std);
      if (embedding->zero_pad_row)
        for (int64_t j = 0; j < d; ++j) v[kPadId * d + j] = 0.f;
    } else if (p.shape.size() == 2) {
      // Xavier-uniform of each [fan_out, fan_in] block: fused projections are q, k, v stacked.
      const bool qkv = ends_with(p.name, "qkv.weight") || ends_with(p.name, ".kv.weight") ||
                       ends_with(p.name, ".q.weight");
      const double fan_in = static_cast<double>(p.shape[1]);
      const double fan_out = qkv ? fan_in : static_cast<double>(p.shape[0]);
      const double gain = qkv ? 1.0 / std::sqrt(2.0) : 1.0;
      const double bound = gain * std::sqrt(6.0 / (fan_in + fan_out));
      for (int64_t j = 0; j < p.numel(); ++j)
        v[j] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    } else if (p.name.find("norm") != std::string::npos && ends_with(p.name, ".weight")) {
      p.value.fill(1.f);
    } else {
      p.value.zero();  // biases
    }
  }
  params.mark_changed();
}

void Transformer::init(ops::Rng& rng) {
  Impl& m = *impl_;
  // The output layer's pad row is zeroed only when it is the (tied) embedding.
  init_like_fairseq(
      m.store, m.first_param, m.end_param,
      {{m.source_embed, true}, {m.target_embed, true}, {m.output, config_.tied_embeddings}},
      config_.d_model, rng);
}

namespace {

// "what" must be i32 [B, T] with T in [1, max_length]; returns T.
int64_t check_ids(const char* what, const Tensor& ids, int64_t batch, int64_t max_length) {
  if (ids.dtype() != DType::i32 || ids.rank() != 2 || ids.dim(0) < 1 || ids.dim(1) < 1 ||
      (batch >= 0 && ids.dim(0) != batch))
    throw Error(std::string("seq2seq: ") + what + " " + shape_str(ids.shape()) +
                " should be i32 [B, T]" +
                (batch >= 0 ? " with B = " + std::to_string(batch) : std::string()));
  if (ids.dim(1) > max_length)
    throw Error(std::string("seq2seq: ") + what + " has " + std::to_string(ids.dim(1)) +
                " positions, more than model.max_length " + std::to_string(max_length));
  return ids.dim(1);
}

void check_lengths(const char* what, const Tensor& lengths, int64_t batch, int64_t max) {
  if (lengths.dtype() != DType::i32 || lengths.rank() != 1 || lengths.dim(0) != batch)
    throw Error(std::string("seq2seq: ") + what + " " + shape_str(lengths.shape()) +
                " should be i32 [" + std::to_string(batch) + "]");
  for (int64_t b = 0; b < batch; ++b)
    if (lengths.i32()[b] < 0 || lengths.i32()[b] > max)
      throw Error(std::string("seq2seq: ") + what + "[" + std::to_string(b) +
                  "] = " + std::to_string(lengths.i32()[b]) + " is outside [0, " +
                  std::to_string(max) + "]");
}

}  // namespace

Tensor Transformer::encode(nn::Context& ctx, const Tensor& source, const Tensor& source_lengths) {
  Impl& m = *impl_;
  const int64_t Ts = check_ids("source", source, -1, config_.max_length);
  check_lengths("source_lengths", source_lengths, source.dim(0), Ts);
  Tensor xs =
      nn::embed_tokens(ctx, source, m.source_embed->value, m.scale, m.positions, 0);  // [B, Ts, d]
  xs = m.source_drop.forward(ctx, xs);
  return m.encoder.forward(ctx, xs, nn::AttentionMask{source_lengths, false});  // [B, Ts, d]
}

Tensor Transformer::forward(nn::Context& ctx, const Tensor& source, const Tensor& source_lengths,
                            const Tensor& target_in, const Tensor& target_lengths) {
  Impl& m = *impl_;
  m.trained = false;  // until this forward has succeeded
  const int64_t Tt = check_ids("target_in", target_in, source.rank() == 2 ? source.dim(0) : -1,
                               config_.max_length);
  const int64_t B = target_in.dim(0), V = config_.vocab_size;
  check_lengths("target_lengths", target_lengths, B, Tt);
  Tensor memory = encode(ctx, source, source_lengths);  // [B, Ts, d]

  Tensor xt = nn::embed_tokens(ctx, target_in, m.target_embed->value, m.scale, m.positions,
                               0);  // [B, Tt, d]
  xt = m.target_drop.forward(ctx, xt);
  Tensor h = m.decoder.forward(ctx, xt, memory, nn::AttentionMask{target_lengths, true},
                               nn::AttentionMask{source_lengths, false});  // [B, Tt, d]
  Tensor logits = ctx.alloc({B, Tt, V});                                   // [B, Tt, V]
  output_layer(ctx, *m.output, m.tied(), h, logits);

  m.trained = ctx.training;
  m.precision = ctx.precision;
  if (ctx.training) {
    m.source = source, m.target_in = target_in, m.hidden = h;
  } else {
    m.source = m.target_in = m.hidden = Tensor();
  }
  return logits;
}

void Transformer::backward(nn::Context& ctx, const Tensor& dlogits) {
  Impl& m = *impl_;
  if (!m.trained) throw Error("seq2seq: backward without a training forward");
  const int64_t B = m.hidden.dim(0), Tt = m.hidden.dim(1), d = config_.d_model;
  const Shape want{B, Tt, config_.vocab_size};
  if (dlogits.dtype() != DType::f32 || dlogits.shape() != want)
    throw Error("seq2seq: dlogits " + shape_str(dlogits.shape()) + " should be f32 " +
                shape_str(want) + " like the logits of the last forward");

  Tensor dh = ctx.alloc({B, Tt, d});  // [B, Tt, d]
  Tensor no_bias;
  nn::Context at_forward = ctx;
  at_forward.precision = m.precision;
  ops::linear_backward(m.hidden, nn::weight_of(*m.output, at_forward), dlogits, dh, m.output->grad,
                       no_bias, m.precision);
  Tensor dmemory;                                      // [B, Ts, d]
  Tensor dxt = m.decoder.backward(ctx, dh, &dmemory);  // [B, Tt, d]
  dxt = m.target_drop.backward(ctx, dxt);
  ops::embedding_backward(m.target_in, dxt, m.target_embed->grad, m.scale);
  Tensor dxs = m.encoder.backward(ctx, dmemory);  // [B, Ts, d]
  dxs = m.source_drop.backward(ctx, dxs);
  ops::embedding_backward(m.source, dxs, m.source_embed->grad, m.scale);
}

void Transformer::start(nn::Context& ctx, const Tensor& memory, const Tensor& source_lengths,
                        int64_t capacity, nn::Decoder::State& state) {
  if (capacity > config_.max_length)
    throw Error("seq2seq: decoding capacity " + std::to_string(capacity) +
                " is more than model.max_length " + std::to_string(config_.max_length));
  if (memory.rank() != 3)
    throw Error("seq2seq: memory " + shape_str(memory.shape()) + " should be [B, Ts, d]");
  check_lengths("source_lengths", source_lengths, memory.dim(0), memory.dim(1));
  impl_->decoder.start(ctx, memory, source_lengths, capacity, state);
}

Tensor Transformer::step(nn::Context& ctx, const Tensor& tokens, nn::Decoder::State& state) {
  Impl& m = *impl_;
  const int64_t B = state.batch(), V = config_.vocab_size;
  if (B == 0) throw Error("seq2seq: step() before start()");
  if (tokens.dtype() != DType::i32 || tokens.numel() != B)
    throw Error("seq2seq: step tokens " + shape_str(tokens.shape()) + " should be i32 [" +
                std::to_string(B) + "], one per row of the decoding state");
  const int64_t position = state.position();
  if (position >= state.capacity)
    throw Error("seq2seq: decoding step at position " + std::to_string(position) +
                " is past the capacity " + std::to_string(state.capacity) + " given to start()");
  nn::Context inference = ctx;
  inference.training = false;
  Tensor x = nn::embed_tokens(inference, tokens.reshaped({B, 1}), m.target_embed->value, m.scale,
                              m.positions,
                              position);           // [B, 1, d]
  Tensor h = m.decoder.step(inference, x, state);  // [B, 1, d]
  Tensor logits = inference.alloc({B, V});         // [B, V]
  output_layer(inference, *m.output, m.tied(), h.reshaped({B, config_.d_model}), logits);
  return logits;
}

ops::CrossEntropyStats sequence_loss(nn::Context& ctx, const Tensor& logits,
                                     const Tensor& target_out, float label_smoothing,
                                     Tensor* dlogits, float scale, bool overwrite_logits) {
  if (logits.rank() != 3 || target_out.rank() != 2 || target_out.dim(0) != logits.dim(0) ||
      target_out.dim(1) != logits.dim(1))
    throw Error("seq2seq: target_out " + shape_str(target_out.shape()) +
                " does not fit the logits " + shape_str(logits.shape()) +
                " (want [B, Tt] and [B, Tt, V])");
  if (!(label_smoothing >= 0.f && label_smoothing < 1.f))
    throw Error("seq2seq: label smoothing must be in [0, 1), not " +
                std::to_string(label_smoothing));
  if (!dlogits) return ops::cross_entropy_forward(logits, target_out, label_smoothing, kPadId);
  // Every row of the gradient is written (zeros on pad rows).
  *dlogits = overwrite_logits ? logits : ctx.alloc_uninit(logits.shape());
  const ops::CrossEntropyStats s = ops::cross_entropy_forward_backward(
      logits, target_out, label_smoothing, kPadId, scale, *dlogits);
  return s;
}

}  // namespace vitk::seq2seq
