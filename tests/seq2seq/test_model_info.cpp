// The translation model's sizes (seq2seq::model_size) against the paper.
#include <gtest/gtest.h>

#include "common/nn/model_info.h"
#include "common/seq2seq/config.h"
#include "util/model_spec.h"

using namespace vitk;
using vitk::test::block;

// Transformer-base with a 37,000-token shared vocabulary: the paper's Table 3 says 65 M.
TEST(ModelInfo, TransformerBaseIsAbout65M) {
  seq2seq::TransformerConfig c;
  c.d_model = 512;
  c.heads = 8;
  c.d_ff = 2048;
  c.vocab_size = 37000;
  const nn::ModelSize m = seq2seq::model_size(c, 128);
  EXPECT_GT(m.total_params, 60000000);
  EXPECT_LT(m.total_params, 66000000);
  const int64_t d = 512;
  // Decoder block: two attentions 8d² + 8d, the FFN 8d² + 5d, three layer norms 6d.
  EXPECT_EQ(block(m, "decoder layer").params, 16 * d * d + 19 * d);
}
