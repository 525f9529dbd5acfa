// Runs the vitk executable as a user would and checks exit codes and messages (as README.md
// lists them: 0 success, 1 run-time failure, 2 usage error; errors name what is at fault).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/ops/ops.h"
#include "common/params.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;

using Result = vitk::testing::ProcessResult;

class Cli : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

  // Runs vitk with args inside the temporary directory (so config paths are relative, as users
  // write them), stdin from /dev/null, stdout and stderr captured separately.
  Result run(const std::vector<std::string>& args) { return vitk::testing::run_vitk(dir_, args); }

  // ctest runs tests in parallel, so each gets its own directory.
  vitk::test::TempDir temp_{"vitk_cli"};
  fs::path dir_ = temp_.path();
};

using vitk::test::contains;
using vitk::testing::expect_one_error_line;

TEST_F(Cli, HelpListsSubcommands) {
  for (const char* flag : {"--help", "-h"}) {
    Result r = run({flag});
    EXPECT_EQ(r.status, 0) << flag;
    EXPECT_TRUE(contains(r.out, "Usage: vitk <subcommand>")) << r.out;
    EXPECT_TRUE(contains(r.out, "  env ")) << r.out;
    EXPECT_EQ(r.err, "");
  }
}

TEST_F(Cli, VersionPrintsVersion) {
  Result r = run({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind(std::string("vitk ") + VITK_VERSION, 0), 0u) << r.out;
}

TEST_F(Cli, NoSubcommandPrintsHelpToStderr) {
  Result r = run({});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(contains(r.err, "Usage: vitk <subcommand>")) << r.err;
  EXPECT_TRUE(contains(r.err, "env")) << r.err;
}

TEST_F(Cli, UnknownSubcommandSuggestsClosestName) {
  Result r = run({"evn"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "unknown subcommand 'evn'")) << r.err;
  EXPECT_TRUE(contains(r.err, "did you mean 'env'?")) << r.err;
  expect_one_error_line(r);

  // Nothing is close: no suggestion rather than a misleading one.
  r = run({"xyzzy"});
  EXPECT_EQ(r.status, 2);
  EXPECT_FALSE(contains(r.err, "did you mean")) << r.err;
}

TEST_F(Cli, OptionBeforeSubcommandIsAUsageError) {
  Result r = run({"--threads", "2", "env"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "'--threads'")) << r.err;
  expect_one_error_line(r);
}

// VITK_MAX_ISA caps vitk's kernels and oneDNN, and `vitk env` says what runs; a value vitk does
// not know is a usage error naming the variable and the values, before anything is printed.
TEST_F(Cli, MaxIsaCapsWhatRunsAndRefusesUnknownLevels) {
  {
    const vitk::test::EnvVar cap("VITK_MAX_ISA", "avx3");
    const Result r = run({"env"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(contains(r.err, "VITK_MAX_ISA=avx3: expected baseline, avx2, avx512")) << r.err;
    EXPECT_EQ(r.out, "");
    expect_one_error_line(r);
  }
  const vitk::test::EnvVar cap("VITK_MAX_ISA", "baseline");
  const Result r = run({"env"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "cpu isa: sse41\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "kernels: baseline (")) << r.out;
  EXPECT_TRUE(contains(r.out, "VITK_MAX_ISA: baseline\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "bf16: no\n")) << r.out;
}

TEST_F(Cli, UnknownOptionIsNamed) {
  Result r = run({"env", "--bogus", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "unknown option '--bogus'")) << r.err;
  expect_one_error_line(r);

  // No prefix guessing: --thread is not silently --threads.
  r = run({"env", "--thread", "2"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "'--thread'")) << r.err;
}

TEST_F(Cli, BadValuesAreUsageErrors) {
  for (auto args : std::vector<std::vector<std::string>>{{"env", "--threads", "abc"},
                                                         {"env", "--threads", "0"},
                                                         {"env", "--threads"},
                                                         {"env", "--seed", "1.5"}}) {
    Result r = run(args);
    EXPECT_EQ(r.status, 2) << args[1] << " " << r.err;
    EXPECT_TRUE(contains(r.err, args[1])) << r.err;
    expect_one_error_line(r);
  }
}

TEST_F(Cli, StrayArgumentIsAUsageError) {
  Result r = run({"env", "extra"});
  EXPECT_EQ(r.status, 2);
  expect_one_error_line(r);
}

TEST_F(Cli, EnvReportsThreadsAndOptions) {
  Result r = run({"env", "--threads", "1", "--name", "abc"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "threads: 1\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "cpu isa: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "bf16: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "  name = abc\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "  seed = 0 (default)\n")) << r.out;
  // No MPI launcher: a world of one, and MPI never starts (no messages from it).
  EXPECT_TRUE(contains(r.out, "world: not under MPI (a world of one)\n")) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(Cli, EnvUnderMpirunPrintsOnceForTheWorld) {
  vitk::testing::Command c = vitk::testing::mpirun_vitk_command(dir_, 2, {"env", "--seed", "3"});
  c.timeout_seconds = 120;
  Result r = vitk::testing::run_process(c);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 0) << r.err;
  // Rank 0 prints for both ranks, once.
  EXPECT_TRUE(contains(r.out, "world: mpirun (Open MPI")) << r.out;
  EXPECT_TRUE(contains(r.out, "rank 0 of 2 on host ")) << r.out;
  EXPECT_TRUE(contains(r.out, "; ranks: 0 on ")) << r.out;
  EXPECT_TRUE(contains(r.out, ", 1 on ")) << r.out;
  EXPECT_TRUE(contains(r.out, " with 1 thread\n")) << r.out;
  size_t versions = 0;
  for (size_t at = r.out.find("vitk " VITK_VERSION); at != std::string::npos;
       at = r.out.find("vitk " VITK_VERSION, at + 1))
    ++versions;
  EXPECT_EQ(versions, 1u) << r.out;
}

TEST_F(Cli, UsageErrorUnderMpirunEndsTheJobWithItsCode) {
  // Every rank fails; none finalizes, so mpirun ends the job at once with the ranks' exit code.
  vitk::testing::Command c = vitk::testing::mpirun_vitk_command(dir_, 2, {"env", "--bogus"});
  c.timeout_seconds = 120;
  Result r = vitk::testing::run_process(c);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "vitk: error: ")) << r.err;
}

TEST_F(Cli, EnvHelpHasExampleAndAllOptions) {
  Result r = run({"env", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(contains(r.out, "Usage: vitk env")) << r.out;
  EXPECT_TRUE(contains(r.out, "Example:\n  vitk env ")) << r.out;
  for (const char* option : {"--seed", "--name", "--threads", "--config", "--help"})
    EXPECT_TRUE(contains(r.out, option)) << option << "\n" << r.out;
}

TEST_F(Cli, ConfigFileSetsOptions) {
  write("run.ini", "# a comment\nseed = 42\nname = from-file  # trailing comment\nthreads = 2\n");
  Result r = run({"env", "--config", "run.ini"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "  seed = 42\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "  name = from-file\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "threads: 2\n")) << r.out;
}

TEST_F(Cli, CommandLineOverridesConfigFile) {
  write("run.ini", "seed = 42\nname = from-file\n");
  // Either order: the command line wins whether it comes before or after --config.
  for (auto args :
       std::vector<std::vector<std::string>>{{"env", "--config", "run.ini", "--seed", "7"},
                                             {"env", "--seed", "7", "--config", "run.ini"}}) {
    Result r = run(args);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "  seed = 7\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "  name = from-file\n")) << r.out;
  }
}

TEST_F(Cli, ConfigTypoNamesFileLineAndKey) {
  write("typo.ini", "# training\nseed = 1\n\nlerning_rate = 3e-4\n");
  Result r = run({"env", "--config", "typo.ini"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "typo.ini:4: unknown option 'lerning_rate'")) << r.err;
  expect_one_error_line(r);

  // [model] keys are "model.KEY"; other sections are headings over plain options.
  write("section.ini", "[train]\nseed = 1\n[model]\nd_modl = 10\n");
  r = run({"env", "--config", "section.ini"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "section.ini:4: unknown option 'model.d_modl'")) << r.err;
}

TEST_F(Cli, ConfigKeysOfOtherSubcommandsAreSkipped) {
  // One preset serves several subcommands: `env` skips [model] keys that `info` takes, and
  // `info` skips `env`'s keys, but each still reads its own.
  write("shared.ini", "[train]\nseed = 7\n[model]\ntype = vit\nd_model = 192\n");
  Result r = run({"env", "--config", "shared.ini"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "seed = 7")) << r.out;
  r = run({"info", "--config", "shared.ini"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "d_model 192")) << r.out;
}

TEST_F(Cli, ConfigBadValueOrSyntaxNamesTheLine) {
  write("value.ini", "name = x\nseed = abc\n");
  Result r = run({"env", "--config", "value.ini"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "value.ini:2:")) << r.err;
  EXPECT_TRUE(contains(r.err, "seed")) << r.err;
  expect_one_error_line(r);

  write("syntax.ini", "seed = 1\nname\n");
  r = run({"env", "--config", "syntax.ini"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "syntax.ini:2:")) << r.err;

  write("twice.ini", "seed = 1\nname = a\nseed = 2\n");
  r = run({"env", "--config", "twice.ini"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "twice.ini:3:")) << r.err;
}

TEST_F(Cli, MissingConfigFileIsNamed) {
  Result r = run({"env", "--config", "no-such-file.ini"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "'no-such-file.ini'")) << r.err;
  expect_one_error_line(r);
}

}  // namespace

// `vitk inspect` reads a real checkpoint, and turns a damaged or foreign file into one error line
// naming the file, with exit code 1.
TEST_F(Cli, InspectShowsCheckpointAndNamesBadFiles) {
  {
    vitk::ParamStore params;
    params.add("blocks.0.attn.qkv.weight", {6, 2});
    params.add("head.bias", {3}, false);
    params.finalize();
    vitk::io::CheckpointMeta meta;
    meta.config["model.d_model"] = "2";
    meta.class_names = {"cat", "dog", "eel"};
    meta.step = 12;
    vitk::io::save_checkpoint((dir_ / "good.h5").string(), params, meta);
  }
  Result good = run({"inspect", "good.h5", "--tensors"});
  EXPECT_EQ(good.status, 0) << good.err;
  EXPECT_TRUE(contains(good.out, "2 tensors, 15 parameters, step 12")) << good.out;
  EXPECT_TRUE(contains(good.out, "model.d_model = 2")) << good.out;
  EXPECT_TRUE(contains(good.out, "cat dog eel")) << good.out;
  EXPECT_TRUE(contains(good.out, "blocks.0.attn.qkv.weight [6, 2]")) << good.out;

  std::string bytes = vitk::test::read_file(dir_ / "good.h5");
  write("truncated.h5", bytes.substr(0, bytes.size() / 2));
  write("text.h5", "this is not a checkpoint\n");
  for (const char* name : {"truncated.h5", "text.h5", "missing.h5"}) {
    Result r = run({"inspect", name});
    EXPECT_EQ(r.status, 1) << name << ": " << r.err;
    expect_one_error_line(r);
    EXPECT_TRUE(contains(r.err, name)) << r.err;
  }
  Result no_arg = run({"inspect"});
  EXPECT_EQ(no_arg.status, 2);
  expect_one_error_line(no_arg);
}

TEST_F(Cli, BenchRefusesUnknownBenchmarkAndPrecision) {
  Result r = run({"bench", "nothing"});
  EXPECT_EQ(r.status, 2);
  expect_one_error_line(r);
  EXPECT_TRUE(contains(r.err, "nothing")) << r.err;
  r = run({"bench", "ops", "--precision", "f16"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--precision")) << r.err;
}

// `vitk bench vit-step|mt-step --config FILE` time the model of the file's [model] section (the
// other model's keys and the [train] keys of other subcommands ignored); --model.KEY on the
// command line overrides the file. The parameter count shows which model ran.
TEST_F(Cli, BenchStepTimesTheModelOfAConfigFile) {
  write("tiny-vit.ini",
        "[model]\ntype = vit\nimage_size = 8\npatch_size = 4\nchannels = 3\nnum_classes = 5\n"
        "d_model = 16\nheads = 2\nd_ff = 32\nlayers = 2\nactivation = gelu\npre_norm = true\n"
        "[train]\nepochs = 3\n");
  const std::vector<std::string> quick = {"--steps",   "1", "--repeats",     "1",
                                          "--threads", "1", "--no-breakdown"};
  auto args = [&](std::vector<std::string> a) {
    a.insert(a.end(), quick.begin(), quick.end());
    return a;
  };
  // Patches 784 (4·4·3·16 + 16), class token 16, positions 5·16, two blocks of 2224, final
  // norm 32, head 16·5 + 5.
  Result r = run(args({"bench", "vit-step", "--config", "tiny-vit.ini", "--batch-size", "2"}));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "vit-step model: ViT, 8x8x3 images, patch 4 (5 tokens), d_model 16"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "; 5445 parameters")) << r.out;
  EXPECT_TRUE(contains(r.out, "vit-step: batch 2, f32, 1 threads: best")) << r.out;
  // 12x12: 9 patches, 80 more position parameters.
  r = run(args({"bench", "vit-step", "--config", "tiny-vit.ini", "--model.image_size", "12",
                "--batch-size", "1"}));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "12x12x3 images, patch 4 (10 tokens)")) << r.out;
  EXPECT_TRUE(contains(r.out, "; 5525 parameters")) << r.out;

  write("tiny-mt.ini",
        "[model]\ntype = transformer\nvocab_size = 50\nd_model = 16\nheads = 2\nd_ff = 32\n"
        "layers = 1\ndecoder_layers = 1\nsequence_length = 16\n");
  r = run(
      args({"bench", "mt-step", "--config", "tiny-mt.ini", "--batch-size", "2", "--length", "4"}));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "mt-step model: Transformer, d 16, 1+1 layers, 2 heads, d_ff 32, "
                       "vocabulary 50 (tied); "))
      << r.out;
  EXPECT_TRUE(contains(r.out, "mt-step: d 16, 1+1 layers")) << r.out;
  EXPECT_TRUE(contains(r.out, "batch 2x4->4")) << r.out;
}

// A bad config file is a usage error (exit 2) on one line naming the file and what is wrong,
// before anything runs.
TEST_F(Cli, BenchStepNamesABadConfigFile) {
  write("wide.ini", "[model]\ntype = vit\nd_model = wide\n");
  write("odd.ini", "[model]\ntype = vit\nd_model = 100\nheads = 3\n");
  write("vit.ini", "[model]\ntype = vit\nd_model = 16\nheads = 2\n");
  write("syntax.ini", "[model]\nd_model 16\n");
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"vit-step", "--config", "missing.ini"}, {"missing.ini"}},
      {{"vit-step", "--config", "wide.ini"}, {"wide.ini", "d_model", "wide"}},
      {{"vit-step", "--config", "odd.ini"}, {"odd.ini", "d_model 100", "heads 3"}},
      {{"mt-step", "--config", "vit.ini"}, {"vit.ini", "'vit' model"}},
      {{"mt-step", "--config", "syntax.ini"}, {"syntax.ini:2"}},
      {{"vit-step", "--model.layers", "none"}, {"--model options", "layers", "none"}},
  };
  for (const auto& [words, parts] : cases) {
    std::vector<std::string> a = {"bench"};
    a.insert(a.end(), words.begin(), words.end());
    const Result r = run(a);
    EXPECT_EQ(r.status, 2) << words[2] << ": " << r.err;
    expect_one_error_line(r);
    for (const std::string& part : parts) EXPECT_TRUE(contains(r.err, part)) << r.err;
    EXPECT_EQ(r.out, "") << words[2];
  }
}

