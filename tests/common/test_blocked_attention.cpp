// Blocked ("flash") attention: the ops against a double-precision loop written here (forward and
// backward, self and cross lengths, padding with an empty key set, causal, both, dropout, head
// sizes with and without padding to 16), central finite differences and the same results on 1 and
// 2 threads. The layers' blocked path against their reference path, and the memory an encoder
// layer's activations take at a long sequence: test_attention_paths.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
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

enum class Masks { none, padded, causal, both };
const char* mask_name(Masks m) {
  switch (m) {
    case Masks::none:
      return "none";
    case Masks::padded:
      return "padded";
    case Masks::causal:
      return "causal";
    case Masks::both:
      return "both";
  }
  return "?";
}

// q [B, Tq, H·dh] and k, v in one [B, Tk, 2·H·dh] projection, as cross-attention has them: the
// views are strided like the layer's.
struct Inputs {
  int64_t B, H, Tq, Tk, dh;
  Tensor qp, kvp;
  ops::MatrixView q, k, v;
  ops::BlockedAttention options;
};

Inputs make_inputs(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t dh, Masks masks,
                   float dropout, std::mt19937& gen) {
  Inputs in{B,
            H,
            Tq,
            Tk,
            dh,
            random_tensor({B, Tq, H * dh}, gen, -1.5f, 1.5f),
            random_tensor({B, Tk, 2 * H * dh}, gen, -1.5f, 1.5f),
            {},
            {},
            {},
            {}};
  in.q = ops::heads_view(in.qp, H, dh, 0);
  in.k = ops::heads_view(in.kvp, H, dh, 0);
  in.v = ops::heads_view(in.kvp, H, dh, 1);
  in.options.scale = 1.f / std::sqrt(static_cast<float>(dh));
  in.options.causal = masks == Masks::causal || masks == Masks::both;
  if (masks == Masks::padded || masks == Masks::both) {
    // Full, empty, and one that ends inside a block.
    std::vector<int32_t> lengths = {static_cast<int32_t>(Tk), 0,
                                    static_cast<int32_t>(std::max<int64_t>(1, Tk / 2 + 1))};
    lengths.resize(static_cast<size_t>(B), static_cast<int32_t>(Tk));
    in.options.key_lengths = test::ids_tensor(lengths);
  }
  in.options.dropout = dropout;
  in.options.seed = 77;
  in.options.counter = 1000;
  return in;
}

double at(const ops::MatrixView& v, int64_t b, int64_t h, int64_t r, int64_t c) {
  const float* p = static_cast<const float*>(v.data);
  return p[b * v.strides[0] + h * v.strides[1] + r * v.strides[2] + c * v.strides[3]];
}

// Everything in double, straight from the definitions: context [B, Tq, H·dh] and the gradients
// of Σ context ⊙ g, laid out like qp and kvp.
struct Reference {
  std::vector<double> context, lse, dqp, dkvp;
};
Reference reference(const Inputs& in, const ops::MatrixView& g) {
  const int64_t B = in.B, H = in.H, Tq = in.Tq, Tk = in.Tk, dh = in.dh;
  const ops::BlockedAttention& o = in.options;
  Reference r;
  r.context.assign(static_cast<size_t>(B * Tq * H * dh), 0.0);
  r.lse.assign(static_cast<size_t>(B * H * Tq), -INFINITY);
  r.dqp.assign(static_cast<size_t>(B * Tq * H * dh), 0.0);
  r.dkvp.assign(static_cast<size_t>(B * Tk * 2 * H * dh), 0.0);
  const double keep = 1.0 / (1.0 - o.dropout);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        std::vector<double> p(static_cast<size_t>(Tk), 0.0), z(static_cast<size_t>(Tk), 0.0);
        std::vector<bool> seen(static_cast<size_t>(Tk), false);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Tk; ++j) {
          seen[j] = (o.key_lengths.empty() || j < o.key_lengths.i32()[b]) &&
                    (!o.causal || j <= i + (Tk - Tq));
          if (!seen[j]) continue;
          double s = 0;
          for (int64_t f = 0; f < dh; ++f) s += at(in.q, b, h, i, f) * at(in.k, b, h, j, f);
          p[j] = s * o.scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Tk; ++j)
          if (seen[j]) sum += (p[j] = std::exp(p[j] - mx));
        if (sum == 0) continue;  // sees nothing: zero context and gradients
        r.lse[(b * H + h) * Tq + i] = mx + std::log(sum);
        for (int64_t j = 0; j < Tk; ++j) {
          if (!seen[j]) continue;
          p[j] /= sum;
          const uint64_t c = o.counter + static_cast<uint64_t>(((b * H + h) * Tq + i) * Tk + j);
          z[j] = o.dropout > 0 && ops::Rng::to_uniform(ops::Rng::hash(o.seed, c)) < o.dropout
                     ? 0.0
                     : (o.dropout > 0 ? keep : 1.0);
        }
        // context_i = Σ_j p_j z_j v_j; dP̃_j = g_i · v_j; dp_j = z_j dP̃_j; ds = p ⊙ (dp − p·dp).
        std::vector<double> dp(static_cast<size_t>(Tk), 0.0);
        double dot = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          if (!seen[j]) continue;
          double gv = 0;
          for (int64_t f = 0; f < dh; ++f) {
            r.context[(b * Tq + i) * H * dh + h * dh + f] += p[j] * z[j] * at(in.v, b, h, j, f);
            gv += at(g, b, h, i, f) * at(in.v, b, h, j, f);
            r.dkvp[(b * Tk + j) * 2 * H * dh + (H + h) * dh + f] += p[j] * z[j] * at(g, b, h, i, f);
          }
          dp[j] = z[j] * gv;
          dot += p[j] * dp[j];
        }
        for (int64_t j = 0; j < Tk; ++j) {
          if (!seen[j]) continue;
          const double ds = p[j] * (dp[j] - dot) * o.scale;
          for (int64_t f = 0; f < dh; ++f) {
            r.dqp[(b * Tq + i) * H * dh + h * dh + f] += ds * at(in.k, b, h, j, f);
            r.dkvp[(b * Tk + j) * 2 * H * dh + h * dh + f] += ds * at(in.q, b, h, i, f);
          }
        }
      }
  return r;
}

