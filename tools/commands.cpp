// The `vitk` command as the library runs it: every subcommand registered, the words dispatched.
// The executable (tools/main.cpp) and the Python module's vitk.main() both come here.
#include <exception>
#include <iostream>

#include "common/dist/world.h"
#include "tools/cli.h"
#include "vitk/vitk.h"

namespace vitk {
namespace {

// Every subcommand source file contributes one registration function; `vitk --help` lists the
// subcommands in this order. Add yours here (and declare it in tools/cli.h).
// clang-format off
constexpr void (*kRegistrations[])(tools::Registry&) = {
    tools::register_env_commands,
    tools::register_info_commands,
    tools::register_train_commands,
    tools::register_finetune_commands,
    tools::register_classify_commands,
    tools::register_bench_commands,
    tools::register_inspect_commands,
    tools::register_quantize_commands,
    tools::register_import_commands,
    tools::register_export_commands,
    tools::register_make_scenes_commands,
    tools::register_bleu_commands,
    tools::register_mt_train_commands,
    tools::register_translate_commands,
    tools::register_caption_commands,
    tools::register_text_train_commands,
    tools::register_text_commands,
    tools::register_plot_commands,
};
// clang-format on

// Joins the MPI world when an MPI launcher started this process (`mpirun -np N vitk ...`; a
// world of one otherwise, and MPI is never called), then dispatches argv.
int run(int argc, char** argv) {
  try {
    dist::init(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "vitk: error: " << e.what() << std::endl;
    return tools::kExitFailure;
  }
  tools::Registry registry;
  try {
    for (auto register_commands : kRegistrations) register_commands(registry);
  } catch (const std::exception& e) {
    // A duplicate or malformed registration is a bug in vitk itself, not in how it was called.
    std::cerr << "vitk: internal error: " << e.what() << std::endl;
    return tools::kExitFailure;
  }
  return tools::run_cli(registry, argc, argv);
}

}  // namespace

int run_command(const std::vector<std::string>& args) {
  std::vector<std::string> words = {"vitk"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(words.size());
  char** p = argv.data();
  const int code = run(argc, p);
  std::cout.flush();
  std::cerr.flush();
  return code;
}

int command_line_main(int argc, char** argv) {
  return dist::leave(run(argc, argv));
}

}  // namespace vitk
