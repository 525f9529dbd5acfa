#pragma once
// The model kinds the vitk command knows (common/nn/model_info.h), each registered by its layer:
// the ViT, the captioner, the translation model and its encoder alone. `vitk info` and
// `vitk inspect` size and describe a model through them.
#include "common/nn/model_info.h"

namespace vitk::tools {

const nn::ModelRegistry& model_registry();

}  // namespace vitk::tools
