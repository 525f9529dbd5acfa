// Fine-tuning recipes and layer-wise learning-rate decay.
#include "vit/finetune.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/progress.h"
#include "vit/checkpoint.h"

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

// ---- The model a fine-tuning run starts from ---------------------------------------------------

namespace {

std::string size_text(int64_t height, int64_t width) {
  return std::to_string(height) + "x" + std::to_string(width);
}

// Model settings a fine-tuning run may change: they do not touch the weights' shapes or meaning.
bool changeable_when_finetuning(const std::string& key) {
  return key == "dropout" || key == "attention_dropout" || key == "drop_path" ||
         key == "patch_drop" || key == "resize" || key == "crop_fraction" || key == "interpolation";
}

// "class_0", "class_1", ...: the names `vitk import` makes up when it is given none.
bool placeholder_names(const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] != "class_" + std::to_string(i)) return false;
  return true;
}

// The first difference between two lists of class names, for messages.
std::string first_difference(const std::vector<std::string>& a, const std::string& a_name,
                             const std::vector<std::string>& b, const std::string& b_name) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i])
      return "class " + std::to_string(i) + " is '" + a[i] + "' in " + a_name + ", '" + b[i] +
             "' in " + b_name;
  return std::to_string(a.size()) + " classes in " + a_name + ", " + std::to_string(b.size()) +
         " in " + b_name;
}

}  // namespace

FinetuneStart finetune_start(const TrainOptions& o, const std::vector<std::string>& class_names,
                             const std::string& source) {
  const FinetuneOptions& f = o.finetune;
  const int64_t classes = static_cast<int64_t>(class_names.size());
  const io::CheckpointMeta meta = io::read_checkpoint_meta(f.from);
  FinetuneStart start;
  start.from = stored_config(f.from, meta);
  start.recipe = meta.recipe;
  VitConfig& cfg = start.config;
  cfg = start.from;
  const auto file = to_config_map(start.from), given = to_config_map(o.model);
  for (const std::string& key : o.model_keys_given) {
    auto a = given.find(key), b = file.find(key);
    if (a == given.end() || b == file.end() || a->second == b->second) continue;
    if (!changeable_when_finetuning(key))
      throw UsageError("--model." + key + " " + a->second + " differs from the " + b->second +
                       " of " + f.from +
                       ": fine-tuning keeps the model's architecture and input statistics" +
                       (key == "image_size"    ? " (train at another size with --image-size)"
                        : key == "num_classes" ? " (a new head: --num-classes)"
                                               : ""));
  }
  for (const std::string& key : o.model_keys_given) {
    if (key == "dropout") cfg.dropout = o.model.dropout;
    if (key == "attention_dropout") cfg.attention_dropout = o.model.attention_dropout;
    if (key == "drop_path") cfg.drop_path = o.model.drop_path;
    if (key == "patch_drop") cfg.patch_drop = o.model.patch_drop;
    if (key == "resize") cfg.preprocess.resize = o.model.preprocess.resize;
    if (key == "crop_fraction") cfg.preprocess.crop_fraction = o.model.preprocess.crop_fraction;
    if (key == "interpolation") cfg.preprocess.interpolation = o.model.preprocess.interpolation;
  }
  try {
    cfg.validate();
  } catch (const UsageError& e) {
    const std::string what = e.what();
    throw UsageError(what.rfind("model.", 0) == 0 ? "--" + what : "model option " + what);
  }

  if (f.image_height > 0) {
    const int64_t p = cfg.patch_size;
    if (f.image_height % p || f.image_width % p) {
      auto down = [p](int64_t x) { return std::max<int64_t>(p, x / p * p); };
      auto up = [p](int64_t x) { return (x + p - 1) / p * p; };
      throw UsageError("--image-size " + size_text(f.image_height, f.image_width) +
                       ": the patch size " + std::to_string(p) + " of " + f.from +
                       " does not divide it (" +
                       size_text(down(f.image_height), down(f.image_width)) + " or " +
                       size_text(up(f.image_height), up(f.image_width)) + " would do)");
    }
    cfg = at_size(cfg, f.image_height, f.image_width, f.from);
  }
  start.align_corners = f.align_corners.value_or(start.from.pos_embed_align_corners);
  cfg.pos_embed_align_corners = start.align_corners;  // the convention the positions now follow

  start.new_head = f.num_classes > 0;
  if (start.new_head) {
    if (f.num_classes != classes)
      throw UsageError("--num-classes " + std::to_string(f.num_classes) + ": the data " + source +
                       " has " + std::to_string(classes) + " classes" +
                       (f.labels.empty() ? "" : " (and --labels " + f.labels + " as many names)"));
    cfg.num_classes = f.num_classes;
  } else {
    if (start.from.num_classes != classes)
      throw UsageError(f.from + " has a head of " + std::to_string(start.from.num_classes) +
                       " classes, the data " + source + " " + std::to_string(classes) +
                       ": give --num-classes " + std::to_string(classes) + " for a new head");
    const auto& names = meta.class_names;
    if (!names.empty() && names != class_names && !placeholder_names(names) && f.labels.empty())
      throw Error("the data's classes are not those of the head of " + f.from + " (" +
                  first_difference(class_names, source, names, f.from) + "): give --num-classes " +
                  std::to_string(classes) +
                  " for a new head, or --labels FILE to keep the head with the names of FILE");
  }
  return start;
}

