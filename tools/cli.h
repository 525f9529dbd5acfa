#pragma once
// The `vitk` command: a registry of subcommands and the dispatcher that parses options, reads the
// --config file, applies --threads and turns exceptions into exit codes (0 success, 1 run-time
// failure, 2 usage error; README.md lists them).
//
// Adding a subcommand: write tools/cmd_NAME.cpp defining `void register_NAME_commands(Registry&)`,
// declare it below next to the others, and add it to the table in tools/main.cpp.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/program_options.hpp>

#include "common/ops/ops.h"

namespace vitk::tools {

namespace po = boost::program_options;

// Exit codes shared by every subcommand.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // run-time failure: bad file, bad data (vitk::Error)
constexpr int kExitUsage = 2;    // the tool was called wrongly (vitk::UsageError, option errors)

struct Subcommand {
  std::string name;     // what follows `vitk`, e.g. "train"
  std::string summary;  // one line for `vitk --help`
  std::string example;  // one or more full command lines for `vitk NAME --help`
  // Adds the subcommand's own options; the common ones (--help, --threads, --config) are added by
  // the dispatcher. Every option added here may also be set in the --config file. May be empty.
  std::function<void(po::options_description&)> add_options;
  // Runs the subcommand once options are parsed, the config file merged, required options checked
  // and --threads applied. Returns the exit code; may throw vitk::UsageError (exit 2) or
  // vitk::Error / std::exception (exit 1).
  std::function<int(const po::variables_map&)> run;
  // Optional: maps bare words to options declared in add_options, e.g. `vitk bench ops` with
  // `p.add("what", 1)`. Positional words are accepted on the command line only.
  std::function<void(po::positional_options_description&)> add_positional;
  // What follows `vitk NAME` in the usage line; change it when there are positional words.
  std::string usage = "[options]";
};

class Registry {
 public:
  // Throws std::logic_error on an empty name, a name starting with '-', a duplicate name or a
  // missing run function: those are programming mistakes, caught the first time vitk runs.
  void add(Subcommand cmd);
  // nullptr when there is no subcommand of that name.
  const Subcommand* find(const std::string& name) const;
  // In registration order, which is the order `vitk --help` lists them.
  const std::vector<Subcommand>& all() const { return commands_; }
  // The registered name closest to `name` by edit distance, or "" when none is close enough to be
  // a plausible typo.
  std::string closest(const std::string& name) const;

