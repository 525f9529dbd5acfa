// The fast attention ops: batched products on strided views (heads read in place from the fused
// projection), the fused AVX-512 attention kernel for d_head = 64, uninitialised arena memory and
// the layer norm backward that adds the residual gradient. Each against a double-precision loop
// written here, with central finite differences for the fused backward. The attention layer's
// fused path against its reference path: test_attention_paths.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/error.h"
#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "util/isa_levels.h"
#include "util/op_test_util.h"

namespace vitk {
namespace {

using test::all_close;
using test::random_tensor;

constexpr int64_t kDh = 64;

// Element (b, h, r, c) of a rank-4 view.
float at(const ops::MatrixView& v, int64_t b, int64_t h, int64_t r, int64_t c) {
  const float* p = static_cast<const float*>(v.data);
  return p[b * v.strides[0] + h * v.strides[1] + r * v.strides[2] + c * v.strides[3]];
}

// Reference attention for one (b, h): probs [Tq, Tk] and context [Tq, dh] in double.
struct RefHead {
  std::vector<double> probs, context;
};
RefHead reference_head(const ops::MatrixView& q, const ops::MatrixView& k, const ops::MatrixView& v,
                       int64_t b, int64_t h, double scale) {
  const int64_t Tq = q.dims[2], Tk = k.dims[2], dh = q.dims[3];
  RefHead r;
  r.probs.assign(static_cast<size_t>(Tq * Tk), 0.0);
  r.context.assign(static_cast<size_t>(Tq * dh), 0.0);
  for (int64_t i = 0; i < Tq; ++i) {
    double mx = -1e300;
    std::vector<double> s(static_cast<size_t>(Tk));
    for (int64_t j = 0; j < Tk; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < dh; ++c) acc += double(at(q, b, h, i, c)) * at(k, b, h, j, c);
      s[j] = acc * scale;
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < Tk; ++j) sum += (s[j] = std::exp(s[j] - mx));
    for (int64_t j = 0; j < Tk; ++j) r.probs[i * Tk + j] = s[j] / sum;
    for (int64_t c = 0; c < dh; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < Tk; ++j) acc += r.probs[i * Tk + j] * at(v, b, h, j, c);
      r.context[i * dh + c] = acc;
    }
  }
  return r;
}

// Self-attention inputs as the layer has them: one fused projection [B, T, 3·H·64].
struct SelfCase {
  Tensor qkv;
  ops::MatrixView q, k, v;
};
SelfCase self_case(int64_t B, int64_t H, int64_t T, std::mt19937& gen) {
  SelfCase c;
  c.qkv = random_tensor({B, T, 3 * H * kDh}, gen, -1.f, 1.f);
  c.q = ops::heads_view(c.qkv, H, kDh, 0);
  c.k = ops::heads_view(c.qkv, H, kDh, 1);
  c.v = ops::heads_view(c.qkv, H, kDh, 2);
  return c;
}

class FusedAttention : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    std::mt19937 gen(1);
    SelfCase c = self_case(1, 1, 2, gen);
    if (!ops::fused_attention_supported(c.q, c.k))
      GTEST_SKIP() << "no fused attention kernel in this build (needs AVX-512)";
  }
};

TEST_P(FusedAttention, ForwardMatchesNaive) {
  const int64_t T = GetParam(), B = 2, H = 3;
  std::mt19937 gen(static_cast<unsigned>(T));
  SelfCase c = self_case(B, H, T, gen);
  Tensor probs = test::garbage_tensor({B, H, T, T});
  Tensor context = test::garbage_tensor({B, T, H * kDh});
  const float scale = 0.125f;
  ops::fused_attention_forward(c.q, c.k, c.v, scale, probs, ops::heads_view(context, H, kDh, 0));
  std::vector<double> want_p(static_cast<size_t>(B * H * T * T));
  std::vector<double> want_c(static_cast<size_t>(B * T * H * kDh));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      RefHead r = reference_head(c.q, c.k, c.v, b, h, scale);
      std::copy(r.probs.begin(), r.probs.end(), want_p.begin() + (b * H + h) * T * T);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < kDh; ++d)
          want_c[(b * T + i) * H * kDh + h * kDh + d] = r.context[i * kDh + d];
    }
  EXPECT_TRUE(all_close(probs, want_p, 1e-6, 1e-5));
  EXPECT_TRUE(all_close(context, want_c, 1e-5, 1e-4));
}

