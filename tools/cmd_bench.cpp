// `vitk bench ...`: benchmarks. Wiring only; the measurements live in common/bench, and
// `vitk bench compare` runs tests/bench/compare.py.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/bench/attention_bench.h"
#include "common/bench/layer_bench.h"
#include "common/bench/ops_bench.h"
#include "common/error.h"
#include "common/ops/ops.h"
#include "common/seq2seq/config.h"
#include "common/seq2seq/step_bench.h"
#include "tools/cli.h"
#include "vit/step_bench.h"
#include "vit/vit.h"

namespace vitk::tools {
namespace {

// What every benchmark but compare reads: --precision, --repeats and --min-time (bench_settings).
struct BenchSettings {
  ops::Precision precision = ops::Precision::f32;
  bench::OpsBenchOptions options;  // repeats, min_seconds, bf16 and int8 set
};

// `vitk bench compare [-- OPTIONS]`: replaces this process by /usr/bin/python3 running
// tests/bench/compare.py of the source tree vitk was built from, with this binary as --vitk, the
// given --threads, then the words after `--`.
int run_compare(const po::variables_map& vm, const BenchSettings& /*unread*/) {
#ifdef VITK_SOURCE_DIR
  const std::string script = std::string(VITK_SOURCE_DIR) + "/tests/bench/compare.py";
#else
  const std::string script = "tests/bench/compare.py";
#endif
  std::error_code ec;
  if (!std::filesystem::is_regular_file(script, ec))
    throw Error(script +
                ": not found (vitk bench compare runs the script of the source tree "
                "this vitk was built from)");
  std::vector<std::string> args{"/usr/bin/python3", script};
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) args.insert(args.end(), {"--vitk", exe.string()});
  if (vm.count("threads"))
    args.insert(args.end(), {"--threads", std::to_string(vm["threads"].as<int>())});
  if (vm.count("compare-args"))
    for (const std::string& a : vm["compare-args"].as<std::vector<std::string>>())
      args.push_back(a);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  execv(argv[0], argv.data());
  throw Error(std::string("cannot run /usr/bin/python3: ") + std::strerror(errno));
}

nn::AttentionKernel parse_kernel(const std::string& name) {
  if (name == "blocked") return nn::AttentionKernel::blocked;
  if (name == "materialized") return nn::AttentionKernel::materialized;
  if (name == "automatic") return nn::AttentionKernel::automatic;
  throw UsageError("unknown attention kernel '" + name +
                   "' (expected blocked, materialized or automatic)");
}

// "1024,2048" -> {1024, 2048}
std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// `vitk bench attention-memory`: the table of peak memory, each case in a child process (or, with
// --child-length, one case in this process).
int run_attention_memory(const po::variables_map& vm, const BenchSettings& s) {
  const int repeats = s.options.repeats;
  if (vm.count("child-length")) {  // one case, in this process (a child of the table below)
    bench::AttentionMemoryCase c;
    c.length = vm["child-length"].as<int>();
    c.training = vm["child-pass"].as<std::string>() == "forward+backward";
    c.kernel = parse_kernel(vm["child-kernel"].as<std::string>());
    c.repeats = repeats;
    std::cout << bench::format_memory_result(bench::run_attention_memory_case(c)) << std::endl;
    return kExitOk;
  }
  std::vector<int64_t> lengths;
  for (const auto& item : split_commas(vm["lengths"].as<std::string>())) {
    size_t used = 0;
    long n = 0;
    try {
      n = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || n < 1)
      throw UsageError("--lengths takes positive integers separated by commas, not '" + item + "'");
    lengths.push_back(n);
  }
  std::vector<nn::AttentionKernel> kernels;
  for (const auto& item : split_commas(vm["kernels"].as<std::string>()))
    kernels.push_back(parse_kernel(item));
  if (lengths.empty() || kernels.empty()) throw UsageError("--lengths and --kernels are empty");
  std::cout
      << "vitk bench attention-memory: one ViT-B/16 encoder layer (d 768, 12 heads, d_ff "
         "3072, pre-norm), batch 1, "
      << ops::num_threads() << " threads, each case in its own process, median of " << repeats
      << " calls (wall-clock and CPU time of the process)\n"
      << "arena = activation arena high-water mark; setup = peak RSS before the first call "
         "(weights, inputs, libraries); peak = peak RSS; MB = 2^20 bytes\n"
      << "     T  pass              kernel         arena MB  setup MB   peak MB  peak-setup   "
         "wall s    CPU s\n"
      << std::flush;
  bench::run_attention_memory_table("/proc/self/exe", lengths, kernels, repeats, ops::num_threads(),
                                    &std::cout);
  return kExitOk;
}

// ---- The model of vit-step and mt-step ------------------------------------------------------
//
// Both take their model from the [model] section of --config (or --model.KEY), read as a
// checkpoint's configuration is read (vit::from_config_map, seq2seq::from_config_map), so every
// key is a string option here. One preset serves both benchmarks and `vitk info`: a key of the
// other model (a ViT config's `activation`, a translation config's `vocab_size` for vit-step) is
// ignored, as `vitk train` ignores it. Without any model key, the benchmark's own model is timed.

// Every [model] key of either model, with the benchmarks that read it.
std::map<std::string, std::string> model_keys() {
  std::map<std::string, std::string> keys;
  for (const auto& [key, value] : vit::to_config_map(vit::VitConfig{})) keys[key] = "vit-step";
  for (const auto& [key, value] : seq2seq::to_config_map(seq2seq::TransformerConfig{}))
    keys[key] = keys.count(key) ? "vit-step, mt-step" : "mt-step";
  return keys;
}

void add_model_options(po::options_description& o) {
  po::options_description model(
      "Model of vit-step and mt-step: the [model] section of --config, or --model.KEY (the keys "
      "of `vitk train --help` and `vitk mt-train --help`)");
  for (const auto& [key, who] : model_keys())
    model.add_options()(("model." + key).c_str(), po::value<std::string>()->value_name("V"),
                        who.c_str());
  o.add(model);
}

// The given model keys among `keys` (a model's to_config_map), without the "model." prefix.
std::map<std::string, std::string> given_model(const po::variables_map& vm,
                                               const std::map<std::string, std::string>& keys) {
  std::map<std::string, std::string> given;
  for (const auto& [key, value] : keys) {
    (void)value;
    const auto it = vm.find("model." + key);
    if (it != vm.end() && !it->second.empty()) given[key] = it->second.as<std::string>();
  }
  return given;
}

// What an error in the model settings names: the config file they came from, if any.
std::string model_source(const po::variables_map& vm) {
  return vm.count("config") ? "the model of " + vm["config"].as<std::string>()
                            : "the --model options";
}

// The ViT of vit-step: --config's [model] (or --model.KEY) if given, else the small default;
// then --drop-path, --patch-drop and the stem and convolution lists, where given.
vit::VitConfig vit_step_model(const po::variables_map& vm) {
  const auto given = given_model(vm, vit::to_config_map(vit::VitConfig{}));
  vit::VitConfig c = vit::StepBenchOptions::small_model();
  if (!given.empty()) {
    try {
      c = vit::from_config_map(given, model_source(vm));
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  auto set = [&](const char* option) { return !vm[option].defaulted(); };
  // A list option through its parser; a bad value is a usage error naming the option.
  auto list = [&](const char* option, std::vector<int64_t> (*parse)(const std::string&)) {
    try {
      return parse(vm[option].as<std::string>());
    } catch (const UsageError& e) {
      throw UsageError(std::string("--") + option + ": " + e.what());
    }
  };
  if (set("drop-path")) c.drop_path = vm["drop-path"].as<float>();
  if (set("patch-drop")) c.patch_drop = vm["patch-drop"].as<float>();
  if (set("stem-channels")) c.stem_channels = list("stem-channels", vit::parse_stem_channels);
  if (set("stem-strides")) c.stem_strides = list("stem-strides", vit::parse_stem_strides);
  if (set("pos-conv-blocks"))
    c.pos_conv_blocks = list("pos-conv-blocks", vit::parse_pos_conv_blocks);
  if (set("ffn-conv-blocks"))
    c.ffn_conv_blocks = list("ffn-conv-blocks", vit::parse_ffn_conv_blocks);
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw UsageError((given.empty() ? std::string("vit-step's model") : model_source(vm)) + ": " +
                     e.what());
  }
  return c;
}

// The translation model of mt-step: --config's [model] (or --model.KEY) if given, else the
// small default.
seq2seq::TransformerConfig mt_step_model(const po::variables_map& vm) {
  const auto given = given_model(vm, seq2seq::to_config_map(seq2seq::TransformerConfig{}));
  if (given.empty()) return seq2seq::StepBenchOptions::small_model();
  try {
    return seq2seq::from_config_map(given, model_source(vm));
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// `vitk bench attention`: materialized against blocked attention, per shape.
int run_attention(const po::variables_map& vm, const BenchSettings& s) {
  const bench::OpsBenchOptions& options = s.options;
  const std::string clock = vm["clock"].as<std::string>();
  if (clock != "wall" && clock != "cpu") throw UsageError("--clock must be wall or cpu");
  std::cout << "vitk bench attention: one MultiHeadAttention layer (projections included), "
            << ops::num_threads() << " threads, median of " << options.repeats
            << " alternating rounds, "
            << (clock == "cpu" ? "CPU time of the process" : "wall-clock") << " ms per call\n"
            << "shape                  pass              materialized    blocked  ratio  "
               "(materialized / blocked)\n"
            << std::flush;
  bench::run_attention_speed(bench::default_attention_shapes(), options.repeats,
                             options.min_seconds, clock == "cpu", &std::cout);
  return kExitOk;
}

// `vitk bench layers`: tab-separated seconds per call; tests/bench/core_vs_pytorch.py puts
// PyTorch beside them.
int run_layers(const po::variables_map& /*unread*/, const BenchSettings& s) {
  bench::print_layer_rows(
      std::cout, bench::run_layer_bench(s.options.repeats, s.options.min_seconds, s.precision));
  return kExitOk;
}

// The options of vit-step or mt-step (vit:: or seq2seq::StepBenchOptions) but the model:
// --repeats rounds of --steps steps, the breakdown, --batch-size and --precision.
template <typename StepOptions>
StepOptions step_options(const po::variables_map& vm, const BenchSettings& s) {
  StepOptions o;
  o.timing.rounds = s.options.repeats;
  o.timing.steps = vm["steps"].as<int>();
  o.timing.breakdown = !vm["no-breakdown"].as<bool>();
  o.batch = vm["batch-size"].as<int>();
  o.precision = s.precision;
  return o;
}

// `vitk bench vit-step`: training steps of vit_step_model.
int run_vit_step(const po::variables_map& vm, const BenchSettings& s) {
  auto vo = step_options<vit::StepBenchOptions>(vm, s);
  vo.model = vit_step_model(vm);
  vit::print_step_bench(std::cout, vo, vit::run_step_bench(vo, &std::cerr));
  return kExitOk;
}

// `vitk bench mt-step`: training steps of mt_step_model on sentences of --length tokens.
int run_mt_step(const po::variables_map& vm, const BenchSettings& s) {
  auto mo = step_options<seq2seq::StepBenchOptions>(vm, s);
  mo.model = mt_step_model(vm);
  const int length = vm["length"].as<int>();
  if (length < 1) throw UsageError("--length must be >= 1");
  if (length > mo.model.max_length)
    throw UsageError("--length " + std::to_string(length) + " is longer than the model's " +
                     "max_length " + std::to_string(mo.model.max_length));
  mo.source_length = mo.target_length = length;
  seq2seq::print_step_bench(std::cout, mo, seq2seq::run_step_bench(mo, &std::cerr));
  return kExitOk;
}

// `vitk bench ops`: the linear products, vitk's op against a bare oneDNN matmul (at int8,
// against vitk's f32 inference product).
int run_ops(const po::variables_map& vm, const BenchSettings& s) {
  const ops::Precision precision = s.precision;
  bench::OpsBenchOptions options = s.options;
  options.packed = vm["packed"].as<bool>();
  options.rows = vm["rows"].as<int64_t>();
  if (options.rows < 0) throw UsageError("--rows must be >= 0");
  if (options.int8) {
    std::cout << "vitk bench ops: " << ops::describe_precision(precision) << " against f32, "
              << ops::num_threads() << " threads, " << ops::cpu_isa() << ", median of "
              << options.repeats << " rounds\n"
              << "f32 = vitk's f32 inference product (weights packed where that is faster); "
                 "int8 = ops::linear_forward_int8 on the same f32 activations (their "
                 "quantisation, the products and the dequantisation with the bias)\n"
              << std::flush;
    const auto rows = bench::run_ops_bench(bench::default_linear_shapes(), options);
    bench::print_ops_table(std::cout, rows, /*int8=*/true);
    return kExitOk;
  }
  std::cout << "vitk bench ops: " << ops::precision_name(precision) << ", " << ops::num_threads()
            << " threads, " << ops::cpu_isa() << ", median of " << options.repeats << " rounds\n"
            << "bare = one oneDNN matmul of the same M·N·K with plain layouts and "
            << ops::precision_name(precision) << " operands, no bias, no accumulation\n"
            << "vitk = the layer's op on f32 activations and an f32 master weight"
            << (options.packed ? ", packed once (inference)"
                : options.bf16 ? ", packed into bf16 before every forward and backward-data "
                                 "call (a new weight each step, as in training)"
                               : ", read in place (training)")
            << "\n"
            << std::flush;
  auto rows = bench::run_ops_bench(bench::default_linear_shapes(), options);
  bench::print_ops_table(std::cout, rows);
  double worst = 1e9;
  for (const auto& r : rows) worst = std::min(worst, r.ratio());
  std::cout << "lowest ratio: " << worst << "\n";
  return kExitOk;
}

// ---- The benchmarks: one table -------------------------------------------------------------
//
// `vitk bench NAME`'s names, the help of its NAME and its usage line, its dispatch and the checks
// of --precision and --min-time all come from bench_kinds().

struct BenchKind {
  const char* name;
  // What it times, in parentheses after its name in the help of NAME; then the words that lead
  // to the next benchmark there.
  const char* summary;
  const char* then;
  // compare only: the usage of the words after `--`, which are its own. Such a benchmark runs
  // before any other option is read.
  const char* words;
  bool int8;               // takes --precision int8 (the others time training passes)
  const char* f32_only;    // why it refuses --precision bf16; nullptr: it takes bf16
  bool positive_min_time;  // refuses a --min-time that is not positive
  int (*run)(const po::variables_map& vm, const BenchSettings& s);
};

const std::vector<BenchKind>& bench_kinds() {
  static const std::vector<BenchKind> kinds = {
      // name, summary, then, words, int8, f32_only, positive_min_time, run
      {"ops", "linear products", ", ", nullptr, true, nullptr, true, run_ops},
      {"layers", "one encoder and one decoder layer", " or ", nullptr, false, nullptr, false,
       run_layers},
      {"vit-step", "a training step of the Fashion-MNIST ViT, with a breakdown", " or ", nullptr,
       false, nullptr, true, run_vit_step},
      {"mt-step",
       "a training step of the small translation Transformer: d 256, 3+3 layers, 4 heads, FFN "
       "1024, 8k tied vocabulary",
       ", each on the model of --config instead when given, ", nullptr, false, nullptr, true,
       run_mt_step},
      {"attention", "materialized against blocked attention", ", ", nullptr, false,
       "the blocked kernel is f32 only", false, run_attention},
      {"attention-memory", "peak memory of an encoder layer at long sequence lengths", " or ",
       nullptr, false, "the blocked kernel is f32 only", false, run_attention_memory},
      {"compare", "vitk against PyTorch, side by side: runs tests/bench/compare.py", "",
       "[-- compare.py's options]", false, nullptr, false, run_compare},
  };
  return kinds;
}

// nullptr when there is no benchmark of that name.
const BenchKind* find_kind(const std::string& name) {
  for (const BenchKind& k : bench_kinds())
    if (name == k.name) return &k;
  return nullptr;
}

// "ops, layers, ..., compare"
std::string kind_names() {
  std::string names;
  for (const BenchKind& k : bench_kinds())
    names += (names.empty() ? "" : ", ") + std::string(k.name);
  return names;
}

// The help of NAME: "what to time: ops (linear products), layers (...) or ...".
std::string what_help() {
  std::string help = "what to time: ";
  for (const BenchKind& k : bench_kinds())
    help += std::string(k.name) + " (" + k.summary + ")" + k.then;
  return help;
}

// "ops|layers|... [options] | compare [-- compare.py's options]"
std::string bench_usage() {
  std::string usage, with_words;
  for (const BenchKind& k : bench_kinds()) {
    if (k.words)
      with_words += std::string(" | ") + k.name + " " + k.words;
    else
      usage += (usage.empty() ? "" : "|") + std::string(k.name);
  }
  return usage + " [options]" + with_words;
}

// --precision, --repeats and --min-time, checked against what `kind` takes.
BenchSettings bench_settings(const po::variables_map& vm, const BenchKind& kind) {
  const std::string what = kind.name;
  BenchSettings s;
  s.precision = precision_from(vm);
  bench::OpsBenchOptions& options = s.options;
  options.repeats = vm["repeats"].as<int>();
  options.min_seconds = vm["min-time"].as<double>();
  options.bf16 = s.precision == ops::Precision::bf16;
  options.int8 = s.precision == ops::Precision::int8;
  if (options.int8 && !kind.int8)
    throw UsageError("vitk bench " + what +
                     " times training passes; --precision int8 is for inference: time it with "
                     "'vitk bench ops --precision int8' (the linear layers) or 'vitk classify "
                     "--benchmark --precision int8' (a whole model)");
  if (options.bf16 && kind.f32_only)
    throw UsageError(what + ": " + kind.f32_only + "; drop --precision");
  if (kind.positive_min_time && !(options.min_seconds > 0))
    throw UsageError("--min-time must be positive");
  return s;
}

int run_bench(const po::variables_map& vm) {
  const std::string what = vm["what"].as<std::string>();
  const BenchKind* kind = find_kind(what);
  if (kind && kind->words) return kind->run(vm, BenchSettings{});
  if (vm.count("compare-args"))
    throw UsageError("'vitk bench " + what + "' takes no words after the benchmark's name");
  if (!kind) throw UsageError("unknown benchmark '" + what + "' (available: " + kind_names() + ")");
  return kind->run(vm, bench_settings(vm, *kind));
}

}  // namespace

void register_bench_commands(Registry& registry) {
  Subcommand c;
  c.name = "bench";
  c.summary =
      "time vitk's ops, layers and training steps on this CPU; compare: vitk against PyTorch";
  c.example =
      "vitk bench ops\n"
      "vitk bench ops --threads 2 --repeats 11 --precision bf16\n"
      "vitk bench layers   # seconds per call; see tests/bench/core_vs_pytorch.py\n"
      "vitk bench vit-step --threads 2 --repeats 5 --steps 10   # the Fashion-MNIST ViT\n"
      "vitk bench vit-step --precision bf16 --repeats 3 [--stem-channels 48,96]\n"
      "vitk bench mt-step --repeats 3 --steps 5   # transformer-small, 128 x 32 tokens; see "
      "tests/bench/mt_train_vs_pytorch.py\n"
      "vitk bench vit-step --config configs/vit-b16.ini --model.image_size 384 --batch-size 4 "
      "--steps 2 --repeats 3   # a config's [model]\n"
      "vitk bench mt-step --config configs/transformer-base.ini --batch-size 48 --length 32\n"
      "vitk bench compare -- --quick   # vitk against PyTorch: runs tests/bench/compare.py\n"
      "vitk bench attention --repeats 3   # materialized vs blocked attention, per shape\n"
      "vitk bench attention-memory --lengths 1024,2048,4096   # peak memory of a ViT-B/16 layer";
  c.usage = bench_usage();
  c.add_options = [](po::options_description& o) {
    o.add_options()("what", po::value<std::string>()->required()->value_name("NAME"),
                    what_help().c_str())("repeats",
                                         value_in(1, 10000)->default_value(7)->value_name("N"),
                                         "timed rounds per measurement; the table shows medians")(
        "min-time", po::value<double>()->default_value(0.05, "0.05")->value_name("SECONDS"),
        "each round repeats the call for at least this long")(
        "steps", value_in(1, 1'000'000)->default_value(10)->value_name("N"),
        "vit-step, mt-step: training steps per timed round")(
        "batch-size",
        value_in(1, static_cast<int>(kMaxBatchSize))->default_value(128)->value_name("N"),
        "vit-step, mt-step: batch size (images or sentences)")(
        "drop-path", po::value<float>()->default_value(0.f, "0")->value_name("P"),
        "vit-step: stochastic depth of the last block")(
        "patch-drop", po::value<float>()->default_value(0.f, "0")->value_name("P"),
        "vit-step: patch dropout, the share of the patch tokens each image leaves out")(
        "stem-channels", po::value<std::string>()->default_value("none")->value_name("LIST"),
        "vit-step: a convolutional stem with these channels (configs/vit-fmnist.ini: 48,96)")(
        "stem-strides", po::value<std::string>()->default_value("none")->value_name("LIST"),
        "vit-step: the stem stages' strides, 1 or 2 each (none: 2 for every stage)")(
        "pos-conv-blocks", po::value<std::string>()->default_value("none")->value_name("LIST"),
        "vit-step: positional convolutions after these blocks (configs/vit-fmnist.ini: "
        "0,1,2,3,4)")("ffn-conv-blocks",
                      po::value<std::string>()->default_value("none")->value_name("LIST"),
                      "vit-step: MLP convolutions in these blocks (vit/vit.h: ffn_conv_blocks)")(
        "length", po::value<int>()->default_value(32)->value_name("N"),
        "mt-step: tokens of every source and target sentence")(
        "no-breakdown", switch_value(), "vit-step, mt-step: skip the profiled round")(
        "packed", switch_value(),
        "ops: weights packed once into oneDNN's blocked layout, as in inference (f32 at every "
        "shape)")("rows", po::value<int64_t>()->default_value(0)->value_name("M"),
                  "ops: rows (tokens) of every product; 0: 8x197 for ViT-B/16, 4096 for "
                  "Transformer-base")(
        "lengths", po::value<std::string>()->default_value("1024,2048,4096")->value_name("LIST"),
        "attention-memory: sequence lengths, separated by commas")(
        "kernels",
        po::value<std::string>()->default_value("blocked,materialized")->value_name("LIST"),
        "attention-memory: attention kernels to compare (blocked, materialized, automatic)")(
        "clock", po::value<std::string>()->default_value("wall")->value_name("wall|cpu"),
        "attention: time by the wall-clock or by the CPU time of the process (steadier on a "
        "loaded machine; run with OMP_WAIT_POLICY=passive)")(
        "child-length", po::value<int>()->value_name("T"),
        "attention-memory, internal: run one case in this process (with --child-pass and "
        "--child-kernel)")("child-pass",
                           po::value<std::string>()->default_value("forward")->value_name("PASS"),
                           "attention-memory, internal: forward or forward+backward")(
        "child-kernel", po::value<std::string>()->default_value("blocked")->value_name("KERNEL"),
        "attention-memory, internal: blocked or materialized")(
        "compare-args", po::value<std::vector<std::string>>()->value_name("WORDS"),
        "compare: the words after `--`, for tests/bench/compare.py (see its --help)");
    add_precision_option(o, /*training=*/true);
    add_model_options(o);
  };
  c.add_positional = [](po::positional_options_description& p) {
    p.add("what", 1).add("compare-args", -1);
  };
  c.run = run_bench;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
