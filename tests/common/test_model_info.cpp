// Model sizes (common/nn/model_info.h) against published figures and the closed forms of the seed
// notes. (That the counts are the parameters each model registers: vit/test_model_info.cpp and
// caption/test_model_info.cpp.)
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/nn/model_info.h"
#include "util/model_spec.h"

using namespace vitk;
using vitk::test::block;
using vitk::test::vit_spec;

// timm's parameter counts for vit_{tiny,small,base,large}_patch16_224 (1000 classes).
TEST(ModelInfo, VitParameterCountsMatchTimm) {
  EXPECT_EQ(nn::model_size(vit_spec(192, 3, 12)).total_params, 5717416);
  EXPECT_EQ(nn::model_size(vit_spec(384, 6, 12)).total_params, 22050664);
  EXPECT_EQ(nn::model_size(vit_spec(768, 12, 12)).total_params, 86567656);
  EXPECT_EQ(nn::model_size(vit_spec(1024, 16, 24)).total_params, 304326632);
}

TEST(ModelInfo, EncoderBlockIsTwelveDSquaredPlusBiases) {
  for (int64_t d : {64, 512, 768}) {
    nn::ModelSpec s = vit_spec(d, 8, 1);
    const auto& enc = block(nn::model_size(s), "encoder layer");
    // qkv 3d² + 3d, proj d² + d, fc1 4d² + 4d, fc2 4d² + d, two layer norms 4d.
    EXPECT_EQ(enc.params, 12 * d * d + 13 * d) << d;
    EXPECT_EQ(enc.macs, 12 * d * d) << d;
  }
}

// The ViT paper's ViT-B/16 costs 17.6 G multiply-adds per 224×224 image; the attention part is
// 2·T·d per token and layer with T = 197.
TEST(ModelInfo, VitB16MultiplyAdds) {
  nn::ModelSize m = nn::model_size(vit_spec(768, 12, 12));
  EXPECT_NEAR(m.macs_per_sequence / 1e9, 17.56, 0.01);
  EXPECT_DOUBLE_EQ(m.attention_macs_per_sequence, 12.0 * 197 * 2 * 197 * 768);
  EXPECT_EQ(block(m, "encoder layer").attention_macs, 2 * 197 * 768);
}

// Transformer-base with a 37,000-token shared vocabulary: the paper's Table 3 says 65 M.
TEST(ModelInfo, TransformerBaseIsAbout65M) {
  nn::ModelSpec s;
  s.layer.d_model = 512;
  s.layer.heads = 8;
  s.layer.d_ff = 2048;
  s.vocab_size = 37000;
  const nn::ModelSize m = nn::model_size(s);
  EXPECT_GT(m.total_params, 60000000);
  EXPECT_LT(m.total_params, 66000000);
  const int64_t d = 512;
  // Decoder block: two attentions 8d² + 8d, the FFN 8d² + 5d, three layer norms 6d.
  EXPECT_EQ(block(m, "decoder layer").params, 16 * d * d + 19 * d);
}

TEST(ModelInfo, BadSpecsAreUsageErrors) {
  nn::ModelSpec s = vit_spec(768, 12, 12);
  s.layer.heads = 7;
  EXPECT_THROW(nn::model_size(s), UsageError);
  s = vit_spec(768, 12, 12);
  s.patch_size = 15;
  EXPECT_THROW(nn::model_size(s), UsageError);
  s.type = "rnn";
  EXPECT_THROW(nn::model_size(s), UsageError);
}
