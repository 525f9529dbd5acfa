// A ViT's sizes (vit::model_size): timm's and the paper's figures, the closed forms of a block, and
// the parameters the model registers.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/nn/model_info.h"
#include "common/params.h"
#include "util/model_spec.h"
#include "vit/vit.h"

using namespace vitk;
using vitk::test::block;
using vitk::test::vit_size;
using vitk::test::vit_spec;

// timm's parameter counts for vit_{tiny,small,base,large}_patch16_224 (1000 classes).
TEST(ModelInfo, VitParameterCountsMatchTimm) {
  EXPECT_EQ(vit_size(vit_spec(192, 3, 12)).total_params, 5717416);
  EXPECT_EQ(vit_size(vit_spec(384, 6, 12)).total_params, 22050664);
  EXPECT_EQ(vit_size(vit_spec(768, 12, 12)).total_params, 86567656);
  EXPECT_EQ(vit_size(vit_spec(1024, 16, 24)).total_params, 304326632);
}

TEST(ModelInfo, EncoderBlockIsTwelveDSquaredPlusBiases) {
  for (int64_t d : {64, 512, 768}) {
    const nn::ModelSize m = vit_size(vit_spec(d, 8, 1));
    const auto& enc = block(m, "encoder layer");
    // qkv 3d² + 3d, proj d² + d, fc1 4d² + 4d, fc2 4d² + d, two layer norms 4d.
    EXPECT_EQ(enc.params, 12 * d * d + 13 * d) << d;
    EXPECT_EQ(enc.macs, 12 * d * d) << d;
  }
}

// The ViT paper's ViT-B/16 costs 17.6 G multiply-adds per 224×224 image; the attention part is
// 2·T·d per token and layer with T = 197.
TEST(ModelInfo, VitB16MultiplyAdds) {
  const nn::ModelSize m = vit_size(vit_spec(768, 12, 12));
  EXPECT_NEAR(m.macs_per_sequence / 1e9, 17.56, 0.01);
  EXPECT_DOUBLE_EQ(m.attention_macs_per_sequence, 12.0 * 197 * 2 * 197 * 768);
  EXPECT_EQ(block(m, "encoder layer").attention_macs, 2 * 197 * 768);
}

// The convolutional stem (vit/vit.h): the count equals the parameters the model registers, and
// the multiply-adds add each stage's 9·C_in·C_out per output pixel.
TEST(ModelInfo, VitStemCountsWhatTheModelRegisters) {
  vit::VitConfig c = vit_spec(192, 3, 6);
  c.d_ff = 384;
  c.image_height = c.image_width = 28;
  c.patch_size = 4;
  c.channels = 1;
  c.num_classes = 10;
  c.pool = "avg";  // fc_norm instead of norm: the same count
  c.preprocess.mean = {0.5f};
  c.preprocess.std = {0.5f};
  const nn::ModelSize plain = vit_size(c);
  c.stem_channels = {48, 96};
  const nn::ModelSize stem = vit_size(c);
  ParamStore store;
  vit::VisionTransformer model(store, c);
  EXPECT_EQ(stem.total_params, store.numel());
  EXPECT_EQ(block(stem, "stem stage 1").positions, 14 * 14);
  EXPECT_EQ(block(stem, "stem stage 2").macs, 48 * 9 * 96);
  EXPECT_EQ(block(stem, "patch embedding").macs, 96 * 192);
  const double extra = 14 * 14 * 9 * 48 + 7 * 7 * (48 * 9 * 96 + 96 * 192 - 16 * 192);
  EXPECT_DOUBLE_EQ(stem.macs_per_sequence - plain.macs_per_sequence, extra);
  vit::VitConfig bad = c;
  bad.stem_channels = {48, 96, 128};  // stride 8 does not divide the patch size 4
  EXPECT_THROW(vit_size(bad), UsageError);

  // A stride-1 first stage works at the image's size, and the count still matches the model.
  c.stem_channels = {32, 48, 96};
  c.stem_strides = {1, 2, 2};
  const nn::ModelSize strided = vit_size(c);
  ParamStore strided_store;
  vit::VisionTransformer strided_model(strided_store, c);
  EXPECT_EQ(strided.total_params, strided_store.numel());
  EXPECT_EQ(block(strided, "stem stage 1").positions, 28 * 28);
  EXPECT_EQ(block(strided, "stem stage 2").positions, 14 * 14);
  EXPECT_EQ(block(strided, "stem stage 3").positions, 7 * 7);
  EXPECT_EQ(block(strided, "patch embedding").macs, 96 * 192);
  bad = c;
  bad.stem_strides = {1, 2};  // two strides for three stages
  EXPECT_THROW(vit_size(bad), UsageError);

  // Positional convolutions (pos_conv_blocks): 9·d + d parameters and 9·d multiply-adds per patch
  // each, as the model registers them.
  const nn::ModelSize without = vit_size(c);
  c.pos_conv_blocks = {0, 1, 2, 3, 4};
  const nn::ModelSize with = vit_size(c);
  ParamStore pos_conv_store;
  vit::VisionTransformer pos_conv_model(pos_conv_store, c);
  EXPECT_EQ(with.total_params, pos_conv_store.numel());
  EXPECT_EQ(with.total_params - without.total_params, 5 * 10 * 192);
  EXPECT_DOUBLE_EQ(with.macs_per_sequence - without.macs_per_sequence, 5.0 * 49 * 9 * 192);
  bad = c;
  bad.pos_conv_blocks = {0, 1, 2, 3, 4, 5, 6};  // more than the 6 blocks
  EXPECT_THROW(vit_size(bad), UsageError);

  // MLP convolutions (ffn_conv_blocks): 9·d_ff + d_ff parameters and 9·d_ff multiply-adds per
  // patch each.
  c.ffn_conv_blocks = {0, 1, 2, 3, 4, 5};
  const nn::ModelSize with_ffn = vit_size(c);
  ParamStore ffn_conv_store;
  vit::VisionTransformer ffn_conv_model(ffn_conv_store, c);
  EXPECT_EQ(with_ffn.total_params, ffn_conv_store.numel());
  EXPECT_EQ(with_ffn.total_params - with.total_params, 6 * 10 * c.d_ff);
  EXPECT_DOUBLE_EQ(with_ffn.macs_per_sequence - with.macs_per_sequence, 6.0 * 49 * 9 * c.d_ff);
  bad = c;
  bad.ffn_conv_blocks = {0, 1, 2, 3, 4, 5, 6};
  EXPECT_THROW(vit_size(bad), UsageError);
}