TEST_P(FusedAttention, BackwardMatchesNaive) {
  const int64_t T = GetParam(), B = 2, H = 2;
  std::mt19937 gen(100 + static_cast<unsigned>(T));
  SelfCase c = self_case(B, H, T, gen);
  const float scale = 0.125f;
  Tensor probs({B, H, T, T});
  Tensor context({B, T, H * kDh});
  ops::fused_attention_forward(c.q, c.k, c.v, scale, probs, ops::heads_view(context, H, kDh, 0));
  Tensor dctx = random_tensor({B, T, H * kDh}, gen);
  Tensor dqkv = test::garbage_tensor({B, T, 3 * H * kDh});
  ops::fused_attention_backward(c.q, c.k, c.v, probs, ops::heads_view(dctx, H, kDh, 0), scale,
                                ops::heads_view(dqkv, H, kDh, 0), ops::heads_view(dqkv, H, kDh, 1),
                                ops::heads_view(dqkv, H, kDh, 2));
  // dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(P ⊙ dP)), dQ = s·dS·K, dK = s·dSᵀ·Q.
  const ops::MatrixView g = ops::heads_view(dctx, H, kDh, 0);
  std::vector<double> want(static_cast<size_t>(dqkv.numel()));
  auto idx = [&](int64_t b, int64_t t, int64_t block, int64_t h, int64_t d) {
    return static_cast<size_t>((b * T + t) * 3 * H * kDh + (block * H + h) * kDh + d);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      RefHead r = reference_head(c.q, c.k, c.v, b, h, scale);
      std::vector<double> ds(static_cast<size_t>(T * T));
      for (int64_t i = 0; i < T; ++i) {
        double dot = 0;
        for (int64_t j = 0; j < T; ++j) {
          double dp = 0;
          for (int64_t d = 0; d < kDh; ++d) dp += double(at(g, b, h, i, d)) * at(c.v, b, h, j, d);
          ds[i * T + j] = dp;
          dot += dp * r.probs[i * T + j];
        }
        for (int64_t j = 0; j < T; ++j) ds[i * T + j] = r.probs[i * T + j] * (ds[i * T + j] - dot);
      }
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < kDh; ++d) {
          double dq = 0, dk = 0, dv = 0;
          for (int64_t j = 0; j < T; ++j) {
            dq += ds[t * T + j] * at(c.k, b, h, j, d);
            dk += ds[j * T + t] * at(c.q, b, h, j, d);
            dv += r.probs[j * T + t] * at(g, b, h, j, d);
          }
          want[idx(b, t, 0, h, d)] = scale * dq;
          want[idx(b, t, 1, h, d)] = scale * dk;
          want[idx(b, t, 2, h, d)] = dv;
        }
    }
  EXPECT_TRUE(all_close(dqkv, want, 1e-5, 1e-4));
}

// 1 and 7: fewer rows than a 6-row tile plus a remainder; 50: the ViT's 7x7 patches and class
// token; 64, 65, 130: one, just over one, and just over two 64-column tiles of keys.
INSTANTIATE_TEST_SUITE_P(Lengths, FusedAttention, ::testing::Values(1, 7, 50, 64, 65, 130),
                         [](const ::testing::TestParamInfo<int64_t>& param_info) {
                           return "T" + std::to_string(param_info.param);
                         });

VITK_AT_EVERY_ISA_LEVEL(FusedAttentionCross);