 private:
  std::vector<Subcommand> commands_;
};

// Parses argv, dispatches to a subcommand and returns the process exit code. Help goes to stdout
// (stderr when no subcommand was given); never throws: every error becomes one
// `vitk: error: ...` line on stderr.
int run_cli(const Registry& registry, int argc, const char* const* argv);

// "vitk 0.1.0 (release build, gcc 12.2.0)": what `vitk --version` prints.
std::string version_line();

// A printable form of a parsed option value (ints, floats, bools, strings and vectors of them),
// for subcommands that echo their configuration into a log.
std::string format_value(const po::variable_value& value);

// ---- Kinds of options every subcommand declares the same way ---------------------------------

// A boolean option is a switch: `--NAME` alone means true, `--NAME=false` (or
// =true, =yes, =no, =on, =off, =1, =0) gives the value, and the next word is never taken as the
// value (`--align-corners img.png` leaves img.png a positional word); a config file says
// `NAME = true` or `NAME = false`. `by_default`: the value when not given (none: then the option
// has a value only when given).
po::typed_value<bool>* switch_value(std::optional<bool> by_default = false);
// Whether `option` was declared with switch_value.
bool is_switch(const po::option_description& option);

// Command-line words parsed as the dispatcher parses every subcommand's: switches as above, no
// prefix guessing (`--thread` is not `--threads`). Values are checked by po::store.
po::parsed_options parse_command_line(const std::vector<std::string>& args,
                                      const po::options_description& options,
                                      const po::positional_options_description& positional = {});

// A number option whose value must lie in [lo, hi]: anything else, on the command line or in a
// config file, is a usage error naming the option and the range ("--batch-size must be in
// 1..65536, got 0"). Bounds are generous: they catch typos and absurd values before any work.
template <typename T>
po::typed_value<T>* value_in(T lo, T hi);
// The same check for a value parsed by hand (e.g. one side of --image-size): UsageError naming
// `option` and the range.
void check_in_range(const std::string& option, long long value, long long lo, long long hi);

// Generous limits shared by the options that use them.
constexpr int64_t kMaxBatchSize = 65536;
constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxClasses = 1'000'000;     // --num-classes, --top-k of classify
constexpr int kMaxPrefetch = 64;               // --prefetch, batches
constexpr int64_t kMaxVocabulary = 1'000'000;  // --vocab-size, --top-k of translate

// Whether `name` was given on the command line or in a config file (not left at its default).
bool option_given(const po::variables_map& vm, const std::string& name);
// Whether `name` was given on the running command's own command line, not by its --config file
// (a preset's value may be shortened by a command-line --steps; one given with it may not).
bool given_on_command_line(const po::variables_map& vm, const std::string& name);

// A path given to `option` must be a file to read, not a directory: vitk::Error
// "--train DIR: is a directory, expected a file" otherwise ("-", standard input, passes).
void check_input_file(const std::string& option, const std::string& path);

// The whole text to standard output ("-"), or to the file `path` written whole or not at all
// (io::write_file_atomic). vitk::Error when it cannot be written.
void write_output_text(const std::string& path, const std::string& text);

// vitk::UsageError "--out OUT is WHAT; name a new file" when the file `out` is one of `inputs`
// (the same file by std::filesystem::equivalent, whatever the path to it): writing it would
// replace an input. Nothing when `out` does not exist yet.
void refuse_output_over_input(const std::string& out, const std::vector<std::string>& inputs,
                              const std::string& what);

// `text` with control characters (but newlines and tabs), DEL and U+FEFF (a byte-order mark)
// written as \xNN or \uFEFF, so that a message quoting it neither hides nor cuts anything.
std::string printable(const std::string& text);

// --precision for the subcommands that run a model: the type of the matrix products, f32|bf16 for
// training, f32|bf16|int8 for inference. `training`: the help also says that bf16 training keeps
// f32 master weights and state.
void add_precision_option(po::options_description& o, bool training = false);
// The --precision given, checked before anything is loaded: vitk::UsageError (exit 2) for a bad
// value, for bf16 on a CPU without AVX512_BF16 (naming the option and the ISA oneDNN sees), or for
// int8 when `training`.
ops::Precision precision_from(const po::variables_map& vm, bool training = false);
// The same for an inference command that runs the checkpoint at `checkpoint`: one of `vitk
// quantize` runs at int8, the default then, and any other --precision is a vitk::UsageError
// naming the file.
ops::Precision precision_from(const po::variables_map& vm, const std::string& checkpoint);

// ---- Registration hooks, one per tools/cmd_*.cpp (called from main.cpp) ----------------------
// `vitk env`: version, threads, CPU ISA, bf16 support, the world (MPI) and the options it was given
// (tools/cli.cpp).
void register_env_commands(Registry& registry);
// `vitk bench ops` (tools/cmd_bench.cpp).
void register_bench_commands(Registry& registry);
// `vitk inspect CKPT` (tools/cmd_inspect.cpp).
void register_inspect_commands(Registry& registry);
// `vitk quantize` (tools/cmd_quantize.cpp).
void register_quantize_commands(Registry& registry);
// `vitk info` (tools/cmd_info.cpp).
void register_info_commands(Registry& registry);
// `vitk train`, `vitk eval` (tools/cmd_train.cpp).
void register_train_commands(Registry& registry);
// `vitk finetune` (tools/cmd_finetune.cpp).
void register_finetune_commands(Registry& registry);
// `vitk import --format timm|hf|torchvision FILE --out CKPT` (tools/cmd_import.cpp).
void register_import_commands(Registry& registry);
// `vitk classify` (tools/cmd_classify.cpp).
void register_classify_commands(Registry& registry);
// `vitk export-samples` (tools/cmd_export_samples.cpp).
void register_export_commands(Registry& registry);
// `vitk bleu --ref REF HYP` (tools/cmd_bleu.cpp).
void register_bleu_commands(Registry& registry);
// `vitk translate`, `vitk average` (tools/cmd_translate.cpp).
void register_translate_commands(Registry& registry);
// `vitk mt-train` (tools/cmd_mt_train.cpp).
void register_mt_train_commands(Registry& registry);
// `vitk caption-train`, `vitk caption`, `vitk caption-eval` (tools/cmd_caption.cpp).
void register_caption_commands(Registry& registry);
// `vitk text-train` (tools/cmd_text_train.cpp).
void register_text_train_commands(Registry& registry);
// `vitk text-classify`, `vitk text-eval` (tools/cmd_text.cpp).
void register_text_commands(Registry& registry);
// `vitk plot positions|mask|metrics` (tools/cmd_plot.cpp).
void register_plot_commands(Registry& registry);
// `vitk make-scenes` (tools/cmd_make_scenes.cpp).
void register_make_scenes_commands(Registry& registry);

// ---- Implementation of value_in ----------------------------------------------------------------

namespace detail {

// The range message, with Boost's placeholder for the option's name as the user wrote it.
std::string range_message(long long lo, long long hi, const std::string& value);

template <typename T>
class RangedValue : public po::typed_value<T> {
 public:
  RangedValue(T lo, T hi) : po::typed_value<T>(nullptr), lo_(lo), hi_(hi) {}
  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override {
    po::typed_value<T>::xparse(store, tokens);
    const T v = boost::any_cast<T>(store);
    if (v < lo_ || v > hi_)
      throw po::error_with_option_name(
          range_message(static_cast<long long>(lo_), static_cast<long long>(hi_),
                        tokens.empty() ? std::string() : tokens.back()));
  }

 private:
  T lo_, hi_;
};

}  // namespace detail

template <typename T>
po::typed_value<T>* value_in(T lo, T hi) {
  static_assert(std::is_integral_v<T>, "value_in is for counts");
  return new detail::RangedValue<T>(lo, hi);
}

}  // namespace vitk::tools