// `vitk bench attention-memory`: one row per length, pass and kernel, each from a child process;
// the materialized kernel's arena holds the [H, T, T] weights that the blocked one never makes.
TEST_F(Cli, BenchAttentionMemoryPrintsEveryCaseAndRefusesBadLists) {
  Result r =
      run({"bench", "attention-memory", "--lengths", "64,256", "--repeats", "1", "--threads", "1"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  // T pass kernel arena-MB setup-MB peak-MB peak-setup wall-s CPU-s
  std::map<std::string, double> arena;
  int rows = 0;
  for (const std::string& line : vitk::test::lines_of(r.out)) {
    std::istringstream in(line);
    std::string t, pass, kernel;
    double a = 0, setup = 0, peak = 0, added = 0, wall = 0, cpu = 0;
    if (!(in >> t >> pass >> kernel >> a >> setup >> peak >> added >> wall >> cpu)) continue;
    ++rows;
    EXPECT_GT(peak, 0) << line;
    EXPECT_GE(peak, setup) << line;
    EXPECT_GT(wall, 0) << line;
    arena[t + " " + pass + " " + kernel] = a;
  }
  EXPECT_EQ(rows, 8) << r.out;  // 2 lengths x 2 passes x 2 kernels
  // At 256 tokens the weights are 12 x 256 x 256 floats, 3 MB.
  for (const char* pass : {"forward", "forward+backward"}) {
    const std::string key = std::string("256 ") + pass;
    EXPECT_GT(arena[key + " materialized"], arena[key + " blocked"] + 2.5) << r.out;
  }
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"bench", "attention-memory", "--lengths", "12x"},
        std::vector<std::string>{"bench", "attention-memory", "--kernels", "quick"},
        std::vector<std::string>{"bench", "attention", "--clock", "sundial"},
        std::vector<std::string>{"bench", "attention-memory", "--precision", "bf16"}}) {
    Result b = run(bad);
    EXPECT_EQ(b.status, 2) << bad[3] << ": " << b.err;
    expect_one_error_line(b);
    EXPECT_TRUE(contains(b.err, bad[3]) || contains(b.err, bad[2])) << b.err;
  }
}

