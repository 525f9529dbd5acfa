// VitConfig: its settings table as a schema, the text form, validation and the core settings of
// each block.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/config_text.h"
#include "common/error.h"
#include "vit/vit.h"

namespace vitk::vit {

std::pair<int64_t, int64_t> parse_image_size(const std::string& text) {
  auto bad = [&] {
    return UsageError("image size '" + text + "': expected a positive integer or HEIGHTxWIDTH");
  };
  size_t x = text.find('x');
  auto one = [&](const std::string& s) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      throw bad();
    int64_t v = std::stoll(s);
    if (v <= 0) throw bad();
    return v;
  };
  if (x == std::string::npos) {
    int64_t v = one(text);
    return {v, v};
  }
  return {one(text.substr(0, x)), one(text.substr(x + 1))};
}

namespace {

std::string image_size_text(const VitConfig& c) {
  return c.image_height == c.image_width
             ? std::to_string(c.image_height)
             : std::to_string(c.image_height) + "x" + std::to_string(c.image_width);
}

void read_image_size(VitConfig& c, const SettingReader& r, const std::string& text) {
  try {
    std::tie(c.image_height, c.image_width) = parse_image_size(text);
  } catch (const UsageError& e) {
    throw Error(r.where("image_size") + ": " + e.what());
  }
}

void check_image_size(const VitConfig& c) {
  if (c.image_height <= 0 || c.image_width <= 0)
    throw UsageError("model.image_size must be positive");
  const int64_t side = std::max(c.image_height, c.image_width);
  // Far above any real ViT; within it, the memory a size would take is weighed against the
  // machine's (vit/checkpoint.h, memory_bytes).
  if (side > kMaxImageSide)
    throw UsageError("model.image_size must be at most " + std::to_string(kMaxImageSide) +
                     ", got " + std::to_string(side));
}

void read_stem_strides(VitConfig& c, const SettingReader& r, const std::string& text) {
  settings::parse(r, "stem_strides", text, c.stem_strides);
}

const settings::Range kStemStrides = settings::between(1, 2);

settings::Schema<VitConfig> make_vit_schema() {
  using Self = VitConfig;
  settings::Schema<VitConfig> schema("vit", "vision transformer");
  schema.add_custom("image_size", "input image size: one side, or height x width", "N|HxW",
                    image_size_text, read_image_size, check_image_size);
  schema VITK_VIT_SETTINGS(VITK_SETTING_FIELD);
  schema.add_custom("stem_strides",
                    "the stem stages' strides, 1 or 2 each (none: 2 for every stage)", "S1,S2,...",
                    stem_strides_text, read_stem_strides, [](const VitConfig& c) {
                      settings::check_range("stem_strides", kStemStrides, c.stem_strides);
                    });
  schema.include(datasets::preprocess_schema(), &VitConfig::preprocess);
  return schema;
}

// A list setting's text read and checked as the schema reads it from a config file:
// vitk::UsageError naming the key otherwise.
std::vector<int64_t> list_setting(const std::string& key, const std::string& text,
                                  std::vector<int64_t> VitConfig::*member) {
  const auto* field = vit_schema().find(key);
  VitConfig c;
  try {
    field->read(c, SettingReader{key}, text);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  field->check(c);
  return c.*member;
}

}  // namespace

const settings::Schema<VitConfig>& vit_schema() {
  static const auto* schema = new settings::Schema<VitConfig>(make_vit_schema());
  return *schema;
}

std::vector<int64_t> parse_stem_channels(const std::string& text) {
  return list_setting("stem_channels", text, &VitConfig::stem_channels);
}

std::string stem_channels_text(const std::vector<int64_t>& channels) {
  return settings::text(channels);
}

std::vector<int64_t> parse_stem_strides(const std::string& text) {
  return list_setting("stem_strides", text, &VitConfig::stem_strides);
}

std::string stem_strides_text(const VitConfig& config) {
  std::vector<int64_t> strides;
  for (size_t i = 0; i < config.stem_channels.size(); ++i)
    strides.push_back(config.stem_stage_stride(i));
  return settings::text(strides);
}

std::vector<int64_t> parse_pos_conv_blocks(const std::string& text) {
  return list_setting("pos_conv_blocks", text, &VitConfig::pos_conv_blocks);
}

std::vector<int64_t> parse_ffn_conv_blocks(const std::string& text) {
  return list_setting("ffn_conv_blocks", text, &VitConfig::ffn_conv_blocks);
}

std::string pos_conv_blocks_text(const std::vector<int64_t>& blocks) {
  return settings::text(blocks);
}

nn::LayerConfig VitConfig::layer_config(int block) const {
  nn::LayerConfig c;
  c.d_model = d_model;
  c.heads = heads;
  c.d_ff = d_ff;
  c.activation = ops::Activation::gelu;
  c.pre_norm = true;
  c.dropout = dropout;
  c.attention_dropout = attention_dropout;
  c.norm_eps = norm_eps;
  // timm: torch.linspace(0, drop_path_rate, depth)[block]
  c.drop_path = layers > 1 ? drop_path * static_cast<float>(block) / static_cast<float>(layers - 1)
                           : drop_path;
  return c;
}

int64_t VitConfig::kept_patches() const {
  // timm's PatchDropout: num_keep = max(1, int(L * (1. - prob))), prob being the decimal given.
  // patch_drop is that decimal rounded to float (off by at most 3e-8): N·1e-7 more absorbs it,
  // so that 0.3 of 10 patches keeps 7 as in timm, not 6.
  const double n = static_cast<double>(patches());
  const double keep = n * (1.0 - static_cast<double>(patch_drop)) + n * 1e-7;
  return std::max<int64_t>(1, static_cast<int64_t>(keep));
}

void VitConfig::validate() const {
  // Each setting's own range (the table's: ceilings far above any real ViT, such as ViT-G's width
  // 1664, 48 blocks and 21843 classes, so that a damaged or hostile value is named here instead of
  // being built), then what the settings must satisfy together.
  vit_schema().check(*this);
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError("model." + what);
  };
  need(image_height % patch_size == 0 && image_width % patch_size == 0,
       "patch_size " + std::to_string(patch_size) + " does not divide the image size " +
           std::to_string(image_height) + "x" + std::to_string(image_width));
  need(stem_channels.size() <= 4,
       "stem_channels: at most 4 stages, got " + std::to_string(stem_channels.size()));
  need(stem_strides.empty() || stem_strides.size() == stem_channels.size(),
       "stem_strides: " + std::to_string(stem_strides.size()) + " strides for " +
           std::to_string(stem_channels.size()) + " stem_channels stages (give one per stage)");
  need(patch_size % stem_stride() == 0,
       "stem_channels: the stem's total stride " + std::to_string(stem_stride()) +
           " (the product of its stem_strides) does not divide patch_size " +
           std::to_string(patch_size));
  need(channels == 1 || channels == 3, "channels must be 1 or 3, got " + std::to_string(channels));
  need(num_classes > 0 || pool == "token", "num_classes 0 (no head) needs pool \"token\"");
  need(d_model % heads == 0, "d_model " + std::to_string(d_model) +
                                 " must be a positive multiple of heads " + std::to_string(heads));
  auto check_blocks = [&](const char* key, const std::vector<int64_t>& blocks, const char* what) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      const int64_t b = blocks[i];
      need(b < layers, std::string(key) + ": block " + std::to_string(b) +
                           " does not exist (the blocks are 0 to " + std::to_string(layers - 1) +
                           ")");
      need(i == 0 || b > blocks[i - 1], std::string(key) + " '" + pos_conv_blocks_text(blocks) +
                                            "': give each block once, in increasing order");
    }
    need(blocks.empty() || patch_drop == 0,
         std::string(key) + ": " + what +
             " needs the whole patch grid, so patch_drop must be 0 (it is " +
             float_text(patch_drop) + ")");
  };
  check_blocks("pos_conv_blocks", pos_conv_blocks, "a positional convolution");
  check_blocks("ffn_conv_blocks", ffn_conv_blocks, "an MLP convolution");
  preprocess.validate(static_cast<int>(channels));
}

std::map<std::string, std::string> to_config_map(const VitConfig& c) {
  return vit_schema().to_map(c);
}

VitConfig from_config_map(const std::map<std::string, std::string>& map,
                          const std::string& source) {
  const VitConfig c = vit_schema().read(map, source);
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw Error(source + ": " + e.what());
  }
  return c;
}

}  // namespace vitk::vit
