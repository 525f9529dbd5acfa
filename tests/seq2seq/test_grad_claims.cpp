// The translation model's claims that a gradient is final (nn::Context::grads_final), checked by
// train::Step (StepOptions::check_final_claims) on two real steps with tied and untied embeddings,
// pre- and post-norm. (What the claims are for and the check itself: common/test_grad_claims.cpp.)
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "common/seq2seq/train_task.h"
#include "util/grad_claims.h"
#include "util/test_util.h"

namespace {

using vitk::DType;
using vitk::Tensor;
using vitk::test::checked_steps;

struct MtCase {
  std::string name;
  bool tied, pre_norm;
};

class GradClaimsTranslation : public ::testing::TestWithParam<MtCase> {};

TEST_P(GradClaimsTranslation, NoGradientChangesAfterItIsDeclaredFinal) {
  vitk::test::OneThread one_thread;
  vitk::seq2seq::TransformerConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.layers = 2;
  c.decoder_layers = 3;
  c.tied_embeddings = GetParam().tied;
  c.pre_norm = GetParam().pre_norm;
  vitk::ops::Rng rng(5);
  const int64_t B = 3, T = 5;
  auto ids = [&] {
    Tensor t({B, T}, DType::i32);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.i32()[i] = static_cast<int32_t>(4 + rng.next_u64() % 28);
    return t;
  };
  vitk::seq2seq::TokenBatch batch;
  batch.source = ids();
  batch.target_in = ids();
  batch.target_out = ids();
  batch.source_lengths = Tensor({B}, DType::i32);
  batch.target_lengths = Tensor({B}, DType::i32);
  for (int64_t i = 0; i < B; ++i)
    batch.source_lengths.i32()[i] = batch.target_lengths.i32()[i] = static_cast<int32_t>(T);
  batch.target_tokens = B * T;
  vitk::seq2seq::TrainOptions options;
  vitk::seq2seq::TranslationTask task(c, options, std::move(batch));
  int64_t claims = 0;
  ASSERT_NO_THROW(claims = checked_steps(task));
  EXPECT_EQ(claims, 2 * (c.layers + c.decoder_layers));
}

INSTANTIATE_TEST_SUITE_P(Layouts, GradClaimsTranslation,
                         ::testing::Values(MtCase{"tied_pre_norm", true, true},
                                           MtCase{"untied_post_norm", false, false},
                                           MtCase{"untied_pre_norm", false, true}),
                         [](const ::testing::TestParamInfo<MtCase>& p) { return p.param.name; });

}  // namespace
