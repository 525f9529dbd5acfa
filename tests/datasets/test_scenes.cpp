// The Fashion-MNIST scene generator (datasets/scenes.h) on tiny IDX files whose pixels say which
// article and which file they come from, and the caption grammar's checker. (`vitk make-scenes`:
// tools/test_make_scenes.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "common/io/json.h"
#include "datasets/scenes.h"
#include "util/idx_data.h"
#include "util/scene_data.h"
#include "util/test_util.h"

namespace {

namespace fs = std::filesystem;
using vitk::datasets::Box;
using vitk::datasets::caption_matches_scene;
using vitk::datasets::check_scene_caption;
using vitk::datasets::make_scenes;
using vitk::datasets::named_articles;
using vitk::datasets::SceneCaptionCheck;
using vitk::datasets::SceneObject;
using vitk::datasets::SceneOptions;
using vitk::io::Json;
using vitk::test::contains;
using vitk::test::error_of;
using vitk::test::files_under;
using vitk::test::read_file;
using vitk::test::TempDir;
using vitk::testing::article_pixel;
using vitk::testing::idx_articles;
using vitk::testing::kTestArticles;
using vitk::testing::kTrainArticles;
using vitk::testing::write_fashion_mnist;

SceneOptions tiny_options(const std::string& data, const fs::path& out) {
  SceneOptions o;
  o.fashion_mnist = data;
  o.output = out.string();
  o.train = 14;
  o.val = 5;
  o.test = 7;
  o.captions_per_image = 5;
  o.seed = 3;
  return o;
}

Json read_json(const fs::path& path) {
  return vitk::io::parse_json(read_file(path), path.string());
}

Box box_of(const Json& j) {
  return {j.at(0).get<int64_t>(), j.at(1).get<int64_t>(), j.at(2).get<int64_t>(),
          j.at(3).get<int64_t>()};
}

bool box_inside(const Box& inner, const Box& outer) {
  return inner.x >= outer.x && inner.y >= outer.y &&
         inner.x + inner.width <= outer.x + outer.width &&
         inner.y + inner.height <= outer.y + outer.height;
}

int64_t factorial(int64_t n) {
  return n <= 1 ? 1 : n * factorial(n - 1);
}

struct SplitExpectation {
  const char* name;
  int64_t scenes;
  bool t10k;
  int64_t first_article, end_article;  // the article indices the split may use
};

TEST(Scenes, WritesCocoFilesWhosePicturesAndCaptionsMatchTheScenes) {
  TempDir dir;
  const std::string data = write_fashion_mnist(dir);
  const SceneOptions o = tiny_options(data, dir / "scenes");
  make_scenes(o);

  const SplitExpectation splits[] = {{"train", o.train, false, 0, 50},
                                     {"val", o.val, false, 50, 60},
                                     {"test", o.test, true, 0, kTestArticles}};
  std::set<int64_t> grids, counts;
  for (const SplitExpectation& split : splits) {
    SCOPED_TRACE(split.name);
    const fs::path image_dir = dir / "scenes" / "images" / split.name;
    const Json doc = read_json(dir / "scenes" / (std::string("captions_") + split.name + ".json"));
    const Json& images = doc.at("images");
    ASSERT_EQ(static_cast<int64_t>(images.size()), split.scenes);
    EXPECT_EQ(std::distance(fs::directory_iterator(image_dir), fs::directory_iterator()),
              split.scenes);

    std::map<int64_t, std::vector<std::string>> captions;
    std::set<int64_t> annotation_ids;
    for (const Json& a : doc.at("annotations")) {
      EXPECT_TRUE(annotation_ids.insert(a.at("id").get<int64_t>()).second);
      captions[a.at("image_id").get<int64_t>()].push_back(a.at("caption").get<std::string>());
    }

    for (size_t i = 0; i < images.size(); ++i) {
      const Json& image = images[i];
      const int64_t id = image.at("id").get<int64_t>();
      char name[32];
      std::snprintf(name, sizeof name, "%06d.png", static_cast<int>(i + 1));
      EXPECT_EQ(image.at("file_name").get<std::string>(), name);
      const Json& scene = image.at("vitk_scene");
      const int64_t grid = scene.at("grid").get<int64_t>();
      ASSERT_TRUE(grid == 2 || grid == 3) << grid;
      grids.insert(grid);

      std::vector<SceneObject> objects;
      std::vector<int64_t> articles;
      std::set<std::pair<int64_t, int64_t>> cells;
      for (const Json& j : scene.at("objects")) {
        SceneObject obj;
        obj.name = j.at("name").get<std::string>();
        obj.row = j.at("row").get<int64_t>();
        obj.col = j.at("col").get<int64_t>();
        obj.box = box_of(j.at("box"));
        obj.cell = box_of(j.at("cell"));
        const int64_t article = j.at("article").get<int64_t>();
        EXPECT_GE(article, split.first_article);
        EXPECT_LT(article, split.end_article);
        // The noun is the article's class (the tiny files label article i with class i % 10).
        EXPECT_EQ(obj.name, vitk::datasets::scene_nouns()[static_cast<size_t>(article % 10)]);
        EXPECT_TRUE(obj.row >= 0 && obj.row < grid && obj.col >= 0 && obj.col < grid);
        EXPECT_TRUE(cells.insert({obj.row, obj.col}).second) << "two articles in one cell";
        const int64_t side = 84 / grid;
        EXPECT_EQ(obj.cell.x, obj.col * side);
        EXPECT_EQ(obj.cell.y, obj.row * side);
        EXPECT_EQ(obj.cell.width, side);
        EXPECT_EQ(obj.cell.height, side);
        EXPECT_EQ(obj.box.width, 28);
        EXPECT_EQ(obj.box.height, 28);
        EXPECT_TRUE(box_inside(obj.box, obj.cell));
        EXPECT_TRUE(box_inside(obj.cell, Box{0, 0, 84, 84}));
        objects.push_back(obj);
        articles.push_back(article);
      }
      const int64_t n = static_cast<int64_t>(objects.size());
      EXPECT_GE(n, o.min_objects);
      EXPECT_LE(n, o.max_objects);
      counts.insert(n);
      std::set<std::string> names;
      for (const SceneObject& obj : objects) names.insert(obj.name);
      EXPECT_EQ(static_cast<int64_t>(names.size()), n) << "two articles of one class";

      const std::vector<std::string>& mine = captions[id];
      EXPECT_EQ(static_cast<int64_t>(mine.size()), std::min(o.captions_per_image, factorial(n)));
      EXPECT_EQ(std::set<std::string>(mine.begin(), mine.end()).size(), mine.size())
          << "repeated caption";
      for (const std::string& caption : mine)
        EXPECT_TRUE(caption_matches_scene(caption, objects)) << caption;

      // The picture: each article's own pixels in its box, black everywhere else.
      const std::string png = read_file(image_dir / name);
      const cv::Mat picture =
          cv::imdecode(std::vector<uint8_t>(png.begin(), png.end()), cv::IMREAD_UNCHANGED);
      ASSERT_EQ(picture.type(), CV_8UC1);
      ASSERT_EQ(picture.rows, 84);
      ASSERT_EQ(picture.cols, 84);
      int64_t wrong = 0;
      for (int y = 0; y < 84; ++y)
        for (int x = 0; x < 84; ++x) {
          int expected = 0;
          for (size_t k = 0; k < objects.size(); ++k)
            if (objects[k].box.contains(x, y))
              expected = article_pixel(split.t10k, articles[k], y - objects[k].box.y,
                                       x - objects[k].box.x);
          wrong += picture.at<uint8_t>(y, x) != expected;
        }
      EXPECT_EQ(wrong, 0) << name;
    }
  }
  // Both grids and both ends of the article count occur among the 26 scenes.
  EXPECT_EQ(grids, (std::set<int64_t>{2, 3}));
  EXPECT_EQ(counts.count(2), 1u);
  EXPECT_EQ(counts.count(4), 1u);
}

TEST(Scenes, SameSeedSameBytesOtherSeedOtherScenes) {
  TempDir dir;
  const std::string data = write_fashion_mnist(dir);
  SceneOptions o = tiny_options(data, dir / "a");
  make_scenes(o);
  o.output = (dir / "b").string();
  make_scenes(o);
  const auto a = files_under(dir / "a");
  EXPECT_EQ(a.size(), static_cast<size_t>(3 + o.train + o.val + o.test));
  EXPECT_EQ(a, files_under(dir / "b"));

  // A split's scenes do not depend on the size of another.
  o.output = (dir / "c").string();
  o.train = 3;
  make_scenes(o);
  const auto c = files_under(dir / "c");
  EXPECT_EQ(c.at("captions_test.json"), a.at("captions_test.json"));
  EXPECT_EQ(c.at("images/test/000001.png"), a.at("images/test/000001.png"));
  EXPECT_EQ(c.at("images/train/000003.png"), a.at("images/train/000003.png"));

  o.output = (dir / "d").string();
  o.train = 14;
  o.seed = 4;
  make_scenes(o);
  const auto d = files_under(dir / "d");
  EXPECT_EQ(d.size(), a.size());
  EXPECT_NE(d.at("captions_train.json"), a.at("captions_train.json"));
  EXPECT_NE(d.at("captions_test.json"), a.at("captions_test.json"));
}

TEST(Scenes, RefusesBadOptionsAndAnOccupiedOutputFolder) {
  TempDir dir;
  const std::string data = write_fashion_mnist(dir);
  const SceneOptions good = tiny_options(data, dir / "out");
  auto usage_error = [&](SceneOptions o) {
    try {
      make_scenes(o);
    } catch (const vitk::UsageError& e) {
      return std::string(e.what());
    } catch (const std::exception& e) {
      return std::string("wrong exception: ") + e.what();
    }
    return std::string("no exception");
  };
  struct Case {
    const char* option;
    void (*change)(SceneOptions&);
  };
  const Case cases[] = {
      {"--train", [](SceneOptions& o) { o.train = -1; }},
      {"--val", [](SceneOptions& o) { o.val = 1'000'001; }},
      {"--test", [](SceneOptions& o) { o.test = -5; }},
      {"--captions-per-image", [](SceneOptions& o) { o.captions_per_image = 0; }},
      {"--captions-per-image", [](SceneOptions& o) { o.captions_per_image = 25; }},
      {"--min-objects", [](SceneOptions& o) { o.min_objects = 1; }},
      {"--max-objects", [](SceneOptions& o) { o.max_objects = 5; }},
      {"--max-objects", [](SceneOptions& o) { o.min_objects = 4, o.max_objects = 3; }},
      {"--out", [](SceneOptions& o) { o.output.clear(); }},
      {"--data", [](SceneOptions& o) { o.fashion_mnist.clear(); }},
      {"--train, --val and --test", [](SceneOptions& o) { o.train = o.val = o.test = 0; }},
  };
  for (const Case& c : cases) {
    SceneOptions o = good;
    c.change(o);
    const std::string message = usage_error(o);
    EXPECT_TRUE(contains(message, c.option)) << c.option << ": " << message;
  }
  EXPECT_FALSE(fs::exists(dir / "out")) << "a refused call made its folder";

  fs::create_directories(dir / "out");
  dir.write("out/keep.txt", "mine");
  const std::string occupied = usage_error(good);
  EXPECT_TRUE(contains(occupied, (dir / "out").string()) && contains(occupied, "not empty"))
      << occupied;
  EXPECT_EQ(read_file(dir / "out" / "keep.txt"), "mine");
  SceneOptions onto_file = good;
  onto_file.output = (dir / "out" / "keep.txt").string();
  EXPECT_TRUE(contains(usage_error(onto_file), "not a folder"));

  // An empty folder is fine; missing data is a run-time error naming the folder, and makes
  // nothing.
  SceneOptions no_data = good;
  no_data.output = (dir / "empty").string();
  fs::create_directories(no_data.output);
  no_data.fashion_mnist = (dir / "nowhere").string();
  EXPECT_TRUE(contains(error_of([&] { make_scenes(no_data); }), "nowhere"));
  EXPECT_TRUE(fs::is_empty(no_data.output));
  make_scenes(tiny_options(data, no_data.output));
  EXPECT_TRUE(fs::exists(fs::path(no_data.output) / "captions_val.json"));
}

// --article-flip's augmentation: each article chosen is mirrored inside its box and nothing else
// moves; probability 0 and 1 do none and all; at 0.5 the choice is per article, the same for the
// same key and different for another; a mirrored image has its boxes mirrored too; a box outside
// the image is an error that names the article.
TEST(Scenes, FlipArticlesMirrorsEachArticleInsideItsBox) {
  const int64_t C = 2, H = 84, W = 84;
  std::vector<float> image(static_cast<size_t>(C * H * W));
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<float>(i % 1009) * 0.25f;
  const std::vector<SceneObject> objects = {vitk::testing::scene_object("bag", 0, 0),
                                            vitk::testing::scene_object("coat", 1, 1)};
  // Where pixel (c, y, x) should come from when the articles in `which` are mirrored.
  auto expected = [&](const std::vector<bool>& which, bool mirrored_image) {
    std::vector<float> want = image;
    for (size_t k = 0; k < objects.size(); ++k) {
      if (!which[k]) continue;
      const Box& b = objects[k].box;
      const int64_t x0 = mirrored_image ? W - b.x - b.width : b.x;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = b.y; y < b.y + b.height; ++y)
          for (int64_t x = 0; x < b.width; ++x)
            want[static_cast<size_t>((c * H + y) * W + x0 + x)] =
                image[static_cast<size_t>((c * H + y) * W + x0 + b.width - 1 - x)];
    }
    return want;
  };
  for (const bool mirrored : {false, true}) {
    SCOPED_TRACE(mirrored ? "mirrored image" : "as drawn");
    std::vector<float> x = image;
    EXPECT_EQ(vitk::datasets::flip_articles(x.data(), C, H, W, objects, mirrored, 0.f, 7), 0);
    EXPECT_EQ(x, image);
    EXPECT_EQ(vitk::datasets::flip_articles(x.data(), C, H, W, objects, mirrored, 1.f, 7), 2);
    EXPECT_EQ(x, expected({true, true}, mirrored));
  }
  std::set<std::vector<bool>> seen;
  for (uint64_t key = 0; key < 64; ++key) {
    std::vector<float> x = image, again = image;
    const int64_t n = vitk::datasets::flip_articles(x.data(), C, H, W, objects, false, 0.5f, key);
    vitk::datasets::flip_articles(again.data(), C, H, W, objects, false, 0.5f, key);
    EXPECT_EQ(x, again) << key;
    bool matched = false;
    for (const std::vector<bool>& which :
         {std::vector<bool>{false, false}, {true, false}, {false, true}, {true, true}})
      if (x == expected(which, false)) {
        matched = true;
        seen.insert(which);
        EXPECT_EQ(n, std::count(which.begin(), which.end(), true)) << key;
      }
    EXPECT_TRUE(matched) << key;
  }
  EXPECT_EQ(seen.size(), 4u);  // every combination occurs over 64 keys
  std::vector<SceneObject> outside = objects;
  outside[1].box.x = 70;
  std::vector<float> x = image;
  const std::string e =
      error_of([&] { vitk::datasets::flip_articles(x.data(), C, H, W, outside, false, 0.f, 7); });
  EXPECT_TRUE(contains(e, "coat (70, 49, 28, 28) is not inside the 84x84 image")) << e;
}