// ---- --precision ----------------------------------------------------------------------------
//
// Every command that takes --precision, with options that would be enough to start it: the check
// comes before any file is opened, so the files need not exist.
namespace {

const std::vector<std::vector<std::string>> kPrecisionCommands = {
    {"classify", "--benchmark", "--random-weights"},
    {"classify", "photo.png", "--model", "missing.h5"},
    {"eval", "--model", "missing.h5", "--data", "missing"},
    {"train", "--data", "missing", "--output", "run"},
    {"finetune", "--from", "missing.h5", "--data", "missing", "--output", "run"},
    {"mt-train", "--train", "missing.tsv", "--valid", "missing.tsv", "--output", "run"},
    {"translate", "--model", "missing.h5"},
    {"bench", "ops"},
    {"bench", "layers"},
    {"bench", "vit-step"},
    {"bench", "mt-step"},
};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// `vitk ARGS` in dir as on a CPU without AVX512_BF16 and without VNNI (VITK_ISA_NO_BF16=1 and
// VITK_ISA_NO_VNNI=1 make vitk believe so).
Result run_without_bf16(const fs::path& dir, const std::vector<std::string>& args) {
  vitk::testing::Command c = vitk::testing::vitk_command(dir, args);
  c.env = {{"VITK_ISA_NO_BF16", "1"}, {"VITK_ISA_NO_VNNI", "1"}};
  return vitk::testing::run_process(c);
}

}  // namespace

