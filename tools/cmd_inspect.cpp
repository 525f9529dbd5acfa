// `vitk inspect CKPT`: what a checkpoint holds, without building a model.
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/io/checkpoint.h"
#include "tools/cli.h"
#include "tools/model_registry.h"

namespace vitk::tools {
namespace {

// "model: vit, d_model 192, ...; 1,887,850 parameters, 0.118 G multiply-adds per image", from the
// kind its configuration names (nothing for a configuration no kind reads).
void describe_model(const std::map<std::string, std::string>& config) {
  const auto type = config.find("type");
  const nn::ModelKind* kind = type == config.end() ? nullptr : model_registry().find(type->second);
  if (!kind) return;
  try {
    const nn::ModelSize size = kind->size(config);
    std::printf("model: %s; %.3f M parameters, %.3f G multiply-adds per %s\n", size.summary.c_str(),
                size.total_params * 1e-6, size.macs_per_sequence * 1e-9, size.unit.c_str());
  } catch (const std::exception&) {
    // A configuration its kind refuses is shown as stored, below.
  }
}

int run_inspect(const po::variables_map& vm) {
  const std::string path = vm["checkpoint"].as<std::string>();
  const io::CheckpointMeta meta = io::read_checkpoint_meta(path);
  const auto all = io::list_checkpoint(path);
  // In a quantised checkpoint, NAME_scale holds the per-row scales of the int8 matrix NAME.
  std::set<std::string> names, int8;
  for (const auto& entry : all) names.insert(entry.first);
  if (!meta.quantization.empty())
    for (const auto& name : names)
      if (names.count(name + "_scale")) int8.insert(name);
  std::vector<std::pair<std::string, Shape>> tensors;
  int64_t total = 0, quantized = 0;
  for (const auto& [name, shape] : all) {
    const size_t n = name.size();
    if (n > 6 && name.compare(n - 6, 6, "_scale") == 0 && int8.count(name.substr(0, n - 6)))
      continue;
    tensors.emplace_back(name, shape);
    total += shape_numel(shape);
    if (int8.count(name)) quantized += shape_numel(shape);
  }
  std::cout << path << ": " << tensors.size() << " tensors, " << total << " parameters, step "
            << meta.step << ", epoch " << meta.epoch << "\n";
  if (!meta.quantization.empty())
    std::cout << "quantization: " << meta.quantization << " (vitk quantize): " << int8.size()
              << " matrices, " << quantized << " parameters, one f32 scale per output row; the "
              << "rest f32; runs at --precision int8, not trainable\n";
  describe_model(meta.config);
  if (!meta.config.empty()) {
    std::cout << "config:\n";
    for (const auto& [key, value] : meta.config) std::cout << "  " << key << " = " << value << "\n";
  }
  if (!meta.recipe.empty()) {
    std::cout << "trained with (its augmentation is what `vitk finetune` and --resume use when not "
                 "given):\n";
    for (const auto& [key, value] : meta.recipe) std::cout << "  --" << key << " " << value << "\n";
  }
  if (!meta.class_names.empty()) {
    std::cout << "classes (" << meta.class_names.size() << "):";
    for (const auto& name : meta.class_names) std::cout << " " << name;
    std::cout << "\n";
  }
  if (vm["tensors"].as<bool>()) {
    for (const auto& [name, shape] : tensors)
      std::cout << "  " << name << " " << shape_str(shape) << (int8.count(name) ? " int8" : "")
                << "\n";
  }
  return kExitOk;
}

}  // namespace

void register_inspect_commands(Registry& registry) {
  Subcommand c;
  c.name = "inspect";
  c.summary = "show a checkpoint's configuration, classes and tensors";
  c.example = "vitk inspect runs/fmnist/best.h5 --tensors";
  c.usage = "CHECKPOINT [options]";
  c.add_options = [](po::options_description& o) {
    o.add_options()("checkpoint", po::value<std::string>()->required()->value_name("FILE"),
                    "the HDF5 checkpoint")("tensors", switch_value(),
                                           "also list every tensor with its shape");
  };
  c.add_positional = [](po::positional_options_description& p) { p.add("checkpoint", 1); };
  c.run = run_inspect;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