// ---- What a checkpoint records of its training ---------------------------------------------

namespace {

// The shortest text that reads back as the same float (0.1f as "0.1", not "0.100000001").
std::string number_text(float x) {
  for (int digits = 6; digits < 9; ++digits) {
    std::string text = format_general(x, digits);
    if (std::strtof(text.c_str(), nullptr) == x) return text;
  }
  return format_general(x, 9);
}

std::string pair_text(const std::array<float, 2>& v) {
  return number_text(v[0]) + " " + number_text(v[1]);
}

// The numbers of a recorded value: exactly `count` of them.
std::vector<double> recorded_numbers(const std::string& key, const std::string& text, size_t count,
                                     const std::string& path) {
  std::istringstream in(text);
  std::vector<double> out;
  bool numbers = true;
  for (std::string word; in >> word;) {
    char* end = nullptr;
    out.push_back(std::strtod(word.c_str(), &end));
    numbers = numbers && !*end && std::isfinite(out.back());
  }
  if (!numbers || out.size() != count)
    throw Error(path + ": attribute recipe." + key + " is '" + text + "', not " +
                (count == 1 ? "a number" : std::to_string(count) + " numbers"));
  return out;
}

}  // namespace

std::map<std::string, std::string> recipe_record(const TrainOptions& o,
                                                 const datasets::AugmentOptions& a) {
  std::map<std::string, std::string> record{
      {"random-resized-crop", a.random_resized_crop ? "true" : "false"},
      {"scale", pair_text(a.scale)},
      {"ratio", pair_text(a.ratio)},
      {"hflip", number_text(a.hflip)},
      {"crop-padding", std::to_string(a.crop_padding)},
      {"reprob", number_text(a.reprob)},
      {"mixup", number_text(a.mixup)},
      {"cutmix", number_text(a.cutmix)},
      {"mixup-prob", number_text(a.mixup_prob)},
      {"mixup-switch-prob", number_text(a.mixup_switch_prob)},
      {"opt", o.opt},
      {"lr", number_text(o.lr)},
      {"min-lr", number_text(o.min_lr)},
      {"warmup-epochs", number_text(o.warmup_epochs)},
      {"weight-decay", number_text(o.weight_decay)},
      {"layer-decay", number_text(o.layer_decay)},
      {"smoothing", number_text(o.smoothing)},
      {"batch-size", std::to_string(o.batch_size)}};
  // The run's length: its --steps, or its --epochs.
  if (o.loop.steps > 0)
    record["steps"] = std::to_string(o.loop.steps);
  else
    record["epochs"] = std::to_string(o.loop.epochs);
  return record;
}

