#pragma once
// Internals of nn::MultiHeadAttention shared by its source files: attention.cpp (construction,
// forward, backward), attention_score.cpp (the four score functions) and attention_decode.cpp
// (incremental decoding). Not part of the core's interface: include only from common/nn.
//
// Layouts: activations are [B, T, d]. With the dot and scaled-dot scores, q, k and v are read in
// place from the projection outputs ([B, T, 3, H, dh] for self-attention) as strided views, and
// the context is written straight into [B, T, H·dh] (ops::heads_view): no head copies. The general
// and additive scores work on contiguous [B, H, T, dh] copies (split_heads, merge_heads).
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

// Column block `block` (of width H·dh) of x [B, T, n·H·dh] as heads: dst [B, H, T, dh].
void split_heads(const Tensor& x, int64_t block, Tensor& dst);
// The inverse: src [B, H, T, dh] into column block `block` of dst [B, T, n·H·dh].
void merge_heads(const Tensor& src, int64_t block, Tensor& dst);

// Checks key_lengths (i32 [B], values in [0, max_length]); `layer` names the layer in errors.
void check_key_lengths(const std::string& layer, const Tensor& key_lengths, int64_t batch,
                       int64_t max_length);

// Whether AttentionKernel::automatic takes the blocked kernel for this shape (attention.cpp says
// how it was measured). `masked`: a causal or padding mask; `dropout`: attention dropout in
// training; `precision`: of the other products (the blocked kernel itself is f32).
bool prefer_blocked(int64_t batch, int64_t heads, int64_t tq, int64_t tk, int64_t head_dim,
                    bool masked, bool dropout, ops::Precision precision);

}  // namespace attention

struct MultiHeadAttention::Impl {
  std::string name;  // the parameter prefix, used in error messages
  int64_t d = 0, heads = 0, head_dim = 0;
  std::optional<Linear> qkv;    // self-attention: [3d, d]
  std::optional<Linear> q, kv;  // cross-attention: [d, d] and [2d, d]
  std::optional<Linear> proj;   // [d, d]
  attention::ScoreParams score;
  Dropout dropout;

  // Kept by a training forward for backward (arena views; empty after an inference forward).
  bool saved = false;
  bool strided = false;  // the last forward read q, k, v in place (dot and scaled-dot scores)
  bool fused = false;    // ... with ops::fused_attention_forward (no mask, no dropout, f32)
  ops::Precision precision = ops::Precision::f32;  // of the last forward's products
  bool blocked = false;  // ... with ops::blocked_attention_forward (no weights in memory)
  int64_t batch = 0, tq = 0, tk = 0;
  // strided: self [B, T, 3d] (kvp empty); cross [B, Tq, d] and [B, Tk, 2d]. With bf16 products,
  // their bf16 rounding (what the products read).
  Tensor qp, kvp;
  Tensor qh, kh, vh;  // copies: [B, H, Tq, dh], [B, H, Tk, dh], [B, H, Tk, dh]
  Tensor probs;       // softmax output [B, H, Tq, Tk], f32
  // probs after dropout [B, H, Tq, Tk] (probs itself without dropout); bf16 with bf16 products
  Tensor attn;
  // Blocked: the context [B, Tq, d], the log-sum-exp of each query [B, H, Tq], and the masks and
  // dropout draw of the forward (key lengths copied into the arena).
  Tensor context, lse;
  ops::BlockedAttention blocked_options;
  attention::ScoreSaved score_saved;
};

}  // namespace vitk::nn
