#pragma once
// What the captioning tests train on and distil from: tiny generated scenes with the options of a
// small, quick captioner, and a ViT classifier saved as a checkpoint.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "datasets/scenes.h"
#include "util/scene_data.h"
#include "util/test_util.h"
#include "vit/caption/task.h"
#include "vit/vit.h"

namespace vitk::testing {

// Scenes of two articles with one caption each, and the options of a small, quick model.
struct TinyScenes {
  test::TempDir dir;
  std::string root;
  explicit TinyScenes(int64_t captions_per_image = 1) {
    datasets::SceneOptions o;
    o.fashion_mnist = write_fashion_mnist(dir);
    o.output = (dir / "scenes").string();
    o.train = 8;
    o.val = 4;
    o.test = 4;
    o.captions_per_image = captions_per_image;
    o.min_objects = o.max_objects = 2;
    o.seed = 5;
    datasets::make_scenes(o);
    root = o.output;
  }

  caption::CaptionTrainOptions options(const std::string& output) const {
    caption::CaptionTrainOptions t;
    t.data = root;
    t.loop.output = output;
    t.vocab_size = 40;
    caption::CaptionConfig& c = t.model;
    c.encoder.image_height = c.encoder.image_width = 84;
    c.encoder.patch_size = 14;
    c.encoder.channels = 1;
    c.encoder.num_classes = 0;
    c.encoder.d_model = 32;
    c.encoder.heads = 2;
    c.encoder.d_ff = 64;
    c.encoder.layers = 1;
    c.encoder.preprocess.resize = "squash";
    c.encoder.preprocess.crop_fraction = 1.f;
    c.encoder.preprocess.mean = {0.5f};
    c.encoder.preprocess.std = {0.5f};
    c.max_length = 64;  // a 40-piece vocabulary spells most words letter by letter
    c.decoder_layers = 1;
    c.decoder_heads = 2;
    c.decoder_d_ff = 64;
    c.decoder_dropout = 0.f;
    t.loop.epochs = 150;
    t.batch_size = 4;
    t.lr = 3e-3f;
    t.warmup_epochs = 2.f;
    t.smoothing = 0.f;
    t.loop.valid_every = 0;  // only at the end
    t.loop.log_interval = 1000;
    return t;
  }
};

// A ViT classifier of `names` at size x size (28: the articles') with the tiny options' encoder,
// initialised (seed 9), then changed by `adjust`, saved at `path`.
inline std::unique_ptr<ParamStore> save_classifier(
    const vit::VitConfig& encoder, const std::vector<std::string>& names, const std::string& path,
    const std::function<void(ParamStore&)>& adjust = [](ParamStore&) {}, int64_t size = 28) {
  vit::VitConfig vc = encoder;
  vc.image_height = vc.image_width = size;
  vc.pool = "avg";
  vc.num_classes = static_cast<int64_t>(names.size());
  auto store = std::make_unique<ParamStore>();
  vit::VisionTransformer classifier(*store, vc);
  store->finalize();
  ops::Rng rng(9);
  classifier.init(rng);
  adjust(*store);
  io::CheckpointMeta meta;
  meta.config = vit::to_config_map(vc);
  meta.class_names = names;
  io::save_checkpoint(path, *store, meta);
  return store;
}

}  // namespace vitk::testing
