// --model.KEY options <-> VitConfig. Wiring only: the settings are vit::vit_schema()'s.
#include "tools/vit_options.h"

#include "common/error.h"
#include "tools/settings_options.h"

namespace vitk::tools {

void add_vit_options(po::options_description& options, const vit::VitConfig& defaults,
                     bool with_defaults) {
  add_settings_options(options, vit::vit_schema().infos(defaults), "model type: vit", with_defaults,
                       {"num_classes"});
}

std::vector<std::string> given_vit_options(const po::variables_map& vm) {
  return given_setting_keys(vm);
}

vit::VitConfig vit_config_from(const po::variables_map& vm, vit::VitConfig c, bool validate) {
  return settings_from(vm, vit::vit_schema(), std::move(c), validate);
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
