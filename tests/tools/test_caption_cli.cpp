// The captioning commands as a user runs them (caption, caption-eval, caption-train's refusals,
// quantize, info) on a model trained here on tiny generated scenes and on the bundled one. (The
// training itself: caption/test_caption_train.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/io/json.h"
#include "datasets/captions.h"
#include "datasets/scenes.h"
#include "util/caption_scenes.h"
#include "util/test_util.h"
#include "util/vitk_process.h"
#include "vit/caption/task.h"

using namespace vitk;
namespace fs = std::filesystem;
using vitk::testing::save_classifier;
using vitk::testing::TinyScenes;

// The commands around a trained model: captions as text, n-best lines and JSON, attention
// pictures, scores, the model quantised to int8, and the errors a user can make.
TEST(CaptionCli, CaptionEvalAndTheirErrors) {
  TinyScenes s;
  const std::string out = (s.dir / "run").string();
  std::ostringstream log;
  caption::CaptionTrainOptions o = s.options(out);
  o.loop.epochs = 10;
  ASSERT_EQ(caption::train_captions(o, log).end, train::End::finished) << log.str();
  const std::string model = out + "/last.h5";
  const std::string image = s.root + "/images/test/000001.png";

  auto r = vitk::testing::run_vitk(s.dir.path(), {"caption", "--model", model, image});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, image + "\ta ")) << r.out;

  r = vitk::testing::run_vitk(
      s.dir.path(), {"caption", "--model", model, image, "--nbest", "2", "--beam-size", "3"},
      "nbest");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;

  r = vitk::testing::run_vitk(s.dir.path(),
                              {"caption", "--model", model, "--dir", s.root + "/images/test",
                               "--json", "--sample", "--temperature", "0.5", "--seed", "3"},
                              "json");
  ASSERT_EQ(r.status, 0) << r.err;
  const io::Json j = io::parse_json(r.out, "caption --json");
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), 4u);
  EXPECT_TRUE(j[0]["captions"][0]["caption"].is_string());

  const fs::path pictures = s.dir / "pictures";
  r = vitk::testing::run_vitk(
      s.dir.path(), {"caption", "--model", model, image, "--attention-dir", pictures.string()},
      "pictures");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_GT(fs::file_size(pictures / "000001.png"), 1000u);

  r = vitk::testing::run_vitk(s.dir.path(),
                              {"caption-eval", "--model", model, "--captions",
                               s.root + "/captions_test.json", "--images", s.root + "/images/test"},
                              "eval");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "BLEU = ")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "exact scene match: ")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "attention in the named article's cell: ")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "every article named once, no other: ")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "relations true: left/right (one row) ")) << r.out;

  // vitk quantize: the int8 file runs at int8 without being told, and captions the test scenes
  // as the f32 file does at --precision int8 (the same int8 matrices); another precision is
  // refused, naming the file.
  const std::string int8 = (s.dir / "int8.h5").string();
  r = vitk::testing::run_vitk(s.dir.path(), {"quantize", model, "--out", int8}, "quantize");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "of the captioning model")) << r.out;
  EXPECT_LT(fs::file_size(int8), fs::file_size(model));
  const std::vector<std::string> test_scenes = {"--dir", s.root + "/images/test", "--json"};
  auto caption_with = [&](std::vector<std::string> args, const std::string& tag) {
    args.insert(args.begin(), "caption");
    args.insert(args.end(), test_scenes.begin(), test_scenes.end());
    const auto run = vitk::testing::run_vitk(s.dir.path(), args, tag);
    EXPECT_EQ(run.status, 0) << tag << ": " << run.err;
    return run.out;
  };
  const std::string quantized = caption_with({"--model", int8}, "int8-file");
  EXPECT_EQ(quantized, caption_with({"--model", model, "--precision", "int8"}, "int8-run"));
  EXPECT_TRUE(test::contains(quantized, "\"caption\"")) << quantized;
  r = vitk::testing::run_vitk(
      s.dir.path(), {"caption", "--model", int8, image, "--precision", "f32"}, "int8-f32");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(test::contains(r.err, int8)) << r.err;

  // Errors: no image (usage), a missing image (named, exit 1), a classifier as the model, a
  // sampling option without --sample.
  r = vitk::testing::run_vitk(s.dir.path(), {"caption", "--model", model}, "none");
  EXPECT_EQ(r.status, 2) << r.err;
  r = vitk::testing::run_vitk(s.dir.path(), {"caption", "--model", model, "nope.png"}, "missing");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(test::contains(r.err, "nope.png")) << r.err;
  r = vitk::testing::run_vitk(s.dir.path(), {"caption", "--model", image, image}, "not-a-model");
  EXPECT_EQ(r.status, 1) << r.err;
  r = vitk::testing::run_vitk(
      s.dir.path(), {"caption", "--model", model, image, "--temperature", "2"}, "temperature");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(test::contains(r.err, "--temperature needs --sample")) << r.err;
}

