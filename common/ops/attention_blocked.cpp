// Blocked ("flash") attention: softmax(scale · q·kᵀ + mask)·v, forward and backward, without ever
// holding more than one block of query rows × one block of keys of scores per thread.
//
// Forward, per (batch, head, block of kBlockQ query rows), over blocks of kBlockK keys:
//   S = scale · Q_i · K_jᵀ                       [rows, keys] in L1
//   m' = max(m, rowmax S);  P = exp(S − m')      the running maximum and sum of the online softmax
//   l  = l · e^(m − m') + rowsum P;  O = O · e^(m − m') + P · V_j
// then O /= l and lse = m + log l, which the backward uses to recompute P = exp(S − lse) exactly.
// Backward (FlashAttention-2), per (batch, head): D = rowsum(dO ⊙ O); for each key block j, for
// each query block i that sees it:
//   P = exp(S − lse);  dP = dO_i · V_jᵀ;  dV_j += Pᵀ · dO_i;  dS = P ⊙ (dP − D)
//   dK_j += scale · dSᵀ · Q_i;  dQ_i += scale · dS · K_j
// Each head is one task, so dQ, dK and dV are summed in one fixed order whatever the thread count.
//
// Masks need no tensor: query row i of batch b sees exactly the keys [0, visible(b, i)), a prefix
// whose length never decreases with i, so a block of keys no query row of a block can see is
// skipped (padding, the upper triangle of a causal mask), and only the block on the boundary
// masks scores. q, k and v are copied per head into padded rows (kt and vt transposed block by
// block): the products then read L1 instead of rows 3·d floats apart in the fused projection.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/attention_tiles.h"
#include "common/ops/kernel_functions.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"
#include "common/ops/vmath.h"

// GCC 12 reports its own AVX-512 intrinsics (reductions, unpacks, shuffles: an undefined
// pass-through operand) as "maybe uninitialized" wherever they are inlined: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace vitk::ops::VITK_ISA_NAMESPACE {
namespace {

constexpr int64_t kBlockQ = 64;  // query rows per block
constexpr int64_t kBlockK = 64;  // keys per block: one 64-column tile of scores
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
static_assert(kBlockK == 64, "the row steps in attention_tiles.h work on 64-wide rows");

int64_t round16(int64_t n) {
  return (n + 15) / 16 * 16;
}

const float* row_of(const MatrixView& v, int64_t b, int64_t h, int64_t r) {
  return static_cast<const float*>(v.data) + b * v.strides[0] + h * v.strides[1] + r * v.strides[2];
}
float* row_of_mut(const MatrixView& v, int64_t b, int64_t h, int64_t r) {
  return static_cast<float*>(v.data) + b * v.strides[0] + h * v.strides[1] + r * v.strides[2];
}

// Shapes, masks and dropout of one call.
struct Problem {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, dh = 0;
  int64_t dhp = 0;  // dh rounded up to 16: the width of packed rows
  float scale = 1.f;
  const int32_t* lengths = nullptr;
  bool causal = false;
  float p = 0.f, keep_scale = 1.f;
  uint64_t seed = 0, counter = 0;

  // Query row i of batch b sees keys [0, visible(b, i)).
  int64_t visible(int64_t b, int64_t i) const {
    int64_t n = lengths ? lengths[b] : Tk;
    if (causal) n = std::min(n, std::max<int64_t>(0, i + (Tk - Tq) + 1));
    return n;
  }
  // Keys seen by any query of batch b.
  int64_t keys_needed(int64_t b) const { return Tq > 0 ? visible(b, Tq - 1) : 0; }
  int64_t key_blocks() const { return (Tk + kBlockK - 1) / kBlockK; }

