// Model sizes against published figures and the closed forms of the seed notes.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/nn/model_info.h"
#include "common/params.h"
#include "vit/caption/model.h"
#include "vit/vit.h"

using namespace vitk;

namespace {

nn::ModelSpec vit_spec(int64_t d, int64_t heads, int layers) {
  nn::ModelSpec s;
  s.type = "vit";
  s.layer.d_model = d;
  s.layer.heads = heads;
  s.layer.d_ff = 4 * d;
  s.layer.pre_norm = true;
  s.layer.activation = ops::Activation::gelu;
  s.encoder_layers = layers;
  return s;
}

const nn::BlockSize& block(const nn::ModelSize& m, const std::string& name) {
  for (const auto& b : m.blocks)
    if (b.name == name) return b;
  throw std::runtime_error("no block " + name);
}

}  // namespace

// timm's parameter counts for vit_{tiny,small,base,large}_patch16_224 (1000 classes).
TEST(ModelInfo, VitParameterCountsMatchTimm) {
  EXPECT_EQ(nn::model_size(vit_spec(192, 3, 12)).total_params, 5717416);
  EXPECT_EQ(nn::model_size(vit_spec(384, 6, 12)).total_params, 22050664);
  EXPECT_EQ(nn::model_size(vit_spec(768, 12, 12)).total_params, 86567656);
  EXPECT_EQ(nn::model_size(vit_spec(1024, 16, 24)).total_params, 304326632);
}

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

// A captioning model (vit/caption/model.h): the count equals the parameters the model registers,
// tied or not; the decoder's multiply-adds grow with the memory by the cross-attention's keys and
// values (2·d² per memory token and layer) and its attention (2·d per target and memory token).
TEST(ModelInfo, CaptionCountsWhatTheModelRegisters) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    nn::ModelSpec s = vit_spec(64, 2, 2);
    s.type = "caption";
    s.layer.d_ff = 96;
    s.image_size = 32;
    s.patch_size = 8;
    s.channels = 1;
    s.stem_channels = {8, 16};
    s.pos_convs = 1;
    s.decoder_layers = 3;
    s.decoder_heads = 4;
    s.decoder_d_ff = 80;
    s.sequence_length = 12;
    s.vocab_size = 50;
    s.tied_embeddings = tied;
    caption::CaptionConfig c;
    c.encoder.image_height = c.encoder.image_width = 32;
    c.encoder.patch_size = 8;
    c.encoder.channels = 1;
    c.encoder.num_classes = 0;
    c.encoder.d_model = 64;
    c.encoder.heads = 2;
    c.encoder.d_ff = 96;
    c.encoder.layers = 2;
    c.encoder.stem_channels = {8, 16};
    c.encoder.pos_conv_blocks = {0};
    c.encoder.preprocess.mean = {0.5f};
    c.encoder.preprocess.std = {0.5f};
    c.decoder_layers = 3;
    c.decoder_heads = 4;
    c.decoder_d_ff = 80;
    c.max_length = 12;
    c.vocab_size = 50;
    c.tie_embeddings = tied;
    ParamStore store;
    caption::CaptionModel model(store, c);
    const nn::ModelSize size = nn::model_size(s);
    EXPECT_EQ(size.total_params, store.numel());
    EXPECT_EQ(block(size, "decoder layer").positions, 12);
    EXPECT_EQ(block(size, "output projection").macs, 64 * 50);

    s.memory_class_token = false;  // one memory token fewer: 17 -> 16
    const nn::ModelSize patches = nn::model_size(s);
    EXPECT_EQ(patches.total_params, size.total_params);
    EXPECT_DOUBLE_EQ(size.macs_per_sequence - patches.macs_per_sequence,
                     3.0 * (2 * 64 * 64 + 12 * 2 * 64));
  }
  nn::ModelSpec s = vit_spec(64, 2, 2);
  s.type = "caption";
  s.decoder_heads = 3;  // does not divide 64
  EXPECT_THROW(nn::model_size(s), UsageError);
}
