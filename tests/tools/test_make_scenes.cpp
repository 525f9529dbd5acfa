// `vitk make-scenes` as a user runs it: it writes what the library's scene generator writes, and
// refuses an occupied output folder, bad options and missing data with one error line. (The
// generator itself: datasets/test_scenes.cpp.)
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "datasets/scenes.h"
#include "util/scene_data.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::datasets::make_scenes;
using vitk::datasets::SceneOptions;
using vitk::test::contains;
using vitk::test::files_under;
using vitk::test::TempDir;
using vitk::testing::write_fashion_mnist;

TEST(MakeScenesCommand, WritesTheScenesAndRefusesBadUse) {
  TempDir dir;
  const std::string data = write_fashion_mnist(dir);
  const auto ok = vitk::testing::run_vitk(
      dir.path(), {"make-scenes", "--data", data, "--out", "made", "--train", "4", "--val", "2",
                   "--test", "3", "--captions-per-image", "2", "--seed", "9"});
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_TRUE(contains(ok.out, "train: 4 scenes")) << ok.out;
  EXPECT_TRUE(contains(ok.out, "test: 3 scenes, 6 captions")) << ok.out;
  EXPECT_TRUE(contains(ok.out, "made")) << ok.out;
  // The command writes what the library writes.
  SceneOptions o;
  o.fashion_mnist = data;
  o.output = (dir / "library").string();
  o.train = 4, o.val = 2, o.test = 3, o.captions_per_image = 2, o.seed = 9;
  make_scenes(o);
  EXPECT_EQ(files_under(dir / "made"), files_under(dir / "library"));

  const auto again = vitk::testing::run_vitk(
      dir.path(), {"make-scenes", "--data", data, "--out", "made", "--train", "1"}, "again");
  EXPECT_EQ(again.status, 2);
  vitk::testing::expect_one_error_line(again);
  EXPECT_TRUE(contains(again.err, "not empty")) << again.err;

  const auto bad = vitk::testing::run_vitk(
      dir.path(), {"make-scenes", "--data", data, "--out", "new", "--min-objects", "1"}, "bad");
  EXPECT_EQ(bad.status, 2);
  vitk::testing::expect_one_error_line(bad);
  EXPECT_TRUE(contains(bad.err, "--min-objects")) << bad.err;
  EXPECT_FALSE(fs::exists(dir / "new"));

  const auto no_data = vitk::testing::run_vitk(
      dir.path(), {"make-scenes", "--data", "nowhere", "--out", "new"}, "no_data");
  EXPECT_EQ(no_data.status, 1);
  vitk::testing::expect_one_error_line(no_data);

  const auto help = vitk::testing::run_vitk(dir.path(), {"make-scenes", "--help"}, "help");
  EXPECT_EQ(help.status, 0);
  EXPECT_TRUE(contains(help.out, "vitk make-scenes --out")) << help.out;
  const auto list = vitk::testing::run_vitk(dir.path(), {"--help"}, "list");
  EXPECT_TRUE(contains(list.out + list.err, "make-scenes")) << list.out << list.err;
}

}  // namespace