TEST_P(FusedAttentionCross, DifferentQueryAndKeyLengthsMatchNaive) {
  std::mt19937 gen(5);
  const int64_t B = 2, H = 1, Tq = 9, Tk = 70;
  SelfCase qc = self_case(B, H, Tq, gen);
  Tensor kv = random_tensor({B, Tk, 2 * H * kDh}, gen);
  const ops::MatrixView k = ops::heads_view(kv, H, kDh, 0), v = ops::heads_view(kv, H, kDh, 1);
  if (!ops::fused_attention_supported(qc.q, k)) GTEST_SKIP() << "no fused kernel";
  Tensor probs({B, H, Tq, Tk});
  Tensor context = test::garbage_tensor({B, Tq, H * kDh});
  ops::fused_attention_forward(qc.q, k, v, 0.3f, probs, ops::heads_view(context, H, kDh, 0));
  for (int64_t b = 0; b < B; ++b) {
    RefHead r = reference_head(qc.q, k, v, b, 0, 0.3);
    Tensor got({Tq, kDh});
    std::copy(context.f32() + b * Tq * kDh, context.f32() + (b + 1) * Tq * kDh, got.f32());
    EXPECT_TRUE(all_close(got, r.context, 1e-5, 1e-4));
  }
}

VITK_AT_EVERY_ISA_LEVEL(FusedAttentionGradient);

TEST_P(FusedAttentionGradient, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(9);
  const int64_t B = 1, H = 1, T = 5;
  SelfCase c = self_case(B, H, T, gen);
  if (!ops::fused_attention_supported(c.q, c.k)) GTEST_SKIP() << "no fused kernel";
  const float scale = 0.2f;
  Tensor w = random_tensor({B, T, H * kDh}, gen);
  Tensor probs({B, H, T, T}), context({B, T, H * kDh});
  auto loss = [&]() {
    ops::fused_attention_forward(c.q, c.k, c.v, scale, probs, ops::heads_view(context, H, kDh, 0));
    return test::weighted_sum(context, w);
  };
  loss();
  Tensor dqkv({B, T, 3 * H * kDh});
  ops::fused_attention_backward(c.q, c.k, c.v, probs, ops::heads_view(w, H, kDh, 0), scale,
                                ops::heads_view(dqkv, H, kDh, 0), ops::heads_view(dqkv, H, kDh, 1),
                                ops::heads_view(dqkv, H, kDh, 2));
  test::FdOptions opt;
  opt.h = 3e-3;
  opt.atol = 1e-3;
  opt.rtol = 1e-2;
  EXPECT_GRAD_OK(test::check_gradient("qkv", c.qkv, dqkv, loss, opt));
}

VITK_AT_EVERY_ISA_LEVEL(FusedAttentionErrors);

TEST_P(FusedAttentionErrors, RejectsViewsItCannotRead) {
  std::mt19937 gen(3);
  Tensor x = random_tensor({1, 4, 3 * 32}, gen);  // d_head 32: no kernel
  const ops::MatrixView q = ops::heads_view(x, 1, 32, 0), k = ops::heads_view(x, 1, 32, 1);
  EXPECT_FALSE(ops::fused_attention_supported(q, k));
  Tensor probs({1, 1, 4, 4}), context({1, 4, 32});
  EXPECT_THROW(ops::fused_attention_forward(q, k, ops::heads_view(x, 1, 32, 2), 1.f, probs,
                                            ops::heads_view(context, 1, 32, 0)),
               Error);
}