struct Outputs {
  Tensor context, lse, dqp, dkvp;
};
Outputs run_blocked(const Inputs& in, const Tensor& g) {
  const int64_t B = in.B, H = in.H, dh = in.dh;
  Outputs out{test::garbage_tensor({B, in.Tq, H * dh}), test::garbage_tensor({B, H, in.Tq}),
              test::garbage_tensor({B, in.Tq, H * dh}),
              test::garbage_tensor({B, in.Tk, 2 * H * dh})};
  const ops::MatrixView o = ops::heads_view(out.context, H, dh, 0);
  ops::blocked_attention_forward(in.q, in.k, in.v, in.options, out.lse, o);
  ops::blocked_attention_backward(in.q, in.k, in.v, o, out.lse, ops::heads_view(g, H, dh, 0),
                                  in.options, ops::heads_view(out.dqp, H, dh, 0),
                                  ops::heads_view(out.dkvp, H, dh, 0),
                                  ops::heads_view(out.dkvp, H, dh, 1));
  return out;
}

// ---- The ops against the reference ----
struct OpCase {
  int64_t tq, tk, dh;
  Masks masks;
  float dropout;
};

class BlockedAttentionOp : public ::testing::TestWithParam<OpCase> {};

TEST_P(BlockedAttentionOp, ForwardAndBackwardMatchDoubleLoops) {
  const OpCase c = GetParam();
  std::mt19937 gen(static_cast<unsigned>(c.tq * 1000 + c.tk * 7 + c.dh));
  const Inputs in = make_inputs(3, 2, c.tq, c.tk, c.dh, c.masks, c.dropout, gen);
  Tensor g = random_tensor({3, c.tq, 2 * c.dh}, gen);
  const Outputs got = run_blocked(in, g);
  const Reference want = reference(in, ops::heads_view(g, 2, c.dh, 0));
  EXPECT_TRUE(all_close(got.context, want.context, 2e-5, 2e-4)) << "context";
  // −inf must come out as −inf (all_close compares |got − want|, NaN for two infinities).
  std::vector<double> lse_got = test::to_double(got.lse), lse_want = want.lse;
  for (size_t i = 0; i < lse_want.size(); ++i)
    if (std::isinf(lse_want[i])) {
      EXPECT_TRUE(std::isinf(lse_got[i]) && lse_got[i] < 0) << "lse " << i << ": " << lse_got[i];
      lse_got[i] = lse_want[i] = 0;
    }
  Tensor lse_finite({static_cast<int64_t>(lse_got.size())});
  for (size_t i = 0; i < lse_got.size(); ++i) lse_finite.f32()[i] = static_cast<float>(lse_got[i]);
  EXPECT_TRUE(all_close(lse_finite, lse_want, 2e-5, 2e-5)) << "lse";
  EXPECT_TRUE(all_close(got.dqp, want.dqp, 2e-5, 5e-4)) << "dq";
  EXPECT_TRUE(all_close(got.dkvp, want.dkvp, 2e-5, 5e-4)) << "dk, dv";
}

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  const Masks all[] = {Masks::none, Masks::padded, Masks::causal, Masks::both};
  // Self lengths around the 64-row and 64-key blocks: 63, 64, 65 and 130 end just before, on and
  // after a block boundary; 300 is 4 blocks and 44.
  for (int64_t t : {1, 7, 63, 64, 65, 130, 300})
    for (Masks m : all) cases.push_back({t, t, 64, m, 0.f});
  // Cross lengths: fewer and more queries than keys (causal then offsets the diagonal, and with
  // Tq > Tk the first queries see no key).
  for (auto [tq, tk] :
       {std::pair<int64_t, int64_t>{7, 130}, {130, 7}, {65, 300}, {300, 63}, {1, 64}, {64, 1}})
    for (Masks m : all) cases.push_back({tq, tk, 64, m, 0.f});
  // Head sizes: 32 and 128 fill whole vectors, 20 and 4 are padded to 16.
  for (int64_t dh : {32, 128, 20, 4}) {
    cases.push_back({65, 130, dh, Masks::both, 0.f});
    cases.push_back({130, 130, dh, Masks::none, 0.f});
  }
  // Dropout on the weights, with masks.
  cases.push_back({65, 65, 64, Masks::none, 0.25f});
  cases.push_back({130, 70, 32, Masks::both, 0.5f});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BlockedAttentionOp, ::testing::ValuesIn(op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& p) {
                           const OpCase& c = p.param;
                           return "Tq" + std::to_string(c.tq) + "_Tk" + std::to_string(c.tk) +
                                  "_dh" + std::to_string(c.dh) + "_" + mask_name(c.masks) +
                                  (c.dropout > 0 ? "_dropout" : "");
                         });

