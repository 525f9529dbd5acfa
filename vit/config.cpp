// VitConfig <-> text, validation, and the core settings of each block.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "common/config_text.h"
#include "common/error.h"
#include "vit/vit.h"

namespace vitk::vit {
namespace {

using Reader = SettingReader;

// An int setting (a layer count): a value beyond int is out of range, not wrapped to another.
int int_setting(const Reader& r, const std::string& key, const std::string& value) {
  const int64_t v = r.integer(key, value);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    throw Error(r.where(key) + ": " + value + " is out of range");
  return static_cast<int>(v);
}

}  // namespace

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
// "48,96" or "48 96" -> {48, 96}; "" or "none" -> {}; otherwise a UsageError naming `key`.
std::vector<int64_t> parse_count_list(const std::string& text, const std::string& key,
                                      const std::string& expected, bool allow_zero = false) {
  std::string spaced = text;
  for (char& c : spaced)
    if (c == ',') c = ' ';
  std::istringstream in(spaced);
  std::vector<int64_t> out;
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  if (words.size() == 1 && words[0] == "none") return {};
  for (const std::string& word : words) {
    if (word.size() > 6 || word.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(word) < (allow_zero ? 0 : 1))
      throw UsageError(key + " '" + text + "': expected " + expected + ", or none");
    out.push_back(std::stoll(word));
  }
  return out;
}

std::string count_list_text(const std::vector<int64_t>& counts) {
  std::string s;
  for (int64_t c : counts) s += (s.empty() ? "" : ",") + std::to_string(c);
  return s.empty() ? "none" : s;
}
}  // namespace

std::vector<int64_t> parse_stem_channels(const std::string& text) {
  return parse_count_list(text, "stem_channels", "positive channel counts separated by commas");
}

std::string stem_channels_text(const std::vector<int64_t>& channels) {
  return count_list_text(channels);
}

std::vector<int64_t> parse_stem_strides(const std::string& text) {
  const std::string expected = "strides 1 or 2 separated by commas";
  std::vector<int64_t> out = parse_count_list(text, "stem_strides", expected);
  for (int64_t s : out)
    if (s != 1 && s != 2) throw UsageError("stem_strides '" + text + "': expected " + expected);
  return out;
}

std::string stem_strides_text(const VitConfig& config) {
  std::vector<int64_t> strides;
  for (size_t i = 0; i < config.stem_channels.size(); ++i)
    strides.push_back(config.stem_stage_stride(i));
  return count_list_text(strides);
}

std::vector<int64_t> parse_pos_conv_blocks(const std::string& text) {
  return parse_count_list(text, "pos_conv_blocks", "block indices (from 0) separated by commas",
                          /*allow_zero=*/true);
}

std::vector<int64_t> parse_ffn_conv_blocks(const std::string& text) {
  return parse_count_list(text, "ffn_conv_blocks", "block indices (from 0) separated by commas",
                          /*allow_zero=*/true);
}

std::string pos_conv_blocks_text(const std::vector<int64_t>& blocks) {
  return count_list_text(blocks);
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
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError("model." + what);
  };
  need(image_height > 0 && image_width > 0, "image_size must be positive");
  // Ceilings far above any real ViT (ViT-G: width 1664, 48 blocks, 21843 classes), so that a
  // damaged or hostile value is named here instead of being built; the memory a size within them
  // takes is weighed against the machine's (vit/checkpoint.h, memory_bytes).
  auto at_most = [&](int64_t value, int64_t limit, const std::string& key) {
    need(value <= limit,
         key + " must be at most " + std::to_string(limit) + ", got " + std::to_string(value));
  };
  at_most(std::max(image_height, image_width), kMaxImageSide, "image_size");
  at_most(d_model, 65536, "d_model");
  at_most(d_ff, 1 << 20, "d_ff");
  at_most(layers, 1000, "layers");
  at_most(num_classes, 1 << 24, "num_classes");
  for (int64_t c : stem_channels) at_most(c, 65536, "stem_channels");
  need(patch_size > 0, "patch_size must be positive");
  need(image_height % patch_size == 0 && image_width % patch_size == 0,
       "patch_size " + std::to_string(patch_size) + " does not divide the image size " +
           std::to_string(image_height) + "x" + std::to_string(image_width));
  need(stem_channels.size() <= 4,
       "stem_channels: at most 4 stages, got " + std::to_string(stem_channels.size()));
  for (int64_t c : stem_channels) need(c > 0, "stem_channels must be positive");
  need(stem_strides.empty() || stem_strides.size() == stem_channels.size(),
       "stem_strides: " + std::to_string(stem_strides.size()) + " strides for " +
           std::to_string(stem_channels.size()) + " stem_channels stages (give one per stage)");
  for (int64_t s : stem_strides) need(s == 1 || s == 2, "stem_strides must be 1 or 2");
  need(patch_size % stem_stride() == 0,
       "stem_channels: the stem's total stride " + std::to_string(stem_stride()) +
           " (the product of its stem_strides) does not divide patch_size " +
           std::to_string(patch_size));
  need(channels == 1 || channels == 3, "channels must be 1 or 3, got " + std::to_string(channels));
  need(num_classes >= 0, "num_classes must be at least 0 (0: no head)");
  need(num_classes > 0 || pool == "token", "num_classes 0 (no head) needs pool \"token\"");
  need(d_model > 0 && heads > 0 && d_model % heads == 0,
       "d_model " + std::to_string(d_model) + " must be a positive multiple of heads " +
           std::to_string(heads));
  need(d_ff > 0, "d_ff must be positive");
  need(layers >= 1, "layers must be at least 1");
  need(norm_eps > 0, "norm_eps must be positive");
  need(pool == "token" || pool == "avg", "pool must be 'token' or 'avg', got '" + pool + "'");
  need(dropout >= 0 && dropout < 1, "dropout must be in [0, 1)");
  need(attention_dropout >= 0 && attention_dropout < 1, "attention_dropout must be in [0, 1)");
  need(drop_path >= 0 && drop_path < 1, "drop_path must be in [0, 1)");
  need(patch_drop >= 0 && patch_drop < 1, "patch_drop must be in [0, 1)");
  auto check_blocks = [&](const char* key, const std::vector<int64_t>& blocks, const char* what) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      const int64_t b = blocks[i];
      need(b >= 0 && b < layers, std::string(key) + ": block " + std::to_string(b) +
                                     " does not exist (the blocks are 0 to " +
                                     std::to_string(layers - 1) + ")");
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
  std::map<std::string, std::string> m;
  m["type"] = "vit";
  m["image_size"] = c.image_height == c.image_width
                        ? std::to_string(c.image_height)
                        : std::to_string(c.image_height) + "x" + std::to_string(c.image_width);
  m["patch_size"] = std::to_string(c.patch_size);
  m["channels"] = std::to_string(c.channels);
  m["num_classes"] = std::to_string(c.num_classes);
  m["d_model"] = std::to_string(c.d_model);
  m["heads"] = std::to_string(c.heads);
  m["d_ff"] = std::to_string(c.d_ff);
  m["layers"] = std::to_string(c.layers);
  m["norm_eps"] = float_text(c.norm_eps);
  m["pool"] = c.pool;
  m["dropout"] = float_text(c.dropout);
  m["attention_dropout"] = float_text(c.attention_dropout);
  m["drop_path"] = float_text(c.drop_path);
  m["patch_drop"] = float_text(c.patch_drop);
  m["resize"] = c.preprocess.resize;
  m["crop_fraction"] = float_text(c.preprocess.crop_fraction);
  m["interpolation"] = c.preprocess.interpolation;
  m["mean"] = floats_text(c.preprocess.mean);
  m["std"] = floats_text(c.preprocess.std);
  m["pos_embed_align_corners"] = c.pos_embed_align_corners ? "true" : "false";
  m["stem_channels"] = stem_channels_text(c.stem_channels);  // "none" without a stem
  m["stem_strides"] = stem_strides_text(c);                  // one per stage, or "none"
  m["pos_conv_blocks"] = pos_conv_blocks_text(c.pos_conv_blocks);
  m["ffn_conv_blocks"] = pos_conv_blocks_text(c.ffn_conv_blocks);
  m["diag_mask"] = c.diag_mask ? "true" : "false";
  return m;
}

