// Importing timm, Hugging Face and torchvision ViTs from .safetensors
// (vit/import.h).
//
// Each format is a table of name templates, source -> vitk, with two
// placeholders: {i} a block index and {wb} "weight" or "bias". The same table
// maps the file's names forward and, for error messages, vitk's names back to
// what the file should have held.
#include "vit/import.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/finite.h"
#include "common/io/checkpoint.h"
#include "common/io/input_file.h"
#include "common/io/json.h"
#include "common/io/safetensors.h"
#include "common/memory.h"
#include "common/quoted_name.h"
#include "vit/checkpoint.h"
#include "vit/resample.h"

namespace vitk::vit {

namespace {

std::string in_quotes(const std::string& s) {
  return quoted_name(s);
}

struct Rule {
  const char* source;
  const char* vitk;  // nullptr: known, unused at inference, skipped
  int part = 0;      // rows [part·n, (part+1)·n) of the vitk tensor, of `parts` equal parts
  int parts = 1;
};

const std::vector<Rule>& timm_rules() {
  static const std::vector<Rule> rules = {
      {"cls_token", "cls_token"},
      {"pos_embed", "pos_embed"},
      {"patch_embed.proj.{wb}", "patch_embed.proj.{wb}"},
      {"blocks.{i}.norm1.{wb}", "blocks.{i}.norm1.{wb}"},
      {"blocks.{i}.attn.qkv.{wb}", "blocks.{i}.attn.qkv.{wb}"},
      {"blocks.{i}.attn.proj.{wb}", "blocks.{i}.attn.proj.{wb}"},
      {"blocks.{i}.norm2.{wb}", "blocks.{i}.norm2.{wb}"},
      {"blocks.{i}.mlp.fc1.{wb}", "blocks.{i}.mlp.fc1.{wb}"},
      {"blocks.{i}.mlp.fc2.{wb}", "blocks.{i}.mlp.fc2.{wb}"},
      {"norm.{wb}", "norm.{wb}"},
      {"fc_norm.{wb}", "fc_norm.{wb}"},
      {"head.{wb}", "head.{wb}"},
  };
  return rules;
}

// Names without the "vit." prefix of ViTForImageClassification (ViTModel has
// none); the classifier is outside it.
const std::vector<Rule>& hf_rules() {
  static const std::vector<Rule> rules = {
      {"embeddings.cls_token", "cls_token"},
      {"embeddings.position_embeddings", "pos_embed"},
      {"embeddings.patch_embeddings.projection.{wb}", "patch_embed.proj.{wb}"},
      {"encoder.layer.{i}.layernorm_before.{wb}", "blocks.{i}.norm1.{wb}"},
      {"encoder.layer.{i}.attention.attention.query.{wb}", "blocks.{i}.attn.qkv.{wb}", 0, 3},
      {"encoder.layer.{i}.attention.attention.key.{wb}", "blocks.{i}.attn.qkv.{wb}", 1, 3},
      {"encoder.layer.{i}.attention.attention.value.{wb}", "blocks.{i}.attn.qkv.{wb}", 2, 3},
      {"encoder.layer.{i}.attention.output.dense.{wb}", "blocks.{i}.attn.proj.{wb}"},
      {"encoder.layer.{i}.layernorm_after.{wb}", "blocks.{i}.norm2.{wb}"},
      {"encoder.layer.{i}.intermediate.dense.{wb}", "blocks.{i}.mlp.fc1.{wb}"},
      {"encoder.layer.{i}.output.dense.{wb}", "blocks.{i}.mlp.fc2.{wb}"},
      {"layernorm.{wb}", "norm.{wb}"},
      {"classifier.{wb}", "head.{wb}"},
      // ViTModel's pooler (dense + tanh) is not on ViTForImageClassification's
      // path; the mask token is only for masked image modelling.
      {"pooler.dense.{wb}", nullptr},
      {"embeddings.mask_token", nullptr},
  };
  return rules;
}

const std::vector<Rule>& torchvision_rules() {
  static const std::vector<Rule> rules = {
      {"class_token", "cls_token"},
      {"encoder.pos_embedding", "pos_embed"},
      {"conv_proj.{wb}", "patch_embed.proj.{wb}"},
      {"encoder.layers.encoder_layer_{i}.ln_1.{wb}", "blocks.{i}.norm1.{wb}"},
      {"encoder.layers.encoder_layer_{i}.self_attention.in_proj_weight",
       "blocks.{i}.attn.qkv.weight"},
      {"encoder.layers.encoder_layer_{i}.self_attention.in_proj_bias", "blocks.{i}.attn.qkv.bias"},
      {"encoder.layers.encoder_layer_{i}.self_attention.out_proj.{wb}",
       "blocks.{i}.attn.proj.{wb}"},
      {"encoder.layers.encoder_layer_{i}.ln_2.{wb}", "blocks.{i}.norm2.{wb}"},
      {"encoder.layers.encoder_layer_{i}.mlp.0.{wb}", "blocks.{i}.mlp.fc1.{wb}"},
      {"encoder.layers.encoder_layer_{i}.mlp.3.{wb}", "blocks.{i}.mlp.fc2.{wb}"},
      // Before torchvision 0.13 (MLPBlock version 1).
      {"encoder.layers.encoder_layer_{i}.mlp.linear_1.{wb}", "blocks.{i}.mlp.fc1.{wb}"},
      {"encoder.layers.encoder_layer_{i}.mlp.linear_2.{wb}", "blocks.{i}.mlp.fc2.{wb}"},
      {"encoder.ln.{wb}", "norm.{wb}"},
      {"heads.head.{wb}", "head.{wb}"},
  };
  return rules;
}

const std::vector<Rule>& rules_for(ImportFormat f) {
  switch (f) {
    case ImportFormat::timm:
      return timm_rules();
    case ImportFormat::hf:
      return hf_rules();
    case ImportFormat::torchvision:
      return torchvision_rules();
  }
  return timm_rules();
}

using Captures = std::map<std::string, std::string>;

// Matches name against a template; fills the placeholders' values.
bool match(const std::string& tmpl, const std::string& name, Captures& captures) {
  captures.clear();
  size_t t = 0, n = 0;
  while (t < tmpl.size()) {
    if (tmpl.compare(t, 3, "{i}") == 0) {
      size_t start = n;
      while (n < name.size() && n - start < 6 && name[n] >= '0' && name[n] <= '9') ++n;
      if (n == start || (name[start] == '0' && n - start > 1)) return false;
      captures["{i}"] = name.substr(start, n - start);
      t += 3;
    } else if (tmpl.compare(t, 4, "{wb}") == 0) {
      std::string word = name.compare(n, 6, "weight") == 0 ? "weight"
                         : name.compare(n, 4, "bias") == 0 ? "bias"
                                                           : "";
      if (word.empty()) return false;
      captures["{wb}"] = word;
      n += word.size();
      t += 4;
    } else {
      if (n >= name.size() || name[n] != tmpl[t]) return false;
      ++n, ++t;
    }
  }
  return n == name.size();
}

std::string substitute(std::string tmpl, const Captures& captures) {
  for (const auto& [key, value] : captures)
    for (size_t pos; (pos = tmpl.find(key)) != std::string::npos;)
      tmpl.replace(pos, key.size(), value);
  return tmpl;
}

// Why a name that maps nowhere cannot be imported, when it is a known feature
// vitk lacks.
std::string unsupported_hint(const std::string& name) {
  static const std::pair<const char*, const char*> kHints[] = {
      {"reg_token", "register tokens are not supported"},
      {"dist_token", "DeiT's distillation token is not supported"},
      {"distillation", "DeiT's distillation token is not supported"},
      {"head_dist", "DeiT's distillation head is not supported"},
      {"pre_logits", "a representation (pre-logits) layer before the head is not supported"},
      {".ls1.", "layer scale is not supported"},
      {".ls2.", "layer scale is not supported"},
      {"lambda", "layer scale is not supported"},
      {"q_norm", "query/key normalisation is not supported"},
      {"k_norm", "query/key normalisation is not supported"},
      {"conv_bn_relu", "torchvision's convolutional stem is not supported"},
      {"conv_last", "torchvision's convolutional stem is not supported"},
      {"attn_pool", "attention pooling is not supported"},
  };
  for (const auto& [needle, hint] : kHints)
    if (name.find(needle) != std::string::npos) return std::string(": ") + hint;
  return "";
}

struct Mapped {
  const Rule* rule = nullptr;  // nullptr: no rule matches
  std::string vitk;            // empty for a skipped tensor
};

// HF names may carry the "vit." prefix (ViTForImageClassification) or not
// (ViTModel).
std::string hf_strip(const std::string& name) {
  return name.compare(0, 4, "vit.") == 0 ? name.substr(4) : name;
}

Mapped map_name(ImportFormat format, const std::string& name) {
  const std::string key = format == ImportFormat::hf ? hf_strip(name) : name;
  Captures captures;
  for (const Rule& rule : rules_for(format)) {
    if (!match(rule.source, key, captures)) continue;
    Mapped m;
    m.rule = &rule;
    if (rule.vitk) m.vitk = substitute(rule.vitk, captures);
    return m;
  }
  return {};
}

// What the file should have held for vitk's `name` (for "missing" messages).
std::string expected_sources(ImportFormat format, const std::string& name) {
  Captures captures;
  std::string out;
  for (const Rule& rule : rules_for(format)) {
    if (!rule.vitk || !match(rule.vitk, name, captures)) continue;
    std::string source = substitute(rule.source, captures);
    if (format == ImportFormat::hf && source.compare(0, 11, "classifier.") != 0)
      source = "vit." + source;
    if (out.find(source) == std::string::npos)
      out += (out.empty() ? "" : " + ") + in_quotes(source);
    if (rule.parts == 1) break;  // a later rule is only the legacy name of the same tensor
  }
  return out;
}

// The format all of whose names this file's names match, if another than
// `format` does.
std::optional<ImportFormat> guess_format(const io::SafetensorsFile& file) {
  for (ImportFormat f : {ImportFormat::timm, ImportFormat::hf, ImportFormat::torchvision}) {
    bool all = !file.entries().empty();
    for (const auto& e : file.entries()) all = all && map_name(f, e.name).rule;
    if (all) return f;
  }
  return std::nullopt;
}

// Heads of the standard ViT widths (Ti, S, M, B, L, H, g, G, e); other widths:
// d / 64.
int64_t default_heads(int64_t d) {
  static const std::map<int64_t, int64_t> kHeads = {{192, 3},   {384, 6},   {512, 8},
                                                    {768, 12},  {1024, 16}, {1280, 16},
                                                    {1408, 16}, {1664, 16}, {1792, 16}};
  auto it = kHeads.find(d);
  if (it != kHeads.end()) return it->second;
  return d % 64 == 0 ? d / 64 : 0;
}

struct Slot {
  std::vector<const io::SafetensorsEntry*> parts;
};

// The file being imported: its tensors by the vitk tensor each fills
// (map_tensors), and what the errors name.
struct Source {
  const std::string& path;
  const io::SafetensorsFile& file;
  const ImportOptions& options;
  std::map<std::string, Slot> slots;

