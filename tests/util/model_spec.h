#pragma once
// Model specifications for the tests of model sizes (common/nn/model_info.h): a ViT's, and a
// block of a size's table by name.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/nn/model_info.h"

namespace vitk::test {

// A pre-norm GELU ViT of width d with d_ff 4d, as timm builds them.
inline nn::ModelSpec vit_spec(int64_t d, int64_t heads, int layers) {
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

// The row `name` of a size's table of blocks.
inline const nn::BlockSize& block(const nn::ModelSize& m, const std::string& name) {
  for (const auto& b : m.blocks)
    if (b.name == name) return b;
  throw std::runtime_error("no block " + name);
}

}  // namespace vitk::test