VitConfig from_config_map(const std::map<std::string, std::string>& map,
                          const std::string& source) {
  VitConfig c;
  Reader r{source};
  // A list setting ("48,96"), its parse error naming the source and the key.
  auto list = [&](const std::string& key, const std::string& value,
                  std::vector<int64_t> (*parse)(const std::string&)) {
    try {
      return parse(value);
    } catch (const UsageError& e) {
      throw Error(r.where(key) + ": " + e.what());
    }
  };
  auto type = map.find("type");
  if (type != map.end() && type->second != "vit")
    throw Error(source + ": a '" + type->second + "' model, not a vision transformer (vit)");
  for (const auto& [key, value] : map) {
    if (key == "type") continue;
    if (key == "image_size") {
      try {
        std::tie(c.image_height, c.image_width) = parse_image_size(value);
      } catch (const UsageError& e) {
        throw Error(r.where(key) + ": " + e.what());
      }
    } else if (key == "patch_size")
      c.patch_size = r.integer(key, value);
    else if (key == "channels")
      c.channels = r.integer(key, value);
    else if (key == "num_classes")
      c.num_classes = r.integer(key, value);
    else if (key == "d_model")
      c.d_model = r.integer(key, value);
    else if (key == "heads")
      c.heads = r.integer(key, value);
    else if (key == "d_ff")
      c.d_ff = r.integer(key, value);
    else if (key == "layers")
      c.layers = int_setting(r, key, value);
    else if (key == "norm_eps")
      c.norm_eps = r.real(key, value);
    else if (key == "pool")
      c.pool = value;
    else if (key == "dropout")
      c.dropout = r.real(key, value);
    else if (key == "attention_dropout")
      c.attention_dropout = r.real(key, value);
    else if (key == "drop_path")
      c.drop_path = r.real(key, value);
    else if (key == "patch_drop")
      c.patch_drop = r.real(key, value);
    else if (key == "resize")
      c.preprocess.resize = value;
    else if (key == "crop_fraction")
      c.preprocess.crop_fraction = r.real(key, value);
    else if (key == "interpolation")
      c.preprocess.interpolation = value;
    else if (key == "mean")
      c.preprocess.mean = r.reals(key, value);
    else if (key == "std")
      c.preprocess.std = r.reals(key, value);
    else if (key == "pos_embed_align_corners")
      c.pos_embed_align_corners = r.boolean(key, value);
    else if (key == "diag_mask")
      c.diag_mask = r.boolean(key, value);
    else if (key == "stem_channels")
      c.stem_channels = list(key, value, parse_stem_channels);
    else if (key == "stem_strides")
      c.stem_strides = list(key, value, parse_stem_strides);
    else if (key == "pos_conv_blocks")
      c.pos_conv_blocks = list(key, value, parse_pos_conv_blocks);
    else if (key == "ffn_conv_blocks")
      c.ffn_conv_blocks = list(key, value, parse_ffn_conv_blocks);
    else
      throw Error(source + ": unknown model setting '" + key + "'");
  }
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw Error(source + ": " + e.what());
  }
  return c;
}

}  // namespace vitk::vit