  // The tensor (the first part) that fills vitk's `vitk`, needed to tell the
  // architecture.
  const io::SafetensorsEntry& entry(const std::string& vitk) const {
    auto it = slots.find(vitk);
    if (it == slots.end() || !it->second.parts[0])
      throw Error(path + ": no tensor " + expected_sources(options.format, vitk) + " (vitk's " +
                  in_quotes(vitk) + "), needed to tell the architecture");
    return *it->second.parts[0];
  }
  // vitk::Error naming e's shape and the `expected` one, unless ok.
  void need_shape(const io::SafetensorsEntry& e, bool ok, const std::string& expected) const {
    if (!ok)
      throw Error(path + ": tensor " + in_quotes(e.name) + " has shape " + shape_str(e.shape) +
                  ", expected " + expected);
  }
};

// A patch grid, in patches.
struct Grid {
  int64_t height = 0, width = 0;
};

// src.slots: every tensor of the file maps to one vitk tensor (or one part of
// it); the tensors known to be unused are skipped with a note.
void map_tensors(Source& src, std::vector<std::string>& notes) {
  const std::string& path = src.path;
  const ImportOptions& options = src.options;
  const std::string format_name = import_format_name(options.format);
  bool hf_prefixed = false, hf_plain = false;
  for (const io::SafetensorsEntry& e : src.file.entries()) {
    const Mapped m = map_name(options.format, e.name);
    if (!m.rule) {
      std::string hint = unsupported_hint(e.name);
      if (hint.empty()) {
        auto guess = guess_format(src.file);
        hint = guess ? std::string(": the file looks like --format ") + import_format_name(*guess)
                     : ": it has no counterpart in vitk's ViT";
      }
      throw Error(path + ": tensor " + in_quotes(e.name) + " is not a " + format_name +
                  " ViT tensor" + hint);
    }
    if (options.format == ImportFormat::hf && e.name.compare(0, 11, "classifier.") != 0)
      (e.name.compare(0, 4, "vit.") == 0 ? hf_prefixed : hf_plain) = true;
    if (m.vitk.empty()) {
      notes.push_back("skipped " + e.name + " (not used for classification)");
      continue;
    }
    Slot& slot = src.slots[m.vitk];
    if (slot.parts.empty()) slot.parts.resize(static_cast<size_t>(m.rule->parts), nullptr);
    if (slot.parts[static_cast<size_t>(m.rule->part)])
      throw Error(path + ": tensors " +
                  in_quotes(slot.parts[static_cast<size_t>(m.rule->part)]->name) + " and " +
                  in_quotes(e.name) + " both map to vitk's " + in_quotes(m.vitk));
    slot.parts[static_cast<size_t>(m.rule->part)] = &e;
  }
  if (hf_prefixed && hf_plain)
    throw Error(path + ": mixes names with and without the 'vit.' prefix");
}

// c.num_classes from the classifier head, or a zero head of --num-classes for a
// backbone.
void read_head(const Source& src, VitConfig& c, std::vector<std::string>& notes) {
  const std::string& path = src.path;
  const ImportOptions& options = src.options;
  const int64_t d = c.d_model;
  if (src.slots.count("head.weight") > 0) {
    const auto& head = src.entry("head.weight");
    src.need_shape(head, head.shape.size() == 2 && head.shape[1] == d && head.shape[0] > 0,
                   "[classes, " + std::to_string(d) + "]");
    if (options.num_classes > 0 && options.num_classes != head.shape[0])
      throw UsageError(path + " has a head of " + std::to_string(head.shape[0]) +
                       " classes; --num-classes is only for a file without one");
    c.num_classes = head.shape[0];
  } else {
    if (options.num_classes <= 0)
      throw Error(path + ": no classifier head (" +
                  expected_sources(options.format, "head.weight") +
                  "): a backbone; --num-classes N adds a zero head to fine-tune");
    c.num_classes = options.num_classes;
    notes.push_back("no classifier in the file: added a zero head of " +
                    std::to_string(c.num_classes) + " classes");
  }
}

// The architecture, from the shapes of the file's tensors (and --heads, which
// no shape shows).
VitConfig read_architecture(const Source& src, std::vector<std::string>& notes) {
  const std::string& path = src.path;
  const ImportOptions& options = src.options;
  const auto& cls = src.entry("cls_token");
  src.need_shape(
      cls, cls.shape.size() == 3 && cls.shape[0] == 1 && cls.shape[1] == 1 && cls.shape[2] > 0,
      "[1, 1, d]");
  const int64_t d = cls.shape[2];
  const auto& patch = src.entry("patch_embed.proj.weight");
  src.need_shape(patch,
                 patch.shape.size() == 4 && patch.shape[0] == d &&
                     patch.shape[2] == patch.shape[3] && patch.shape[2] > 0,
                 "[" + std::to_string(d) + ", channels, P, P]");
  const auto& pos = src.entry("pos_embed");
  src.need_shape(
      pos, pos.shape.size() == 3 && pos.shape[0] == 1 && pos.shape[1] >= 2 && pos.shape[2] == d,
      "[1, 1 + patches, " + std::to_string(d) + "]");
  const auto& fc1 = src.entry("blocks.0.mlp.fc1.weight");
  src.need_shape(fc1, fc1.shape.size() == 2 && fc1.shape[1] == d && fc1.shape[0] > 0,
                 "[d_ff, " + std::to_string(d) + "]");

  VitConfig c;
  c.d_model = d;
  c.patch_size = patch.shape[2];
  c.channels = patch.shape[1];
  c.d_ff = fc1.shape[0];
  int max_block = -1;
  for (const auto& [name, slot] : src.slots)
    if (name.compare(0, 7, "blocks.") == 0)
      max_block = std::max(max_block, std::stoi(name.substr(7, name.find('.', 7) - 7)));
  c.layers = max_block + 1;
  const bool has_norm = src.slots.count("norm.weight") || src.slots.count("norm.bias");
  const bool has_fc_norm = src.slots.count("fc_norm.weight") || src.slots.count("fc_norm.bias");
  if (has_norm && has_fc_norm)
    throw Error(path + ": has both norm and fc_norm; vitk's ViT has one final norm");
  c.pool = has_fc_norm ? "avg" : "token";
  read_head(src, c, notes);

  c.heads = options.heads > 0 ? options.heads : default_heads(d);
  if (c.heads <= 0)
    throw UsageError(path + ": cannot tell the number of heads of a ViT of width " +
                     std::to_string(d) +
                     " (not a standard width nor a multiple of 64): give --heads");
  if (options.heads <= 0)
    notes.push_back("heads " + std::to_string(c.heads) + " (the standard for width " +
                    std::to_string(d) + "; the file does not say: --heads to change)");
  return c;
}

// The grid the position embeddings were trained at: the asked image size's when
// it has as many patches as there are positions, else the square grid they
// fill.
Grid source_grid(const Source& src, const VitConfig& c) {
  const std::string& path = src.path;
  const ImportOptions& options = src.options;
  const auto& pos = src.entry("pos_embed");
  const int64_t positions = pos.shape[1] - 1;
  const int64_t asked_gh = options.image_height / c.patch_size;
  const int64_t asked_gw = options.image_width / c.patch_size;
  if (options.image_height > 0 && options.image_width > 0 &&
      (options.image_height % c.patch_size || options.image_width % c.patch_size))
    throw UsageError("image size " + std::to_string(options.image_height) + "x" +
                     std::to_string(options.image_width) + ": the patch size " +
                     std::to_string(c.patch_size) + " of " + path + " does not divide it");
  if (options.image_height > 0 && asked_gh * asked_gw == positions) return {asked_gh, asked_gw};
  auto square_side = [](int64_t n) {
    const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
    return side * side == n ? side : 0;
  };
  const int64_t side = square_side(positions);
  // timm's no_embed_class models keep no position for the class token.
  if (!side && square_side(positions + 1))
    throw Error(path + ": " + in_quotes(pos.name) + " holds " + std::to_string(positions + 1) +
                " positions, a square grid without a class-token slot (timm's "
                "no_embed_class): "
                "not supported");
  if (!side)
    throw Error(path + ": " + in_quotes(pos.name) + " holds " + std::to_string(positions) +
                " positions, not a square grid: give the size it was trained "
                "at (--image-size HxW)");
  return {side, side};
}

// What the weights do not say, from the options (ε, the eval transform, the
// positions' resampling); then c checked: its memory, then validate().
void settle_config(const Source& src, VitConfig& c) {
  const std::string& path = src.path;
  const ImportOptions& options = src.options;
  c.norm_eps = options.norm_eps;
  c.preprocess = options.preprocess;
  // Recorded so that a later change of size (vitk eval/classify --image-size,
  // vitk finetune) resamples the positions as the source library would.
  c.pos_embed_align_corners = options.align_corners;
  // A grey-scale model with the format's colour statistics: one value when all
  // three agree.
  auto to_one = [&](std::vector<float>& v) {
    if (c.channels == 1 && v.size() == 3 && v[0] == v[1] && v[1] == v[2]) v.resize(1);
  };
  to_one(c.preprocess.mean);
  to_one(c.preprocess.std);
  // The memory first (saturating arithmetic, safe before validate): an asked
  // size beyond it is the option's fault, and said with the amount.
  const std::string shortfall = memory_shortfall(memory_bytes(c, 0));
  if (!shortfall.empty() && options.image_height > 0)
    throw UsageError("--image-size " + std::to_string(c.image_height) + "x" +
                     std::to_string(c.image_width) + ": the model of " + path + " at that size " +
                     shortfall);
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw Error(path + ": the model read from it is not one vitk can build: " + e.what());
  }
  if (!shortfall.empty()) throw Error(path + ": the model it holds " + shortfall);
}

// Parameter p from the parts of its slot, each read, checked and (pos_embed,
// when `resample`) resampled from the source grid to c's.
void fill_parameter(const Source& src, Parameter& p, const Slot& slot, const VitConfig& c,
                    Grid grid, bool resample) {
  const std::string& path = src.path;
  const auto& parts = slot.parts;
  for (size_t k = 0; k < parts.size(); ++k)
    if (!parts[k])
      throw Error(path + ": " + in_quotes(p.name) + " needs " +
                  expected_sources(src.options.format, p.name) + ", but one is missing");
  const int64_t rows = p.shape[0] / static_cast<int64_t>(parts.size());
  float* dst = p.value.f32();
  for (size_t k = 0; k < parts.size(); ++k) {
    Tensor t = src.file.read_f32(parts[k]->name);
    const int64_t bad = first_non_finite(t.f32(), t.numel());
    if (bad >= 0)
      throw Error(path + ": tensor " + in_quotes(parts[k]->name) + " holds a non-finite value (" +
                  std::to_string(t.f32()[bad]) + " at flat index " + std::to_string(bad) + ")");
    if (p.name == "pos_embed" && resample) {
      t = resample_pos_embed(t, grid.height, grid.width, c.grid_height(), c.grid_width(),
                             src.options.align_corners);
    }
    Shape expected = p.shape;
    expected[0] = rows;
    if (t.shape() != expected)
      throw Error(
          path + ": tensor " + in_quotes(parts[k]->name) + " has shape " + shape_str(t.shape()) +
          ", expected " + shape_str(expected) + " for vitk's " + in_quotes(p.name) +
          (parts.size() > 1
               ? " (part " + std::to_string(k + 1) + " of " + std::to_string(parts.size()) + ")"
               : ""));
    std::memcpy(dst + static_cast<size_t>(k) * static_cast<size_t>(t.numel()), t.f32(), t.nbytes());
  }
}

// Every parameter of the model from the file (a missing head stays zero), and
// every tensor of the file used.
void fill_parameters(const Source& src, ParamStore& params, const VitConfig& c, Grid grid,
                     bool resample) {
  const std::string& path = src.path;
  const bool has_head = src.slots.count("head.weight") > 0;
  std::set<std::string> used;
  for (Parameter& p : params.params()) {
    auto it = src.slots.find(p.name);
    if (it == src.slots.end()) {
      if (!has_head && p.name.compare(0, 5, "head.") == 0) continue;  // stays zero
      throw Error(path + ": missing tensor " + expected_sources(src.options.format, p.name) +
                  " (vitk's " + in_quotes(p.name) + " " + shape_str(p.shape) + ")");
    }
    used.insert(p.name);
    fill_parameter(src, p, it->second, c, grid, resample);
  }
  for (const auto& [name, slot] : src.slots)
    if (!used.count(name))
      throw Error(path + ": tensor " + in_quotes(slot.parts[0] ? slot.parts[0]->name : name) +
                  " maps to vitk's " + in_quotes(name) + ", which this " +
                  std::to_string(c.layers) + "-block " + c.pool + "-pool model does not have");
  params.mark_changed();
}

// The options' class names, one per class, or "class_0", "class_1", ...
std::vector<std::string> class_names(const Source& src, const VitConfig& c) {
  const ImportOptions& options = src.options;
  if (!options.class_names.empty()) {
    if (static_cast<int64_t>(options.class_names.size()) != c.num_classes)
      throw UsageError(std::to_string(options.class_names.size()) + " class names for the " +
                       std::to_string(c.num_classes) + " classes of " + src.path);
    return options.class_names;
  }
  std::vector<std::string> names;
  for (int64_t k = 0; k < c.num_classes; ++k) names.push_back("class_" + std::to_string(k));
  return names;
}

}  // namespace

