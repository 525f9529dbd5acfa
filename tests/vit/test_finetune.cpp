// Fine-tuning (vit/finetune.h): layer-wise learning-rate scales, loading weights into a model of
// another size or head, and the recorded resampling convention. (The recipes, their option
// defaults and `vitk finetune` end to end: tools/test_finetune_cli.cpp.)
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/optim/optim.h"
#include "common/params.h"
#include "util/op_test_util.h"
#include "util/test_util.h"
#include "vit/checkpoint.h"
#include "vit/finetune.h"
#include "vit/resample.h"

using namespace vitk;

namespace {

// A ViT small enough to build in microseconds: 8×8 grey images, 4×4 patches (a 2×2 grid).
vit::VitConfig tiny_config(int layers = 2) {
  vit::VitConfig c;
  c.image_height = c.image_width = 8;
  c.patch_size = 4;
  c.channels = 1;
  c.num_classes = 4;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.layers = layers;
  c.preprocess.mean = {0.5f};
  c.preprocess.std = {0.5f};
  return c;
}

// A checkpoint of a randomly initialised tiny model; returns its store's values by name.
std::map<std::string, Tensor> save_tiny(const std::string& path, const vit::VitConfig& c) {
  ParamStore store;
  vit::VisionTransformer model(store, c);
  store.finalize();
  ops::Rng rng(7);
  model.init(rng);
  // A head and class token that are not zero, so that zeroing shows.
  for (Parameter& p : store.params())
    if (p.name == "head.bias" || p.name == "cls_token")
      for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] = 0.25f + 0.01f * i;
  io::CheckpointMeta meta;
  meta.config = vit::to_config_map(c);
  for (int64_t k = 0; k < c.num_classes; ++k) meta.class_names.push_back("c" + std::to_string(k));
  io::save_checkpoint(path, store, meta);
  std::map<std::string, Tensor> out;
  for (const Parameter& p : store.params()) out.emplace(p.name, p.value.clone());
  return out;
}

}  // namespace

// ---- Layer-wise learning-rate decay ------------------------------------------------------------

TEST(LayerDecay, ExactScalePerParameterName) {
  // BEiT / timm with 2 blocks: layer 0 the stem, 1 and 2 the blocks, 3 the final norm and head;
  // scale = 0.5^(3 − layer).
  const std::map<std::string, float> want{
      {"cls_token", 0.125f},
      {"pos_embed", 0.125f},
      {"patch_embed.proj.weight", 0.125f},
      {"patch_embed.proj.bias", 0.125f},
      {"blocks.0.norm1.weight", 0.25f},
      {"blocks.0.norm1.bias", 0.25f},
      {"blocks.0.attn.qkv.weight", 0.25f},
      {"blocks.0.attn.qkv.bias", 0.25f},
      {"blocks.0.attn.proj.weight", 0.25f},
      {"blocks.0.attn.proj.bias", 0.25f},
      {"blocks.0.norm2.weight", 0.25f},
      {"blocks.0.norm2.bias", 0.25f},
      {"blocks.0.mlp.fc1.weight", 0.25f},
      {"blocks.0.mlp.fc1.bias", 0.25f},
      {"blocks.0.mlp.fc2.weight", 0.25f},
      {"blocks.0.mlp.fc2.bias", 0.25f},
      {"blocks.1.norm1.weight", 0.5f},
      {"blocks.1.norm1.bias", 0.5f},
      {"blocks.1.attn.qkv.weight", 0.5f},
      {"blocks.1.attn.qkv.bias", 0.5f},
      {"blocks.1.attn.proj.weight", 0.5f},
      {"blocks.1.attn.proj.bias", 0.5f},
      {"blocks.1.norm2.weight", 0.5f},
      {"blocks.1.norm2.bias", 0.5f},
      {"blocks.1.mlp.fc1.weight", 0.5f},
      {"blocks.1.mlp.fc1.bias", 0.5f},
      {"blocks.1.mlp.fc2.weight", 0.5f},
      {"blocks.1.mlp.fc2.bias", 0.5f},
      {"norm.weight", 1.f},
      {"norm.bias", 1.f},
      {"head.weight", 1.f},
      {"head.bias", 1.f},
  };
  ParamStore store;
  vit::VisionTransformer model(store, tiny_config());
  store.finalize();
  vit::apply_layer_decay(store, 2, 0.5);
  ASSERT_EQ(store.params().size(), want.size());
  for (const Parameter& p : store.params()) {
    auto it = want.find(p.name);
    ASSERT_NE(it, want.end()) << p.name;
    EXPECT_EQ(p.lr_scale, it->second) << p.name;
  }
}

