#pragma once
// The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017), built
// from the core's nn::Encoder and nn::Decoder: token embeddings scaled by √d_model plus the fixed
// sinusoids, dropout, the two stacks, and a linear output layer over the shared vocabulary.
//
// Parameter names, as fairseq's transformer (the layers inside follow the core's names):
//   tied_embeddings = true:   embed_tokens.weight [V, d]  (source, target and output)
//   tied_embeddings = false:  encoder.embed_tokens.weight, decoder.embed_tokens.weight [V, d],
//                            output_projection.weight [V, d]
//   encoder.layers.<i>.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}
//   decoder.layers.<i>.{norm1, self_attn.qkv, self_attn.proj, norm2, cross_attn.q, cross_attn.kv,
//                       cross_attn.proj, norm3, mlp.fc1, mlp.fc2}
//   encoder.norm, decoder.norm  (pre-norm only: a post-norm layer already ends in a norm)
// The output layer has no bias (fairseq; with tied embeddings it is the embedding matrix).
#include <cstdint>
#include <memory>
#include <vector>

#include "common/decode/search.h"
#include "common/nn/nn.h"
#include "common/seq2seq/config.h"

namespace vitk::seq2seq {

class Transformer : public decode::StepModel {
 public:
  // Registers every parameter in params (not yet finalized). vitk::UsageError for a bad config.
  Transformer(ParamStore& params, const TransformerConfig& config);
  // fairseq's initialisation, after params.finalize(): embeddings (and an untied output layer)
  // N(0, d^-1/2) with the pad row zero, so that scaled by √d they have unit variance; Linear
  // weights Xavier-uniform, q, k and v each as their own [d, d] matrix with gain 1/√2; biases 0;
  // norms 1 and 0.
  void init(ops::Rng& rng);

  // Teacher forcing. source i32 [B, Ts], source_lengths i32 [B], target_in i32 [B, Tt] (BOS and
  // the tokens), target_lengths i32 [B] -> logits f32 [B, Tt, V]. Positions past a length are
  // padding: no query sees them as keys. The id tensors must stay alive until backward().
  Tensor forward(nn::Context& ctx, const Tensor& source, const Tensor& source_lengths,
                 const Tensor& target_in, const Tensor& target_lengths);
  // dlogits [B, Tt, V] -> ADDS every parameter's gradient. Needs the last training forward.
  void backward(nn::Context& ctx, const Tensor& dlogits);

  // Incremental decoding (inference only), the decode::StepModel that decode::Searcher runs.
  // encode() -> memory [B, Ts, d] (in ctx.arena); start() prepares the decoder's caches for up
  // to `capacity` target positions; step() feeds one token per row, tokens i32 [B] (BOS first),
  // at position state.position(), and returns the next-token logits [B, V] (in ctx.arena).
  // Between steps the caller may reorder the state (nn::Decoder::State::reorder) and reset
  // ctx.arena: the caches do not live there.
  Tensor encode(nn::Context& ctx, const Tensor& source, const Tensor& source_lengths);
  void start(nn::Context& ctx, const Tensor& memory, const Tensor& source_lengths, int64_t capacity,
             nn::Decoder::State& state) override;
  Tensor step(nn::Context& ctx, const Tensor& tokens, nn::Decoder::State& state) override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_length() const override { return config_.max_length; }

  const TransformerConfig& config() const { return config_; }
  nn::Encoder& encoder();
  nn::Decoder& decoder();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  TransformerConfig config_;
};

// fairseq's initialisation of params.params()[first, end) (after finalize()): the embeddings
// N(0, d^-1/2) (so that scaled by √d they have unit variance), with the pad row zero for those
// marked so; other matrices Xavier-uniform, fused projections (qkv, kv, q) as q, k and v each its
// own [d, d] block with gain 1/√2; norms 1; biases 0. For every model of this layer.
struct EmbeddingInit {
  const Parameter* param;
  bool zero_pad_row;
};
void init_like_fairseq(ParamStore& params, size_t first, size_t end,
                       const std::vector<EmbeddingInit>& embeddings, int64_t d_model,
                       ops::Rng& rng);

// Label-smoothed cross-entropy of logits [B, Tt, V] against target_out i32 [B, Tt] (the tokens
// and EOS, padded with kPadId), averaged over the non-pad tokens, as
// torch.nn.functional.cross_entropy(ignore_index=pad, label_smoothing=ε). With dlogits set, also
// writes scale · d(loss)/d(logits) there (a fresh tensor from ctx.arena; zero on pad rows), in
// the same pass over the logits. With overwrite_logits, dlogits is the logits' own memory instead
// (the logits are gone afterwards): training needs no second [B, Tt, V] buffer.
ops::CrossEntropyStats sequence_loss(nn::Context& ctx, const Tensor& logits,
                                     const Tensor& target_out, float label_smoothing,
                                     Tensor* dlogits = nullptr, float scale = 1.f,
                                     bool overwrite_logits = false);

}  // namespace vitk::seq2seq
