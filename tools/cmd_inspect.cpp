// `vitk inspect CKPT`: what a checkpoint holds, without building a model.
#include <iostream>

#include "common/io/checkpoint.h"
#include "tools/cli.h"

namespace vitk::tools {
namespace {

int run_inspect(const po::variables_map& vm) {
  const std::string path = vm["checkpoint"].as<std::string>();
  const io::CheckpointMeta meta = io::read_checkpoint_meta(path);
  const auto tensors = io::list_checkpoint(path);
  int64_t total = 0;
  for (const auto& [name, shape] : tensors) total += shape_numel(shape);
  std::cout << path << ": " << tensors.size() << " tensors, " << total << " parameters, step "
            << meta.step << ", epoch " << meta.epoch << "\n";
  if (!meta.config.empty()) {
    std::cout << "config:\n";
    for (const auto& [key, value] : meta.config) std::cout << "  " << key << " = " << value << "\n";
  }
  if (!meta.class_names.empty()) {
    std::cout << "classes (" << meta.class_names.size() << "):";
    for (const auto& name : meta.class_names) std::cout << " " << name;
    std::cout << "\n";
  }
  if (vm["tensors"].as<bool>()) {
    for (const auto& [name, shape] : tensors)
      std::cout << "  " << name << " " << shape_str(shape) << "\n";
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