VITK_AT_EVERY_ISA_LEVEL(BlockedAttentionGradient);

TEST_P(BlockedAttentionGradient, BackwardMatchesFiniteDifferences) {
  for (Masks m : {Masks::none, Masks::both}) {
    SCOPED_TRACE(mask_name(m));
    std::mt19937 gen(11);
    Inputs in = make_inputs(3, 2, 5, 6, 3, m, 0.f, gen);
    Tensor w = random_tensor({3, 5, 2 * 3}, gen);
    Tensor context({3, 5, 2 * 3}), lse({3, 2, 5});
    const ops::MatrixView o = ops::heads_view(context, 2, 3, 0);
    auto loss = [&]() {
      ops::blocked_attention_forward(in.q, in.k, in.v, in.options, lse, o);
      return test::weighted_sum(context, w);
    };
    const Outputs got = run_blocked(in, w);
    test::FdOptions opt;
    opt.h = 1e-3;
    opt.atol = 5e-4;
    opt.rtol = 5e-3;
    EXPECT_GRAD_OK(test::check_gradient("q", in.qp, got.dqp, loss, opt));
    EXPECT_GRAD_OK(test::check_gradient("kv", in.kvp, got.dkvp, loss, opt));
  }
}

VITK_AT_EVERY_ISA_LEVEL(BlockedAttentionThreads);

TEST_P(BlockedAttentionThreads, OneAndTwoThreadsGiveIdenticalResults) {
  std::mt19937 gen(5);
  // Three heads for two threads, causal blocks of unequal work, dropout.
  const Inputs in = make_inputs(1, 3, 200, 200, 64, Masks::causal, 0.1f, gen);
  Tensor g = random_tensor({1, 200, 3 * 64}, gen);
  const int saved = ops::num_threads();
  ops::set_num_threads(1);
  const Outputs one = run_blocked(in, g);
  ops::set_num_threads(2);
  const Outputs two = run_blocked(in, g);
  ops::set_num_threads(saved);
  EXPECT_TRUE(test::bitwise_equal(one.context, two.context));
  EXPECT_TRUE(test::bitwise_equal(one.lse, two.lse));
  EXPECT_TRUE(test::bitwise_equal(one.dqp, two.dqp));
  EXPECT_TRUE(test::bitwise_equal(one.dkvp, two.dkvp));
}

VITK_AT_EVERY_ISA_LEVEL(BlockedAttentionErrors);

TEST_P(BlockedAttentionErrors, RejectsBadShapesAndLengths) {
  std::mt19937 gen(3);
  Inputs in = make_inputs(2, 2, 4, 5, 8, Masks::none, 0.f, gen);
  Tensor context({2, 4, 16}), lse({2, 2, 4});
  const ops::MatrixView o = ops::heads_view(context, 2, 8, 0);
  EXPECT_TRUE(ops::blocked_attention_supported(in.q, in.k, in.v));
  ops::blocked_attention_forward(in.q, in.k, in.v, in.options, lse, o);
  Tensor bad_lse({2, 2, 5});
  EXPECT_THROW(ops::blocked_attention_forward(in.q, in.k, in.v, in.options, bad_lse, o), Error);
  in.options.key_lengths = test::ids_tensor({5, 6});  // 6 > Tk
  EXPECT_THROW(ops::blocked_attention_forward(in.q, in.k, in.v, in.options, lse, o), Error);
  in.options.key_lengths = test::ids_tensor({5});  // one length for two sequences
  EXPECT_THROW(ops::blocked_attention_forward(in.q, in.k, in.v, in.options, lse, o), Error);
  in.options.key_lengths = Tensor();
  EXPECT_THROW(ops::blocked_attention_forward(in.q, in.q, in.v, in.options, lse, o), Error);
  EXPECT_FALSE(ops::blocked_attention_supported(in.q, in.q.t(), in.v));  // columns not contiguous
}

}  // namespace
}  // namespace vitk
