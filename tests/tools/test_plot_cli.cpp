// Pictures end to end through the vitk executable: `vitk plot positions|mask|metrics`,
// `vitk classify --attention-dir` and `vitk translate --attention-dir` on tiny models built here;
// each PNG must decode, and bad inputs must name the file and exit 1 (bad input) or 2 (usage).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "common/io/checkpoint.h"
#include "common/seq2seq/checkpoint.h"
#include "datasets/tokenizer.h"
#include "util/test_util.h"
#include "util/tiny_models.h"
#include "util/vitk_process.h"
#include "vit/vit.h"

namespace {

namespace fs = std::filesystem;
using vitk::testing::run_vitk;
using vitk::testing::VitkResult;

using vitk::test::contains;

cv::Mat decoded(const fs::path& p) {
  return cv::imread(p.string(), cv::IMREAD_UNCHANGED);
}

// No temporary file of the atomic writer left anywhere under dir.
bool no_leftovers(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (contains(e.path().filename().string(), ".tmp-")) return false;
  return true;
}

class PlotCli : public ::testing::Test {
 protected:
  // VITK_TEST_KEEP=1 keeps the scratch directory, to look at the pictures.
  void TearDown() override {
    if (const char* keep = std::getenv("VITK_TEST_KEEP"); keep && *keep && *keep != '0') {
      std::cerr << "kept " << dir_ << "\n";
      temp_.keep();
    }
  }
  VitkResult run(std::vector<std::string> args) {
    args.push_back("--threads");
    args.push_back("1");
    return run_vitk(dir_, args);
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  // A grey 16x16 ViT of 4x4 patches (a 4x4 grid), random weights.
  void write_vit(const std::string& name, const std::string& pool) {
    vitk::vit::VitConfig c = vitk::testing::tiny_grey_vit(16, 3, 2);
    c.pool = pool;
    vitk::testing::save_random_vit((dir_ / name).string(), c, {"uno", "dos", "tr\xC3\xA9s"});
  }
  vitk::test::TempDir temp_{"vitk_plot_cli"};
  fs::path dir_ = temp_.path();
};

TEST_F(PlotCli, SinusoidsAndMasks) {
  VitkResult r = run({"plot", "positions", "--d-model", "32", "--length", "16", "--out", "p.png"});
  ASSERT_EQ(r.status, 0) << r.err;
  const cv::Mat p = decoded(dir_ / "p.png");
  ASSERT_FALSE(p.empty());
  EXPECT_GE(p.cols, 32 * 17);  // 560 / 32 = 17 pixels per cell
  EXPECT_GE(p.rows, 16 * 17);
  EXPECT_TRUE(contains(r.out, "wrote p.png"));

  r = run({"plot", "mask", "--causal", "--length", "8"});
  ASSERT_EQ(r.status, 0) << r.err;
  const cv::Mat m = decoded(dir_ / "mask.png");  // the default name
  ASSERT_FALSE(m.empty());
  EXPECT_GE(m.cols, 8 * 40);
  EXPECT_GE(m.rows, 8 * 40);
  r = run({"plot", "mask", "--causal", "--length", "6", "--key-length", "4", "--out", "b.png"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(decoded(dir_ / "b.png").empty());
  EXPECT_TRUE(no_leftovers(dir_));

  // Usage errors: exit 2, nothing written.
  EXPECT_EQ(run({"plot", "mask", "--out", "x.png"}).status, 2);  // nothing to mask
  EXPECT_EQ(run({"plot", "mask", "--causal", "--length", "0", "--out", "x.png"}).status, 2);
  EXPECT_EQ(run({"plot", "mask", "--causal", "--key-length", "9", "--out", "x.png"}).status, 2);
  EXPECT_EQ(run({"plot", "pictures", "--out", "x.png"}).status, 2);
  EXPECT_EQ(run({"plot", "positions", "--causal", "--out", "x.png"}).status, 2);
  EXPECT_FALSE(fs::exists(dir_ / "x.png"));
  // A file that cannot be written: exit 1, the file named.
  r = run({"plot", "mask", "--causal", "--out", "no/such/dir/m.png"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "no/such/dir/m.png")) << r.err;
}

TEST_F(PlotCli, PositionsOfAViTCheckpoint) {
  write_vit("m.h5", "token");
  VitkResult r = run({"plot", "positions", "--model", "m.h5", "--out", "pos.png"});
  ASSERT_EQ(r.status, 0) << r.err;
  const cv::Mat p = decoded(dir_ / "pos.png");
  ASSERT_FALSE(p.empty());
  EXPECT_GE(p.cols, 4 * 4 * 12);  // a 4x4 grid of 4x4 maps of 12-pixel cells
  r = run({"plot", "positions", "--model", "missing.h5", "--out", "q.png"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "missing.h5")) << r.err;
}

TEST_F(PlotCli, MetricsOfBothTrainers) {
  write("vit.csv",
        "epoch,step,lr,train_loss,train_acc,val_loss,val_top1,val_top5,images_per_s,seconds\n"
        "1,469,0.0015,1.2,55.5,0.9,69.1,97.0,250.1,270.2\n"
        "2,938,0.0014,0.8,70.25,0.7,76.4,98.5,251.0,268.9\n");
  write("mt.csv",
        "step,epoch,lr,train_loss,target_tokens_per_s,valid_loss,valid_bleu\n"
        "1000,0.500,0.0007,5.5,9000.0,5.1,3.25\n");
  VitkResult r = run({"plot", "metrics", "vit.csv"});
  ASSERT_EQ(r.status, 0) << r.err;
  const cv::Mat v = decoded(dir_ / "vit.png");  // the CSV's name with .png
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.cols, 820);
  EXPECT_GT(v.rows, 3 * 210);  // loss, accuracy, learning rate
  r = run({"plot", "metrics", "mt.csv", "--out", "curves.png"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(decoded(dir_ / "curves.png").empty());

  r = run({"plot", "metrics", "absent.csv"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "absent.csv")) << r.err;
  write("bad.csv", "epoch,lr\n1,0.1\n");
  r = run({"plot", "metrics", "bad.csv"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "bad.csv")) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "bad.png"));
  EXPECT_EQ(run({"plot", "metrics"}).status, 2);
  EXPECT_TRUE(no_leftovers(dir_));
}

TEST_F(PlotCli, ClassifyDrawsOnePicturePerReadableImage) {
  for (const std::string pool : {"avg", "token"}) {
    SCOPED_TRACE(pool);
    write_vit("m.h5", pool);
    fs::create_directories(dir_ / "a");
    fs::create_directories(dir_ / "b");
    cv::Mat image(16, 16, CV_8UC1);
    cv::randu(image, 0, 255);
    cv::imwrite((dir_ / "a/shoe.png").string(), image);
    cv::imwrite((dir_ / "b/shoe.png").string(), 255 - image);
    write("broken.png", "not a png");
    const VitkResult r = run({"classify", "--model", "m.h5", "a/shoe.png", "b/shoe.png",
                              "broken.png", "--attention-dir", "pics", "--batch-size", "2"});
    EXPECT_EQ(r.status, 1) << r.err;  // the broken file, after the others were done
    EXPECT_TRUE(contains(r.err, "broken.png")) << r.err;
    EXPECT_TRUE(contains(r.err, "wrote 2 attention pictures")) << r.err;
    const cv::Mat first = decoded(dir_ / "pics/shoe.png"),
                  second = decoded(dir_ / "pics/shoe-2.png");
    ASSERT_FALSE(first.empty());
    ASSERT_FALSE(second.empty());
    EXPECT_EQ(first.size(), second.size());
    EXPECT_GT(first.cols, 2 * 224);  // the input at 224 and the rollout beside it
    EXPECT_FALSE(fs::exists(dir_ / "pics/broken.png"));
    EXPECT_LT(fs::file_size(dir_ / "pics/shoe.png"), 200u * 1024);
    fs::remove_all(dir_ / "pics");
  }
  EXPECT_EQ(run({"classify", "--model", "m.h5", "--attention-dir", "p", "--benchmark"}).status, 2);
  EXPECT_EQ(run({"classify", "--model", "m.h5", "a/shoe.png", "--attention-dir", "p",
                 "--rollout-heads", "median"})
                .status,
            2);
}

TEST_F(PlotCli, TranslateDrawsOneAlignmentPerTranslatedLine) {
  // A tokenizer with accents and a random model: the pictures' values are checked in-process
  // (seq2seq/test_alignment.cpp); here the files, names and errors.
  std::vector<std::string> text;
  const std::vector<std::string> words = {
      "cre\xC3\xB3", "Dios",        "los",          "cielos", "y",  "la",
      "tierra",      "ni\xC3\xB1o", "se\xC3\xB1or", "agua",   "pan"};
  std::mt19937 gen(1);
  for (int i = 0; i < 60; ++i) {
    std::string s;
    for (int k = 0; k < 3 + static_cast<int>(gen() % 5); ++k)
      s += (k ? " " : "") + words[gen() % words.size()];
    text.push_back(s);
  }
  vitk::datasets::TokenizerOptions o;
  o.vocab_size = 48;
  const vitk::datasets::Tokenizer tokenizer = vitk::datasets::Tokenizer::train(text, o);
  vitk::seq2seq::TransformerConfig c;
  c.vocab_size = tokenizer.size();
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.layers = 1;
  c.decoder_layers = 2;
  c.dropout = 0;
  c.max_length = 32;
  vitk::ParamStore params;
  vitk::seq2seq::Transformer model(params, c);
  params.finalize();
  vitk::ops::Rng rng(2);
  model.init(rng);
  vitk::seq2seq::save_translation((dir_ / "mt.h5").string(), params, c, tokenizer.bytes(), 1);
  write("in.txt", "En el principio cre\xC3\xB3 Dios los cielos y la tierra.\n\nagua y pan\n");

  VitkResult r = run({"translate", "--model", "mt.h5", "--input", "in.txt", "--output", "out.txt",
                      "--greedy", "--max-length-offset", "4", "--attention-dir", "align"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "wrote 2 alignment pictures")) << r.err;
  const cv::Mat one = decoded(dir_ / "align/0001.png"), three = decoded(dir_ / "align/0003.png");
  ASSERT_FALSE(one.empty());
  ASSERT_FALSE(three.empty());
  EXPECT_FALSE(fs::exists(dir_ / "align/0002.png"));  // the empty line
  EXPECT_GT(one.cols, 200);
  EXPECT_LT(fs::file_size(dir_ / "align/0001.png"), 200u * 1024);
  r = run({"translate", "--model", "mt.h5", "--input", "in.txt", "--output", "o2.txt", "--greedy",
           "--max-length-offset", "4", "--attention-dir", "al2", "--attention-layer", "0",
           "--attention-head", "1"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(decoded(dir_ / "al2/0001.png").empty());

  // Layers and heads the model lacks, or the options without a directory: usage errors, before
  // any translation is written.
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--attention-dir", "x", "--attention-layer", "2"},
        {"--attention-dir", "x", "--attention-head", "2"},
        {"--attention-dir", "x", "--attention-head", "one"},
        {"--attention-layer", "0"}}) {
    std::vector<std::string> args = {"translate", "--model",  "mt.h5",  "--input",
                                     "in.txt",    "--output", "bad.txt"};
    args.insert(args.end(), bad.begin(), bad.end());
    r = run(args);
    EXPECT_EQ(r.status, 2) << bad[bad.size() - 1] << ": " << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "bad.txt"));
  }
  EXPECT_TRUE(no_leftovers(dir_));
}

}  // namespace
