// The ViT's size (common/nn/model_info.h) equals the parameters the model registers, with a
// convolutional stem, positional and MLP convolutions, and their multiply-adds follow the closed
// forms. (Sizes against published figures: common/test_model_info.cpp.)
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/nn/model_info.h"
#include "common/params.h"
#include "util/model_spec.h"
#include "vit/vit.h"

using namespace vitk;
using vitk::test::block;
using vitk::test::vit_spec;

// The convolutional stem (vit/vit.h): the count equals the parameters the model registers, and
// the multiply-adds add each stage's 9·C_in·C_out per output pixel.
TEST(ModelInfo, VitStemCountsWhatTheModelRegisters) {
  nn::ModelSpec s = vit_spec(192, 3, 6);
  s.layer.d_ff = 384;
  s.image_size = 28;
  s.patch_size = 4;
  s.channels = 1;
  s.num_classes = 10;
  const nn::ModelSize plain = nn::model_size(s);
  s.stem_channels = {48, 96};
  const nn::ModelSize stem = nn::model_size(s);
  vit::VitConfig c;
  c.image_height = c.image_width = 28;
  c.patch_size = 4;
  c.channels = 1;
  c.num_classes = 10;
  c.d_model = 192;
  c.heads = 3;
  c.d_ff = 384;
  c.layers = 6;
  c.pool = "avg";  // fc_norm instead of norm: the same count
  c.stem_channels = {48, 96};
  c.preprocess.mean = {0.5f};
  c.preprocess.std = {0.5f};
  ParamStore store;
  vit::VisionTransformer model(store, c);
  EXPECT_EQ(stem.total_params, store.numel());
  EXPECT_EQ(block(stem, "stem stage 1").positions, 14 * 14);
  EXPECT_EQ(block(stem, "stem stage 2").macs, 48 * 9 * 96);
  EXPECT_EQ(block(stem, "patch embedding").macs, 96 * 192);
  const double extra = 14 * 14 * 9 * 48 + 7 * 7 * (48 * 9 * 96 + 96 * 192 - 16 * 192);
  EXPECT_DOUBLE_EQ(stem.macs_per_sequence - plain.macs_per_sequence, extra);
  s.stem_channels = {48, 96, 128};  // stride 8 does not divide the patch size 4
  EXPECT_THROW(nn::model_size(s), UsageError);

  // A stride-1 first stage works at the image's size, and the count still matches the model.
  s.stem_channels = c.stem_channels = {32, 48, 96};
  s.stem_strides = c.stem_strides = {1, 2, 2};
  const nn::ModelSize strided = nn::model_size(s);
  ParamStore strided_store;
  vit::VisionTransformer strided_model(strided_store, c);
  EXPECT_EQ(strided.total_params, strided_store.numel());
  EXPECT_EQ(block(strided, "stem stage 1").positions, 28 * 28);
  EXPECT_EQ(block(strided, "stem stage 2").positions, 14 * 14);
  EXPECT_EQ(block(strided, "stem stage 3").positions, 7 * 7);
  EXPECT_EQ(block(strided, "patch embedding").macs, 96 * 192);
  s.stem_strides = {1, 2};  // two strides for three stages
  EXPECT_THROW(nn::model_size(s), UsageError);

  // Positional convolutions (pos_conv_blocks): 9·d + d parameters and 9·d multiply-adds per patch
  // each, as the model registers them.
  s.stem_strides = c.stem_strides;
  const nn::ModelSize without = nn::model_size(s);
  s.pos_convs = 5;
  c.pos_conv_blocks = {0, 1, 2, 3, 4};
  const nn::ModelSize with = nn::model_size(s);
  ParamStore pos_conv_store;
  vit::VisionTransformer pos_conv_model(pos_conv_store, c);
  EXPECT_EQ(with.total_params, pos_conv_store.numel());
  EXPECT_EQ(with.total_params - without.total_params, 5 * 10 * 192);
  EXPECT_DOUBLE_EQ(with.macs_per_sequence - without.macs_per_sequence, 5.0 * 49 * 9 * 192);
  s.pos_convs = 7;  // more than the 6 blocks
  EXPECT_THROW(nn::model_size(s), UsageError);

  // MLP convolutions (ffn_conv_blocks): 9·d_ff + d_ff parameters and 9·d_ff multiply-adds per
  // patch each.
  s.pos_convs = 5;
  s.ffn_convs = 6;
  c.ffn_conv_blocks = {0, 1, 2, 3, 4, 5};
  const nn::ModelSize with_ffn = nn::model_size(s);
  ParamStore ffn_conv_store;
  vit::VisionTransformer ffn_conv_model(ffn_conv_store, c);
  EXPECT_EQ(with_ffn.total_params, ffn_conv_store.numel());
  EXPECT_EQ(with_ffn.total_params - with.total_params, 6 * 10 * c.d_ff);
  EXPECT_DOUBLE_EQ(with_ffn.macs_per_sequence - with.macs_per_sequence, 6.0 * 49 * 9 * c.d_ff);
  s.ffn_convs = 7;
  EXPECT_THROW(nn::model_size(s), UsageError);
}
