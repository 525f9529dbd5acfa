#pragma once
// Small models with random weights for the tests that need a checkpoint but no training: a grey
// ViT and a translation Transformer, built and initialised as vitk builds them.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/ops/ops.h"
#include "common/params.h"
#include "common/seq2seq/model.h"
#include "vit/vit.h"

namespace vitk::testing {

// A grey ViT of side×side images in 4×4 patches, width 16, 2 heads; inputs scaled by 0.5 ± 0.5.
inline vit::VitConfig tiny_grey_vit(int64_t side, int64_t classes, int64_t layers) {
  vit::VitConfig c;
  c.image_height = c.image_width = side;
  c.patch_size = 4;
  c.channels = 1;
  c.num_classes = classes;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.layers = layers;
  c.preprocess.mean = {0.5f};
  c.preprocess.std = {0.5f};
  return c;
}

// Writes a checkpoint of the ViT `c` with random weights (seed 3) and the class names.
inline void save_random_vit(const std::string& path, const vit::VitConfig& c,
                            std::vector<std::string> class_names) {
  ParamStore params;
  vit::VisionTransformer model(params, c);
  params.finalize();
  ops::Rng rng(3);
  model.init(rng);
  io::CheckpointMeta meta;
  meta.config = vit::to_config_map(c);
  meta.class_names = std::move(class_names);
  io::save_checkpoint(path, params, meta);
}

// A translation Transformer of width 8 with one layer on each side and a vocabulary of 16, random
// weights (seed 1).
struct TinyTranslation {
  seq2seq::TransformerConfig config;
  ParamStore params;
  std::unique_ptr<seq2seq::Transformer> model;

  TinyTranslation() {
    config.vocab_size = 16, config.d_model = 8, config.heads = 2, config.d_ff = 16;
    config.layers = 1, config.decoder_layers = 1, config.max_length = 32;
    model = std::make_unique<seq2seq::Transformer>(params, config);
    params.finalize();
    ops::Rng rng(1);
    model->init(rng);
  }
};

}  // namespace vitk::testing
