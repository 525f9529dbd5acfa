#pragma once
// Internals of nn::MultiHeadAttention shared by its source files: attention.cpp (construction, the
// choice of a path, the reference path), attention_fused_path.cpp and attention_blocked_path.cpp
// (the fast paths), attention_score.cpp (the four score functions) and attention_decode.cpp
// (incremental decoding). Not part of the core's interface: include only from common/nn.
//
// Layouts: activations are [B, T, d]. q, k and v are strided views of the projection outputs
// ([B, T, 3, H, dh] for self-attention, Heads), and the context is written straight into
// [B, Tq, H·dh] (ops::heads_view): no head copies, except that the general and additive scores
// work on contiguous [B, H, T, dh] copies (split_heads, merge_heads).
#include <cstdint>
#include <optional>
#include <string>

#include "common/nn/nn.h"

namespace vitk::nn {
namespace attention {

// The parameters of a score function; the pointers that the score does not use stay null.
struct ScoreParams {
  Score kind = Score::scaled_dot;
  int64_t head_dim = 0;
  int64_t additive_dim = 0;
  Parameter* weight = nullptr;  // general: W [dh, dh]
  Parameter* w_q = nullptr;     // additive: W_q [a, dh]
  Parameter* w_k = nullptr;     // additive: W_k [a, dh]
  Parameter* v = nullptr;       // additive: v [a]

  // The dot and scaled-dot scores are one product q·kᵀ, which every path computes in place.
  bool is_dot() const { return kind == Score::scaled_dot || kind == Score::dot; }
  float dot_scale() const;  // of q·kᵀ: 1/√dh for scaled_dot, 1 for dot
};

// What a training forward of the score keeps for its backward (arena views).
struct ScoreSaved {
  Tensor kw;   // general: k·Wᵀ [B, H, Tk, dh]
  Tensor act;  // additive: tanh(W_q q_i + W_k k_j) [B, H, Tq, Tk, a]
};

// scores [B, H, Tq, Tk] = score(q [B, H, Tq, dh], k [B, H, Tk, dh]), overwritten. With saved set
// (training) the intermediate values the backward needs are stored there.
void score_forward(Context& ctx, const ScoreParams& p, const Tensor& q, const Tensor& k,
                   Tensor& scores, ScoreSaved* saved);
// dq [B, H, Tq, dh] and dk [B, H, Tk, dh] overwritten; score parameter gradients accumulated.
void score_backward(Context& ctx, const ScoreParams& p, const Tensor& q, const Tensor& k,
                    const ScoreSaved& saved, const Tensor& dscores, Tensor& dq, Tensor& dk);
// Decoding: one query per sequence and head, q [B, H, 1, dh], against the first `length` keys of
// a cache [B, H, capacity, dh]; scores [B, H, 1, length] overwritten.
void score_step(Context& ctx, const ScoreParams& p, const Tensor& q, const Tensor& cache_k,
                int64_t length, Tensor& scores);

// Heads read in place (an f32 heads_view, rows contiguous) into contiguous dst [B, H, T, dh].
void split_heads(const ops::MatrixView& src, Tensor& dst);
// The inverse: src [B, H, T, dh] into heads written in place.
void merge_heads(const Tensor& src, const ops::MatrixView& dst);

// Checks key_lengths (i32 [B], values in [0, max_length]); `layer` names the layer in errors.
void check_key_lengths(const std::string& layer, const Tensor& key_lengths, int64_t batch,
                       int64_t max_length);

// Whether AttentionKernel::automatic takes the blocked path for this shape (attention.cpp says
// how it was measured). `masked`: a causal or padding mask; `dropout`: attention dropout in
// training; `precision`: of the other products (the blocked kernel itself is f32).
bool prefer_blocked(int64_t batch, int64_t heads, int64_t tq, int64_t tk, int64_t head_dim,
                    bool masked, bool dropout, ops::Precision precision);

// The sizes of one forward, once its inputs are checked: B, Tq (the query rows), Tk.
struct Sizes {
  int64_t batch, tq, tk;
};

// The operands of one forward, q [B, H, Tq, dh], k and v [B, H, Tk, dh], as views in place in the
// projections (self [B, T, 3d]: blocks 0, 1 and 2; cross [B, Tq, d] and [B, Tk, 2d]), or the
// gradients of those views. Their dtype is what the path's products read: bf16 where the
// reference path computes dot scores with bf16 products (the projection writes them rounded), f32
// otherwise.
struct Heads {
  ops::MatrixView q, k, v;
};

// The paths. Each forward writes the context's heads [B, H, Tq, dh] (a view of [B, Tq, d]) from
// the operands and, when ctx.training, keeps what its backward needs (arena views); each backward
// overwrites the operands' gradients from d(context) [B, Tq, d].

// The plain maths (attention.cpp), for any score:
//   scores  = score(q, k)              [B, H, Tq, Tk]  (one product for the dot scores)
//   probs   = softmax(scores + mask)   [B, H, Tq, Tk]  (rows that see nothing: 0)
//   attn    = dropout(probs)           [B, H, Tq, Tk]
//   context = attn · v                 [B, H, Tq, dh]
class ReferencePath {
 public:
  // Returns probs (the weights, for keep_weights).
  Tensor forward(Context& ctx, const ScoreParams& score, Dropout& dropout, const Heads& in,
                 const AttentionMask& mask, const ops::MatrixView& context);
  // dprobs (may be empty): a further gradient on the weights before dropout [B, H, Tq, Tk], from
  // a loss term that reads them (MultiHeadAttention::dweights).
  void backward(Context& ctx, const ScoreParams& score, Dropout& dropout, const Heads& in,
                const Tensor& dcontext, const Heads& grad, const Tensor& dprobs = Tensor());

