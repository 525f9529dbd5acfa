// Multi-head attention: construction, forward and its hand-written backward. The score functions
// live in attention_score.cpp and incremental decoding in attention_decode.cpp.
//
// Forward (q, k, v are strided views of the projection, heads [B, H, T, dh]; the general and
// additive scores take contiguous copies instead):
//   q, k, v   = heads(x·Wqkvᵀ + b)  (cross: q from x, k and v from memory)
//   scores    = score(q, k)                          [B, H, Tq, Tk]
//   probs     = softmax(scores + mask)               [B, H, Tq, Tk]  (rows that see nothing: 0)
//   attn      = dropout(probs)                       [B, H, Tq, Tk]
//   context   = attn · v, written as heads of        [B, Tq, d]
//   y         = context·Wprojᵀ + b                   [B, Tq, d]
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/nn/attention_impl.h"
#include "common/nn/mask.h"

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
// [B, 1, 1, Tk] for padding alone, [1, 1, Tq, Tk] for causal or diagonal alone, [B, 1, Tq, Tk]
// for padding with either; empty when every key is visible. Masked entries are −inf.
Tensor build_mask(Context& ctx, int64_t B, int64_t Tq, int64_t Tk, const AttentionMask& mask) {
  if (!mask.hides_keys()) return Tensor();
  const bool padded = !mask.key_lengths.empty(), per_query = mask.causal || mask.diagonal;
  const float minus_inf = -std::numeric_limits<float>::infinity();
  const int32_t* len = padded ? mask.key_lengths.i32() : nullptr;
  const int64_t mb = padded ? B : 1, mq = per_query ? Tq : 1;
  Tensor m = ctx.alloc({mb, 1, mq, Tk});  // zero-filled: visible
  float* p = m.f32();
  for (int64_t b = 0; b < mb; ++b)
    for (int64_t i = 0; i < mq; ++i)
      for (int64_t j = 0; j < Tk; ++j) {
        if (!mask_visible(mask, len, b, i, j, Tq, Tk)) p[(b * mq + i) * Tk + j] = minus_inf;
      }
  return m;
}

// The factor of the dot-product scores: 1/√dh for scaled_dot, 1 for dot.
float score_scale(const attention::ScoreParams& p) {
  return p.kind == Score::scaled_dot ? 1.f / std::sqrt(static_cast<float>(p.head_dim)) : 1.f;
}

ops::MatrixView heads_view(const Tensor& x, int64_t heads, int64_t head_dim, int64_t block) {
  return ops::heads_view(x, heads, head_dim, block);
}

// q [B, H, Tq, dh] in the projection's q block: its first Tq positions (all of them but with
// MultiHeadAttention's `queries`).
ops::MatrixView query_view(const Tensor& projection, int64_t heads, int64_t head_dim, int64_t Tq) {
  ops::MatrixView q = heads_view(projection, heads, head_dim, 0);
  q.dims[2] = Tq;
  return q;
}

// What the products read: x itself, or with bf16 products x rounded once into the arena (each of
// these tensors feeds two products, so rounding it here halves the work of rounding in the ops).
Tensor for_products(Context& ctx, ops::Precision precision, const Tensor& x) {
  if (precision != ops::Precision::bf16 || x.empty() || x.dtype() == DType::bf16) return x;
  Tensor r = ctx.alloc_uninit(x.shape(), DType::bf16);
  ops::round_to_bf16(x, r);
  return r;
}

}  // namespace

