// --precision through the vitk executable: the refusal on a CPU without AVX512_BF16 (simulated
// with VITK_ISA_NO_BF16=1) for every command that takes the option, bad values, and bf16 runs of
// classify, mt-train and translate against f32.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/ops/ops.h"
#include "mt_corpus.h"
#include "test_util.h"
#include "vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::TempDir;
using vitk::testing::run_vitk;
using vitk::testing::slurp_file;
using vitk::testing::VitkResult;

using vitk::test::contains;

using vitk::test::lines_of;

// Sets an environment variable for the commands run while it lives (they inherit it).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(n, value, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

// Every command that takes --precision, with options that would be enough to start it: the check
// comes before any file is opened, so the files need not exist.
const std::vector<std::vector<std::string>> kCommands = {
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

TEST(PrecisionCli, Bf16IsRefusedWithExitCode2OnACpuWithoutIt) {
  TempDir dir;
  const ScopedEnv no_bf16("VITK_ISA_NO_BF16", "1");
  for (const auto& args : kCommands) {
    const VitkResult r = run_vitk(dir.path(), with(args, {"--precision", "bf16"}));
    const std::string what = args[0] + " " + args[1];
    EXPECT_EQ(r.status, 2) << what << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "--precision bf16 needs a CPU with AVX512_BF16")) << what << r.err;
    EXPECT_TRUE(contains(r.err, "oneDNN sees " + vitk::ops::cpu_isa())) << what << r.err;
    EXPECT_TRUE(contains(r.err, "VITK_ISA_NO_BF16")) << what << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << r.err;
    EXPECT_FALSE(fs::exists(dir.path() / "run")) << what << ": wrote its output first";
  }
  // eval's second precision is checked the same way.
  const VitkResult r = run_vitk(dir.path(), {"eval", "--model", "missing.h5", "--data", "missing",
                                             "--compare-precision", "bf16"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--compare-precision bf16 needs a CPU with AVX512_BF16")) << r.err;
  // f32 is not refused (the command then fails on its missing files: exit 1).
  const VitkResult f32 = run_vitk(
      dir.path(), {"eval", "--model", "missing.h5", "--data", "missing", "--precision", "f32"});
  EXPECT_EQ(f32.status, 1) << f32.err;
}

TEST(PrecisionCli, ABadValueIsAUsageErrorNamingTheOption) {
  TempDir dir;
  for (const auto& args : kCommands) {
    const VitkResult r = run_vitk(dir.path(), with(args, {"--precision", "fp16"}));
    EXPECT_EQ(r.status, 2) << args[0] << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "--precision must be f32 or bf16, not 'fp16'")) << r.err;
  }
  const VitkResult r = run_vitk(
      dir.path(), {"eval", "--model", "m.h5", "--data", "d", "--compare-precision", "half"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "must be f32 or bf16, not 'half'")) << r.err;
}

// "path": first label of each file in classify's JSON output (the labels array's first string).
std::vector<std::pair<std::string, std::string>> top1_of(const std::string& json) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while ((pos = json.find("\"labels\"", pos)) != std::string::npos) {
    const size_t key_end = json.rfind("\": {", pos);
    const size_t key_start = json.rfind('"', key_end - 1);
    const size_t first = json.find('"', json.find('[', pos)) + 1;
    out.emplace_back(json.substr(key_start + 1, key_end - key_start - 1),
                     json.substr(first, json.find('"', first) - first));
    pos = first;
  }
  return out;
}

TEST(PrecisionCli, ClassifyInBf16GivesF32sLabelsWithTheBundledModel) {
  SKIP_WITHOUT_BF16();
  const fs::path root = VITK_SOURCE_DIR;
  std::error_code ec;
  if (!fs::exists(root / "vit/models/fmnist-vit.h5", ec) ||
      !fs::is_directory(root / "datasets/samples", ec))
    GTEST_SKIP() << "no bundled model or samples";
  TempDir dir;
  const auto run = [&](const char* precision) {
    return run_vitk(dir.path(),
                    {"classify", "--dir", (root / "datasets/samples").string(), "--json",
                     "--threads", "1", "--precision", precision},
                    precision);
  };
  const VitkResult f32 = run("f32"), bf16 = run("bf16");
  ASSERT_EQ(f32.status, 0) << f32.err;
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  const auto a = top1_of(f32.out), b = top1_of(bf16.out);
  ASSERT_GE(a.size(), 5u) << f32.out;
  EXPECT_EQ(a, b);
  EXPECT_NE(f32.out, bf16.out) << "the probabilities should differ in their last digits";
}

TEST(PrecisionCli, MtTrainLearnsInBf16AndTranslateAgreesWithF32) {
  SKIP_WITHOUT_BF16();
  TempDir dir;
  using vitk::testing::sentences;
  vitk::testing::write_tsv(dir.path() / "train.tsv", sentences(600, 1));
  vitk::testing::write_tsv(dir.path() / "valid.tsv", sentences(60, 2));
  {
    std::ofstream in(dir.path() / "in.txt");
    for (const auto& s : sentences(60, 3)) in << s << "\n";
  }
  const VitkResult trained = run_vitk(
      dir.path(),
      with({"mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "run",
            "--max-steps", "600", "--valid-freq", "300", "--epochs", "1000", "--precision", "bf16"},
           vitk::testing::kTinyMtModel),
      "train");
  ASSERT_EQ(trained.status, 0) << trained.out << trained.err;
  EXPECT_TRUE(contains(trained.out, "precision bf16")) << trained.out;
  const std::vector<std::string> rows = lines_of(slurp_file(dir.path() / "run/metrics.csv"));
  ASSERT_GE(rows.size(), 2u);
  const std::string last = rows.back();
  const double bleu = std::stod(last.substr(last.rfind(',') + 1));
  EXPECT_GT(bleu, 60.0) << "the copy task is nearly solved in bf16 as in f32: " << last;

  const auto translate = [&](const char* precision) {
    return run_vitk(dir.path(),
                    {"translate", "--model", "run/best.h5", "--input", "in.txt", "--threads", "1",
                     "--precision", precision},
                    std::string("translate_") + precision);
  };
  const VitkResult f32 = translate("f32"), bf16 = translate("bf16");
  ASSERT_EQ(f32.status, 0) << f32.err;
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  const auto a = lines_of(f32.out), b = lines_of(bf16.out);
  ASSERT_EQ(a.size(), 60u);
  ASSERT_EQ(b.size(), 60u);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  EXPECT_GE(same, 54) << "of 60 translations identical in bf16 and f32";
}

}  // namespace
