#include "common/io/checkpoint_config.h"

#include <algorithm>
#include <cstdlib>

#include "common/error.h"
#include "common/quoted_name.h"

namespace vitk::io {

std::string config_values_text(const std::map<std::string, std::string>& config,
                               const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& key : keys) {
    auto it = config.find(key);
    out += (out.empty() ? "" : ", ") + ("config." + key) + " = " +
           (it == config.end() ? std::string("(absent)") : it->second);
  }
  return out;
}

void require_model_type(const std::string& path, const std::map<std::string, std::string>& config,
                        const std::string& type, const std::string& noun, const std::string& writer,
                        bool required) {
  const auto it = config.find("type");
  if (it == config.end() ? !required : it->second == type) return;
  const std::string is =
      it == config.end() ? "it records no model type" : "its model type is '" + it->second + "'";
  throw Error(path + ": not a " + noun + " checkpoint (" + is + ", not '" + type + "'); " + writer);
}

void require_f32_checkpoint(const CheckpointMeta& meta, const std::string& path,
                            const std::string& option, const std::string& role) {
  if (meta.quantization.empty()) return;
  throw UsageError(option + " " + path + ": is quantised to " + meta.quantization +
                   " (vitk quantize); " + role +
                   " must be an f32 checkpoint (the one it was quantised from)");
}

void require_config_keys(const std::string& path, const std::map<std::string, std::string>& config,
                         const std::vector<std::string>& keys) {
  for (const std::string& key : keys)
    if (!config.count(key))
      throw Error(path + ": has no config." + key +
                  " attribute, which the model's size needs (every vitk checkpoint records it)");
}

void check_layer_count(const std::string& path, const std::map<std::string, std::string>& config,
                       const StoredTensors& stored, const std::string& prefix,
                       const std::string& key, int64_t expected) {
  int64_t count = 0;  // one more than the largest index under prefix
  for (const auto& entry : stored) {
    const std::string& name = entry.first;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t end = name.find('.', prefix.size());
    const std::string index = name.substr(prefix.size(), end - prefix.size());
    if (end == std::string::npos || index.empty() || index.size() > 9 ||
        index.find_first_not_of("0123456789") != std::string::npos)
      continue;  // not a layer's tensor: the full check of names names it
    count = std::max<int64_t>(count, std::atoll(index.c_str()) + 1);
  }
  if (count == expected) return;
  const std::string held = count == 0 ? "none ('" + prefix + "0.*' is missing)"
                                      : std::to_string(count) + " (" + prefix + "0 to " + prefix +
                                            std::to_string(count - 1) + ")";
  throw Error(path + ": " + config_values_text(config, {key}) +
              " does not match the stored tensors, whose layers under '" + prefix + "' are " +
              held);
}

void check_implied_sizes(const std::string& path, const std::map<std::string, std::string>& config,
                         const StoredTensors& stored, const std::vector<ImpliedSize>& implied) {
  for (const ImpliedSize& want : implied) {
    for (const auto& [name, shape] : stored) {
      if (name != want.tensor) continue;
      if (want.axis < shape.size() && shape[want.axis] == want.size) break;
      throw Error(path + ": " + config_values_text(config, want.keys) +
                  " does not match the stored tensors: " + quoted_name(name) + " has shape " +
                  shape_str(shape) + ", where the configuration implies " +
                  std::to_string(want.size) + " along axis " + std::to_string(want.axis));
    }
  }
}

}  // namespace vitk::io
