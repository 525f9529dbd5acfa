#pragma once
// The model options of the ViT subcommands: --model.KEY for every key of vit::to_config_map
// ("[model]" KEY = VALUE in a config file), turned into a VitConfig. Shared by train, classify
// and finetune, so that every ViT subcommand spells the model the same way.
#include <string>
#include <vector>

#include "tools/cli.h"
#include "vit/vit.h"

namespace vitk::tools {

// Declares --model.type, --model.image_size, --model.patch_size, ... with `defaults`' values as
// the shown defaults. --model.num_classes has no default: it comes from the data.
void add_vit_options(po::options_description& options, const vit::VitConfig& defaults = {});

// `base` with every model option that was given (on the command line or in the config file, not
// a default) put in. Validates the result; a bad value throws vitk::UsageError naming the option.
vit::VitConfig vit_config_from(const po::variables_map& vm, vit::VitConfig base);

// The model option keys that were given, without the "model." prefix ("patch_size", ...).
std::vector<std::string> given_vit_options(const po::variables_map& vm);

}  // namespace vitk::tools
