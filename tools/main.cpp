// vitk: one executable, one subcommand per job (`vitk --help` lists them, README.md too).
#include <exception>
#include <iostream>

#include "common/dist/world.h"
#include "tools/cli.h"

namespace {

// Every subcommand source file contributes one registration function; `vitk --help` lists the
// subcommands in this order. Add yours here (and declare it in tools/cli.h).
// clang-format off
constexpr void (*kRegistrations[])(vitk::tools::Registry&) = {
    vitk::tools::register_env_commands,
    vitk::tools::register_info_commands,
    vitk::tools::register_train_commands,
    vitk::tools::register_finetune_commands,
    vitk::tools::register_classify_commands,
    vitk::tools::register_bench_commands,
    vitk::tools::register_inspect_commands,
    vitk::tools::register_quantize_commands,
    vitk::tools::register_import_commands,
    vitk::tools::register_export_commands,
    vitk::tools::register_make_scenes_commands,
    vitk::tools::register_bleu_commands,
    vitk::tools::register_mt_train_commands,
    vitk::tools::register_translate_commands,
    vitk::tools::register_caption_commands,
    vitk::tools::register_plot_commands,
};
// clang-format on

}  // namespace

int main(int argc, char** argv) {
  // Under an MPI launcher (`mpirun -np N vitk ...`) this process joins the world; otherwise it is a
  // world of one and MPI is never called.
  try {
    vitk::dist::init(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "vitk: error: " << e.what() << std::endl;
    return vitk::dist::leave(vitk::tools::kExitFailure);
  }
  vitk::tools::Registry registry;
  try {
    for (auto register_commands : kRegistrations) register_commands(registry);
  } catch (const std::exception& e) {
    // A duplicate or malformed registration is a bug in vitk itself, not in how it was called.
    std::cerr << "vitk: internal error: " << e.what() << std::endl;
    return vitk::dist::leave(vitk::tools::kExitFailure);
  }
  return vitk::dist::leave(vitk::tools::run_cli(registry, argc, argv));
}
