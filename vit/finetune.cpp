// Fine-tuning recipes and layer-wise learning-rate decay.
#include "vit/finetune.h"

#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace vitk::vit {

namespace {

Recipe make_vit() {
  Recipe r;
  r.name = "vit";
  r.optimizer = "sgd";
  r.lr_per_512 = 0.03;
  r.min_lr_fraction = 0;
  r.epochs = 10;
  r.warmup_fraction = 0.05;
  r.weight_decay = 0;
  r.clip_grad = 1;
  r.smoothing = 0;
  r.momentum = 0.9f;
  return r;
}

Recipe make_deit() {
  Recipe r;
  r.name = "deit";
  r.optimizer = "adamw";
  r.lr_per_512 = 5e-6;
  r.min_lr_fraction = 1;
  r.epochs = 30;
  r.warmup_fraction = 5.0 / 30.0;
  r.weight_decay = 1e-8f;
  r.clip_grad = 0;
  r.smoothing = 0.1f;
  return r;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::char_traits<char>::length(prefix), prefix) == 0;
}

}  // namespace

float Recipe::lr(int64_t batch_size) const {
  return static_cast<float>(lr_per_512 * static_cast<double>(batch_size) / 512.0);
}

float Recipe::min_lr(float peak) const {
  return static_cast<float>(min_lr_fraction * static_cast<double>(peak));
}

float Recipe::warmup_epochs(int run_epochs) const {
  return static_cast<float>(warmup_fraction * run_epochs);
}

const Recipe& recipe(const std::string& name) {
  static const Recipe vit = make_vit(), deit = make_deit();
  if (name == "vit") return vit;
  if (name == "deit") return deit;
  throw UsageError(
      "--recipe must be 'vit' (SGD, the ViT paper's) or 'deit' (AdamW, DeiT's), got '" + name +
      "'");
}

const Recipe& recipe_for_optimizer(const std::string& optimizer) {
  if (optimizer == "sgd") return recipe("vit");
  if (optimizer == "adamw") return recipe("deit");
  throw UsageError("--opt must be 'sgd' or 'adamw', got '" + optimizer + "'");
}

int layer_id(const std::string& name, int num_layers) {
  if (name == "cls_token" || name == "pos_embed" || starts_with(name, "patch_embed.")) return 0;
  // blocks.<i>.* and pos_conv.<i>.* (the positional convolution after block i)
  for (const std::string prefix : {"blocks.", "pos_conv."}) {
    if (!starts_with(name, prefix.c_str())) continue;
    const char* digits = name.c_str() + prefix.size();
    char* end = nullptr;
    const long i = std::strtol(digits, &end, 10);
    if (end != digits && *end == '.' && i >= 0 && i < num_layers) return static_cast<int>(i) + 1;
    throw Error("layer decay: '" + name + "' is not a block of a " + std::to_string(num_layers) +
                "-layer ViT");
  }
  return num_layers + 1;
}

float layer_decay_scale(const std::string& name, int num_layers, double decay) {
  return static_cast<float>(std::pow(decay, num_layers + 1 - layer_id(name, num_layers)));
}

void apply_layer_decay(ParamStore& params, int num_layers, double decay) {
  if (!(decay > 0 && decay <= 1))
    throw Error("layer decay must be in (0, 1], got " + std::to_string(decay));
  for (Parameter& p : params.params()) p.lr_scale = layer_decay_scale(p.name, num_layers, decay);
}

}  // namespace vitk::vit
