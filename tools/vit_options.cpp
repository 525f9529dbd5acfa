// --model.KEY options <-> VitConfig. Wiring only: the values' meaning is vit::VitConfig's.
#include "tools/vit_options.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "common/config_text.h"
#include "common/error.h"

namespace vitk::tools {
namespace {

constexpr const char* kPrefix = "model.";

// "0.5,0.5,0.5" or "0.5 0.5 0.5" -> floats; UsageError naming the option otherwise.
std::vector<float> parse_floats(const std::string& option, const std::string& text) {
  std::string spaced = text;
  for (char& c : spaced)
    if (c == ',') c = ' ';
  std::istringstream in(spaced);
  std::vector<float> out;
  for (std::string word; in >> word;) {
    char* end = nullptr;
    float v = std::strtof(word.c_str(), &end);
    if (*end || word.empty())
      throw UsageError("--" + option + ": expected comma-separated numbers, got '" + text + "'");
    out.push_back(v);
  }
  if (out.empty())
    throw UsageError("--" + option + ": expected comma-separated numbers, got '" + text + "'");
  return out;
}

bool given(const po::variables_map& vm, const std::string& key) {
  auto it = vm.find(kPrefix + key);
  return it != vm.end() && !it->second.defaulted() && !it->second.empty();
}

template <typename T>
T get(const po::variables_map& vm, const std::string& key) {
  return vm[kPrefix + key].as<T>();
}

}  // namespace

void add_vit_options(po::options_description& options, const vit::VitConfig& d,
                     bool with_defaults) {
  const std::string size = d.image_height == d.image_width ? std::to_string(d.image_height)
                                                           : std::to_string(d.image_height) + "x" +
                                                                 std::to_string(d.image_width);
  // Without defaults, an option has a value only when it was given (vitk finetune: the model
  // comes from a checkpoint, and the help must not show another model's settings).
  auto value = [with_defaults](auto x, const std::string& text) {
    auto* v = po::value<decltype(x)>();
    return with_defaults ? v->default_value(x, text) : v;
  };
  auto integer = [&](int64_t x) { return value(x, std::to_string(x)); };
  auto real = [&](float x) { return value(x, float_text(x)); };
  auto text = [&](const std::string& x) { return value(x, x); };
  auto flag = [with_defaults](bool x) {
    return switch_value(with_defaults ? std::optional<bool>(x) : std::nullopt);
  };
  options.add_options()                                          //
      ("model.type", text("vit"), "model type: vit")             //
      ("model.image_size", text(size)->value_name("N|HxW"),      //
       "input image size: one side, or height x width")          //
      ("model.patch_size", integer(d.patch_size), "patch side")  //
      ("model.stem_channels", text(vit::stem_channels_text(d.stem_channels)),
       "convolutional stem: channels of its 3x3 stages, comma-separated (none: the "
       "patch projection sees the pixels)")  //
      ("model.stem_strides", po::value<std::string>()->value_name("S1,S2,..."),
       "the stem stages' strides, 1 or 2 each (default: 2 for every stage)")  //
      ("model.pos_conv_blocks", text(vit::pos_conv_blocks_text(d.pos_conv_blocks)),
       "blocks (from 0, comma-separated) followed by a positional convolution: a depthwise 3x3 "
       "convolution of the patch grid added to the tokens, as CPVT's PEG (none: no such)")  //
      ("model.ffn_conv_blocks", text(vit::pos_conv_blocks_text(d.ffn_conv_blocks)),
       "blocks (from 0, comma-separated) whose MLP adds a depthwise 3x3 convolution of its "
       "hidden tokens' patch grid to them before GELU, as PVTv2 and CeiT (none: no such)")  //
      ("model.channels", integer(d.channels), "image channels: 1 (grey) or 3 (RGB)")        //
      ("model.num_classes", po::value<int64_t>(),
       "classes of the head (default: the number of classes in the data)")                   //
      ("model.d_model", integer(d.d_model), "width (embedding dim)")                         //
      ("model.heads", integer(d.heads), "attention heads")                                   //
      ("model.d_ff", integer(d.d_ff), "MLP hidden width")                                    //
      ("model.layers", value(d.layers, std::to_string(d.layers)), "encoder blocks (depth)")  //
      ("model.norm_eps", real(d.norm_eps), "LayerNorm epsilon")                              //
      ("model.pool", text(d.pool),
       "what the head sees: token (class token) or avg (mean of the patch tokens)")            //
      ("model.dropout", real(d.dropout), "dropout after positions, in the MLP and residuals")  //
      ("model.attention_dropout", real(d.attention_dropout), "dropout on attention weights")   //
      ("model.drop_path", real(d.drop_path),
       "stochastic depth of the last block, rising linearly from 0 (timm --drop-path)")  //
      ("model.patch_drop", real(d.patch_drop),
       "patch dropout: share of the patch tokens each training image leaves out (timm "
       "patch_drop_rate)")  //
      ("model.resize", text(d.preprocess.resize),
       "eval resize: shorter (shorter side, then centre crop) or squash")  //
      ("model.crop_fraction", real(d.preprocess.crop_fraction),
       "eval centre crop fraction (timm crop_pct)")              //
      ("model.interpolation", text(d.preprocess.interpolation),  //
       "bicubic, bilinear, nearest or area")                     //
      ("model.mean", text(floats_text(d.preprocess.mean)),       //
       "per-channel mean of [0, 1] pixels, comma-separated")     //
      ("model.std", text(floats_text(d.preprocess.std)),         //
       "per-channel standard deviation, comma-separated")        //
      ("model.diag_mask", flag(d.diag_mask),
       "no token attends to itself (LSA's diagonal masking)")  //
      ("model.pos_embed_align_corners", flag(d.pos_embed_align_corners),
       "how the positions are resampled to another size by default: false as timm, DeiT and "
       "Hugging Face, true as torchvision");
}

std::vector<std::string> given_vit_options(const po::variables_map& vm) {
  std::vector<std::string> keys;
  for (const auto& [name, value] : vm)
    if (name.rfind(kPrefix, 0) == 0 && !value.defaulted() && !value.empty())
      keys.push_back(name.substr(std::char_traits<char>::length(kPrefix)));
  return keys;
}

vit::VitConfig vit_config_from(const po::variables_map& vm, vit::VitConfig c, bool validate,
                               const std::string& type) {
  if (given(vm, "type") && get<std::string>(vm, "type") != type)
    throw UsageError("--model.type: only '" + type + "' is trained by this subcommand, got '" +
                     get<std::string>(vm, "type") + "'");
  if (given(vm, "image_size")) {
    try {
      std::tie(c.image_height, c.image_width) =
          vit::parse_image_size(get<std::string>(vm, "image_size"));
    } catch (const UsageError& e) {
      throw UsageError(std::string("--model.image_size: ") + e.what());
    }
  }
  if (given(vm, "patch_size")) c.patch_size = get<int64_t>(vm, "patch_size");
  // The list settings ("48,96"): a parse error names the option.
  auto list = [&](const char* key, std::vector<int64_t> (*parse)(const std::string&),
                  std::vector<int64_t>& into) {
    if (!given(vm, key)) return;
    try {
      into = parse(get<std::string>(vm, key));
    } catch (const UsageError& e) {
      throw UsageError(std::string("--model.") + e.what());
    }
  };
  list("stem_channels", vit::parse_stem_channels, c.stem_channels);
  list("stem_strides", vit::parse_stem_strides, c.stem_strides);
  list("pos_conv_blocks", vit::parse_pos_conv_blocks, c.pos_conv_blocks);
  list("ffn_conv_blocks", vit::parse_ffn_conv_blocks, c.ffn_conv_blocks);
  if (given(vm, "channels")) c.channels = get<int64_t>(vm, "channels");
  if (given(vm, "num_classes")) c.num_classes = get<int64_t>(vm, "num_classes");
  if (given(vm, "d_model")) c.d_model = get<int64_t>(vm, "d_model");
  if (given(vm, "heads")) c.heads = get<int64_t>(vm, "heads");
  if (given(vm, "d_ff")) c.d_ff = get<int64_t>(vm, "d_ff");
  if (given(vm, "layers")) c.layers = get<int>(vm, "layers");
  if (given(vm, "norm_eps")) c.norm_eps = get<float>(vm, "norm_eps");
  if (given(vm, "pool")) c.pool = get<std::string>(vm, "pool");
  if (given(vm, "dropout")) c.dropout = get<float>(vm, "dropout");
  if (given(vm, "attention_dropout")) c.attention_dropout = get<float>(vm, "attention_dropout");
  if (given(vm, "drop_path")) c.drop_path = get<float>(vm, "drop_path");
  if (given(vm, "patch_drop")) c.patch_drop = get<float>(vm, "patch_drop");
  if (given(vm, "resize")) c.preprocess.resize = get<std::string>(vm, "resize");
  if (given(vm, "crop_fraction")) c.preprocess.crop_fraction = get<float>(vm, "crop_fraction");
  if (given(vm, "interpolation"))
    c.preprocess.interpolation = get<std::string>(vm, "interpolation");
  if (given(vm, "mean"))
    c.preprocess.mean = parse_floats("model.mean", get<std::string>(vm, "mean"));
  if (given(vm, "std")) c.preprocess.std = parse_floats("model.std", get<std::string>(vm, "std"));
  if (given(vm, "diag_mask")) c.diag_mask = get<bool>(vm, "diag_mask");
  if (given(vm, "pos_embed_align_corners"))
    c.pos_embed_align_corners = get<bool>(vm, "pos_embed_align_corners");
  if (!validate) return c;
  try {
    c.validate();
  } catch (const UsageError& e) {
    const std::string what = e.what();
    // VitConfig::validate names "model.KEY"; the preprocessing settings name only the KEY.
    throw UsageError(what.rfind(kPrefix, 0) == 0 ? "--" + what : "model option " + what);
  }
  return c;
}

std::pair<int64_t, int64_t> image_size_option(const po::variables_map& vm,
                                              const std::string& option) {
  std::pair<int64_t, int64_t> hw;
  try {
    hw = vit::parse_image_size(vm[option].as<std::string>());
  } catch (const UsageError& e) {
    throw UsageError("--" + option + ": " + e.what());
  }
  for (int64_t side : {hw.first, hw.second})
    check_in_range("--" + option, side, 1, vit::kMaxImageSide);
  return hw;
}

void add_resolution_options(po::options_description& options, const std::string& image_size_help) {
  options.add_options()                                                                       //
      ("image-size", po::value<std::string>()->value_name("N|HxW"), image_size_help.c_str())  //
      ("align-corners", switch_value(std::nullopt),
       "resample the position embeddings with align_corners (torchvision's convention; "
       "--align-corners=false for timm's); default: the checkpoint's convention, recorded at "
       "import (true for torchvision, false for timm and hf)")  //
      ("pos-interpolation", po::value<std::string>()->value_name("MODE")->default_value("bicubic"),
       "how the position embeddings are resampled: bicubic (timm, torchvision) or bilinear (the "
       "ViT paper's code)");
}

Resolution resolution_from(const po::variables_map& vm) {
  Resolution r;
  if (vm.count("image-size")) {
    std::tie(r.height, r.width) = image_size_option(vm, "image-size");
  }
  if (vm.count("align-corners")) r.align_corners = vm["align-corners"].as<bool>();
  if (vm.count("pos-interpolation"))
    r.pos_interpolation = vit::parse_pos_interpolation(vm["pos-interpolation"].as<std::string>(),
                                                       "--pos-interpolation");
  return r;
}

}  // namespace vitk::tools
