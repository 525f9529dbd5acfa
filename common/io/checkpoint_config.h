#pragma once
// Checks of a checkpoint's configuration (its model type, whether its weights are f32) and of the
// configuration against its own tensors (names and shapes, no data),
// made before a model is built from it: a wrong size value (a damaged or edited config.layers,
// config.d_model, config.image_size) is named as the key it is, instead of being built first
// (hours, or all the memory) and then reported as a missing or misshapen tensor. The model
// (vit/checkpoint.cpp, common/seq2seq/checkpoint.cpp) says which keys imply which sizes.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/tensor.h"

namespace vitk::io {

using StoredTensors = std::vector<std::pair<std::string, Shape>>;  // list_checkpoint

// vitk::Error "PATH: not a ViT checkpoint (its model type is 'caption', not 'vit'); vitk train
// writes them" when the configuration names another model type than `type` (`noun`: what a model
// of it is called; `writer`: which commands write such files, "vitk train writes them"). A
// configuration without a type passes unless `required`: checkpoints from before types were
// recorded load as they did. Each model's loader checks this first, so a file of another model is
// named as such rather than as one lacking this model's keys.
void require_model_type(const std::string& path, const std::map<std::string, std::string>& config,
                        const std::string& type, const std::string& noun, const std::string& writer,
                        bool required = false);

// vitk::UsageError "OPTION PATH: is quantised to int8 (vitk quantize); ROLE must be an f32
// checkpoint (the one it was quantised from)" for a file of `vitk quantize` given where weights
// are read as f32 (a teacher, an encoder to start from).
void require_f32_checkpoint(const CheckpointMeta& meta, const std::string& path,
                            const std::string& option, const std::string& role);

// vitk::Error "PATH: has no config.KEY attribute ..." for the first of keys the configuration
// lacks: a missing size would otherwise fall back to a default and fail later on a tensor.
void require_config_keys(const std::string& path, const std::map<std::string, std::string>& config,
                         const std::vector<std::string>& keys);

// The number of layers the stored tensors hold under prefix ("blocks." counts blocks.0.*,
// blocks.1.*, ...: one more than the largest index), compared with config.KEY = expected.
void check_layer_count(const std::string& path, const std::map<std::string, std::string>& config,
                       const StoredTensors& stored, const std::string& prefix,
                       const std::string& key, int64_t expected);

// One size the configuration implies: axis `axis` of the stored tensor `tensor` is `size`, as
// the values of `keys` set it.
struct ImpliedSize {
  std::string tensor;
  size_t axis = 0;
  int64_t size = 0;
  std::vector<std::string> keys;
};
// vitk::Error "PATH: config.d_model = 768 does not match the stored tensors: 'cls_token' has
// shape [1, 1, 192], where the configuration implies 768 along axis 2" for the first that
// differs. A tensor the file lacks is skipped: the full check of names names it.
void check_implied_sizes(const std::string& path, const std::map<std::string, std::string>& config,
                         const StoredTensors& stored, const std::vector<ImpliedSize>& implied);

// "config.d_model = 192, config.layers = 6": the keys' values, for messages.
std::string config_values_text(const std::map<std::string, std::string>& config,
                               const std::vector<std::string>& keys);

}  // namespace vitk::io