ImportFormat parse_import_format(const std::string& name) {
  if (name == "timm") return ImportFormat::timm;
  if (name == "hf") return ImportFormat::hf;
  if (name == "torchvision") return ImportFormat::torchvision;
  throw UsageError("unknown import format '" + name + "': expected timm, hf or torchvision");
}

const char* import_format_name(ImportFormat format) {
  switch (format) {
    case ImportFormat::timm:
      return "timm";
    case ImportFormat::hf:
      return "hf";
    case ImportFormat::torchvision:
      return "torchvision";
  }
  return "?";
}

ImportOptions options_for(ImportFormat format) {
  ImportOptions o;
  o.format = format;
  switch (format) {
    case ImportFormat::timm:
      o.norm_eps = 1e-6f;
      o.preprocess.resize = "shorter";
      o.preprocess.crop_fraction = 0.9f;
      o.preprocess.interpolation = "bicubic";
      o.preprocess.mean = {0.5f, 0.5f, 0.5f};
      o.preprocess.std = {0.5f, 0.5f, 0.5f};
      o.align_corners = false;
      break;
    case ImportFormat::hf:
      o.norm_eps = 1e-12f;
      o.preprocess.resize = "squash";
      o.preprocess.crop_fraction = 1.f;
      o.preprocess.interpolation = "bilinear";
      o.preprocess.mean = {0.5f, 0.5f, 0.5f};
      o.preprocess.std = {0.5f, 0.5f, 0.5f};
      o.align_corners = false;
      break;
    case ImportFormat::torchvision:
      o.norm_eps = 1e-6f;
      o.preprocess.resize = "shorter";
      o.preprocess.crop_fraction = 0.875f;
      o.preprocess.interpolation = "bilinear";
      o.preprocess.mean = {0.485f, 0.456f, 0.406f};
      o.preprocess.std = {0.229f, 0.224f, 0.225f};
      o.align_corners = true;
      break;
  }
  return o;
}

