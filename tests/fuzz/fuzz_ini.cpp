// Fuzzes the INI config reader of every subcommand (tools/cli.cpp: read_config, scan_config,
// store_config, then Boost.Program_options and the options' own checks), through run_cli as
// `vitk SUBCOMMAND --config FILE`. The registry holds every real subcommand's options, with a run
// that does nothing, so that an input sets real options (ranges, switches, [model] keys) and
// nothing trains. Input: [subcommand: 1 byte] then the file.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tools/cli.h"

namespace {

using vitk::tools::Registry;

const Registry& registry() {
  static const Registry r = [] {
    Registry real;
    for (auto add : {vitk::tools::register_env_commands, vitk::tools::register_info_commands,
                     vitk::tools::register_train_commands, vitk::tools::register_finetune_commands,
                     vitk::tools::register_classify_commands, vitk::tools::register_bench_commands,
                     vitk::tools::register_inspect_commands, vitk::tools::register_import_commands,
                     vitk::tools::register_export_commands, vitk::tools::register_bleu_commands,
                     vitk::tools::register_mt_train_commands,
                     vitk::tools::register_translate_commands, vitk::tools::register_plot_commands})
      add(real);
    Registry inert;
    for (vitk::tools::Subcommand c : real.all()) {
      c.run = [](const vitk::tools::po::variables_map&) { return vitk::tools::kExitOk; };
      inert.add(std::move(c));
    }
    return inert;
  }();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vitk::fuzz::ScratchFile file("ini", ".ini");
  // run_cli reports every error on stderr and help on stdout: millions of lines otherwise.
  static std::ostringstream sink;
  static const bool quiet = [] {
    std::cerr.rdbuf(sink.rdbuf());
    std::cout.rdbuf(sink.rdbuf());
    return true;
  }();
  (void)quiet;
  if (size < 1) return 0;
  const auto& commands = registry().all();
  const std::string name = commands[data[0] % commands.size()].name;
  const std::string& path = file.write(data + 1, size - 1);
  const std::vector<const char*> argv = {"vitk", name.c_str(), "--config", path.c_str()};
  const int code = vitk::tools::run_cli(registry(), static_cast<int>(argv.size()), argv.data());
  if (code != vitk::tools::kExitOk && code != vitk::tools::kExitFailure &&
      code != vitk::tools::kExitUsage)
    __builtin_trap();
  sink.str({});
  return 0;
}