class PrecisionOption : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(PrecisionOption, Bf16IsRefusedWithExitCode2OnACpuWithoutIt) {
  const vitk::test::TempDir dir;
  const std::vector<std::string>& args = GetParam();
  const Result r = run_without_bf16(dir.path(), with(args, {"--precision", "bf16"}));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--precision bf16 needs a CPU with AVX512_BF16")) << r.err;
  EXPECT_TRUE(contains(r.err, "oneDNN sees " + vitk::ops::cpu_isa())) << r.err;
  EXPECT_TRUE(contains(r.err, "VITK_ISA_NO_BF16")) << r.err;
  expect_one_error_line(r);
  EXPECT_FALSE(fs::exists(dir.path() / "run")) << "wrote its output first";
}

// int8 is for inference: the training commands and benchmarks refuse it before writing anything;
// classify, eval, translate and bench ops take it on every CPU (here they then fail on their
// missing files, exit 1), VNNI or not.
TEST_P(PrecisionOption, Int8IsRefusedByTrainingAndTakenByInference) {
  const vitk::test::TempDir dir;
  const std::vector<std::string>& args = GetParam();
  const std::string& command = args[0];
  const bool training = command == "train" || command == "finetune" || command == "mt-train" ||
                        (command == "bench" && args[1] != "ops");
  if (command == "classify" && args[1] == "--benchmark") GTEST_SKIP() << "would run the benchmark";
  if (command == "bench" && args[1] == "ops") GTEST_SKIP() << "would run the benchmark";
  const Result r = run_without_bf16(dir.path(), with(args, {"--precision", "int8"}));
  if (training) {
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_TRUE(contains(r.err, "--precision int8 is for inference")) << r.err;
    expect_one_error_line(r);
  } else {
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "missing")) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "run")) << "wrote its output first";
}