  // Multiplies p[c] (c < n), the weights of query row i against keys j0 + c, by the dropout
  // factor: 0 or 1/(1 − p), the draw dropout_forward makes for element (b, h, i, j).
  void apply_dropout(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, float* w) const {
    const uint64_t first = counter + static_cast<uint64_t>(((b * H + h) * Tq + i) * Tk + j0);
    const float drop = p, keep = keep_scale;
#pragma omp simd
    for (int64_t c = 0; c < n; ++c)
      w[c] *=
          Rng::to_uniform(Rng::hash(seed, first + static_cast<uint64_t>(c))) >= drop ? keep : 0.f;
  }
};

// dst [n, dhp] = rows [r0, r0 + n) of matrix (b, h) of src; columns dh..dhp are zero.
void pack_rows(const MatrixView& src, int64_t b, int64_t h, int64_t r0, int64_t n, int64_t dh,
               int64_t dhp, float* dst) {
  for (int64_t r = 0; r < n; ++r, dst += dhp) {
    const float* s = row_of(src, b, h, r0 + r);
    std::copy(s, s + dh, dst);
    std::fill(dst + dh, dst + dhp, 0.f);
  }
}

// Rows [0, n) of matrix (b, h) of src, transposed block by block: dst [blocks, dhp, kBlockK],
// dst[(jb·dhp + f)·kBlockK + c] = src[jb·kBlockK + c, f]; padding (f >= dh, keys >= n) is zero.
// One block (16 KB for dh = 64) is contiguous, so the score product streams through it.
void pack_transposed(const MatrixView& src, int64_t b, int64_t h, int64_t n, int64_t dh,
                     int64_t dhp, float* dst) {
  for (int64_t j0 = 0; j0 < n; j0 += kBlockK) {
    float* blk = dst + j0 * dhp;  // (j0 / kBlockK) · dhp · kBlockK
    const int64_t nk = std::min(kBlockK, n - j0);
#if defined(__AVX512F__)
    // 16 keys × 16 features at a time, transposed in registers.
    __m512 r[16];
    for (int64_t c0 = 0; c0 < kBlockK; c0 += 16)
      for (int64_t f0 = 0; f0 < dhp; f0 += 16) {
        const int64_t left = dh - f0;
        const __mmask16 fm = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
        for (int64_t i = 0; i < 16; ++i)
          r[i] = c0 + i < nk ? _mm512_maskz_loadu_ps(fm, row_of(src, b, h, j0 + c0 + i) + f0)
                             : _mm512_setzero_ps();
        detail::transpose16(r);
        for (int64_t i = 0; i < 16; ++i) _mm512_storeu_ps(blk + (f0 + i) * kBlockK + c0, r[i]);
      }
#else
    if (nk < kBlockK || dh < dhp) std::fill(blk, blk + dhp * kBlockK, 0.f);
    for (int64_t c = 0; c < nk; ++c) {
      const float* s = row_of(src, b, h, j0 + c);
      for (int64_t f = 0; f < dh; ++f) blk[f * kBlockK + c] = s[f];
    }
#endif
  }
}

void grow(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

// Per-thread buffers, grown once to the largest shape seen (no allocation in a steady state).
struct Scratch {
  std::vector<float> kt, vt;      // [key blocks, dhp, kBlockK]: k and (backward) v transposed
  std::vector<float> km, vm;      // [Tk, dhp]: k (backward) and v (forward) rows
  std::vector<float> qm, gm;      // [Tq, dhp] (backward) or [kBlockQ, dhp] (forward q): q, dO
  std::vector<float> acc, dk;     // forward: O [kBlockQ, dhp]; backward: dQ [Tq, dhp], dK [Tk, dhp]
  std::vector<float> dv;          // backward: dV [Tk, dhp]
  std::vector<float> s, dp, pd;   // [kBlockQ, kBlockK]: scores or P, dP or dS, dropped P
  std::vector<float> m, l, dvec;  // per query row: running max, running sum; D
};
Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}

// ---- Forward ----

void forward_block(const Problem& pr, Scratch& sc, const MatrixView& q, int64_t b, int64_t h,
                   int64_t i0, int64_t rows, float* lse, const MatrixView& context) {
  const int64_t dhp = pr.dhp, dh = pr.dh;
  float* qm = sc.qm.data();    // [rows, dhp]
  float* s = sc.s.data();      // [rows, kBlockK]: S, then P
  float* acc = sc.acc.data();  // [rows, dhp]: unnormalised O
  float* m = sc.m.data();
  float* l = sc.l.data();
  pack_rows(q, b, h, i0, rows, dh, dhp, qm);
  std::fill(m, m + rows, kMinusInf);
  std::fill(l, l + rows, 0.f);
  std::fill(acc, acc + rows * dhp, 0.f);
  const int64_t keys = pr.visible(b, i0 + rows - 1);  // the most any row of the block sees
  for (int64_t j0 = 0; j0 < keys; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, keys - j0);
    detail::tile_gemm(rows, round16(nk), dhp, qm, dhp, 1, sc.kt.data() + j0 * dhp, kBlockK, s,
                      kBlockK, pr.scale, false);
    for (int64_t r = 0; r < rows; ++r) {
      float* sr = s + r * kBlockK;
      const int64_t n = std::clamp<int64_t>(pr.visible(b, i0 + r) - j0, 0, nk);
      if (n == 0) {  // masked: no weight
        std::fill(sr, sr + kBlockK, 0.f);
        continue;
      }
      const float m_new = std::max(m[r], detail::row_max64(sr, n));
      const float alpha = detail::fast_exp(m[r] - m_new);  // 0 on the first visible block
      const float sum = detail::row_exp64(sr, n, m_new);
      l[r] = l[r] * alpha + sum;
      m[r] = m_new;
      if (pr.p > 0.f) pr.apply_dropout(b, h, i0 + r, j0, n, sr);  // after the sum: l is undropped
      if (alpha != 1.f) {
        float* ar = acc + r * dhp;
#pragma omp simd
        for (int64_t f = 0; f < dhp; ++f) ar[f] *= alpha;
      }
    }
    detail::tile_gemm(rows, dhp, nk, s, kBlockK, 1, sc.vm.data() + j0 * dhp, dhp, acc, dhp, 1.f,
                      true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* out = row_of_mut(context, b, h, i0 + r);
    if (l[r] > 0.f) {
      const float inv = 1.f / l[r];
      const float* ar = acc + r * dhp;
#pragma omp simd
      for (int64_t f = 0; f < dh; ++f) out[f] = ar[f] * inv;
      lse[r] = m[r] + std::log(l[r]);
    } else {  // sees no key
      std::fill(out, out + dh, 0.f);
      lse[r] = kMinusInf;
    }
  }
}

// ---- Backward ----

void backward_head(const Problem& pr, Scratch& sc, const MatrixView& q, const MatrixView& k,
                   const MatrixView& v, const MatrixView& o, const float* lse, const MatrixView& go,
                   int64_t b, int64_t h, const MatrixView& dq, const MatrixView& dk,
                   const MatrixView& dv) {
  const int64_t dhp = pr.dhp, dh = pr.dh, Tq = pr.Tq, Tk = pr.Tk;
  const int64_t keys = pr.keys_needed(b);
  float* qm = sc.qm.data();      // [Tq, dhp]
  float* gm = sc.gm.data();      // [Tq, dhp]: dO
  float* km = sc.km.data();      // [keys, dhp]
  float* dqa = sc.acc.data();    // [Tq, dhp]
  float* dka = sc.dk.data();     // [keys, dhp]
  float* dva = sc.dv.data();     // [keys, dhp]
  float* dvec = sc.dvec.data();  // [Tq]: D = rowsum(dO ⊙ O)
  float* s = sc.s.data();        // [kBlockQ, kBlockK]: S, then P
  float* dp = sc.dp.data();      // [kBlockQ, kBlockK]: dP, then dS
  float* pd = sc.pd.data();      // [kBlockQ, kBlockK]: P after dropout
  if (keys > 0) {
    pack_rows(q, b, h, 0, Tq, dh, dhp, qm);
    pack_rows(go, b, h, 0, Tq, dh, dhp, gm);
    pack_rows(k, b, h, 0, keys, dh, dhp, km);
    pack_transposed(k, b, h, keys, dh, dhp, sc.kt.data());
    pack_transposed(v, b, h, keys, dh, dhp, sc.vt.data());
    for (int64_t i = 0; i < Tq; ++i) {
      const float* oi = row_of(o, b, h, i);
      const float* gi = gm + i * dhp;
      float d = 0.f;
      for (int64_t f = 0; f < dh; ++f) d += gi[f] * oi[f];
      dvec[i] = d;
    }
    std::fill(dqa, dqa + Tq * dhp, 0.f);
    std::fill(dka, dka + keys * dhp, 0.f);
    std::fill(dva, dva + keys * dhp, 0.f);
  }
  const bool dropout = pr.p > 0.f;
  for (int64_t j0 = 0; j0 < keys; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, keys - j0), ncols = round16(nk);
    const float* kt = sc.kt.data() + j0 * dhp;
    const float* vt = sc.vt.data() + j0 * dhp;
    // Rows are sorted by how many keys they see: start at the first that sees key j0.
    const int64_t first_row = pr.causal ? std::max<int64_t>(0, j0 - (Tk - Tq)) : 0;
    for (int64_t i0 = first_row / kBlockQ * kBlockQ; i0 < Tq; i0 += kBlockQ) {
      const int64_t rows = std::min(kBlockQ, Tq - i0);
      detail::tile_gemm(rows, ncols, dhp, qm + i0 * dhp, dhp, 1, kt, kBlockK, s, kBlockK, pr.scale,
                        false);
      detail::tile_gemm(rows, ncols, dhp, gm + i0 * dhp, dhp, 1, vt, kBlockK, dp, kBlockK, 1.f,
                        false);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        float* sr = s + r * kBlockK;
        float* dr = dp + r * kBlockK;
        const int64_t n = std::clamp<int64_t>(pr.visible(b, i) - j0, 0, nk);
        detail::row_exp64(sr, n, lse[i]);
        if (dropout) {
          // dV takes the dropped weights; dP = dP̃ ⊙ keep / (1 − p).
          float* pr_row = pd + r * kBlockK;
          std::copy(sr, sr + nk, pr_row);
          pr.apply_dropout(b, h, i, j0, n, pr_row);
          pr.apply_dropout(b, h, i, j0, n, dr);
        }
        detail::row_softmax_grad64(sr, dr, dvec[i], n);  // dS, 0 where masked
      }
      const float* pv = dropout ? pd : s;
      // dV_j += Pᵀ·dO_i: row c of dV, A(c, r) = P[r, c].
      detail::tile_gemm(nk, dhp, rows, pv, 1, kBlockK, gm + i0 * dhp, dhp, dva + j0 * dhp, dhp, 1.f,
                        true);
      // dK_j += scale · dSᵀ·Q_i; dQ_i += scale · dS·K_j.
      detail::tile_gemm(nk, dhp, rows, dp, 1, kBlockK, qm + i0 * dhp, dhp, dka + j0 * dhp, dhp,
                        pr.scale, true);
      detail::tile_gemm(rows, dhp, nk, dp, kBlockK, 1, km + j0 * dhp, dhp, dqa + i0 * dhp, dhp,
                        pr.scale, true);
    }
  }
  for (int64_t i = 0; i < Tq; ++i) {
    float* out = row_of_mut(dq, b, h, i);
    if (keys > 0)
      std::copy(dqa + i * dhp, dqa + i * dhp + dh, out);
    else
      std::fill(out, out + dh, 0.f);
  }
  for (int64_t j = 0; j < Tk; ++j) {  // keys nobody sees get zero gradients
    float* ok = row_of_mut(dk, b, h, j);
    float* ov = row_of_mut(dv, b, h, j);
    if (j < keys) {
      std::copy(dka + j * dhp, dka + j * dhp + dh, ok);
      std::copy(dva + j * dhp, dva + j * dhp + dh, ov);
    } else {
      std::fill(ok, ok + dh, 0.f);
      std::fill(ov, ov + dh, 0.f);
    }
  }
}

