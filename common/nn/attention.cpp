// Multi-head attention: construction, forward and its hand-written backward. The score functions
// live in attention_score.cpp and incremental decoding in attention_decode.cpp.
//
// Forward, with every head-split tensor a contiguous [B, H, T, dh] copy:
//   q, k, v   = split(x·Wqkvᵀ + b)  (cross: q from x, k and v from memory)
//   scores    = score(q, k)                          [B, H, Tq, Tk]
//   probs     = softmax(scores + mask)               [B, H, Tq, Tk]  (rows that see nothing: 0)
//   attn      = dropout(probs)                       [B, H, Tq, Tk]
//   context   = merge(attn · v)                      [B, Tq, d]
//   y         = context·Wprojᵀ + b                   [B, Tq, d]
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/nn/attention_impl.h"

namespace vitk::nn {

Score parse_score(const std::string& name) {
  if (name == "scaled_dot") return Score::scaled_dot;
  if (name == "dot") return Score::dot;
  if (name == "general") return Score::general;
  if (name == "additive") return Score::additive;
  throw UsageError("unknown attention score '" + name +
                   "' (expected scaled_dot, dot, general or additive)");
}

const char* score_name(Score s) {
  switch (s) {
    case Score::scaled_dot:
      return "scaled_dot";
    case Score::dot:
      return "dot";
    case Score::general:
      return "general";
    case Score::additive:
      return "additive";
  }
  return "?";
}

namespace {

// The additive mask for softmax_forward, in the smallest shape that broadcasts to [B, H, Tq, Tk]:
// [B, 1, 1, Tk] for padding alone, [1, 1, Tq, Tk] for causal alone, [B, 1, Tq, Tk] for both;
// empty when every key is visible. Masked entries are −inf.
Tensor build_mask(Context& ctx, int64_t B, int64_t Tq, int64_t Tk, const AttentionMask& mask) {
  const bool padded = !mask.key_lengths.empty();
  if (!padded && !mask.causal) return Tensor();
  const float minus_inf = -std::numeric_limits<float>::infinity();
  const int32_t* len = padded ? mask.key_lengths.i32() : nullptr;
  const int64_t mb = padded ? B : 1, mq = mask.causal ? Tq : 1;
  Tensor m = ctx.alloc({mb, 1, mq, Tk});  // zero-filled: visible
  float* p = m.f32();
  for (int64_t b = 0; b < mb; ++b)
    for (int64_t i = 0; i < mq; ++i)
      for (int64_t j = 0; j < Tk; ++j) {
        const bool hidden = (padded && j >= len[b]) || (mask.causal && j > i + (Tk - Tq));
        if (hidden) p[(b * mq + i) * Tk + j] = minus_inf;
      }
  return m;
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(ParamStore& params, const std::string& name,
                                       AttentionConfig config)
    : impl_(std::make_shared<Impl>()), config_(config) {
  Impl& m = *impl_;
  m.name = name;
  const int64_t d = config.d_model, heads = config.heads;
  if (d <= 0 || heads <= 0 || d % heads != 0)
    throw Error(name + ": d_model " + std::to_string(d) + " must be a positive multiple of heads " +
                std::to_string(heads));
  if (config.additive_dim < 0)
    throw Error(name + ": additive_dim must be >= 0, not " + std::to_string(config.additive_dim));
  if (!(config.dropout >= 0.f && config.dropout < 1.f))
    throw Error(name + ": attention dropout must be in [0, 1), not " +
                std::to_string(config.dropout));
  m.d = d;
  m.heads = heads;
  m.head_dim = d / heads;
  if (config.cross) {
    m.q.emplace(params, name + ".q", d, d, config.bias);
    m.kv.emplace(params, name + ".kv", d, 2 * d, config.bias);
  } else {
    m.qkv.emplace(params, name + ".qkv", d, 3 * d, config.bias);
  }
  m.proj.emplace(params, name + ".proj", d, d, config.bias);

  attention::ScoreParams& s = m.score;
  s.kind = config.score;
  s.head_dim = m.head_dim;
  s.additive_dim = config.additive_dim ? config.additive_dim : m.head_dim;
  const int64_t dh = m.head_dim, a = s.additive_dim;
  if (s.kind == Score::general) s.weight = &params.add(name + ".score.weight", {dh, dh});
  if (s.kind == Score::additive) {
    s.w_q = &params.add(name + ".score.w_q", {a, dh});
    s.w_k = &params.add(name + ".score.w_k", {a, dh});
    s.v = &params.add(name + ".score.v", {a});
  }
  m.dropout = Dropout(config.dropout);
}

Tensor MultiHeadAttention::forward(Context& ctx, const Tensor& x, const Tensor& memory,
                                   const AttentionMask& mask) {
  Impl& m = *impl_;
  const int64_t d = m.d, H = m.heads, dh = m.head_dim;
  const std::string want = "[B, T, " + std::to_string(d) + "]";
  if (x.empty() || x.dtype() != DType::f32 || x.rank() != 3 || x.dim(2) != d || x.dim(0) < 1 ||
      x.dim(1) < 1)
    throw Error(m.name + ": x must be f32 " + want + ", not " + shape_str(x.shape()));
  const int64_t B = x.dim(0), Tq = x.dim(1);
  if (config_.cross) {
    if (memory.empty())
      throw Error(m.name + ": cross-attention needs a memory " + want + " (x " +
                  shape_str(x.shape()) + ")");
    if (memory.dtype() != DType::f32 || memory.rank() != 3 || memory.dim(0) != B ||
        memory.dim(2) != d || memory.dim(1) < 1)
      throw Error(m.name + ": memory " + shape_str(memory.shape()) + " does not fit x " +
                  shape_str(x.shape()) + " (want f32 [" + std::to_string(B) + ", Tk, " +
                  std::to_string(d) + "])");
  } else if (!memory.empty()) {
    throw Error(m.name + ": self-attention takes no memory, got " + shape_str(memory.shape()));
  }
  const int64_t Tk = config_.cross ? memory.dim(1) : Tq;
  if (!mask.key_lengths.empty()) attention::check_key_lengths(m.name, mask.key_lengths, B, Tk);
  const bool training = ctx.training;
  if (training && m.dropout.p > 0.f && !ctx.rng)
    throw Error(m.name + ": attention dropout in training needs nn::Context::rng");

  Tensor qh = ctx.alloc({B, H, Tq, dh});  // [B, H, Tq, dh]
  Tensor kh = ctx.alloc({B, H, Tk, dh});  // [B, H, Tk, dh]
  Tensor vh = ctx.alloc({B, H, Tk, dh});  // [B, H, Tk, dh]
  if (config_.cross) {
    Tensor qp = m.q->forward(ctx, x);         // [B, Tq, d]
    Tensor kvp = m.kv->forward(ctx, memory);  // [B, Tk, 2d]: k then v
    attention::split_heads(qp, 0, qh);
    attention::split_heads(kvp, 0, kh);
    attention::split_heads(kvp, 1, vh);
  } else {
    Tensor qkvp = m.qkv->forward(ctx, x);  // [B, T, 3d]: q, k, v
    attention::split_heads(qkvp, 0, qh);
    attention::split_heads(qkvp, 1, kh);
    attention::split_heads(qkvp, 2, vh);
  }

  Tensor probs = ctx.alloc({B, H, Tq, Tk});  // [B, H, Tq, Tk]: scores, then softmax in place
  m.score_saved = attention::ScoreSaved();
  attention::score_forward(ctx, m.score, qh, kh, probs, training ? &m.score_saved : nullptr);
  Tensor additive_mask = build_mask(ctx, B, Tq, Tk, mask);  // broadcasts to [B, H, Tq, Tk]
  ops::softmax_forward(probs, additive_mask, probs);
  weights_ = keep_weights ? probs.clone() : Tensor();

  Tensor attn = m.dropout.forward(ctx, probs);   // [B, H, Tq, Tk] (probs itself without dropout)
  Tensor context_h = ctx.alloc({B, H, Tq, dh});  // [B, H, Tq, dh]
  ops::bmm(attn, false, vh, false, context_h);
  Tensor context = ctx.alloc({B, Tq, d});  // [B, Tq, d]
  attention::merge_heads(context_h, 0, context);
  Tensor y = m.proj->forward(ctx, context);  // [B, Tq, d]

  m.saved = training;
  if (training) {
    m.qh = qh, m.kh = kh, m.vh = vh, m.probs = probs, m.attn = attn;
  } else {
    m.qh = m.kh = m.vh = m.probs = m.attn = Tensor();
  }
  return y;
}

Tensor MultiHeadAttention::backward(Context& ctx, const Tensor& dy, Tensor* dmemory) {
  Impl& m = *impl_;
  if (!m.saved) throw Error(m.name + ": backward without a training forward");
  const int64_t B = m.qh.dim(0), H = m.heads, Tq = m.qh.dim(2), Tk = m.kh.dim(2);
  const int64_t d = m.d, dh = m.head_dim;
  if (dy.dtype() != DType::f32 || dy.shape() != Shape{B, Tq, d})
    throw Error(m.name + ": dy " + shape_str(dy.shape()) + " should be f32 " +
                shape_str({B, Tq, d}) + " like the forward output");

  Tensor dcontext = m.proj->backward(ctx, dy);    // [B, Tq, d]
  Tensor dcontext_h = ctx.alloc({B, H, Tq, dh});  // [B, H, Tq, dh]
  attention::split_heads(dcontext, 0, dcontext_h);
  Tensor dattn = ctx.alloc({B, H, Tq, Tk});  // [B, H, Tq, Tk]
  Tensor dvh = ctx.alloc({B, H, Tk, dh});    // [B, H, Tk, dh]
  ops::bmm_backward(m.attn, false, m.vh, false, dcontext_h, 1.f, dattn, dvh);
  Tensor dscores = m.dropout.backward(ctx, dattn);   // [B, H, Tq, Tk]: d(probs) ...
  ops::softmax_backward(m.probs, dscores, dscores);  // ... then d(scores), in place
  Tensor dqh = ctx.alloc({B, H, Tq, dh});            // [B, H, Tq, dh]
  Tensor dkh = ctx.alloc({B, H, Tk, dh});            // [B, H, Tk, dh]
  attention::score_backward(ctx, m.score, m.qh, m.kh, m.score_saved, dscores, dqh, dkh);

  if (config_.cross) {
    Tensor dqp = ctx.alloc({B, Tq, d});       // [B, Tq, d]
    Tensor dkvp = ctx.alloc({B, Tk, 2 * d});  // [B, Tk, 2d]
    attention::merge_heads(dqh, 0, dqp);
    attention::merge_heads(dkh, 0, dkvp);
    attention::merge_heads(dvh, 1, dkvp);
    Tensor dmem = m.kv->backward(ctx, dkvp);  // [B, Tk, d]
    if (dmemory) *dmemory = dmem;
    return m.q->backward(ctx, dqp);  // [B, Tq, d]
  }
  Tensor dqkvp = ctx.alloc({B, Tq, 3 * d});  // [B, T, 3d]
  attention::merge_heads(dqh, 0, dqkvp);
  attention::merge_heads(dkh, 1, dqkvp);
  attention::merge_heads(dvh, 2, dqkvp);
  return m.qkv->backward(ctx, dqkvp);  // [B, T, d]
}

}  // namespace vitk::nn
