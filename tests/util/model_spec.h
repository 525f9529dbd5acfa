#pragma once
// Model specifications for the tests of model sizes (common/nn/model_info.h): a ViT's settings,
// its size as `vitk info` computes it, and a block of a size's table by name.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/nn/model_info.h"
#include "vit/vit.h"

namespace vitk::test {

// A ViT of width d with d_ff 4d, as timm builds them (224 x 224, patch 16, 1000 classes).
inline vit::VitConfig vit_spec(int64_t d, int64_t heads, int layers) {
  vit::VitConfig c;
  c.d_model = d;
  c.heads = heads;
  c.d_ff = 4 * d;
  c.layers = layers;
  return c;
}

// The size of a ViT of these settings, checked first as every caller does.
inline nn::ModelSize vit_size(const vit::VitConfig& c) {
  c.validate();
  return vit::model_size(c);
}

// The row `name` of a size's table of blocks.
inline const nn::BlockSize& block(const nn::ModelSize& m, const std::string& name) {
  for (const auto& b : m.blocks)
    if (b.name == name) return b;
  throw std::runtime_error("no block " + name);
}

}  // namespace vitk::test