TEST_P(PrecisionOption, ABadValueIsAUsageErrorNamingTheOption) {
  const vitk::test::TempDir dir;
  const Result r = vitk::testing::run_vitk(dir.path(), with(GetParam(), {"--precision", "fp16"}));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--precision must be f32, bf16 or int8, not 'fp16'")) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Commands, PrecisionOption, ::testing::ValuesIn(kPrecisionCommands),
                         [](const ::testing::TestParamInfo<std::vector<std::string>>& p) {
                           // "classify_benchmark", "classify_photo_png", "bench_vit_step", ...
                           std::string name = p.param[0] + "_" + p.param[1];
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           while (name.find("__") != std::string::npos)
                             name.erase(name.find("__"), 1);
                           return name;
                         });

// eval's second precision is checked the same way; f32 is never refused (the command then fails
// on its missing files: exit 1).
TEST(PrecisionOption, EvalComparePrecisionIsCheckedAndF32IsNotRefused) {
  const vitk::test::TempDir dir;
  const Result r = run_without_bf16(dir.path(), {"eval", "--model", "missing.h5", "--data",
                                                 "missing", "--compare-precision", "bf16"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--compare-precision bf16 needs a CPU with AVX512_BF16")) << r.err;
  const Result f32 = run_without_bf16(
      dir.path(), {"eval", "--model", "missing.h5", "--data", "missing", "--precision", "f32"});
  EXPECT_EQ(f32.status, 1) << f32.err;
  const Result bad = vitk::testing::run_vitk(
      dir.path(), {"eval", "--model", "m.h5", "--data", "d", "--compare-precision", "half"});
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "must be f32, bf16 or int8, not 'half'")) << bad.err;
}