// --article-erase's augmentation: each article chosen gets one rectangle of noise inside its box
// (2% to 1/3 of the box's area), and no pixel outside the chosen boxes changes; probability 0
// and 1 erase none and all; at 0.5 the choice is per article, the same for the same key; a
// mirrored image has its boxes mirrored too; a box outside the image is an error.
TEST(Scenes, EraseArticlesFillsARectangleInsideEachChosenArticlesBox) {
  const int64_t C = 2, H = 84, W = 84;
  std::vector<float> image(static_cast<size_t>(C * H * W));
  for (size_t i = 0; i < image.size(); ++i) image[i] = 100.f + static_cast<float>(i % 1009);
  const std::vector<SceneObject> objects = {vitk::testing::scene_object("bag", 0, 0),
                                            vitk::testing::scene_object("coat", 1, 1)};
  // Which articles' boxes hold changed pixels; fails the test on a change outside every box, or
  // on changed pixels that are not one rectangle of the allowed area in every channel.
  auto erased = [&](const std::vector<float>& x, bool mirrored_image) {
    std::vector<bool> which(objects.size(), false);
    std::vector<bool> inside(static_cast<size_t>(H * W), false);
    for (size_t k = 0; k < objects.size(); ++k) {
      const Box& b = objects[k].box;
      const int64_t x0 = mirrored_image ? W - b.x - b.width : b.x;
      int64_t changed = 0, top = H, bottom = -1, left = W, right = -1;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = b.y; y < b.y + b.height; ++y)
          for (int64_t xx = x0; xx < x0 + b.width; ++xx) {
            inside[static_cast<size_t>(y * W + xx)] = true;
            const size_t i = static_cast<size_t>((c * H + y) * W + xx);
            if (x[i] == image[i]) continue;
            ++changed;
            EXPECT_LT(std::abs(x[i]), 10.f) << "not N(0, 1) noise at " << i;
            top = std::min(top, y), bottom = std::max(bottom, y);
            left = std::min(left, xx), right = std::max(right, xx);
          }
      if (changed == 0) continue;
      which[k] = true;
      const int64_t area = (bottom - top + 1) * (right - left + 1);
      EXPECT_EQ(changed, C * area) << "article " << k << ": not one rectangle in every channel";
      const double share = static_cast<double>(area) / static_cast<double>(b.height * b.width);
      EXPECT_GE(share, 0.015) << "article " << k;  // 2%, give or take the rounding of the sides
      EXPECT_LE(share, 0.40) << "article " << k;   // 1/3, the same
    }
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i)
        if (!inside[static_cast<size_t>(i)]) {
          EXPECT_EQ(x[static_cast<size_t>(c * H * W + i)],
                    image[static_cast<size_t>(c * H * W + i)])
              << "changed outside the boxes at " << c * H * W + i;
        }
    return which;
  };
  for (const bool mirrored : {false, true}) {
    SCOPED_TRACE(mirrored ? "mirrored image" : "as drawn");
    std::vector<float> x = image;
    EXPECT_EQ(vitk::datasets::erase_articles(x.data(), C, H, W, objects, mirrored, 0.f, 7), 0);
    EXPECT_EQ(x, image);
    EXPECT_EQ(vitk::datasets::erase_articles(x.data(), C, H, W, objects, mirrored, 1.f, 7), 2);
    EXPECT_EQ(erased(x, mirrored), (std::vector<bool>{true, true}));
  }
  std::set<std::vector<bool>> seen;
  std::set<std::vector<float>> images;
  for (uint64_t key = 0; key < 64; ++key) {
    std::vector<float> x = image, again = image;
    const int64_t n = vitk::datasets::erase_articles(x.data(), C, H, W, objects, false, 0.5f, key);
    vitk::datasets::erase_articles(again.data(), C, H, W, objects, false, 0.5f, key);
    EXPECT_EQ(x, again) << key;
    const std::vector<bool> which = erased(x, false);
    EXPECT_EQ(n, std::count(which.begin(), which.end(), true)) << key;
    seen.insert(which);
    images.insert(x);
  }
  EXPECT_EQ(seen.size(), 4u);     // every combination occurs over 64 keys
  EXPECT_GT(images.size(), 40u);  // and the rectangles differ from key to key
  std::vector<SceneObject> outside = objects;
  outside[1].box.x = 70;
  std::vector<float> x = image;
  const std::string e =
      error_of([&] { vitk::datasets::erase_articles(x.data(), C, H, W, outside, false, 0.f, 7); });
  EXPECT_TRUE(contains(e, "coat (70, 49, 28, 28) is not inside the 84x84 image")) << e;
}