// ---- Checks ----

bool rows_contiguous(const MatrixView& v) {
  return v.data && v.dtype == DType::f32 && v.dims.size() == 4 && v.strides.size() == 4 &&
         v.strides[3] == 1 && v.dims[3] >= 1;
}

std::string view_str(const MatrixView& v) {
  return shape_str(v.dims);
}

Problem make_problem(const char* op, const MatrixView& q, const MatrixView& k, const MatrixView& v,
                     const BlockedAttention& options) {
  const std::string name(op);
  if (!rows_contiguous(q) || !rows_contiguous(k) || !rows_contiguous(v))
    throw Error(name + ": q, k, v must be f32 [B, H, T, dh] views with contiguous rows");
  Problem pr;
  pr.B = q.dims[0], pr.H = q.dims[1], pr.Tq = q.dims[2], pr.Tk = k.dims[2], pr.dh = q.dims[3];
  if (k.dims[0] != pr.B || k.dims[1] != pr.H || k.dims[3] != pr.dh || v.dims != k.dims)
    throw Error(name + ": q " + view_str(q) + ", k " + view_str(k) + " and v " + view_str(v) +
                " do not fit");
  pr.dhp = round16(pr.dh);
  pr.scale = options.scale;
  pr.causal = options.causal;
  if (!options.key_lengths.empty()) {
    const Tensor& len = options.key_lengths;
    if (len.dtype() != DType::i32 || len.shape() != Shape{pr.B})
      throw Error(name + ": key_lengths " + shape_str(len.shape()) + " should be i32 [" +
                  std::to_string(pr.B) + "]");
    pr.lengths = len.i32();
    for (int64_t b = 0; b < pr.B; ++b)
      if (pr.lengths[b] < 0 || pr.lengths[b] > pr.Tk)
        throw Error(name + ": key length " + std::to_string(pr.lengths[b]) + " of sequence " +
                    std::to_string(b) + " is outside [0, " + std::to_string(pr.Tk) + "]");
  }
  if (!(options.dropout >= 0.f && options.dropout < 1.f))
    throw Error(name + ": dropout must be in [0, 1), not " + std::to_string(options.dropout));
  pr.p = options.dropout;
  pr.keep_scale = 1.f / (1.f - options.dropout);
  pr.seed = options.seed, pr.counter = options.counter;
  return pr;
}