bool attention::prefer_blocked(int64_t batch, int64_t heads, int64_t tq, int64_t tk,
                               int64_t head_dim, bool masked, bool dropout,
                               ops::Precision precision) {
  // From 64 MiB of weights [B, H, Tq, Tk] on, the blocked kernel is taken whatever its speed: the
  // materialized path holds two or three such tensors in training.
  constexpr double kLargeWeights = 64.0 * 1024 * 1024;
  if (4.0 * static_cast<double>(batch * heads) * static_cast<double>(tq * tk) >= kLargeWeights)
    return true;
  if (precision != ops::Precision::f32) return false;  // bf16 products beat an f32 kernel
  // Below that, `vitk bench attention` (2 cores, AVX-512; README "Long sequences") finds the two
  // within a few per cent of each other for the models' shapes (ViT-B/16 at 197 tokens, the
  // Fashion-MNIST ViT, the translation models at 32 tokens), the materialized path ahead by 2-8%
  // without a mask (its fused kernel), and the blocked kernel ahead with a mask from about 128
  // keys on: it skips blocks of keys a mask hides (the upper triangle of a causal mask, padding)
  // and never builds an additive mask tensor.
  (void)head_dim, (void)dropout;
  return masked && tk >= 128;
}

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
                                   const AttentionMask& mask, int64_t queries) {
  Impl& m = *impl_;
  const int64_t d = m.d, H = m.heads, dh = m.head_dim;
  const std::string want = "[B, T, " + std::to_string(d) + "]";
  const bool rounded_x = x.dtype() == DType::bf16 && ctx.training &&
                         ctx.precision == ops::Precision::bf16;  // Linear takes it as it is
  if (x.empty() || (x.dtype() != DType::f32 && !rounded_x) || x.rank() != 3 || x.dim(2) != d ||
      x.dim(0) < 1 || x.dim(1) < 1)
    throw Error(m.name + ": x must be f32 " + want +
                " (bf16 with bf16 products in training), not " + dtype_name(x.dtype()) + " " +
                shape_str(x.shape()));
  const int64_t B = x.dim(0);
  int64_t Tq = x.dim(1);  // the queries (the first `queries` positions when that is set)
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
  const int64_t T = x.dim(1);  // the positions whose keys and values are read (self-attention)
  if (queries != 0 && queries != T) {
    if (config_.cross || queries < 0 || queries > T)
      throw Error(m.name + ": queries " + std::to_string(queries) +
                  (config_.cross ? " is for self-attention only"
                                 : " must be in [1, " + std::to_string(T) + "]"));
    if (mask.causal || mask.diagonal)
      throw Error(m.name + ": the first " + std::to_string(queries) + " of " + std::to_string(T) +
                  " queries with a causal or diagonal mask (their rule assumes every position)");
    if (m.score.kind != Score::scaled_dot && m.score.kind != Score::dot)
      throw Error(m.name + ": the first " + std::to_string(queries) + " of " + std::to_string(T) +
                  " queries with the " + score_name(m.score.kind) + " score (dot scores only)");
    Tq = queries;
  }
  const int64_t Tk = config_.cross ? memory.dim(1) : T;
  if (!mask.key_lengths.empty()) attention::check_key_lengths(m.name, mask.key_lengths, B, Tk);
  const bool training = ctx.training;
  if (training && m.dropout.p > 0.f && !ctx.rng)
    throw Error(m.name + ": attention dropout in training needs nn::Context::rng");

  const bool strided = m.score.kind == Score::scaled_dot || m.score.kind == Score::dot;
  const ops::Precision precision = ctx.precision;
  const bool bf16 = precision == ops::Precision::bf16;
  const bool dropout = training && m.dropout.p > 0.f;
  // Whether the blocked kernel may be taken (below, once the projections' views exist).
  const bool may_block =
      strided && !keep_weights && !mask.diagonal &&
      ctx.attention_kernel != AttentionKernel::materialized &&
      (ctx.attention_kernel == AttentionKernel::blocked ||
       attention::prefer_blocked(B, H, Tq, Tk, dh, mask.hides_keys(), dropout, precision));
  // Projections: self [B, T, 3d] (q, k, v), cross [B, Tq, d] (q) and [B, Tk, 2d] (k, v). With
  // bf16 products the strided scores read them rounded to bf16 (forward and backward), so the
  // projections write them so, unless the blocked kernel (f32) may read them.
  const DType projected = strided && bf16 && !may_block ? DType::bf16 : DType::f32;
  Tensor qp, kvp;
  if (config_.cross) {
    qp = m.q->forward(ctx, x, projected);
    kvp = m.kv->forward(ctx, memory, projected);
  } else {
    qp = m.qkv->forward(ctx, x, projected);
  }
  const int64_t kb = config_.cross ? 0 : 1, vb = config_.cross ? 1 : 2;
  // The blocked kernel takes masks and dropout itself and never holds the [Tq, Tk] weights (so
  // it cannot hand them to keep_weights). It computes in f32 whatever the precision: with bf16
  // products it is taken only where the weights would be too large to hold.
  bool blocked = false;
  if (mask.diagonal && ctx.attention_kernel == AttentionKernel::blocked)
    throw Error(m.name +
                ": the blocked attention kernel does not take the diagonal mask (use "
                "the automatic or the materialized kernel)");
  auto q_view = [&](const Tensor& projection) { return query_view(projection, H, dh, Tq); };
  if (may_block) {
    const Tensor& kv = config_.cross ? kvp : qp;
    const ops::MatrixView q = q_view(qp);
    const ops::MatrixView k = heads_view(kv, H, dh, kb), v = heads_view(kv, H, dh, vb);
    blocked = ops::blocked_attention_supported(q, k, v);
  }
  if (strided && bf16 && !blocked) {
    // bf16 products read q, k and v from rounded projections (the backward reads them too).
    qp = for_products(ctx, precision, qp);
    kvp = for_products(ctx, precision, kvp);
  }
  Tensor context = ctx.alloc_uninit({B, Tq, d});  // [B, Tq, d], written head by head in place
  m.score_saved = attention::ScoreSaved();
  m.blocked = false;
  Tensor qh, kh, vh;
  // q [B, H, Tq, dh], k and v [B, H, Tk, dh] in place in the projections (strided scores).
  const Tensor& kv_src = config_.cross ? kvp : qp;
  const ops::MatrixView q = q_view(qp);
  const ops::MatrixView k = heads_view(kv_src, H, dh, kb);
  ops::MatrixView v = heads_view(kv_src, H, dh, vb);
  // Without a mask and dropout, one kernel per (batch, head) does the products and the softmax in
  // cache (f32 only: the bf16 path keeps its rounded products).
  const bool fused =
      strided && !mask.hides_keys() && !dropout && !bf16 && ops::fused_attention_supported(q, k);
  if (blocked) {
    ops::BlockedAttention& o = m.blocked_options;
    o = ops::BlockedAttention();
    o.scale = score_scale(m.score);
    o.causal = mask.causal;
    if (!mask.key_lengths.empty()) {  // a copy: the caller's tensor may change before backward
      o.key_lengths = ctx.alloc_uninit({B}, DType::i32);
      o.key_lengths.copy_from(mask.key_lengths);
    }
    if (dropout) {  // the counters Dropout would reserve for [B, H, Tq, Tk]: the same mask
      o.dropout = m.dropout.p;
      o.seed = ctx.rng->seed();
      o.counter = ctx.rng->reserve(static_cast<uint64_t>(B * H * Tq * Tk));
    }
    Tensor lse = ctx.alloc_uninit({B, H, Tq});  // [B, H, Tq]
    ops::blocked_attention_forward(q, k, v, o, lse, heads_view(context, H, dh, 0));
    weights_ = Tensor();
    Tensor y = m.proj->forward(ctx, context);  // [B, Tq, d]
    m.saved = training;
    m.strided = m.blocked = true;
    m.fused = false;
    m.precision = precision;
    m.batch = B, m.tq = Tq, m.tk = Tk;
    m.qh = m.kh = m.vh = m.probs = m.attn = Tensor();
    if (training) {
      m.qp = qp, m.kvp = kvp, m.context = context, m.lse = lse;
    } else {
      m.qp = m.kvp = m.context = m.lse = Tensor();
      m.blocked_options.key_lengths = Tensor();
    }
    return y;
  }
  m.context = m.lse = Tensor();
  Tensor probs = ctx.alloc_uninit({B, H, Tq, Tk});  // [B, H, Tq, Tk]: scores, then softmax
  if (fused) {
    ops::fused_attention_forward(q, k, v, score_scale(m.score), probs,
                                 heads_view(context, H, dh, 0));
    weights_ = keep_weights ? probs.clone() : Tensor();
    Tensor y = m.proj->forward(ctx, context);  // [B, Tq, d]
    m.saved = training;
    m.strided = m.fused = true;
    m.precision = precision;
    m.batch = B, m.tq = Tq, m.tk = Tk;
    m.qh = m.kh = m.vh = Tensor();
    if (training) {
      m.qp = qp, m.kvp = kvp, m.probs = m.attn = probs;
    } else {
      m.qp = m.kvp = m.probs = m.attn = Tensor();
    }
    return y;
  }
  if (strided) {
    ops::bmm(q, k.t(), ops::matrix_view(probs), score_scale(m.score), 0.f, precision);
  } else {
    qh = ctx.alloc_uninit({B, H, Tq, dh});  // [B, H, Tq, dh]
    kh = ctx.alloc_uninit({B, H, Tk, dh});  // [B, H, Tk, dh]
    vh = ctx.alloc_uninit({B, H, Tk, dh});  // [B, H, Tk, dh]
    attention::split_heads(qp, 0, qh);
    attention::split_heads(config_.cross ? kvp : qp, config_.cross ? 0 : 1, kh);
    attention::split_heads(config_.cross ? kvp : qp, config_.cross ? 1 : 2, vh);
    attention::score_forward(ctx, m.score, qh, kh, probs, training ? &m.score_saved : nullptr);
    v = ops::matrix_view(vh);
  }
  Tensor additive_mask = build_mask(ctx, B, Tq, Tk, mask);  // broadcasts to [B, H, Tq, Tk]
  ops::softmax_forward(probs, additive_mask, probs);
  weights_ = keep_weights ? probs.clone() : Tensor();

  Tensor attn = m.dropout.forward(ctx, probs);  // [B, H, Tq, Tk] (probs itself without dropout)
  attn = for_products(ctx, precision, attn);    // f32, or bf16 with bf16 products
  ops::bmm(ops::matrix_view(attn), v, heads_view(context, H, dh, 0), 1.f, 0.f, precision);
  Tensor y = m.proj->forward(ctx, context);  // [B, Tq, d]

  m.saved = training;
  m.strided = strided;
  m.fused = false;
  m.precision = precision;
  m.batch = B, m.tq = Tq, m.tk = Tk;
  if (training) {
    m.qp = qp, m.kvp = kvp, m.qh = qh, m.kh = kh, m.vh = vh, m.probs = probs, m.attn = attn;
  } else {
    m.qp = m.kvp = m.qh = m.kh = m.vh = m.probs = m.attn = Tensor();
  }
  return y;
}

