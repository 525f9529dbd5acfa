#pragma once
// The text classifier: a sentence -> scores over num_classes labels, from the core's encoder as
// the translation model uses it (token embeddings scaled by √d_model plus the fixed sinusoids),
// pooled into one vector and read by a linear layer, as Hugging Face's
// AutoModelForSequenceClassification reads a pooled encoder.
//
//   x      = √d · E[ids] + pe[o : o + T]                 [B, T, d]   (o = 1 with a class token)
//   cls:   x = [cls_token + pe[0]; x]                    [B, 1 + T, d]
//   h      = encoder(dropout(x), mask: lengths)          [B, T', d]
//   pooled = mean of h over each sentence's positions | h[:, 0]    [B, d]
//   logits = dropout(pooled) · Wᵀ + b                    [B, C]
//
// Parameter names: encoder.embed_tokens.weight [V, d]; cls_token [1, 1, d] (pool = cls);
// encoder.layers.<i>.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2} and encoder.norm
// (pre-norm), as the translation model's, so that its encoder loads by name (--encoder-from);
// head.weight [C, d], head.bias [C].
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "common/seq2seq/text_config.h"

namespace vitk::seq2seq {

class TextClassifier {
 public:
  // Registers every parameter in params (not yet finalized). vitk::UsageError for a bad config.
  TextClassifier(ParamStore& params, const TextClassifierConfig& config);
  // After params.finalize(): the embedding and the class token N(0, d^-1/2) (unit variance once
  // scaled by √d; the pad row zero), Linear weights Xavier-uniform (q, k and v each as its own
  // [d, d] matrix with gain 1/√2), biases 0, norms 1 and 0: the translation model's.
  void init(ops::Rng& rng);

  // ids i32 [B, T] (the tokens and EOS, padded with the pad id), lengths i32 [B] in [1, T] ->
  // logits f32 [B, C] (in ctx.arena). The ids must stay alive until backward().
  Tensor forward(nn::Context& ctx, const Tensor& ids, const Tensor& lengths);
  // dlogits [B, C] -> ADDS every parameter's gradient; with train_encoder false, only the head's
  // (and no backward through the encoder at all). Needs the last training forward.
  void backward(nn::Context& ctx, const Tensor& dlogits);

  // What the pooled vector attends to in the last encoder layer, after a forward with
  // keep_attention set: [B, T'] (T' = T, or 1 + T with a class token, position 0 the class token),
  // the mean over the heads of the class token's attention row (cls) or of the sentence's rows
  // (mean); each row sums to 1 over the sentence's positions.
  Tensor pooled_attention() const;
  bool keep_attention = false;
  bool train_encoder = true;  // false: a frozen encoder (--encoder-lr-scale 0)

  // [first, end) of params.params(): the embedding, the class token and the encoder, the part
  // that --encoder-from loads and --encoder-lr-scale scales.
  std::pair<size_t, size_t> encoder_params() const;
  const TextClassifierConfig& config() const { return config_; }
  // The offset of the first token in the encoder's sequence: 1 with a class token, else 0.
  int64_t first_token() const { return config_.pool == TextPool::cls ? 1 : 0; }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  TextClassifierConfig config_;
};

// Label-smoothed cross-entropy of logits [B, C] against labels i32 [B], averaged over the batch,
// as torch.nn.functional.cross_entropy(label_smoothing=ε). With dlogits set, also writes
// scale · d(loss)/d(logits) there (a fresh tensor from ctx.arena).
ops::CrossEntropyStats text_loss(nn::Context& ctx, const Tensor& logits, const Tensor& labels,
                                 float label_smoothing, Tensor* dlogits = nullptr,
                                 float scale = 1.f);

}  // namespace vitk::seq2seq