ImportedVit import_vit(const std::string& path, const ImportOptions& options) {
  const io::SafetensorsFile file(path);
  Source src{path, file, options, {}};
  ImportedVit out;
  map_tensors(src, out.notes);
  VitConfig c = read_architecture(src, out.notes);

  // ---- image size: the source's grid, and the size asked for ----
  const Grid grid = source_grid(src, c);
  out.source_height = grid.height * c.patch_size;
  out.source_width = grid.width * c.patch_size;
  c.image_height = options.image_height > 0 ? options.image_height : out.source_height;
  c.image_width = options.image_width > 0 ? options.image_width : out.source_width;
  const bool resample = c.grid_height() != grid.height || c.grid_width() != grid.width;
  if (resample)
    out.notes.push_back("position embeddings resampled from a " + std::to_string(grid.height) +
                        "x" + std::to_string(grid.width) + " to a " +
                        std::to_string(c.grid_height()) + "x" + std::to_string(c.grid_width()) +
                        " grid (bicubic, align_corners " +
                        (options.align_corners ? "true" : "false") + ")");
  settle_config(src, c);

  // ---- build the model and fill every parameter ----
  out.config = c;
  out.params = std::make_unique<ParamStore>();
  out.model = std::make_unique<VisionTransformer>(*out.params, c);
  out.params->finalize();
  fill_parameters(src, *out.params, c, grid, resample);
  out.class_names = class_names(src, c);
  return out;
}

