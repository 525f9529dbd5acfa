// The four attention score functions (scaled dot, dot, Luong's general, Bahdanau's additive), each
// with its hand-written backward, plus the head split/merge copies the attention layer uses.
// Products of whole tensors run on ops::bmm / ops::linear (oneDNN); the additive score's
// pairwise tanh has no matrix form and is a plain loop.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/nn/attention_impl.h"
#include "common/ops/profile.h"
#include "common/ops/vmath.h"

namespace vitk::nn::attention {
namespace {

// tanh through the vectorisable exp of common/ops: std::tanh is a libm call per element, which made
// the additive score's O(B·H·Tq·Tk·a) loop about three times slower. Absolute error about 1e-7.
inline float fast_tanh(float x) {
  const float e = ops::detail::fast_exp(-2.f * std::fabs(x));  // (0, 1]
  return std::copysign((1.f - e) / (1.f + e), x);
}

// The additive score: act[b,h,i,j,:] = tanh(qa_i + ka_j), s_ij = v · act[b,h,i,j,:].
void additive_forward(Context& ctx, const ScoreParams& p, const Tensor& q, const Tensor& k,
                      Tensor& scores, ScoreSaved* saved) {
  const int64_t B = q.dim(0), H = q.dim(1), Tq = q.dim(2), Tk = k.dim(2), a = p.additive_dim;
  Tensor qa = ctx.alloc({B, H, Tq, a});  // [B, H, Tq, a] = q · W_qᵀ
  Tensor ka = ctx.alloc({B, H, Tk, a});  // [B, H, Tk, a] = k · W_kᵀ
  Tensor none;
  ops::linear_forward(q, weight_of(*p.w_q, ctx), none, qa, ctx.precision);
  ops::linear_forward(k, weight_of(*p.w_k, ctx), none, ka, ctx.precision);
  Tensor act;  // [B, H, Tq, Tk, a], only when training
  if (saved) act = saved->act = ctx.alloc({B, H, Tq, Tk, a});
  const float* qap = qa.f32();
  const float* kap = ka.f32();
  const float* v = p.v->value.f32();
  float* s = scores.f32();
  float* actp = saved ? act.f32() : nullptr;
  const int64_t rows = B * H * Tq;
#pragma omp parallel for schedule(static) if (rows * Tk * a > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t bh = r / Tq;
    const float* qr = qap + r * a;
    for (int64_t j = 0; j < Tk; ++j) {
      const float* kr = kap + (bh * Tk + j) * a;
      float* t = actp ? actp + (r * Tk + j) * a : nullptr;
      float sum = 0.f;
      if (t) {
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < a; ++c) {
          const float th = fast_tanh(qr[c] + kr[c]);
          t[c] = th;
          sum += v[c] * th;
        }
      } else {
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < a; ++c) sum += v[c] * fast_tanh(qr[c] + kr[c]);
      }
      s[r * Tk + j] = sum;
    }
  }
}

void additive_backward(Context& ctx, const ScoreParams& p, const Tensor& q, const Tensor& k,
                       const ScoreSaved& saved, const Tensor& dscores, Tensor& dq, Tensor& dk) {
  const int64_t B = q.dim(0), H = q.dim(1), Tq = q.dim(2), Tk = k.dim(2), a = p.additive_dim;
  Tensor dqa = ctx.alloc({B, H, Tq, a});  // [B, H, Tq, a]
  Tensor dka = ctx.alloc({B, H, Tk, a});  // [B, H, Tk, a]
  // dv summed per (b, h) first and then in order, so the result does not depend on threads.
  Tensor dv_part = ctx.alloc({B * H, a});  // [B·H, a]
  const float* act = saved.act.f32();
  const float* ds = dscores.f32();
  const float* v = p.v->value.f32();
  float* dqap = dqa.f32();
  float* dkap = dka.f32();
  float* dvp = dv_part.f32();
#pragma omp parallel for schedule(static) if (B * H * Tq * Tk * a > 16384)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    float* dvr = dvp + bh * a;
    for (int64_t i = 0; i < Tq; ++i) {
      const int64_t r = bh * Tq + i;
      float* dqr = dqap + r * a;
      for (int64_t j = 0; j < Tk; ++j) {
        const float g = ds[r * Tk + j];
        if (g == 0.f) continue;  // masked keys: every term below has g as a factor
        const float* t = act + (r * Tk + j) * a;
        float* dkr = dkap + (bh * Tk + j) * a;
#pragma omp simd
        for (int64_t c = 0; c < a; ++c) {
          dvr[c] += g * t[c];
          const float dt = g * v[c] * (1.f - t[c] * t[c]);
          dqr[c] += dt;
          dkr[c] += dt;
        }
      }
    }
  }
  float* dv = p.v->grad.f32();
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t c = 0; c < a; ++c) dv[c] += dvp[bh * a + c];
  Tensor none;
  ops::linear_backward(q, weight_of(*p.w_q, ctx), dqa, dq, p.w_q->grad, none, ctx.precision);
  ops::linear_backward(k, weight_of(*p.w_k, ctx), dka, dk, p.w_k->grad, none, ctx.precision);
}