void check_like(const char* op, const char* what, const MatrixView& got, const MatrixView& like) {
  if (!rows_contiguous(got) || got.dims != like.dims)
    throw Error(std::string(op) + ": " + what + " " + view_str(got) + " should be an f32 view " +
                view_str(like) + " with contiguous rows");
}

void check_lse(const char* op, const Tensor& lse, const Problem& pr) {
  if (lse.dtype() != DType::f32 || lse.shape() != Shape{pr.B, pr.H, pr.Tq})
    throw Error(std::string(op) + ": lse " + shape_str(lse.shape()) + " should be f32 " +
                shape_str({pr.B, pr.H, pr.Tq}));
}

}  // namespace

bool blocked_attention_supported(const MatrixView& q, const MatrixView& k, const MatrixView& v) {
  return rows_contiguous(q) && rows_contiguous(k) && rows_contiguous(v) && k.dims[3] == q.dims[3] &&
         v.dims == k.dims;
}

void blocked_attention_forward(const MatrixView& q, const MatrixView& k, const MatrixView& v,
                               const BlockedAttention& options, Tensor& lse,
                               const MatrixView& context) {
  const char* op = "blocked_attention_forward";
  const Problem pr = make_problem(op, q, k, v, options);
  check_like(op, "context", context, q);
  check_lse(op, lse, pr);
  const int64_t B = pr.B, H = pr.H, Tq = pr.Tq, dhp = pr.dhp;
  profile::Scope scope(op, B * H, Tq, pr.Tk);
  const int64_t q_blocks = (Tq + kBlockQ - 1) / kBlockQ, tasks = B * H * q_blocks;
  float* lse_p = lse.f32();
#pragma omp parallel if (tasks > 1)
  {
    Scratch& sc = scratch();
    grow(sc.kt, pr.key_blocks() * dhp * kBlockK);
    grow(sc.vm, pr.key_blocks() * kBlockK * dhp);
    grow(sc.qm, kBlockQ * dhp);
    grow(sc.acc, kBlockQ * dhp);
    grow(sc.s, kBlockQ * kBlockK);
    grow(sc.m, kBlockQ);
    grow(sc.l, kBlockQ);
    int64_t packed = -1;  // the head whose k and v this thread holds
    // Dynamic: causal blocks differ in work, and the results do not depend on who does a block.
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bh = t / q_blocks, i0 = t % q_blocks * kBlockQ;
      const int64_t b = bh / H, h = bh % H, rows = std::min(kBlockQ, Tq - i0);
      if (bh != packed) {
        const int64_t keys = pr.keys_needed(b);
        pack_transposed(k, b, h, keys, pr.dh, dhp, sc.kt.data());
        pack_rows(v, b, h, 0, keys, pr.dh, dhp, sc.vm.data());
        packed = bh;
      }
      forward_block(pr, sc, q, b, h, i0, rows, lse_p + bh * Tq + i0, context);
    }
  }
}

