// Model sizes against published figures and the closed forms of the seed notes; each model sizes
// itself (vit::model_size, caption::model_size, seq2seq::model_size) and registers a ModelKind.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/nn/model_info.h"
#include "common/params.h"
#include "common/seq2seq/config.h"
#include "vit/caption/model.h"
#include "vit/vit.h"

using namespace vitk;

namespace {

vit::VitConfig vit_spec(int64_t d, int64_t heads, int layers) {
  vit::VitConfig c;
  c.d_model = d;
  c.heads = heads;
  c.d_ff = 4 * d;
  c.layers = layers;
  return c;
}

// The size of a ViT of these settings, checked first as every caller does.
nn::ModelSize vit_size(const vit::VitConfig& c) {
  c.validate();
  return vit::model_size(c);
}

const nn::BlockSize& block(const nn::ModelSize& m, const std::string& name) {
  for (const auto& b : m.blocks)
    if (b.name == name) return b;
  throw std::runtime_error("no block " + name);
}

}  // namespace

// timm's parameter counts for vit_{tiny,small,base,large}_patch16_224 (1000 classes).
TEST(ModelInfo, VitParameterCountsMatchTimm) {
  EXPECT_EQ(vit_size(vit_spec(192, 3, 12)).total_params, 5717416);
  EXPECT_EQ(vit_size(vit_spec(384, 6, 12)).total_params, 22050664);
  EXPECT_EQ(vit_size(vit_spec(768, 12, 12)).total_params, 86567656);
  EXPECT_EQ(vit_size(vit_spec(1024, 16, 24)).total_params, 304326632);
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

// Each model registers its kind: `vitk info` sizes a model from [model] keys as text, and a bad
// value or a setting that contradicts another is a usage error naming it.
TEST(ModelInfo, KindsSizeFromTextAndRefuseBadSettings) {
  nn::ModelRegistry registry;
  registry.add(vit::model_kind());
  registry.add(caption::model_kind());
  registry.add(seq2seq::model_kind());
  registry.add(seq2seq::encoder_kind());
  EXPECT_THROW(registry.add(vit::model_kind()), std::logic_error);
  EXPECT_EQ(registry.find("rnn"), nullptr);
  const nn::ModelKind& vit = *registry.find("vit");
  const std::map<std::string, std::string> b16 = {{"d_model", "768"}, {"heads", "12"}};
  EXPECT_EQ(vit.size(b16).total_params, 86567656);
  // Keys of another kind are not this one's business (one preset serves `vitk info` for all).
  auto with_other = b16;
  with_other["activation"] = "gelu";
  EXPECT_EQ(vit.size(with_other).total_params, 86567656);
  for (const auto& [key, value] : std::map<std::string, std::string>{
           {"heads", "7"}, {"patch_size", "15"}, {"d_model", "x"}, {"layers", "0"}}) {
    auto bad = b16;
    bad[key] = value;
    try {
      vit.size(bad);
      ADD_FAILURE() << key << " " << value;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--model."), std::string::npos) << e.what();
    }
  }
  const nn::ModelKind& transformer = *registry.find("transformer");
  EXPECT_EQ(transformer.size({{"sequence_length", "50"}}).tokens, 50);
  EXPECT_THROW(transformer.size({{"score", "cosine"}}), UsageError);
  // The settings each kind shows are its schema's, with its defaults.
  bool found = false;
  for (const auto& f : vit.fields)
    if (f.key == "d_model") found = f.default_text == "768";
  EXPECT_TRUE(found);
}

// A captioning model (vit/caption/model.h): the count equals the parameters the model registers,
// tied or not; the decoder's multiply-adds grow with the memory by the cross-attention's keys and
// values (2·d² per memory token and layer) and its attention (2·d per target and memory token).
TEST(ModelInfo, CaptionCountsWhatTheModelRegisters) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    caption::CaptionConfig c;
    c.encoder.image_height = c.encoder.image_width = 32;
    c.encoder.patch_size = 8;
    c.encoder.channels = 1;
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
    c.validate();
    ParamStore store;
    caption::CaptionModel model(store, c);
    const nn::ModelSize size = caption::model_size(c);
    EXPECT_EQ(size.total_params, store.numel());
    EXPECT_EQ(block(size, "decoder layer").positions, 12);
    EXPECT_EQ(block(size, "output projection").macs, 64 * 50);

    c.memory_class_token = false;  // one memory token fewer: 17 -> 16
    const nn::ModelSize patches = caption::model_size(c);
    EXPECT_EQ(patches.total_params, size.total_params);
    EXPECT_DOUBLE_EQ(size.macs_per_sequence - patches.macs_per_sequence,
                     3.0 * (2 * 64 * 64 + 12 * 2 * 64));
  }
  const nn::ModelKind kind = caption::model_kind();
  EXPECT_THROW(kind.size({{"d_model", "64"}, {"heads", "2"}, {"decoder_heads", "3"}}),
               UsageError);  // 3 does not divide 64
}