float dot(const float* x, const float* y, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < n; ++c) s += x[c] * y[c];
  return s;
}

}  // namespace

void score_forward(Context& ctx, const ScoreParams& p, const Tensor& q, const Tensor& k,
                   Tensor& scores, ScoreSaved* saved) {
  switch (p.kind) {
    case Score::scaled_dot:
      ops::bmm(q, false, k, true, scores, 1.f / std::sqrt(static_cast<float>(p.head_dim)), 0.f,
               ctx.precision);
      return;
    case Score::dot:
      ops::bmm(q, false, k, true, scores, 1.f, 0.f, ctx.precision);
      return;
    case Score::general: {
      // q·W·kᵀ = q·(k·Wᵀ)ᵀ: one linear over the keys, then the same product as the dot score.
      Tensor kw = ctx.alloc(k.shape());  // [B, H, Tk, dh]
      Tensor none;
      ops::linear_forward(k, weight_of(*p.weight, ctx), none, kw, ctx.precision);
      ops::bmm(q, false, kw, true, scores, 1.f, 0.f, ctx.precision);
      if (saved) saved->kw = kw;
      return;
    }
    case Score::additive:
      additive_forward(ctx, p, q, k, scores, saved);
      return;
  }
}

void score_backward(Context& ctx, const ScoreParams& p, const Tensor& q, const Tensor& k,
                    const ScoreSaved& saved, const Tensor& dscores, Tensor& dq, Tensor& dk) {
  switch (p.kind) {
    case Score::scaled_dot:
      ops::bmm_backward(q, false, k, true, dscores, 1.f / std::sqrt(static_cast<float>(p.head_dim)),
                        dq, dk, ctx.precision);
      return;
    case Score::dot:
      ops::bmm_backward(q, false, k, true, dscores, 1.f, dq, dk, ctx.precision);
      return;
    case Score::general: {
      Tensor dkw = ctx.alloc(k.shape());  // [B, H, Tk, dh]
      ops::bmm_backward(q, false, saved.kw, true, dscores, 1.f, dq, dkw, ctx.precision);
      Tensor none;
      ops::linear_backward(k, weight_of(*p.weight, ctx), dkw, dk, p.weight->grad, none,
                           ctx.precision);
      return;
    }
    case Score::additive:
      additive_backward(ctx, p, q, k, saved, dscores, dq, dk);
      return;
  }
}