// ---- Batched products on strided views ----
TEST(BmmViews, HeadsInPlaceAndTransposesMatchNaive) {
  std::mt19937 gen(21);
  const int64_t B = 2, H = 3, T = 6, dh = 5;
  Tensor qkv = random_tensor({B, T, 3 * H * dh}, gen);
  const ops::MatrixView q = ops::heads_view(qkv, H, dh, 0), k = ops::heads_view(qkv, H, dh, 1);
  Tensor s = test::garbage_tensor({B, H, T, T});
  ops::bmm(q, k.t(), ops::matrix_view(s), 0.5f);  // scores: q·kᵀ/2, no copies
  std::vector<double> want(static_cast<size_t>(s.numel()));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < dh; ++d) acc += double(at(q, b, h, i, d)) * at(k, b, h, j, d);
          want[((b * H + h) * T + i) * T + j] = 0.5 * acc;
        }
  EXPECT_TRUE(all_close(s, want, 1e-6, 1e-5));

  // Write into a view: context heads in place in [B, T, H·dh], with beta accumulating.
  Tensor ctx = random_tensor({B, T, H * dh}, gen);
  Tensor before = ctx.clone();
  const ops::MatrixView v = ops::heads_view(qkv, H, dh, 2);
  ops::bmm(ops::matrix_view(s), v, ops::heads_view(ctx, H, dh, 0), 1.f, 1.f);
  std::vector<double> want_ctx = test::to_double(before);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < dh; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < T; ++j)
            acc += double(s.f32()[((b * H + h) * T + i) * T + j]) * at(v, b, h, j, d);
          want_ctx[(b * T + i) * H * dh + h * dh + d] += acc;
        }
  EXPECT_TRUE(all_close(ctx, want_ctx, 1e-5, 1e-5));
}

TEST(BmmViews, MismatchedViewsThrow) {
  Tensor a({2, 3, 4}), b({2, 5, 6}), c({2, 3, 6});
  EXPECT_THROW(ops::bmm(ops::matrix_view(a), ops::matrix_view(b), ops::matrix_view(c)), Error);
  EXPECT_THROW(ops::heads_view(a, 2, 3, 0), Error);  // 2·3 columns do not fit in 4
}

// ---- Arena memory ----
TEST(ArenaUninit, PoisonShowsReadsBeforeWritesAndAllocZeroes) {
  Arena arena;
  arena.set_poison(true);
  Tensor u = arena.alloc_uninit({16});
  for (int64_t i = 0; i < 16; ++i) EXPECT_TRUE(std::isnan(u.f32()[i]));
  u.fill(3.f);
  arena.reset();
  Tensor z = arena.alloc({16});  // the same memory, zero-filled again
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(z.f32()[i], 0.f);
}

// ---- Layer norm backward with the residual gradient added ----
VITK_AT_EVERY_ISA_LEVEL(LayerNormBackwardAdd);

TEST_P(LayerNormBackwardAdd, EqualsBackwardPlusTheAddend) {
  std::mt19937 gen(8);
  const int64_t M = 37, N = 192;  // above the parallel threshold in rows × columns
  Tensor x = random_tensor({M, N}, gen), gamma = random_tensor({N}, gen),
         beta = random_tensor({N}, gen), dy = random_tensor({M, N}, gen),
         add = random_tensor({M, N}, gen);
  Tensor y({M, N}), mean({M}), rstd({M});
  ops::layernorm_forward(x, gamma, beta, 1e-6f, y, mean, rstd);
  Tensor dx({M, N}), dg({N}), db({N});
  ops::layernorm_backward(x, gamma, mean, rstd, dy, dx, dg, db);
  Tensor dx_add = test::garbage_tensor({M, N}), dg2({N}), db2({N});
  ops::layernorm_backward(x, gamma, mean, rstd, dy, dx_add, dg2, db2, add);
  std::vector<double> want = test::to_double(dx), a = test::to_double(add);
  for (size_t i = 0; i < want.size(); ++i) want[i] += a[i];
  EXPECT_TRUE(all_close(dx_add, want, 1e-6, 1e-6));
  EXPECT_TRUE(test::bitwise_equal(dg, dg2));
  EXPECT_TRUE(test::bitwise_equal(db, db2));
  // In place: dx may be the addend itself.
  Tensor inplace = add.clone();
  Tensor dg3({N}), db3({N});
  ops::layernorm_backward(x, gamma, mean, rstd, dy, inplace, dg3, db3, inplace);
  EXPECT_TRUE(all_close(inplace, want, 1e-6, 1e-6));
}

}  // namespace
}  // namespace vitk
