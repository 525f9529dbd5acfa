// Runs the vitk executable as a user would and checks exit codes and messages (DESIGN.md,
// "Command line": 0 success, 1 run-time failure, 2 usage error; errors name what is at fault).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int status = -1;  // exit code, or -1 when killed by a signal
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    // ctest runs tests in parallel, so each gets its own directory.
    std::string tmpl = (fs::temp_directory_path() / "vitk_cli_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

  // Runs vitk with args inside the temporary directory (so config paths are relative, as users
  // write them), stdin from /dev/null, stdout and stderr captured separately.
  Result run(const std::vector<std::string>& args) {
    fs::path out_path = dir_ / "stdout.txt";
    fs::path err_path = dir_ / "stderr.txt";
    pid_t pid = fork();
    if (pid == 0) {
      int in = open("/dev/null", O_RDONLY);
      int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in < 0 || out < 0 || err < 0 || chdir(dir_.c_str()) != 0) _exit(126);
      dup2(in, 0), dup2(out, 1), dup2(err, 2);
      std::vector<char*> argv{const_cast<char*>(VITK_BINARY)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(VITK_BINARY, argv.data());
      _exit(127);
    }
    Result r;
    int status = 0;
    EXPECT_GT(pid, 0);
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    return r;
  }

  fs::path dir_;
};

using vitk::test::contains;

// A usage or run-time error is exactly one line, prefixed so that it stands out in a log.
void expect_one_error_line(const Result& r) {
  EXPECT_EQ(r.err.rfind("vitk: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

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
  Result r = run({"env", "--threads", "3", "--name", "abc"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "threads: 3\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "cpu isa: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "bf16: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "  name = abc\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "  seed = 0 (default)\n")) << r.out;
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

  std::string bytes = slurp(dir_ / "good.h5");
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
