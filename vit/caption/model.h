#pragma once
// Image captioning in the manner of Show, Attend and Tell (Xu et al., 2015), built from the shared
// core: a ViT encoder (vit/vit.h, without a head) turns an image into patch tokens, and the core's
// nn::Decoder, with token embeddings and learned positions, generates the caption while each of
// its layers cross-attends to those tokens, so that each word looks at the part of the image it
// names. The same composition CTranslate2 uses to build Whisper from its text model's layers.
//
//   memory  = vit.features(images)        [B, 1 + N, d]  (timm's forward_features)
//             without the class token when memory_class_token is false: [B, N, d]
//             + S, when memory_positions: a fixed 2-D sine-cosine code of each patch's row and
//             column (the core's sinusoids of each in one half of d, as MAE's and DETR's), zero
//             on the class token's row: where each token lies, restated for the decoder after
//             the encoder's blocks have mixed it with content
//   x       = E[target_in] + P[0:Tt]      [B, Tt, d]     (dropout in training)
//   h       = decoder(x, memory, self: causal + target lengths)   [B, Tt, d]  (pre-norm, GELU,
//             final norm)
//   logits  = h · Wᵀ                      [B, Tt, V]     (W = E when tied; no bias)
//
// Parameter names: the encoder keeps timm's ViT names (cls_token, pos_embed, patch_embed.*,
// blocks.<i>.*, norm), so a ViT checkpoint's encoder loads by name (--encoder-from); the decoder:
//   decoder.embed_tokens.weight [V, d]   decoder.embed_positions.weight [max_length, d]
//   decoder.layers.<i>.{norm1, self_attn.qkv, self_attn.proj, norm2, cross_attn.q, cross_attn.kv,
//                       cross_attn.proj, norm3, mlp.fc1, mlp.fc2}   decoder.norm
//   output_projection.weight [V, d]   (untied only)
//
// The doubly stochastic attention penalty (the paper's §4.2.1): with α_ti the cross-attention
// weight of target position t on memory token i (the mean over the heads of the last decoder
// layer), each image adds λ · Σ_i (1 − Σ_t α_ti)² to the loss, t over its caption's positions
// (BOS and the words; the position that predicts EOS included): over the whole caption, every part
// of the image should get about one word's worth of attention. Loss terms of other recipes reach
// the training forward through CaptionModel::LossHooks.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/nn/nn.h"
#include "common/vocabulary.h"
#include "vit/vit.h"

namespace vitk::caption {

// The captioner's own settings, one line each: type, name (the [model] key, --model.NAME, the
// checkpoint attribute), default, values allowed, help (common/settings.h). caption_schema()
// adds the encoder's: every ViT setting but num_classes.
#define VITK_CAPTION_SETTINGS(X)                                                             \
  X(int64_t, vocab_size, 1000, between(5, 1 << 24),                                          \
    "vocabulary size (caption-train: the SentencePiece model's, --vocab-size)")              \
  X(int64_t, max_length, 40, between(2, 4096), "target positions (BOS included)")            \
  X(int, decoder_layers, 2, between(1, 1000), "decoder layers")                              \
  X(int64_t, decoder_heads, 4, at_least(1), "decoder attention heads")                       \
  X(int64_t, decoder_d_ff, 0, between(0, 1 << 20),                                           \
    "decoder feed-forward width (0: the encoder's)")                                         \
  X(float, decoder_dropout, 0.1f, fraction(),                                                \
    "decoder dropout: after embeddings + positions, residual branches, FFN")                 \
  X(float, decoder_attention_dropout, 0.f, fraction(), "dropout on the decoder's attention") \
  X(bool, tie_embeddings, true, any(), "the output layer is the token embedding matrix")     \
  X(bool, memory_class_token, true, any(),                                                   \
    "the class token's row is one of the decoder's memory tokens")                           \
  X(bool, memory_positions, false, any(), "add the patch grid's 2-D sine-cosine code to the memory")

// A ViT without a head, as a captioner's encoder.
inline vit::VitConfig headless_vit() {
  vit::VitConfig c;
  c.num_classes = 0;
  return c;
}

struct CaptionConfig {
  vit::VitConfig encoder = headless_vit();  // num_classes 0, pool "token"
  VITK_CAPTION_SETTINGS(VITK_SETTING_MEMBER)

  int64_t d_model() const { return encoder.d_model; }
  int64_t d_ff() const { return decoder_d_ff > 0 ? decoder_d_ff : encoder.d_ff; }
  int64_t memory_tokens() const { return encoder.patches() + (memory_class_token ? 1 : 0); }
  nn::LayerConfig decoder_layer_config() const;
  void validate() const;  // vitk::UsageError naming the model option at fault
};

// The settings table as a schema (VITK_CAPTION_SETTINGS and the encoder's).
const settings::Schema<CaptionConfig>& caption_schema();
// As text, for checkpoint attributes and a config file's [model] section: "type" = "caption" and
// every field of caption_schema().
std::map<std::string, std::string> to_config_map(const CaptionConfig& config);
// The reverse; vitk::Error naming `source` and the key for an unknown key, a bad value or a type
// other than "caption". Missing keys keep their defaults.
CaptionConfig caption_config_from_map(const std::map<std::string, std::string>& map,
                                      const std::string& source);

// Sizes for `vitk info` and `vitk inspect` (common/nn/model_info.h); model_kind() registers the
// captioner ("caption").
nn::ModelSize model_size(const CaptionConfig& config);
nn::ModelKind model_kind();

class CaptionModel {
 public:
  // Registers every parameter in params (not yet finalized).
  CaptionModel(ParamStore& params, const CaptionConfig& config);
  // After params.finalize(): the encoder as vit::VisionTransformer::init (timm's), the decoder's
  // Linear weights and embeddings trunc_normal(std 0.02) as timm and BLIP initialise text
  // decoders, the pad row of the embedding zero, biases 0, norms 1 and 0.
  void init(ops::Rng& rng);