TEST(Scenes, TooFewClassesForTheArticlesOfAScene) {
  TempDir dir;
  const fs::path root = dir / "fm";
  fs::create_directories(root);
  // Only classes 0..2 in the file: a scene of four distinct classes cannot be made.
  std::vector<uint8_t> labels;
  for (uint32_t i = 0; i < 12; ++i) labels.push_back(static_cast<uint8_t>(i % 3));
  dir.write("fm/train-images-idx3-ubyte", idx_articles(false, 12));
  dir.write("fm/train-labels-idx1-ubyte", vitk::testing::idx_labels(labels));
  SceneOptions o = tiny_options(root.string(), dir / "out");
  o.val = o.test = 0;
  const std::string message = error_of([&] { make_scenes(o); });
  EXPECT_TRUE(contains(message, "train-images-idx3-ubyte") && contains(message, "classes"))
      << message;
  o.max_objects = 3;
  o.min_objects = 2;
  o.train = 1;  // three classes among the first ten articles: enough
  make_scenes(o);
  EXPECT_TRUE(fs::exists(dir / "out" / "images" / "train" / "000001.png"));
}

// ---- The grammar -------------------------------------------------------------------------------

SceneObject at(const std::string& name, int64_t row, int64_t col) {
  return vitk::testing::scene_object(name, row, col);
}

