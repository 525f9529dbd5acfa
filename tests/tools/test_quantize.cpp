// int8 checkpoints (`vitk quantize`) on the bundled model: the quantised checkpoint runs exactly as
// the f32 one does at --precision int8, and everything that would train it, or run it at another
// precision, refuses it by name. The format's round trip and its checks in-process:
// common/test_quantized_checkpoint.cpp; the translation round trip is in test_mt_cli.cpp (it
// needs a trained model).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "util/test_util.h"
#include "util/texture_data.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::TempDir;
using vitk::testing::ProcessResult;

class Quantize : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kBundled)) GTEST_SKIP() << "no bundled model";
  }
  ProcessResult run(const std::vector<std::string>& args) {
    return vitk::testing::run_vitk(dir_.path(), args);
  }
  const std::string kBundled = std::string(VITK_SOURCE_DIR) + "/vit/models/fmnist-vit.h5";
  const std::string kSamples = std::string(VITK_SOURCE_DIR) + "/datasets/samples";
  TempDir dir_{"vitk_quantize"};
};

TEST_F(Quantize, TheQuantisedModelRunsAsTheF32OneAtInt8) {
  const ProcessResult q = run({"quantize", kBundled, "--out", "q.h5"});
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_TRUE(contains(q.out, "quantised 25 matrices of the ViT")) << q.out;
  EXPECT_LT(fs::file_size(dir_.path() / "q.h5") * 3, fs::file_size(kBundled));
  const ProcessResult shown = run({"inspect", "q.h5", "--tensors"});
  ASSERT_EQ(shown.status, 0) << shown.err;
  EXPECT_TRUE(contains(shown.out, "quantization: int8 (vitk quantize): 25 matrices")) << shown.out;
  int int8_lines = 0;
  for (size_t at = 0; (at = shown.out.find("] int8\n", at)) != std::string::npos; ++at)
    ++int8_lines;
  EXPECT_EQ(int8_lines, 25) << shown.out;
  EXPECT_FALSE(contains(shown.out, "_scale")) << shown.out;

  // The same int8 products as the f32 checkpoint run at int8: the same probabilities, to the
  // digit; --precision int8 is the quantised checkpoint's default.
  const std::vector<std::string> classify{"classify", "--json", "--top-k", "10", "--dir", kSamples};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const ProcessResult f32_at_int8 =
      run(with(classify, {"--model", kBundled, "--precision", "int8"}));
  const ProcessResult quantised = run(with(classify, {"--model", "q.h5"}));
  ASSERT_EQ(f32_at_int8.status, 0) << f32_at_int8.err;
  ASSERT_EQ(quantised.status, 0) << quantised.err;
  EXPECT_EQ(quantised.out, f32_at_int8.out);
  EXPECT_TRUE(contains(quantised.out, "probabilities"));
}

TEST_F(Quantize, RefusalsNameTheFileAndTheWayOut) {
  ASSERT_EQ(run({"quantize", kBundled, "--out", "q.h5"}).status, 0);
  vitk::testing::write_textures(dir_.path() / "textures", "train", 4, 1);
  vitk::testing::write_textures(dir_.path() / "textures", "val", 2, 2);
  struct Case {
    std::vector<std::string> args;
    int status;
    const char* said;
  };
  const std::vector<Case> cases = {
      {{"classify", "--model", "q.h5", "--precision", "f32", kSamples + "/0002-trouser.png"},
       2,
       "q.h5 is quantised to int8 (vitk quantize) and runs at --precision int8 only"},
      {{"eval", "--model", "q.h5", "--data", "nowhere", "--precision", "int8",
        "--compare-precision", "f32"},
       2,
       "has no f32 weights to compare with"},
      {{"finetune", "--from", "q.h5", "--data", "textures", "--output", "run", "--batch-size", "8",
        "--num-classes", "4"},
       1,
       "is quantised to int8 (vitk quantize): it runs only at inference"},
      {{"quantize", "q.h5", "--out", "q2.h5"}, 2, "q.h5: is already quantised to int8"},
      {{"quantize", kBundled, "--out", kBundled}, 2, "is the checkpoint being quantised"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[0]);
    const ProcessResult r = run(c.args);
    EXPECT_EQ(r.status, c.status) << r.err;
    EXPECT_TRUE(contains(r.err, c.said)) << r.err;
    vitk::testing::expect_one_error_line(r);
  }
  EXPECT_FALSE(fs::exists(dir_.path() / "run"));
  EXPECT_FALSE(fs::exists(dir_.path() / "q2.h5"));
}

}  // namespace