void score_step(Context& ctx, const ScoreParams& p, const Tensor& q, const Tensor& cache_k,
                int64_t length, Tensor& scores) {
  const int64_t B = q.dim(0), H = q.dim(1), dh = q.dim(3), capacity = cache_k.dim(2);
  const int64_t a = p.additive_dim;
  // Per (b, h) scratch: general needs q·W [dh]; additive needs W_q·q and W_k·k_j [a] each.
  const int64_t scratch_width = p.kind == Score::additive ? 2 * a : dh;
  Tensor scratch = ctx.alloc({B * H, scratch_width});  // [B·H, dh or 2a]
  const float* qp = q.f32();
  const float* kp = cache_k.f32();
  float* sp = scores.f32();
  float* scr = scratch.f32();
  const float scale = p.kind == Score::scaled_dot ? 1.f / std::sqrt(static_cast<float>(dh)) : 1.f;
#pragma omp parallel for schedule(static) if (B * H * length * dh > 16384)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const float* qr = qp + bh * dh;
    const float* keys = kp + bh * capacity * dh;  // [capacity, dh], the first `length` filled
    float* s = sp + bh * length;
    float* tmp = scr + bh * scratch_width;
    switch (p.kind) {
      case Score::scaled_dot:
      case Score::dot:
        for (int64_t j = 0; j < length; ++j) s[j] = dot(qr, keys + j * dh, dh) * scale;
        break;
      case Score::general: {
        // (q·W)_e = Σ_c q_c W_ce, then a dot product with every key.
        const float* w = p.weight->value.f32();  // [dh, dh]
        std::fill(tmp, tmp + dh, 0.f);
        for (int64_t c = 0; c < dh; ++c)
          for (int64_t e = 0; e < dh; ++e) tmp[e] += qr[c] * w[c * dh + e];
        for (int64_t j = 0; j < length; ++j) s[j] = dot(tmp, keys + j * dh, dh);
        break;
      }
      case Score::additive: {
        const float* wq = p.w_q->value.f32();  // [a, dh]
        const float* wk = p.w_k->value.f32();  // [a, dh]
        const float* v = p.v->value.f32();     // [a]
        float* qa = tmp;                       // [a]
        float* ka = tmp + a;                   // [a]
        for (int64_t c = 0; c < a; ++c) qa[c] = dot(wq + c * dh, qr, dh);
        for (int64_t j = 0; j < length; ++j) {
          const float* kr = keys + j * dh;
          for (int64_t c = 0; c < a; ++c) ka[c] = dot(wk + c * dh, kr, dh);
          float sum = 0.f;
#pragma omp simd reduction(+ : sum)
          for (int64_t c = 0; c < a; ++c) sum += v[c] * fast_tanh(qa[c] + ka[c]);
          s[j] = sum;
        }
        break;
      }
    }
  }
}

namespace {

// Row (b, h, t) of a rank-4 f32 view.
float* view_row(const ops::MatrixView& v, int64_t b, int64_t h, int64_t t) {
  return static_cast<float*>(v.data) + b * v.strides[0] + h * v.strides[1] + t * v.strides[2];
}

void check_heads(const char* op, const ops::MatrixView& v, const Tensor& t) {
  if (v.dtype != DType::f32 || v.dims.size() != 4 || v.strides[3] != 1 || v.dims != t.shape() ||
      t.dtype() != DType::f32)
    throw Error(std::string(op) + ": heads " + shape_str(v.dims) + " do not fit " +
                shape_str(t.shape()) + " (f32 views with contiguous rows)");
}

}  // namespace

void split_heads(const ops::MatrixView& src, Tensor& dst) {
  check_heads("split_heads", src, dst);
  const int64_t B = dst.dim(0), H = dst.dim(1), T = dst.dim(2), dh = dst.dim(3);
  ops::profile::Scope scope("split_heads");
  float* out = dst.f32();
#pragma omp parallel for schedule(static) if (B * T * H * dh > 65536)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(out + ((b * H + h) * T + t) * dh, view_row(src, b, h, t), sizeof(float) * dh);
  }
}

void merge_heads(const Tensor& src, const ops::MatrixView& dst) {
  check_heads("merge_heads", dst, src);
  const int64_t B = src.dim(0), H = src.dim(1), T = src.dim(2), dh = src.dim(3);
  ops::profile::Scope scope("merge_heads");
  const float* in = src.f32();
#pragma omp parallel for schedule(static) if (B * T * H * dh > 65536)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(view_row(dst, b, h, t), in + ((b * H + h) * T + t) * dh, sizeof(float) * dh);
  }
}

void check_key_lengths(const std::string& layer, const Tensor& key_lengths, int64_t batch,
                       int64_t max_length) {
  if (key_lengths.dtype() != DType::i32 || key_lengths.rank() != 1 || key_lengths.dim(0) != batch)
    throw Error(layer + ": key_lengths must be i32 [" + std::to_string(batch) + "], not " +
                dtype_name(key_lengths.dtype()) + " " + shape_str(key_lengths.shape()));
  const int32_t* len = key_lengths.i32();
  for (int64_t b = 0; b < batch; ++b)
    if (len[b] < 0 || len[b] > max_length)
      throw Error(layer + ": key_lengths[" + std::to_string(b) + "] = " + std::to_string(len[b]) +
                  " is outside [0, " + std::to_string(max_length) + "]");
}

}  // namespace vitk::nn::attention