TEST(SceneCaptions, MatchOnlyTheCaptionsTheGrammarGivesForTheScene) {
  // bag | ankle boot
  // coat | (empty)
  const std::vector<SceneObject> scene = {at("bag", 0, 0), at("ankle boot", 0, 1),
                                          at("coat", 1, 0)};
  auto match = [&](const std::string& caption) { return caption_matches_scene(caption, scene); };
  EXPECT_TRUE(match("a bag to the left of a ankle boot and a coat below it"));
  EXPECT_TRUE(match("a ankle boot to the right of a bag and a coat below it"));
  EXPECT_TRUE(match("a coat below a ankle boot and a bag to the left of it"));
  EXPECT_TRUE(match("A coat below a bag, and a ankle boot to the right of it."));  // normalized
  EXPECT_TRUE(match("  a coat   below a bag and a ankle boot to the right of it "));

  EXPECT_FALSE(match(""));
  EXPECT_FALSE(match("a bag to the left of a sandal and a coat below it"));  // not in the scene
  EXPECT_FALSE(match("a bag to the left of a ankle boot"));                  // coat missing
  EXPECT_FALSE(match("a bag to the left of a ankle boot and a bag to the left of it"));
  EXPECT_FALSE(match("a bag to the left of a ankle boot and a coat below it and a bag above it"));
  EXPECT_FALSE(match("a bag to the right of a ankle boot and a coat below it"));  // false relation
  EXPECT_FALSE(match("a bag above a ankle boot and a coat below it"));  // same row: left, not above
  // Rows differ, so the grammar says below even though the coat's column is the smaller.
  EXPECT_FALSE(match("a coat to the left of a ankle boot and a bag above it"));
  EXPECT_FALSE(match("a coat below a ankle boot and a bag above it"));  // bag is left of the boot
  EXPECT_FALSE(match("a bag to the left of a ankle boot and a coat below it please"));
  EXPECT_FALSE(match("a bag to the left of a ankle boot and a coat below it and"));
  EXPECT_FALSE(match("a bag to the left of a ankle boot and a coat below"));
  EXPECT_FALSE(match("the bag to the left of a ankle boot and a coat below it"));
  EXPECT_FALSE(match("a bag left of a ankle boot and a coat below it"));
  EXPECT_FALSE(match("a bag to the left of a boot and a coat below it"));
  EXPECT_FALSE(match("a bag to the left of an ankle boot and a coat below it"));

  // A scene of one article, or with two articles of one class, has no caption.
  EXPECT_FALSE(caption_matches_scene("a bag", {at("bag", 0, 0)}));
  EXPECT_FALSE(
      caption_matches_scene("a bag to the left of a bag", {at("bag", 0, 0), at("bag", 0, 1)}));
}

