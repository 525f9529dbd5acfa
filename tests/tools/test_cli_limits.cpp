// Hostile command lines and inputs (issue 31), run through the executable as a user would:
// `vitk eval` counts only the images it read, boolean options never swallow the next word,
// absurd counts are usage errors naming the option and its range, --threads is capped at the
// cores, and messages show what they quote (a NUL, a byte-order mark, a directory given as a file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "tools/cli.h"
#include "util/test_util.h"
#include "util/tiny_models.h"
#include "util/vitk_process.h"
#include "vit/vit.h"

namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;
using Result = vitk::testing::ProcessResult;
using vitk::test::contains;
using vitk::testing::expect_one_error_line;

// A random 8x8 grey ViT of two classes, "a" and "b" (the class folders' names).
void write_model(const std::string& path) {
  vitk::vit::VitConfig c = vitk::testing::tiny_grey_vit(8, 2, 1);
  c.preprocess.resize = "squash";
  vitk::testing::save_random_vit(path, c, {"a", "b"});
}

void write_png(const fs::path& path, int shade) {
  fs::create_directories(path.parent_path());
  cv::Mat m(8, 8, CV_8UC1);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x)
      m.at<uint8_t>(y, x) = static_cast<uint8_t>((shade + 37 * x * y) % 256);
  ASSERT_TRUE(cv::imwrite(path.string(), m));
}

class CliLimits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    temp_ = new vitk::test::TempDir("vitk_cli_limits");
    dir_ = &temp_->path();
    write_model((*dir_ / "m.h5").string());
    // clean/: 3 images of each class; noisy/: the same and one text file named .png.
    for (const char* root : {"clean", "noisy"})
      for (int i = 0; i < 6; ++i)
        write_png(*dir_ / root / (i < 3 ? "a" : "b") / (std::to_string(i) + ".png"), 40 * i);
    std::ofstream(*dir_ / "noisy" / "a" / "broken.png") << "not an image";
  }
  static void TearDownTestSuite() { delete temp_; }
  static void write(const std::string& name, const std::string& text) {
    std::ofstream(*dir_ / name, std::ios::binary) << text;
  }
  Result run(const std::vector<std::string>& args) { return vitk::testing::run_vitk(*dir_, args); }

  static vitk::test::TempDir* temp_;
  static const fs::path* dir_;
};

vitk::test::TempDir* CliLimits::temp_ = nullptr;
const fs::path* CliLimits::dir_ = nullptr;