Tensor MultiHeadAttention::backward(Context& ctx, const Tensor& dy, Tensor* dmemory) {
  Impl& m = *impl_;
  if (!m.saved) throw Error(m.name + ": backward without a training forward");
  const int64_t B = m.batch, H = m.heads, Tq = m.tq, Tk = m.tk;
  const int64_t d = m.d, dh = m.head_dim;
  const bool cross = config_.cross;
  if (dy.dtype() != DType::f32 || dy.shape() != Shape{B, Tq, d})
    throw Error(m.name + ": dy " + shape_str(dy.shape()) + " should be f32 " +
                shape_str({B, Tq, d}) + " like the forward output");

  const ops::Precision precision = m.precision;
  Tensor dcontext = m.proj->backward(ctx, dy);  // [B, Tq, d]
  // [B, H, Tq, dh]; with bf16 products rounded once for dP and dV.
  const ops::MatrixView dctx = heads_view(
      m.fused || m.blocked ? dcontext : for_products(ctx, precision, dcontext), H, dh, 0);
  // Gradients of the projections, written head by head in place.
  Tensor dqp = ctx.alloc_uninit(m.qp.shape());                       // [B, Tq, d] or [B, T, 3d]
  Tensor dkvp = cross ? ctx.alloc_uninit(m.kvp.shape()) : Tensor();  // [B, Tk, 2d]
  Tensor& dk_of = cross ? dkvp : dqp;
  const int64_t kb = cross ? 0 : 1, vb = cross ? 1 : 2;
  // With `queries`, q is the first Tq rows of the q block: its other rows get no gradient.
  auto q_view = [&](const Tensor& projection) { return query_view(projection, H, dh, Tq); };
  if (!cross && Tq < Tk) {
    float* g = dqp.f32();
#pragma omp parallel for schedule(static) if (B * Tk * d > 65536)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = Tq; t < Tk; ++t) std::fill_n(g + (b * Tk + t) * 3 * d, d, 0.f);
  }
  if (m.fused || m.blocked) {
    const Tensor& kv_src = cross ? m.kvp : m.qp;
    const ops::MatrixView q = q_view(m.qp);
    const ops::MatrixView k = heads_view(kv_src, H, dh, kb), v = heads_view(kv_src, H, dh, vb);
    const ops::MatrixView dq = q_view(dqp);
    const ops::MatrixView dk = heads_view(dk_of, H, dh, kb), dv = heads_view(dk_of, H, dh, vb);
    if (m.blocked)
      ops::blocked_attention_backward(q, k, v, heads_view(m.context, H, dh, 0), m.lse, dctx,
                                      m.blocked_options, dq, dk, dv);
    else
      ops::fused_attention_backward(q, k, v, m.probs, dctx, score_scale(m.score), dq, dk, dv);
    if (cross) {
      Tensor dmem = m.kv->backward(ctx, dkvp);  // [B, Tk, d]
      if (dmemory) *dmemory = dmem;
      return m.q->backward(ctx, dqp);  // [B, Tq, d]
    }
    return m.qkv->backward(ctx, dqp);  // [B, T, d]
  }
  const ops::MatrixView v = m.strided ? heads_view(cross ? m.kvp : m.qp, H, dh, vb)
                                      : ops::matrix_view(m.vh);                 // [B, H, Tk, dh]
  const ops::MatrixView attn = ops::matrix_view(m.attn);                        // [B, H, Tq, Tk]
  Tensor dattn = ctx.alloc_uninit({B, H, Tq, Tk});                              // [B, H, Tq, Tk]
  ops::bmm(dctx, v.t(), ops::matrix_view(dattn), 1.f, 0.f, precision);          // dP = dO·Vᵀ
  ops::bmm(attn.t(), dctx, heads_view(dk_of, H, dh, vb), 1.f, 0.f, precision);  // dV = Pᵀ·dO
  Tensor dscores = m.dropout.backward(ctx, dattn);   // [B, H, Tq, Tk]: d(probs) ...
  ops::softmax_backward(m.probs, dscores, dscores);  // ... then d(scores), in place

  if (m.strided) {
    const ops::MatrixView q = q_view(m.qp);
    const ops::MatrixView k = heads_view(cross ? m.kvp : m.qp, H, dh, kb);
    const ops::MatrixView ds = ops::matrix_view(for_products(ctx, precision, dscores));
    const float scale = score_scale(m.score);
    ops::bmm(ds, k, q_view(dqp), scale, 0.f, precision);                       // dQ = dS·K
    ops::bmm(ds.t(), q, heads_view(dk_of, H, dh, kb), scale, 0.f, precision);  // dK = dSᵀ·Q
  } else {
    Tensor dqh = ctx.alloc_uninit({B, H, Tq, dh});  // [B, H, Tq, dh]
    Tensor dkh = ctx.alloc_uninit({B, H, Tk, dh});  // [B, H, Tk, dh]
    Context at_forward = ctx;  // the score's products at the forward's precision
    at_forward.precision = precision;
    attention::score_backward(at_forward, m.score, m.qh, m.kh, m.score_saved, dscores, dqh, dkh);
    attention::merge_heads(dqh, 0, dqp);
    attention::merge_heads(dkh, kb, dk_of);
  }

  if (cross) {
    Tensor dmem = m.kv->backward(ctx, dkvp);  // [B, Tk, d]
    if (dmemory) *dmemory = dmem;
    return m.q->backward(ctx, dqp);  // [B, Tq, d]
  }
  return m.qkv->backward(ctx, dqp);  // [B, T, d]
}

}  // namespace vitk::nn
