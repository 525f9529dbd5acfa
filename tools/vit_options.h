#pragma once
// The model options of the ViT subcommands: --model.KEY for every key of vit::vit_schema()
// ("[model]" KEY = VALUE in a config file), turned into a VitConfig. Shared by train, classify
// and finetune, so that every ViT subcommand spells the model the same way.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/cli.h"
#include "vit/resample.h"
#include "vit/vit.h"

namespace vitk::tools {

// Declares --model.type and --model.KEY for every field of vit::vit_schema() (tools/
// settings_options.h), with `defaults`' values as the shown defaults (none when with_defaults is
// false: then an option has a value only when it was given). --model.num_classes has no default:
// it comes from the data.
void add_vit_options(po::options_description& options, const vit::VitConfig& defaults = {},
                     bool with_defaults = true);

// `base` with every model option that was given (on the command line or in the config file, not
// a default) put in. Validates the result unless told not to; a bad value throws
// vitk::UsageError naming the option, and so does a --model.type other than "vit".
vit::VitConfig vit_config_from(const po::variables_map& vm, vit::VitConfig base,
                               bool validate = true);

// The model option keys that were given, without the "model." prefix ("patch_size", ...).
std::vector<std::string> given_vit_options(const po::variables_map& vm);

// ---- Running a checkpoint at another input size (eval, classify, finetune) --------------------

// --image-size N|HxW and --align-corners[=BOOL], the two arguments of vit::load_vit beyond the
// path. `image_size_help` says what the size does for the subcommand.
void add_resolution_options(po::options_description& options, const std::string& image_size_help);

// The height and width of an N|HxW option (--image-size), each side checked against
// kMaxImageSide: vitk::UsageError naming the option.
std::pair<int64_t, int64_t> image_size_option(const po::variables_map& vm,
                                              const std::string& option);

struct Resolution {
  int64_t height = 0, width = 0;      // 0: the checkpoint's own size
  std::optional<bool> align_corners;  // unset: the checkpoint's convention
  vit::PosInterpolation pos_interpolation = vit::PosInterpolation::bicubic;
};
// vitk::UsageError naming --image-size for a malformed size.
Resolution resolution_from(const po::variables_map& vm);

}  // namespace vitk::tools