std::vector<std::string> take_recorded_augment(const std::map<std::string, std::string>& record,
                                               const std::set<std::string>& given,
                                               datasets::AugmentOptions& a,
                                               const std::string& path) {
  std::vector<std::string> taken;
  // --no-aug given turns the crop, the flip, the shift and the erasing off: none of them is taken.
  const bool no_aug = given.count("no-aug") > 0;
  auto find = [&](const std::string& key, bool crop_or_flip) -> const std::string* {
    if (given.count(key) || (crop_or_flip && no_aug)) return nullptr;
    auto it = record.find(key);
    if (it == record.end()) return nullptr;
    taken.push_back(key);
    return &it->second;
  };
  // A number in [0, max]: a probability (max 1) or a Mixup/CutMix alpha (max 1000).
  auto number = [&](const std::string& key, float& into, double max, bool crop_or_flip) {
    if (const std::string* text = find(key, crop_or_flip)) {
      const double v = recorded_numbers(key, *text, 1, path)[0];
      if (!(v >= 0 && v <= max))
        throw Error(path + ": attribute recipe." + key + " is " + *text + ", not in [0, " +
                    number_text(static_cast<float>(max)) + "]");
      into = static_cast<float>(v);
    }
  };
  // scale (at most 1) and ratio: two numbers 0 < MIN <= MAX.
  auto range = [&](const std::string& key, std::array<float, 2>& into, bool at_most_1) {
    if (const std::string* text = find(key, true)) {
      const std::vector<double> v = recorded_numbers(key, *text, 2, path);
      if (!(v[0] > 0 && v[0] <= v[1] && (!at_most_1 || v[1] <= 1) && v[1] < 1e30))
        throw Error(path + ": attribute recipe." + key + " is '" + *text +
                    "', not two numbers 0 < MIN <= MAX" + (at_most_1 ? " <= 1" : ""));
      into = {static_cast<float>(v[0]), static_cast<float>(v[1])};
    }
  };
  if (const std::string* text = find("random-resized-crop", true)) {
    if (*text != "true" && *text != "false")
      throw Error(path + ": attribute recipe.random-resized-crop is '" + *text +
                  "', not true or false");
    a.random_resized_crop = *text == "true";
  }
  range("scale", a.scale, true);
  range("ratio", a.ratio, false);
  number("hflip", a.hflip, 1, true);
  if (const std::string* text = find("crop-padding", true)) {
    const double v = recorded_numbers("crop-padding", *text, 1, path)[0];
    if (!(v >= 0 && v <= 1024 && v == std::floor(v)))
      throw Error(path + ": attribute recipe.crop-padding is " + *text +
                  ", not a whole number in [0, 1024]");
    a.crop_padding = static_cast<int64_t>(v);
  }
  number("reprob", a.reprob, 1, true);
  number("mixup", a.mixup, 1e3, false);
  number("cutmix", a.cutmix, 1e3, false);
  number("mixup-prob", a.mixup_prob, 1, false);
  number("mixup-switch-prob", a.mixup_switch_prob, 1, false);
  return taken;
}

void check_resumed_finetune(const FinetuneOptions& f, const VitConfig& cfg,
                            const std::string& resume) {
  if (f.image_height > 0 &&
      (f.image_height != cfg.image_height || f.image_width != cfg.image_width))
    throw UsageError("--image-size " + size_text(f.image_height, f.image_width) +
                     " differs from the " + size_text(cfg.image_height, cfg.image_width) + " of " +
                     resume + "; a resumed run keeps its model");
  if (f.num_classes > 0 && f.num_classes != cfg.num_classes)
    throw UsageError("--num-classes " + std::to_string(f.num_classes) + " differs from the " +
                     std::to_string(cfg.num_classes) + " classes of " + resume +
                     "; a resumed run keeps its model");
}

}  // namespace vitk::vit