void apply_hf_config(const std::string& path, ImportOptions& options) {
  io::require_regular_file(path, "a Hugging Face config");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open Hugging Face config " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  const io::Json config = io::parse_json(text.str(), path);
  io::as_object(config, path);
  auto key = [&](const char* name) { return path + ": " + name; };
  if (const io::Json* v = io::member(config, "hidden_act")) {
    const std::string& act = io::as_string(*v, key("hidden_act"));
    if (act != "gelu")
      throw Error(key("hidden_act") + " is '" + act + "'; vitk's ViT uses the exact GELU ('gelu')");
  }
  if (const io::Json* v = io::member(config, "qkv_bias"); v && !io::as_bool(*v, key("qkv_bias")))
    throw Error(key("qkv_bias") + " is false; vitk's ViT has query, key and value biases");
  if (const io::Json* v = io::member(config, "num_attention_heads")) {
    options.heads = static_cast<int64_t>(io::as_uint(*v, key("num_attention_heads")));
    if (options.heads < 1) throw Error(key("num_attention_heads") + " must be at least 1");
  }
  if (const io::Json* v = io::member(config, "layer_norm_eps")) {
    options.norm_eps = static_cast<float>(io::as_double(*v, key("layer_norm_eps")));
    if (!(options.norm_eps > 0)) throw Error(key("layer_norm_eps") + " must be positive");
  }
  if (const io::Json* v = io::member(config, "image_size")) {
    const auto size = static_cast<int64_t>(io::as_uint(*v, key("image_size")));
    if (size < 1) throw Error(key("image_size") + " must be positive");
    options.image_height = options.image_width = size;
  }
  if (const io::Json* v = io::member(config, "id2label")) {
    const io::Json& labels = io::as_object(*v, key("id2label"));
    std::vector<std::string> names(labels.size());
    for (const auto& [id, label] : labels.items()) {
      const std::string where = key("id2label") + " '" + id + "'";
      size_t index = names.size();
      if (!id.empty() && id.size() < 10 && id.find_first_not_of("0123456789") == std::string::npos)
        index = std::stoul(id);
      if (index >= names.size())
        throw Error(where + ": ids must be 0.." + std::to_string(names.size() - 1));
      names[index] = io::as_string(label, where);
      if (names[index].empty()) throw Error(where + ": empty class name");
    }
    options.class_names = std::move(names);
  }
}

void save_imported(const ImportedVit& imported, const std::string& path) {
  io::CheckpointMeta meta;
  meta.config = to_config_map(imported.config);
  meta.class_names = imported.class_names;
  io::save_checkpoint(path, *imported.params, meta);
}

std::vector<std::string> read_labels(const std::string& path) {
  io::require_regular_file(path, "a labels file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open labels file " + path + ": " + std::strerror(errno));
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    names.push_back(line);
  }
  if (in.bad()) throw Error("cannot read labels file " + path);
  while (!names.empty() && names.back().empty()) names.pop_back();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].empty()) throw Error(path + ":" + std::to_string(i + 1) + ": empty class name");
  if (names.empty()) throw Error(path + ": no class names");
  return names;
}

}  // namespace vitk::vit