  // images f32 [B, C, H, W] -> memory [B, Tm, d] (in ctx.arena).
  Tensor encode(nn::Context& ctx, const Tensor& images);
  // Teacher forcing: images, target_in i32 [B, Tt] (BOS and the words), target_lengths i32 [B]
  // -> logits f32 [B, Tt, V]. The id tensors must stay alive until backward().
  Tensor forward(nn::Context& ctx, const Tensor& images, const Tensor& target_in,
                 const Tensor& target_lengths);
  // Loss terms on the last decoder layer's cross-attention weights α (the mean over its heads)
  // of the last training forward, which must have been run with keep_attention_weights set.
  bool keep_attention_weights = false;  // the next training forward keeps the weights
  // The doubly stochastic penalty: Σ over the images of λ · Σ_i (1 − Σ_t α_ti)². Returns its
  // value and makes the next backward() add grad_scale times its gradient.
  double attention_penalty(float lambda, float grad_scale);
  // Loss terms outside the model (the generated scenes' guided attention and article loss,
  // vit/caption/scenes/losses.h) read what the last training forward kept, and give their
  // gradients to the next backward(), through these hooks (below).
  class LossHooks;
  LossHooks loss_hooks();
  // dlogits [B, Tt, V] -> ADDS every parameter's gradient (the encoder's only where it trains:
  // train_encoder false skips the encoder's backward altogether, a frozen encoder).
  void backward(nn::Context& ctx, const Tensor& dlogits);
  bool train_encoder = true;

  // Incremental decoding (the interface of decode::StepModel): start() prepares the caches from
  // a memory of encode(); step() feeds one token per row and returns next-token logits [B, V].
  int64_t vocab_size() const { return config_.vocab_size; }
  int64_t max_length() const { return config_.max_length; }
  void start(nn::Context& ctx, const Tensor& memory, const Tensor& memory_lengths, int64_t capacity,
             nn::Decoder::State& state);
  Tensor step(nn::Context& ctx, const Tensor& tokens, nn::Decoder::State& state);

  // The cross-attention weights [rows, Tm] of decoder `layer` (-1: the last), mean over the heads
  // (head -1) or one head, while the model reads `tokens` (the caption's ids without BOS and EOS)
  // for one image [1, C, H, W]: row t is the position that predicts tokens[t], and with_eos adds
  // the row that predicts EOS. A teacher-forced forward: decoding is deterministic, so it attends
  // as the search did on its way to that caption.
  Tensor cross_attention(nn::Context& ctx, const Tensor& image, const std::vector<int32_t>& tokens,
                         bool with_eos, int layer = -1, int head = -1);

  const CaptionConfig& config() const { return config_; }
  vit::VisionTransformer& encoder();
  nn::Decoder& decoder();
  // The parameters of the encoder, in registration order, [first, end) of the store: for a
  // learning-rate scale or a frozen encoder.
  std::pair<size_t, size_t> encoder_params() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  CaptionConfig config_;
};

// The hooks of loss terms outside the model (CaptionModel::loss_hooks()), which attention_penalty
// uses inside it: what the last training forward kept, valid until the next forward, and gradient
// buffers that the next backward() adds in. Each buffer is zero-filled at its first use after a
// forward; a term ADDS its gradient there.
class CaptionModel::LossHooks {
 public:
  // vitk::Error "caption: WHO needs a training forward" unless the last forward was one.
  void require_training_forward(const char* who) const;
  // The last decoder layer's cross-attention weights [B, H, Tt, Tm], each head's (α is their mean
  // over the heads), and their gradient; vitk::Error naming WHO unless the last forward was a
  // training one with keep_attention_weights.
  const Tensor& attention(const char* who) const;
  Tensor& attention_grad(const char* who) const;
  const Tensor& target_lengths() const;  // i32 [B]: the positions of each caption
  // The memory [B, Tm, d] the decoder read, and its gradient (to the encoder, when it trains).
  const Tensor& memory() const;
  Tensor& memory_grad() const;
  // The output layer's W [V, d] (the token embedding when tied) and its gradient.
  const Tensor& output_weight() const;
  Tensor& output_weight_grad() const;

 private:
  friend class CaptionModel;
  explicit LossHooks(Impl& m) : m_(&m) {}
  Impl* m_;
};

}  // namespace vitk::caption
