// Multi-head attention: construction, the one choice of a path per forward, and the reference path
// with its hand-written backward. The fast paths live in attention_fused_path.cpp and
// attention_blocked_path.cpp, the score functions in attention_score.cpp and incremental decoding
// in attention_decode.cpp.
//
// Forward (q, k, v are strided views of the projection, heads [B, H, T, dh]; the general and
// additive scores take contiguous copies instead):
//   q, k, v   = heads(x·Wqkvᵀ + b)  (cross: q from x, k and v from memory)
//   scores    = score(q, k)                          [B, H, Tq, Tk]
//   probs     = softmax(scores + mask)               [B, H, Tq, Tk]  (rows that see nothing: 0)
//   attn      = dropout(probs)                       [B, H, Tq, Tk]
//   context   = attn · v, written as heads of        [B, Tq, d]
//   y         = context·Wprojᵀ + b                   [B, Tq, d]
// The fused and blocked paths compute the same context from the same q, k, v without holding
// (blocked) or leaving cache for (fused) the weights [B, H, Tq, Tk].
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

const char* attention_path_name(AttentionPath p) {
  switch (p) {
    case AttentionPath::reference:
      return "reference";
    case AttentionPath::fused:
      return "fused";
    case AttentionPath::blocked:
      return "blocked";
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

// What the reference path's products read: x itself, or with bf16 products x rounded once into
// the arena (each of these tensors feeds two products, so rounding it here halves the work of
// rounding in the ops).
Tensor for_products(Context& ctx, ops::Precision precision, const Tensor& x) {
  if (precision != ops::Precision::bf16 || x.dtype() == DType::bf16) return x;
  Tensor r = ctx.alloc_uninit(x.shape(), DType::bf16);
  ops::round_to_bf16(x, r);
  return r;
}

// The dtype in which the projections write q, k and v: what the path's products read. bf16 for
// the reference path's bf16 products on the dot scores (they read the heads in place, forward and
// backward); f32 for the fused and blocked kernels and for the general and additive scores, whose
// copies the score functions round themselves.
DType operand_dtype(AttentionPath path, const attention::ScoreParams& score,
                    ops::Precision precision) {
  return path == AttentionPath::reference && score.is_dot() && precision == ops::Precision::bf16
             ? DType::bf16
             : DType::f32;
}

}  // namespace

float attention::ScoreParams::dot_scale() const {
  return kind == Score::scaled_dot ? 1.f / std::sqrt(static_cast<float>(head_dim)) : 1.f;
}

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

attention::Heads MultiHeadAttention::Impl::heads_of(const Tensor& q_proj,
                                                    const Tensor& kv_proj) const {
  const bool self = kv_proj.empty();
  const Tensor& keys = self ? q_proj : kv_proj;  // and values
  const int64_t kb = self ? 1 : 0;               // k's column block; v's is the next
  attention::Heads h{ops::heads_view(q_proj, heads, head_dim, 0),
                     ops::heads_view(keys, heads, head_dim, kb),
                     ops::heads_view(keys, heads, head_dim, kb + 1)};
  h.q.dims[2] = tq;  // the query rows: all of them, or the first tq (QueryRows)
  return h;
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

AttentionPath MultiHeadAttention::path() const {
  return impl_->path;
}

// Checks a forward's inputs (errors name the layer) and returns its sizes.
attention::Sizes MultiHeadAttention::Impl::check_inputs(const Context& ctx, bool cross,
                                                        const Tensor& x, const Tensor& memory,
                                                        const AttentionMask& mask,
                                                        QueryRows queries) const {
  const std::string want = "[B, T, " + std::to_string(d) + "]";
  const bool rounded_x = x.dtype() == DType::bf16 && ctx.training &&
                         ctx.precision == ops::Precision::bf16;  // Linear takes it as it is
  if (x.empty() || (x.dtype() != DType::f32 && !rounded_x) || x.rank() != 3 || x.dim(2) != d ||
      x.dim(0) < 1 || x.dim(1) < 1)
    throw Error(name + ": x must be f32 " + want + " (bf16 with bf16 products in training), not " +
                dtype_name(x.dtype()) + " " + shape_str(x.shape()));
  const int64_t B = x.dim(0), T = x.dim(1);
  if (cross) {
    if (memory.empty())
      throw Error(name + ": cross-attention needs a memory " + want + " (x " +
                  shape_str(x.shape()) + ")");
    if (memory.dtype() != DType::f32 || memory.rank() != 3 || memory.dim(0) != B ||
        memory.dim(2) != d || memory.dim(1) < 1)
      throw Error(name + ": memory " + shape_str(memory.shape()) + " does not fit x " +
                  shape_str(x.shape()) + " (want f32 [" + std::to_string(B) + ", Tk, " +
                  std::to_string(d) + "])");
  } else if (!memory.empty()) {
    throw Error(name + ": self-attention takes no memory, got " + shape_str(memory.shape()));
  }
  const int64_t Tq = queries.count(T);
  if (Tq != T) {
    const std::string first = "the first " + std::to_string(Tq) + " of " + std::to_string(T);
    if (cross) throw Error(name + ": query rows are for self-attention only (" + first + ")");
    if (Tq < 1 || Tq > T)
      throw Error(name + ": query rows: " + first + " positions (must be 1 to " +
                  std::to_string(T) + ")");
    if (mask.causal || mask.diagonal)
      throw Error(name + ": " + first +
                  " positions as queries with a causal or diagonal mask (their rule assumes every "
                  "position)");
    if (!score.is_dot())
      throw Error(name + ": " + first + " positions as queries with the " + score_name(score.kind) +
                  " score (dot scores only)");
  }
  const int64_t Tk = cross ? memory.dim(1) : T;
  if (!mask.key_lengths.empty()) attention::check_key_lengths(name, mask.key_lengths, B, Tk);
  if (ctx.training && dropout.p > 0.f && !ctx.rng)
    throw Error(name + ": attention dropout in training needs nn::Context::rng");
  if (mask.diagonal && ctx.attention_kernel == AttentionKernel::blocked)
    throw Error(name +
                ": the blocked attention kernel does not take the diagonal mask (use "
                "the automatic or the materialized kernel)");
  return {B, Tq, Tk};
}

// The one choice of a forward. The fused and blocked kernels compute the dot scores only, and the
// blocked one never holds the weights (so it cannot hand them to keep_weights) nor takes the
// diagonal mask. Both compute in f32 whatever the precision. With bf16 products the blocked
// kernel is taken only where the weights would be too large to hold; the fused one is taken as
// in f32: oneDNN runs the per-head bf16 products on strided views on its slow gemm:jit kernel,
// and those products with their softmax cost about twice the fused kernel (common/ops/README.md).
AttentionPath MultiHeadAttention::Impl::choose_path(const Context& ctx, const attention::Sizes& s,
                                                    const AttentionMask& mask,
                                                    bool keep_weights) const {
  const AttentionKernel want = ctx.attention_kernel;
  if (!score.is_dot() || want == AttentionKernel::reference) return AttentionPath::reference;
  // Weights kept in training are for a loss term on them (dweights): the path that takes it.
  if (keep_weights && ctx.training) return AttentionPath::reference;
  const bool drops = ctx.training && dropout.p > 0.f;
  if (!keep_weights && !mask.diagonal && want != AttentionKernel::materialized &&
      (want == AttentionKernel::blocked ||
       attention::prefer_blocked(s.batch, heads, s.tq, s.tk, head_dim, mask.hides_keys(), drops,
                                 ctx.precision)))
    return AttentionPath::blocked;
  if (!mask.hides_keys() && !drops && ops::fused_attention_supported(head_dim))
    return AttentionPath::fused;
  return AttentionPath::reference;
}

Tensor MultiHeadAttention::forward(Context& ctx, const Tensor& x, const Tensor& memory,
                                   const AttentionMask& mask, QueryRows queries) {
  Impl& m = *impl_;
  const attention::Sizes s = m.check_inputs(ctx, config_.cross, x, memory, mask, queries);
  const AttentionPath path = m.choose_path(ctx, s, mask, keep_weights);
  m.path = path;
  m.saved = false;  // until this forward has succeeded
  m.batch = s.batch, m.tq = s.tq, m.tk = s.tk;

  // Projections: self [B, T, 3d] (q, k, v), cross [B, Tq, d] (q) and [B, Tk, 2d] (k, v).
  const DType operands = operand_dtype(path, m.score, ctx.precision);
  const Tensor qp = (config_.cross ? *m.q : *m.qkv).forward(ctx, x, operands);
  const Tensor kvp = config_.cross ? m.kv->forward(ctx, memory, operands) : Tensor();
  const attention::Heads in = m.heads_of(qp, kvp);
  Tensor context = ctx.alloc_uninit({s.batch, s.tq, m.d});  // [B, Tq, d], written head by head
  const ops::MatrixView heads = ops::heads_view(context, m.heads, m.head_dim, 0);
  Tensor weights;  // [B, H, Tq, Tk], where the path holds them
  switch (path) {
    case AttentionPath::reference:
      weights = m.reference.forward(ctx, m.score, m.dropout, in, mask, heads);
      break;
    case AttentionPath::fused:
      weights = m.fused.forward(ctx, in, m.score.dot_scale(), heads);
      break;
    case AttentionPath::blocked:
      m.blocked.forward(ctx, in, m.score.dot_scale(), mask, m.dropout.p, heads);
      break;
  }
  weights_ = keep_weights ? weights.clone() : Tensor();
  Tensor y = m.proj->forward(ctx, context);  // [B, Tq, d]
  m.saved = ctx.training;
  m.qp = ctx.training ? qp : Tensor();
  m.kvp = ctx.training ? kvp : Tensor();
  return y;
}

Tensor MultiHeadAttention::backward(Context& ctx, const Tensor& dy, Tensor* dmemory) {
  Impl& m = *impl_;
  if (!m.saved) throw Error(m.name + ": backward without a training forward");
  const int64_t B = m.batch, Tq = m.tq, d = m.d;
  if (dy.dtype() != DType::f32 || dy.shape() != Shape{B, Tq, d})
    throw Error(m.name + ": dy " + shape_str(dy.shape()) + " should be f32 " +
                shape_str({B, Tq, d}) + " like the forward output");

  if (!dweights.empty()) {
    if (m.path != AttentionPath::reference)
      throw Error(m.name + ": dweights needs keep_weights at the training forward");
    const Shape want{B, m.heads, Tq, m.tk};
    if (dweights.dtype() != DType::f32 || dweights.shape() != want)
      throw Error(m.name + ": dweights " + shape_str(dweights.shape()) + " should be f32 " +
                  shape_str(want) + " like the weights of the last forward");
  }
  const Tensor dcontext = m.proj->backward(ctx, dy);  // [B, Tq, d]
  // Gradients of the projections, written head by head in place by the path.
  Tensor dqp = ctx.alloc_uninit(m.qp.shape());  // [B, T, 3d] or [B, Tq, d]
  Tensor dkvp = config_.cross ? ctx.alloc_uninit(m.kvp.shape()) : Tensor();  // [B, Tk, 2d]
  const int64_t T = m.qp.dim(1);
  if (Tq < T) {  // query rows: the other rows of q get no gradient
    float* g = dqp.f32();
#pragma omp parallel for schedule(static) if (B * T * d > 65536)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = Tq; t < T; ++t) std::fill_n(g + (b * T + t) * 3 * d, d, 0.f);
  }
  const attention::Heads in = m.heads_of(m.qp, m.kvp), grad = m.heads_of(dqp, dkvp);
  switch (m.path) {
    case AttentionPath::reference:
      m.reference.backward(ctx, m.score, m.dropout, in, dcontext, grad, dweights);
      break;
    case AttentionPath::fused:
      m.fused.backward(in, dcontext, grad);
      break;
    case AttentionPath::blocked:
      m.blocked.backward(in, dcontext, grad);
      break;
  }
  dweights = Tensor();  // consumed
  if (config_.cross) {
    Tensor dmem = m.kv->backward(ctx, dkvp);  // [B, Tk, d]
    if (dmemory) *dmemory = dmem;
    return m.q->backward(ctx, dqp);  // [B, Tq, d]
  }
  return m.qkv->backward(ctx, dqp);  // [B, T, d]
}

// ---- The reference path ----

Tensor attention::ReferencePath::forward(Context& ctx, const ScoreParams& score, Dropout& dropout,
                                         const Heads& in, const AttentionMask& mask,
                                         const ops::MatrixView& context) {
  const int64_t B = in.q.dims[0], H = in.q.dims[1], Tq = in.q.dims[2], Tk = in.k.dims[2];
  const int64_t dh = in.q.dims[3];
  const ops::Precision precision = ctx.precision;
  // scores = score(q, k): one product on the heads in place for the dot scores; the general and
  // additive scores work on contiguous copies of q, k and v.
  Tensor probs = ctx.alloc_uninit({B, H, Tq, Tk});  // [B, H, Tq, Tk]: scores, then softmax
  ops::MatrixView v = in.v;
  Tensor qh, kh, vh;
  score_saved_ = ScoreSaved();
  if (score.is_dot()) {
    ops::bmm(in.q, in.k.t(), ops::matrix_view(probs), score.dot_scale(), 0.f, precision);
  } else {
    qh = ctx.alloc_uninit({B, H, Tq, dh});  // [B, H, Tq, dh]
    kh = ctx.alloc_uninit({B, H, Tk, dh});  // [B, H, Tk, dh]
    vh = ctx.alloc_uninit({B, H, Tk, dh});  // [B, H, Tk, dh]
    split_heads(in.q, qh);
    split_heads(in.k, kh);
    split_heads(in.v, vh);
    score_forward(ctx, score, qh, kh, probs, ctx.training ? &score_saved_ : nullptr);
    v = ops::matrix_view(vh);
  }
  // probs = softmax(scores + mask), in place
  Tensor additive_mask = build_mask(ctx, B, Tq, Tk, mask);  // broadcasts to [B, H, Tq, Tk]
  ops::softmax_forward(probs, additive_mask, probs);
  // attn = dropout(probs) [B, H, Tq, Tk] (probs itself without dropout): f32, or bf16 with bf16
  // products
  const Tensor attn = for_products(ctx, precision, dropout.forward(ctx, probs));
  ops::bmm(ops::matrix_view(attn), v, context, 1.f, 0.f, precision);  // context = attn · v

  precision_ = precision;
  const bool keep = ctx.training;
  qh_ = keep ? qh : Tensor(), kh_ = keep ? kh : Tensor(), vh_ = keep ? vh : Tensor();
  probs_ = keep ? probs : Tensor(), attn_ = keep ? attn : Tensor();
  return probs;
}

void attention::ReferencePath::backward(Context& ctx, const ScoreParams& score, Dropout& dropout,
                                        const Heads& in, const Tensor& dcontext, const Heads& grad,
                                        const Tensor& dprobs) {
  const int64_t B = in.q.dims[0], H = in.q.dims[1], Tq = in.q.dims[2], Tk = in.k.dims[2];
  const int64_t dh = in.q.dims[3];
  const ops::Precision precision = precision_;
  // [B, H, Tq, dh]; with bf16 products rounded once for dP and dV.
  const ops::MatrixView dctx = ops::heads_view(for_products(ctx, precision, dcontext), H, dh, 0);
  const ops::MatrixView v = score.is_dot() ? in.v : ops::matrix_view(vh_);  // [B, H, Tk, dh]
  const ops::MatrixView attn = ops::matrix_view(attn_);                     // [B, H, Tq, Tk]
  Tensor dattn = ctx.alloc_uninit({B, H, Tq, Tk});                          // [B, H, Tq, Tk]
  ops::bmm(dctx, v.t(), ops::matrix_view(dattn), 1.f, 0.f, precision);      // dP = dO·Vᵀ
  ops::bmm(attn.t(), dctx, grad.v, 1.f, 0.f, precision);                    // dV = Pᵀ·dO
  Tensor dscores = dropout.backward(ctx, dattn);  // [B, H, Tq, Tk]: d(probs) ...
  if (!dprobs.empty()) {                          // ... plus a loss term's on the weights ...
    float* g = dscores.f32();
    const float* e = dprobs.f32();
    const int64_t n = dscores.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) g[i] += e[i];
  }
  ops::softmax_backward(probs_, dscores, dscores);  // ... then d(scores), in place

  if (score.is_dot()) {
    const ops::MatrixView ds = ops::matrix_view(for_products(ctx, precision, dscores));
    const float scale = score.dot_scale();
    ops::bmm(ds, in.k, grad.q, scale, 0.f, precision);      // dQ = dS·K
    ops::bmm(ds.t(), in.q, grad.k, scale, 0.f, precision);  // dK = dSᵀ·Q
    return;
  }
  Tensor dqh = ctx.alloc_uninit({B, H, Tq, dh});  // [B, H, Tq, dh]
  Tensor dkh = ctx.alloc_uninit({B, H, Tk, dh});  // [B, H, Tk, dh]
  Context at_forward = ctx;                       // the score's products at the forward's precision
  at_forward.precision = precision;
  score_backward(at_forward, score, qh_, kh_, score_saved_, dscores, dqh, dkh);
  merge_heads(dqh, grad.q);
  merge_heads(dkh, grad.k);
}

}  // namespace vitk::nn