TEST(LayerDecay, AveragePoolingDeepModelsAndOff) {
  // pool = avg: fc_norm after the blocks trains at the full rate, like the head.
  vit::VitConfig c = tiny_config(3);
  c.pool = "avg";
  ParamStore store;
  vit::VisionTransformer model(store, c);
  store.finalize();
  vit::apply_layer_decay(store, 3, 0.75);
  EXPECT_EQ(store.get("fc_norm.weight").lr_scale, 1.f);
  EXPECT_EQ(store.get("head.bias").lr_scale, 1.f);
  EXPECT_EQ(store.get("blocks.2.mlp.fc2.weight").lr_scale, 0.75f);
  EXPECT_EQ(store.get("blocks.0.attn.qkv.weight").lr_scale, 0.421875f);  // 0.75^3, exact
  EXPECT_EQ(store.get("pos_embed").lr_scale, 0.31640625f);               // 0.75^4, exact
  // Two-digit blocks (ViT-B has 12).
  EXPECT_EQ(vit::layer_id("blocks.10.mlp.fc1.weight", 12), 11);
  EXPECT_EQ(vit::layer_id("blocks.1.mlp.fc1.weight", 12), 2);
  EXPECT_EQ(vit::layer_id("norm.weight", 12), 13);
  EXPECT_EQ(vit::layer_id("patch_embed.proj.weight", 12), 0);
  EXPECT_FLOAT_EQ(vit::layer_decay_scale("blocks.0.norm1.weight", 12, 0.65),
                  static_cast<float>(std::pow(0.65, 12)));
  EXPECT_THROW(vit::layer_id("blocks.12.norm1.weight", 12), Error);
  // A positional convolution trains with the block it follows.
  EXPECT_EQ(vit::layer_id("pos_conv.0.weight", 12), 1);
  EXPECT_EQ(vit::layer_id("pos_conv.11.bias", 12), 12);
  EXPECT_THROW(vit::layer_id("pos_conv.12.bias", 12), Error);
  // 1 is off; outside (0, 1] is refused.
  vit::apply_layer_decay(store, 3, 1.0);
  for (const Parameter& p : store.params()) EXPECT_EQ(p.lr_scale, 1.f) << p.name;
  EXPECT_THROW(vit::apply_layer_decay(store, 3, 0.0), Error);
  EXPECT_THROW(vit::apply_layer_decay(store, 3, 1.5), Error);
}

TEST(LayerDecay, OptimizersApplyTheScale) {
  // One SGD step without momentum: Δp = −lr · scale · g, so the scale is visible per parameter.
  ParamStore store;
  vit::VisionTransformer model(store, tiny_config());
  store.finalize();
  vit::apply_layer_decay(store, 2, 0.5);
  for (Parameter& p : store.params())
    for (int64_t i = 0; i < p.numel(); ++i) p.grad.f32()[i] = 1.f;
  optim::SgdOptions so;
  so.momentum = 0;
  optim::Sgd sgd(store, so);
  sgd.step(0.5f);
  EXPECT_EQ(store.get("head.weight").value.f32()[0], -0.5f);
  EXPECT_EQ(store.get("blocks.1.mlp.fc1.bias").value.f32()[0], -0.25f);
  EXPECT_EQ(store.get("blocks.0.mlp.fc1.bias").value.f32()[0], -0.125f);
  EXPECT_EQ(store.get("patch_embed.proj.bias").value.f32()[0], -0.0625f);
}

// ---- Loading weights into a model of another size or head -------------------------------------

TEST(FinetuneLoad, NewHeadIsZeroAndEverythingElseCarriesOver) {
  const test::TempDir temp("vitk_ftload");
  const std::string dir = temp.path().string();
  const std::string path = dir + "/src.h5";
  const vit::VitConfig src = tiny_config();
  const auto before = save_tiny(path, src);

  // Same size, a head of 7 classes.
  vit::VitConfig c = src;
  c.num_classes = 7;
  ParamStore store;
  vit::VisionTransformer model(store, c);
  store.finalize();
  for (int64_t i = 0; i < store.values().numel(); ++i) store.values().f32()[i] = 9.f;
  vit::load_vit_weights(path, c, store, std::nullopt, /*new_head=*/true);
  EXPECT_EQ(store.get("head.weight").shape, (Shape{7, 8}));
  EXPECT_EQ(store.get("head.bias").shape, (Shape{7}));
  for (const char* name : {"head.weight", "head.bias"}) {
    const Parameter& p = store.get(name);
    for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(p.value.f32()[i], 0.f) << name << " " << i;
  }
  for (const Parameter& p : store.params()) {
    if (p.name.rfind("head.", 0) == 0) continue;
    EXPECT_TRUE(test::bitwise_equal(p.value, before.at(p.name))) << p.name;
  }

  // A new head of the same size is zero too (the ViT paper's fine-tuning always starts so).
  ParamStore same;
  vit::VisionTransformer same_model(same, src);
  same.finalize();
  vit::load_vit_weights(path, src, same, std::nullopt, true);
  EXPECT_EQ(same.get("head.bias").value.f32()[0], 0.f);

  // 12×12 (a 3×3 grid) and 7 classes: pos_embed resampled, the class token's row untouched.
  vit::VitConfig big = c;
  big.image_height = big.image_width = 12;
  ParamStore store12;
  vit::VisionTransformer model12(store12, big);
  store12.finalize();
  vit::load_vit_weights(path, big, store12, std::nullopt, true);
  const Tensor want = vit::resample_pos_embed(before.at("pos_embed"), 2, 2, 3, 3, false);
  EXPECT_EQ(store12.get("pos_embed").shape, (Shape{1, 10, 8}));
  EXPECT_TRUE(test::bitwise_equal(store12.get("pos_embed").value, want));
  for (int64_t k = 0; k < 8; ++k)
    EXPECT_EQ(store12.get("pos_embed").value.f32()[k], before.at("pos_embed").f32()[k]);
  EXPECT_TRUE(test::bitwise_equal(store12.get("cls_token").value, before.at("cls_token")));

  // Another head without new_head is an error naming the tensor.
  ParamStore wrong;
  vit::VisionTransformer wrong_model(wrong, c);
  wrong.finalize();
  try {
    vit::load_vit_weights(path, c, wrong, std::nullopt, false);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head.weight"), std::string::npos) << e.what();
  }
}