// caption-eval's breakdown of exact scene match: the articles, and the relations by the kind the
// scene calls for, each counted whether the rest of the caption is right or not.
TEST(SceneCaptions, TheCheckCountsWhatACaptionGetsRight) {
  // bag | ankle boot
  // coat | (empty)
  const std::vector<SceneObject> scene = {at("bag", 0, 0), at("ankle boot", 0, 1),
                                          at("coat", 1, 0)};
  struct Want {
    const char* caption;
    bool grammatical, articles;
    int64_t horizontal, horizontal_true, vertical, vertical_true;
  };
  const Want wants[] = {
      {"a bag to the left of a ankle boot and a coat below it", true, true, 1, 1, 1, 1},
      // The coat is below the boot by row, though left of it by column.
      {"a coat below a ankle boot and a bag to the left of it", true, true, 1, 1, 1, 1},
      {"a bag to the right of a ankle boot and a coat below it", true, true, 1, 0, 1, 1},
      {"a bag above a ankle boot and a coat above it", true, true, 1, 0, 1, 0},
      {"a coat above a bag", true, false, 0, 0, 1, 0},  // the boot is not named
      // The sandal is not in the scene: its two relations are not counted; the boot above the
      // coat is.
      {"a bag to the left of a sandal and a coat below it and a ankle boot above it", true, false,
       0, 0, 1, 1},
      {"a bag to the left of a ankle boot and a bag to the left of it", true, false, 2, 2, 0, 0},
      {"a bag left of a ankle boot", false, false, 0, 0, 0, 0},
      {"a bag to the left of a ankle boot and a coat below", false, false, 0, 0, 0, 0},
      {"", false, false, 0, 0, 0, 0},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.caption);
    const SceneCaptionCheck c = check_scene_caption(w.caption, scene);
    EXPECT_EQ(c.grammatical, w.grammatical);
    EXPECT_EQ(c.articles, w.articles);
    EXPECT_EQ(c.horizontal, w.horizontal);
    EXPECT_EQ(c.horizontal_true, w.horizontal_true);
    EXPECT_EQ(c.vertical, w.vertical);
    EXPECT_EQ(c.vertical_true, w.vertical_true);
    EXPECT_EQ(c.exact(), caption_matches_scene(w.caption, scene));
  }
  // A scene with two articles of one class has no right articles and no relations counted.
  const SceneCaptionCheck twins =
      check_scene_caption("a bag to the left of a bag", {at("bag", 0, 0), at("bag", 0, 1)});
  EXPECT_TRUE(twins.grammatical);
  EXPECT_FALSE(twins.articles);
  EXPECT_EQ(twins.horizontal + twins.vertical, 0);
}

TEST(SceneCaptions, NamedArticlesGiveTheNounsLastWord) {
  const auto named = named_articles("A t-shirt above an ankle boot, and a bag to the left of it");
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].name, "t-shirt");
  EXPECT_EQ(named[0].word, 1);
  EXPECT_EQ(named[1].name, "ankle boot");
  EXPECT_EQ(named[1].word, 5);  // a t-shirt above an ankle [boot]
  EXPECT_EQ(named[2].name, "bag");
  EXPECT_EQ(named[2].word, 8);
  EXPECT_TRUE(named_articles("").empty());
  EXPECT_TRUE(named_articles("an ankle to the left of a boot").empty());
  const auto& nouns = vitk::datasets::scene_nouns();
  ASSERT_EQ(nouns.size(), 10u);
  EXPECT_EQ(nouns.front(), "t-shirt");
  EXPECT_EQ(nouns.back(), "ankle boot");
}

}  // namespace