// What caption-train refuses before it writes anything.
TEST(CaptionCli, CaptionTrainRefusesBadDataAndOptions) {
  TinyScenes s;
  auto r = vitk::testing::run_vitk(
      s.dir.path(), {"caption-train", "--data", (s.dir / "nowhere").string(), "--output",
                     (s.dir / "a").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(test::contains(r.err, "nowhere")) << r.err;
  EXPECT_FALSE(fs::exists(s.dir / "a"));
  r = vitk::testing::run_vitk(s.dir.path(),
                              {"caption-train", "--data", s.root, "--output",
                               (s.dir / "b").string(), "--encoder-lr-scale", "-1"},
                              "lr-scale");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(test::contains(r.err, "--encoder-lr-scale")) << r.err;
  r = vitk::testing::run_vitk(s.dir.path(),
                              {"caption-train", "--data", s.root, "--output",
                               (s.dir / "c").string(), "--model.decoder_heads", "5"},
                              "heads");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(test::contains(r.err, "decoder_heads")) << r.err;
  r = vitk::testing::run_vitk(
      s.dir.path(),
      {"caption-train", "--data", s.root, "--output", (s.dir / "d").string(), "--batch-size", "64"},
      "batch");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(test::contains(r.err, "--batch-size")) << r.err;
  r = vitk::testing::run_vitk(s.dir.path(),
                              {"caption-train", "--data", s.root, "--output",
                               (s.dir / "g").string(), "--references", "best"},
                              "references");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(test::contains(r.err, "--references must be random or likeliest, got 'best'"))
      << r.err;
  // The augmentation options, each refused with exit 2 and the option named.
  struct Refused {
    std::vector<std::string> options;
    std::string says;
  };
  const std::vector<Refused> refused = {
      {{"--hflip", "1.5"}, "--hflip must be in [0, 1]"},
      {{"--article-flip", "-0.5"}, "--article-flip must be in [0, 1]"},
      {{"--article-erase", "1.5"}, "--article-erase must be in [0, 1]"},
      {{"--article-erase", "0.5", "--model.image_size", "56", "--model.patch_size", "14",
        "--batch-size", "4", "--vocab-size", "40"},
       "--article-erase: "},
      {{"--article-flip", "0.5", "--model.image_size", "56", "--model.patch_size", "14",
        "--batch-size", "4", "--vocab-size", "40"},
       "is not inside the 56x56 image of the model"},
      {{"--guided-attention", "-1"}, "--guided-attention must be >= 0"},
      {{"--guided-attention", "nan"}, "--guided-attention must be >= 0"},
      {{"--article-loss", "-0.5"}, "--article-loss must be >= 0"},
      {{"--article-loss", "inf"}, "--article-loss must be >= 0"},
      {{"--guided-attention", "0.5", "--model.image_size", "56", "--model.patch_size", "14",
        "--batch-size", "4", "--vocab-size", "40"},
       "--guided-attention: "},
      {{"--article-loss", "0.5", "--model.image_size", "56", "--model.patch_size", "14",
        "--batch-size", "4", "--vocab-size", "40"},
       "--article-loss: "},
      {{"--hflip", "0.5", "--hflip-swap", "left"}, "--hflip-swap"},
      {{"--hflip", "0.5", "--hflip-swap", "left:right,"}, "--hflip-swap"},
      {{"--hflip", "0.5", "--hflip-swap", "left:right:up"}, "--hflip-swap"},
      {{"--hflip", "0.5", "--hflip-swap", "left:left"}, "--hflip-swap"},
      {{"--hflip", "0.5", "--hflip-swap", "Left:right"}, "--hflip-swap"},
      {{"--hflip", "0.5", "--hflip-swap", "to left:right"}, "--hflip-swap"},
      {{"--teacher", "any.h5"},
       "--teacher is distilled onto the article loss: give --article-loss as well"},
      {{"--distillation-type", "medium"}, "--distillation-type must be soft or hard, got 'medium'"},
      {{"--distillation-alpha", "1.5"}, "--distillation-alpha must be in [0, 1]"},
      {{"--distillation-tau", "0"}, "--distillation-tau must be in (0, 100], got 0"}};
  for (const Refused& c : refused) {
    std::vector<std::string> args = {"caption-train", "--data", s.root, "--output",
                                     (s.dir / "g").string()};
    args.insert(args.end(), c.options.begin(), c.options.end());
    r = vitk::testing::run_vitk(s.dir.path(), args, "augment");
    EXPECT_EQ(r.status, 2) << c.options.back();
    EXPECT_TRUE(test::contains(r.err, c.says)) << c.options.back() << ": " << r.err;
  }
  // --teacher: a classifier of other classes, of another size than the articles' or for other
  // channels than the captioner's, or none at all: refused, the file named.
  const vit::VitConfig encoder = s.options("").model.encoder;  // 1 channel
  std::vector<std::string> digits;
  for (int k = 0; k < 10; ++k) digits.push_back(std::to_string(k));
  const std::string fmnist = (s.dir / "fmnist.h5").string(), other = (s.dir / "digits.h5").string(),
                    at56 = (s.dir / "at56.h5").string();
  save_classifier(encoder, datasets::fashion_mnist_classes(), fmnist);
  save_classifier(encoder, digits, other);
  save_classifier(
      encoder, datasets::fashion_mnist_classes(), at56, [](ParamStore&) {}, 56);
  struct BadTeacher {
    std::string teacher;
    bool grey;  // a 1-channel captioner, else the default 3 channels
    std::string says;
  };
  const std::vector<BadTeacher> teachers = {
      {other, true, "--teacher " + other + ": class 0, \"0\", is not an article of the scenes"},
      {at56, true, "--teacher " + at56 + " reads 56x56 images, and the "},
      {fmnist, false,
       "--teacher " + fmnist + " reads 1-channel images, the captioner 3-channel ones"},
      {(s.dir / "nowhere.h5").string(), true, "nowhere.h5"}};
  for (const BadTeacher& t : teachers) {
    std::vector<std::string> args = {"caption-train",
                                     "--data",
                                     s.root,
                                     "--output",
                                     (s.dir / "g").string(),
                                     "--batch-size",
                                     "4",
                                     "--vocab-size",
                                     "40",
                                     "--model.image_size",
                                     "84",
                                     "--model.patch_size",
                                     "14",
                                     "--article-loss",
                                     "0.5",
                                     "--teacher",
                                     t.teacher};
    if (t.grey)
      args.insert(args.end(),
                  {"--model.channels", "1", "--model.mean", "0.5", "--model.std", "0.5"});
    r = vitk::testing::run_vitk(s.dir.path(), args, "teacher");
    EXPECT_NE(r.status, 0) << t.teacher;
    EXPECT_TRUE(test::contains(r.err, t.says)) << r.err;
  }
  const std::string coco = std::string(VITK_SOURCE_DIR) + "/tests/fixtures/captions/coco.json";
  // The options that read the scenes' boxes, on captions without them.
  const std::vector<std::pair<std::string, std::string>> need_boxes = {
      {"--article-flip", "--article-flip mirrors the articles"},
      {"--article-erase", "--article-erase erases parts of the articles"},
      {"--guided-attention", "--guided-attention points the attention at the articles"},
      {"--article-loss", "--article-loss classifies the articles"}};
  for (const auto& [option, says] : need_boxes) {
    r = vitk::testing::run_vitk(s.dir.path(),
                                {"caption-train", "--train-captions", coco, "--val-captions", coco,
                                 "--output", (s.dir / "g").string(), option, "0.5"},
                                "coco" + option);
    EXPECT_EQ(r.status, 2) << option;
    EXPECT_TRUE(
        test::contains(r.err, says + " of generated scenes, and " + coco + " has no scene boxes"))
        << r.err;
  }
  for (const std::string phrases : {"to the left of,,below", "to the left of,", " , "}) {
    r = vitk::testing::run_vitk(s.dir.path(),
                                {"caption-train", "--data", s.root, "--output",
                                 (s.dir / "e").string(), "--phrases", phrases},
                                "phrases");
    EXPECT_EQ(r.status, 2) << phrases;
    EXPECT_TRUE(test::contains(r.err, "--phrases '" + phrases + "': an empty phrase")) << r.err;
  }
  r = vitk::testing::run_vitk(
      s.dir.path(),
      {"caption-train", "--data", s.root, "--output", (s.dir / "f").string(), "--phrases",
       "to the left of", "--spm", (s.dir / "any.model").string()},
      "phrases-spm");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(test::contains(r.err, "--phrases")) << r.err;
  EXPECT_FALSE(fs::exists(s.dir / "e"));
  EXPECT_FALSE(fs::exists(s.dir / "f"));
  EXPECT_FALSE(fs::exists(s.dir / "g"));
}

// `vitk caption` without --model uses the bundled scenes model: every sample scene gets a caption
// of the scenes' grammar naming two to four articles.
TEST(CaptionCli, TheBundledModelCaptionsTheSampleScenes) {
  const fs::path samples = fs::path(VITK_SOURCE_DIR) / "datasets/scene-samples";
  if (!fs::exists(fs::path(VITK_SOURCE_DIR) / "vit/models/scenes-caption.h5"))
    GTEST_SKIP() << "no bundled captioning model";
  test::TempDir dir;
  const auto r =
      vitk::testing::run_vitk(dir.path(), {"caption", "--dir", samples.string(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const io::Json j = io::parse_json(r.out, "caption --json");
  ASSERT_EQ(j.size(), 5u) << r.out;
  for (const auto& item : j) {
    const std::string caption = item["captions"][0]["caption"];
    const auto named = datasets::named_articles(caption);
    EXPECT_GE(named.size(), 2u) << caption;
    EXPECT_LE(named.size(), 4u) << caption;
  }
}

// `vitk info` reads the captioning preset: the decoder's keys, and the vocabulary from [data].
TEST(CaptionCli, InfoCountsThePreset) {
  test::TempDir dir;
  const std::string preset = std::string(VITK_SOURCE_DIR) + "/configs/caption-scenes.ini";
  const auto r = vitk::testing::run_vitk(dir.path(), {"info", "--config", preset});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "model: caption, d_model 192")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "2 decoder layers")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "40 target positions, vocabulary 128")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "output projection")) << r.out;
  EXPECT_FALSE(test::contains(r.out, "classifier head")) << r.out;
}