 private:
  ops::Precision precision_ = ops::Precision::f32;  // of the forward's products
  Tensor qh_, kh_, vh_;  // general and additive scores: q, k, v copied, [B, H, T, dh]
  Tensor probs_;         // [B, H, Tq, Tk] f32
  Tensor attn_;          // probs after dropout (probs itself without), rounded like the operands
  ScoreSaved score_saved_;
};

// ops::fused_attention_* (attention_fused_path.cpp): the products and the softmax of one (batch,
// head) in cache. No mask, no dropout, f32, d_head 64 on AVX-512.
class FusedPath {
 public:
  // Returns the weights [B, H, Tq, Tk].
  Tensor forward(Context& ctx, const Heads& in, float scale, const ops::MatrixView& context);
  void backward(const Heads& in, const Tensor& dcontext, const Heads& grad) const;

 private:
  float scale_ = 1.f;
  Tensor probs_;  // [B, H, Tq, Tk]
};

// ops::blocked_attention_* (attention_blocked_path.cpp): flash-style, blocks of keys with an online
// softmax, never the [Tq, Tk] weights; masks and dropout in the kernel. Dot scores, f32.
class BlockedPath {
 public:
  void forward(Context& ctx, const Heads& in, float scale, const AttentionMask& mask, float dropout,
               const ops::MatrixView& context);
  void backward(const Heads& in, const Tensor& dcontext, const Heads& grad) const;

 private:
  ops::BlockedAttention options_;  // scale, masks (key lengths copied) and the dropout draw
  ops::MatrixView context_;        // [B, H, Tq, dh]
  Tensor lse_;                     // log-sum-exp of each query [B, H, Tq]
};

}  // namespace attention

struct MultiHeadAttention::Impl {
  std::string name;  // the parameter prefix, used in error messages
  int64_t d = 0, heads = 0, head_dim = 0;
  std::optional<Linear> qkv;    // self-attention: [3d, d]
  std::optional<Linear> q, kv;  // cross-attention: [d, d] and [2d, d]
  std::optional<Linear> proj;   // [d, d]
  attention::ScoreParams score;
  Dropout dropout;

  // The last forward: its path, and what a training one kept for backward (arena views).
  AttentionPath path = AttentionPath::reference;
  bool saved = false;
  int64_t batch = 0, tq = 0, tk = 0;
  Tensor qp, kvp;  // self [B, T, 3d] (kvp empty); cross [B, Tq, d] and [B, Tk, 2d]
  attention::ReferencePath reference;
  attention::FusedPath fused;
  attention::BlockedPath blocked;

  // Checks a forward's inputs (errors name the layer) and returns its sizes.
  attention::Sizes check_inputs(const Context& ctx, bool cross, const Tensor& x,
                                const Tensor& memory, const AttentionMask& mask,
                                QueryRows queries) const;
  // The one choice of a forward (attention.cpp says why).
  AttentionPath choose_path(const Context& ctx, const attention::Sizes& s,
                            const AttentionMask& mask, bool keep_weights) const;
  // q, k, v of the forward (tq queries) in projections laid out like qp and kvp.
  attention::Heads heads_of(const Tensor& q_proj, const Tensor& kv_proj) const;
};

}  // namespace vitk::nn