// The report's "top-1 accuracy: ..." line.
std::string top1_line(const std::string& out) {
  const size_t at = out.find("top-1 accuracy:");
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

// ---- Defect 2: eval counts exactly the images it read ------------------------------------------

TEST_F(CliLimits, EvalCountsOnlyTheImagesItRead) {
  const Result clean = run({"eval", "--model", "m.h5", "--data", "clean", "-b", "4"});
  ASSERT_EQ(clean.status, 0) << clean.err;
  EXPECT_TRUE(contains(clean.out, " of 6 images)")) << clean.out;
  EXPECT_FALSE(contains(clean.out, "skipped")) << clean.out;

  const Result noisy = run({"eval", "--model", "m.h5", "--data", "noisy", "-b", "4"});
  ASSERT_EQ(noisy.status, 0) << noisy.err;
  EXPECT_EQ(top1_line(noisy.out), top1_line(clean.out)) << noisy.out;
  EXPECT_TRUE(contains(noisy.out, "skipped: 1 unreadable image ")) << noisy.out;
  EXPECT_TRUE(contains(noisy.err, "broken.png")) << noisy.err;
}

TEST_F(CliLimits, EvalOfACsvWithMissingFilesCountsTheRest) {
  // 10 rows, 4 of them missing; with batches of 2, rows 3-4 make a batch with no image at all.
  std::string csv = "path,label\n";
  for (int i = 0; i < 6; ++i)
    csv += "clean/" + std::string(i < 3 ? "a" : "b") + "/" + std::to_string(i) + ".png," +
           (i < 3 ? "a" : "b") + "\n";
  csv.insert(csv.find("clean/a/2.png"), "gone/1.png,a\ngone/2.png,b\n");
  csv += "gone/3.png,a\ngone/4.png,b\n";
  write("list.csv", csv);
  const Result r = run({"eval", "--model", "m.h5", "--data", "list.csv", "-b", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, " of 6 images)")) << r.out;
  EXPECT_TRUE(contains(r.out, "skipped: 4 unreadable images ")) << r.out;
  const Result clean = run({"eval", "--model", "m.h5", "--data", "clean", "-b", "2"});
  EXPECT_EQ(top1_line(r.out), top1_line(clean.out)) << r.out;

  write("none.csv", "gone/1.png,a\ngone/2.png,b\n");
  const Result none = run({"eval", "--model", "m.h5", "--data", "none.csv"});
  EXPECT_EQ(none.status, 1) << none.out;
  EXPECT_TRUE(contains(none.err, "none of its 2 images can be read")) << none.err;
}

// ---- Defect 8: a boolean option never takes the next word ---------------------------------------

TEST_F(CliLimits, ASwitchLeavesTheNextWordAlone) {
  write_png(*dir_ / "x.png", 90);
  Result r = run({"classify", "--model", "m.h5", "--align-corners", "x.png"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "x.png")) << r.out;
  r = run({"classify", "--model", "m.h5", "--json", "x.png", "--align-corners=false"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{", 0), 0u) << r.out;
  r = run({"classify", "--model", "m.h5", "--json=false", "x.png"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.rfind("{", 0), 0u) << r.out;
  // A value as the next word is not taken, and the message says how to write it.
  r = run({"classify", "--model", "m.h5", "--json", "false", "x.png"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--json=false")) << r.err;
  expect_one_error_line(r);
  r = run({"classify", "--model", "m.h5", "--json=maybe", "x.png"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--json")) << r.err;
  // A config file still says `key = true` or `key = false`.
  write("json.ini", "json = true\n");
  r = run({"classify", "--model", "m.h5", "--config", "json.ini", "x.png"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{", 0), 0u) << r.out;
  // The model's booleans too: --model.tied_embeddings=false, --model.pre_norm.
  r = run(
      {"info", "--model.pre_norm", "--model.tied_embeddings=false", "--model.vocab_size", "100"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "pre-norm")) << r.out;
}

// Every boolean option of every subcommand is a switch_value (and none takes no value at all,
// which would refuse `--NAME=false`): the rule holds for options added later too.
TEST(CliSwitches, EveryBooleanOptionIsASwitch) {
  using namespace vitk::tools;
  Registry registry;
  for (auto add : {register_env_commands, register_info_commands, register_train_commands,
                   register_finetune_commands, register_classify_commands, register_bench_commands,
                   register_inspect_commands, register_import_commands, register_export_commands,
                   register_bleu_commands, register_mt_train_commands, register_translate_commands,
                   register_plot_commands, register_make_scenes_commands, register_caption_commands,
                   register_quantize_commands})
    add(registry);
  int switches = 0;
  for (const Subcommand& c : registry.all()) {
    po::options_description d;
    if (c.add_options) c.add_options(d);
    for (const auto& o : d.options()) {
      const std::string name = c.name + " --" + o->long_name();
      EXPECT_GT(o->semantic()->max_tokens(), 0u) << name;
      const bool boolean = dynamic_cast<const po::typed_value<bool>*>(o->semantic().get());
      EXPECT_EQ(boolean, is_switch(*o)) << name;
      switches += boolean;
    }
  }
  EXPECT_GT(switches, 20);
}

// ---- Limits -------------------------------------------------------------------------------------

TEST_F(CliLimits, AbsurdCountsAreUsageErrorsNamingTheRange) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"classify", "--model", "m.h5", "--top-k", "1000000000", "x.png"},
       "--top-k must be in 1..1000000, got 1000000000"},
      {{"classify", "--model", "m.h5", "--image-size", "200000", "x.png"},
       "--image-size must be in 1..65536, got 200000"},
      {{"classify", "--model", "m.h5", "--batch-size", "0", "x.png"},
       "--batch-size must be in 1..65536, got 0"},
      {{"eval", "--model", "m.h5", "--data", "clean", "-b", "100000000"},
       "--batch-size must be in 1..65536, got 100000000"},
      {{"eval", "--model", "m.h5", "--data", "clean", "--image-size", "8x99999"},
       "--image-size must be in 1..65536, got 99999"},
      {{"train", "--data", "clean", "--epochs", "0"}, "--epochs must be in 1..1000000, got 0"},
      {{"finetune", "--from", "m.h5", "--data", "clean", "--num-classes", "-3"},
       "--num-classes must be in 1..1000000, got -3"},
      {{"import", "x.safetensors", "--format", "timm", "--out", "y.h5", "--image-size", "80000"},
       "--image-size must be in 1..65536, got 80000"},
      {{"translate", "--model", "m.h5", "--nbest", "0"}, "--nbest must be in 1..1024, got 0"},
      {{"translate", "--model", "m.h5", "--sample", "--top-k", "-1"},
       "--top-k must be in 0..1000000, got -1"},
      {{"translate", "--model", "m.h5", "--max-length-offset", "99999999"},
       "--max-length-offset must be in 0..65536, got 99999999"},
      {{"mt-train", "--train", "t.tsv", "--max-tokens", "0"},
       "--max-tokens must be in 1..16777216, got 0"},
      {{"mt-train", "--train", "t.tsv", "--valid-batch-size", "0"},
       "--valid-batch-size must be in 1..65536, got 0"},
      {{"bench", "vit-step", "--steps", "0"}, "--steps must be in 1..1000000, got 0"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.status, 2) << c.args[0] << " " << c.message << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << r.err;
    expect_one_error_line(r);
  }
  // In a config file, the line says where.
  write("batch.ini", "[eval]\n\nbatch-size = 0\n");
  const Result r = run({"eval", "--model", "m.h5", "--data", "clean", "--config", "batch.ini"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "batch.ini:3: batch-size must be in 1..65536, got 0")) << r.err;
}

TEST_F(CliLimits, ThreadsAboveTheCoresAreCappedWithOneWarning) {
  const Result r = run({"env", "--threads", "100000"});
  ASSERT_EQ(r.status, 0) << r.err;
  const size_t at = r.err.find("warning: --threads 100000 is more than the ");
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("warning", at + 1), std::string::npos) << "said twice:\n" << r.err;
  const size_t line = r.out.find("threads: ");
  ASSERT_NE(line, std::string::npos) << r.out;
  const int used = std::stoi(r.out.substr(line + 9));
  EXPECT_GE(used, 1);
  EXPECT_LE(used, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) << r.out;
}

// ---- Defect 6: messages show what they quote
// -----------------------------------------------------

TEST_F(CliLimits, AConfigFileWithAByteOrderMarkIsRead) {
  write("bom.ini", "\xEF\xBB\xBF# from a Windows editor\nseed = 7\n");
  const Result r = run({"env", "--config", "bom.ini"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "seed = 7\n")) << r.out;
  write("bom2.ini", "\xEF\xBB\xBFseed = 8\n");
  EXPECT_TRUE(contains(run({"env", "--config", "bom2.ini"}).out, "seed = 8\n"));
}

TEST_F(CliLimits, ControlCharactersInAConfigLineAreShownNotCutOff) {
  write("nul.ini", std::string("seed = 1\0x\n", 11));
  Result r = run({"env", "--config", "nul.ini"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "nul.ini:1: control character \\x00 in the line 'seed = 1\\x00x'"))
      << r.err;
  expect_one_error_line(r);
  // An invisible character in a key is shown too.
  write("odd.ini", "se\xEF\xBB\xBFtd = 1\n");
  r = run({"env", "--config", "odd.ini"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "unknown option 'se\\uFEFFtd'")) << r.err;
}

// Boost.Program_options fills its messages' placeholders (%value%, %option%) until none is left:
// a bad value holding one made the message loop forever (found by fuzz_ini). The value is shown
// with its '%' escaped, on the command line and in a config file, within a time limit.
TEST_F(CliLimits, APlaceholderInABadValueIsShownNotExpandedForever) {
  write("placeholder.ini", "reprob = 0.2%value%x\n");
  for (const auto& [args, said] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"classify", "--top-k", "x%value%y", "a.png"},
            "the argument ('x\\x25value\\x25y') for option '--top-k' is invalid"},
           {{"train", "--config", "placeholder.ini", "--data", "d", "--output", "o"},
            "placeholder.ini:1: the argument ('0.2\\x25value\\x25x') for option 'reprob' is "
            "invalid"}}) {
    vitk::testing::Command c = vitk::testing::vitk_command(*dir_, args);
    c.timeout_seconds = 20;
    const Result r = vitk::testing::run_process(c);
    EXPECT_FALSE(r.timed_out) << args[0];
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_TRUE(contains(r.err, said)) << r.err;
    expect_one_error_line(r);
  }
}

TEST_F(CliLimits, ADirectoryGivenAsAFileIsNamed) {
  write("valid.tsv", "uno\tone\n");
  Result r = run({"mt-train", "--train", "clean", "--valid", "valid.tsv", "--output", "out"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--train clean: is a directory, expected a file")) << r.err;
  r = run({"translate", "--model", "m.h5", "--input", "clean"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--input clean: is a directory, expected a file")) << r.err;
}

}  // namespace