void blocked_attention_backward(const MatrixView& q, const MatrixView& k, const MatrixView& v,
                                const MatrixView& context, const Tensor& lse,
                                const MatrixView& dcontext, const BlockedAttention& options,
                                const MatrixView& dq, const MatrixView& dk, const MatrixView& dv) {
  const char* op = "blocked_attention_backward";
  const Problem pr = make_problem(op, q, k, v, options);
  check_like(op, "context", context, q);
  check_like(op, "dcontext", dcontext, q);
  check_like(op, "dq", dq, q);
  check_like(op, "dk", dk, k);
  check_like(op, "dv", dv, v);
  check_lse(op, lse, pr);
  const int64_t B = pr.B, H = pr.H, Tq = pr.Tq, Tk = pr.Tk, dhp = pr.dhp;
  profile::Scope scope(op, B * H, Tq, Tk);
  const float* lse_p = lse.f32();
#pragma omp parallel if (B * H > 1)
  {
    Scratch& sc = scratch();
    grow(sc.kt, pr.key_blocks() * dhp * kBlockK);
    grow(sc.vt, pr.key_blocks() * dhp * kBlockK);
    grow(sc.km, Tk * dhp);
    grow(sc.qm, Tq * dhp);
    grow(sc.gm, Tq * dhp);
    grow(sc.acc, Tq * dhp);
    grow(sc.dk, Tk * dhp);
    grow(sc.dv, Tk * dhp);
    grow(sc.s, kBlockQ * kBlockK);
    grow(sc.dp, kBlockQ * kBlockK);
    grow(sc.pd, kBlockQ * kBlockK);
    grow(sc.dvec, Tq);
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < B * H; ++bh)
      backward_head(pr, sc, q, k, v, context, lse_p + bh * Tq, dcontext, bh / H, bh % H, dq, dk,
                    dv);
  }
}

}  // namespace vitk::ops::VITK_ISA_NAMESPACE