// A model with a convolutional stem and a positional convolution loads at a higher resolution:
// the stem, the projection and the positional convolution are size-free and carry over bit for
// bit, only pos_embed is resampled; the model then runs at the new size.
TEST(FinetuneLoad, StemModelRunsAtAHigherResolution) {
  const test::TempDir temp("vitk_ftstem");
  const std::string dir = temp.path().string();
  const std::string path = dir + "/src.h5";
  vit::VitConfig src = tiny_config();
  src.stem_channels = {4, 6};
  src.pos_conv_blocks = {0};
  const auto before = save_tiny(path, src);

  vit::LoadedVit m = vit::load_vit(path, 16, 12);
  EXPECT_TRUE(m.resampled);
  EXPECT_EQ(m.config.stem_channels, src.stem_channels);
  EXPECT_EQ(m.config.pos_conv_blocks, src.pos_conv_blocks);
  EXPECT_EQ(m.params->get("pos_conv.0.weight").shape, (Shape{8, 1, 3, 3}));
  EXPECT_EQ(m.params->get("pos_embed").shape, (Shape{1, 13, 8}));  // a 4×3 grid + class token
  for (const Parameter& p : m.params->params()) {
    if (p.name == "pos_embed") continue;
    EXPECT_TRUE(test::bitwise_equal(p.value, before.at(p.name))) << p.name;
  }
  Arena arena;
  nn::Context eval{false, &arena, nullptr};
  Tensor images({2, 1, 16, 12});
  images.fill(0.5f);
  const Tensor logits = m.model->forward(eval, images);
  EXPECT_EQ(logits.shape(), (Shape{2, 4}));
  for (int64_t i = 0; i < logits.numel(); ++i) EXPECT_TRUE(std::isfinite(logits.f32()[i]));
  EXPECT_THROW(vit::load_vit(path, 14, 12), UsageError);  // 14 is not a multiple of patch 4
}

TEST(FinetuneLoad, ResamplingConventionIsRecordedAndOldCheckpointsLoad) {
  // The key's round trip, and a configuration without it (written before it existed) is false.
  vit::VitConfig c = tiny_config();
  auto map = vit::to_config_map(c);
  EXPECT_EQ(map.at("pos_embed_align_corners"), "false");
  c.pos_embed_align_corners = true;
  map = vit::to_config_map(c);
  EXPECT_EQ(map.at("pos_embed_align_corners"), "true");
  EXPECT_TRUE(vit::from_config_map(map, "x").pos_embed_align_corners);
  map.erase("pos_embed_align_corners");
  EXPECT_FALSE(vit::from_config_map(map, "x").pos_embed_align_corners);
  map["pos_embed_align_corners"] = "maybe";
  try {
    vit::from_config_map(map, "old.h5");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pos_embed_align_corners"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("old.h5"), std::string::npos);
  }

  // load_vit follows the checkpoint's convention unless told otherwise.
  const test::TempDir temp("vitk_ftalign");
  const std::string dir = temp.path().string();
  c.pos_embed_align_corners = true;
  const auto before = save_tiny(dir + "/tv.h5", c);
  const Tensor aligned = vit::resample_pos_embed(before.at("pos_embed"), 2, 2, 3, 3, true);
  const Tensor unaligned = vit::resample_pos_embed(before.at("pos_embed"), 2, 2, 3, 3, false);
  vit::LoadedVit m = vit::load_vit(dir + "/tv.h5", 12, 12);
  EXPECT_TRUE(m.resampled && m.align_corners);
  EXPECT_TRUE(test::bitwise_equal(m.params->get("pos_embed").value, aligned));
  vit::LoadedVit o = vit::load_vit(dir + "/tv.h5", 12, 12, false);
  EXPECT_FALSE(o.align_corners);
  EXPECT_TRUE(test::bitwise_equal(o.params->get("pos_embed").value, unaligned));
  EXPECT_FALSE(test::bitwise_equal(aligned, unaligned));
  // A size the patches do not tile: a usage error naming the sizes.
  try {
    vit::load_vit(dir + "/tv.h5", 10, 12);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("10x12"), std::string::npos) << e.what();
  }
}
