// What `caption --json` and `caption-eval` give when the inputs are odd, on the bundled captioner:
// a file name that is not UTF-8 keeps the JSON (U+FFFD in its place), and an evaluation that
// finds no image to score fails (exit 1) naming the images it looked for, never "0 images ...
// BLEU = 0.00" with exit 0.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/io/json.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::testing::ProcessResult;

const std::string kCaptioner = std::string(VITK_SOURCE_DIR) + "/vit/models/scenes-caption.h5";
const std::string kScene = std::string(VITK_SOURCE_DIR) + "/datasets/scene-samples/test-000001.png";

class CaptionOutputs : public ::testing::Test {
 protected:
  ProcessResult run(const std::vector<std::string>& args, const std::string& tag) {
    vitk::testing::Command c = vitk::testing::vitk_command(dir_.path(), args, tag);
    c.timeout_seconds = 120;
    ProcessResult r = vitk::testing::run_process(c);
    EXPECT_FALSE(r.timed_out) << "timed out: vitk " << args[0];
    return r;
  }
  // caption-eval of the bundled model on the COCO captions `json`, images in `images`.
  ProcessResult eval(const std::string& json, const fs::path& images, const std::string& tag) {
    std::ofstream(dir_ / (tag + ".json")) << json;
    return run({"caption-eval", "--model", kCaptioner, "--captions",
                (dir_ / (tag + ".json")).string(), "--images", images.string()},
               tag);
  }
  vitk::test::TempDir dir_{"vitk_caption_outputs"};
};

// COCO captions of `n` images named test-00000K.png, one caption each.
std::string coco(int n) {
  std::string images, annotations;
  for (int i = 1; i <= n; ++i) {
    const std::string sep = i > 1 ? ", " : "";
    images += sep + R"({"id": )" + std::to_string(i) + R"(, "file_name": "test-00000)" +
              std::to_string(i) + R"(.png"})";
    annotations += sep + R"({"id": )" + std::to_string(i) + R"(, "image_id": )" +
                   std::to_string(i) + R"(, "caption": "a bag"})";
  }
  return R"({"images": [)" + images + R"(], "annotations": [)" + annotations + "]}";
}

TEST_F(CaptionOutputs, JsonKeepsAFileNameThatIsNotUtf8) {
  const fs::path ok = dir_ / "ok.png", bad = dir_ / "bad\xff.png";
  fs::copy_file(kScene, ok);
  fs::copy_file(kScene, bad);
  ProcessResult r =
      run({"caption", "--model", kCaptioner, ok.string(), bad.string(), "--json"}, "json");
  EXPECT_EQ(r.status, 0) << r.err;
  vitk::io::Json j = vitk::io::parse_json(r.out, "caption --json");
  ASSERT_TRUE(j.is_array() && j.size() == 2u) << r.out;
  EXPECT_EQ(j[0]["image"].get<std::string>(), ok.string());
  EXPECT_EQ(j[1]["image"].get<std::string>(), (dir_ / "bad\xef\xbf\xbd.png").string());
  EXPECT_TRUE(j[1]["captions"][0]["caption"].is_string()) << r.out;

  // With a file that cannot be read as well: the JSON of the others, exit 1 as for any file.
  r = run({"caption", "--model", kCaptioner, ok.string(), bad.string(),
           (dir_ / "gone\xfe.png").string(), "--json"},
          "json_missing");
  EXPECT_EQ(r.status, 1) << r.err;
  j = vitk::io::parse_json(r.out, "caption --json");
  EXPECT_TRUE(j.is_array() && j.size() == 2u) << r.out;
  EXPECT_TRUE(contains(r.err, "gone\xfe.png")) << r.err;
}

TEST_F(CaptionOutputs, EvalOfNoImageFailsNamingTheMissingImages) {
  // --images at a folder that does not exist.
  ProcessResult r = eval(coco(5), dir_ / "nowhere", "no_folder");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "no_folder.json: no image was found to score: none of its 5 "
                       "captioned images is in '" +
                           (dir_ / "nowhere").string() + "' (no such folder"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "missing: '" + (dir_ / "nowhere" / "test-000001.png").string() +
                                  "', '" + (dir_ / "nowhere" / "test-000002.png").string() +
                                  "', '" + (dir_ / "nowhere" / "test-000003.png").string() +
                                  "', ..."))
      << r.err;
  EXPECT_FALSE(contains(r.out, "BLEU")) << r.out;
  vitk::testing::expect_one_error_line(r);

  // A folder that holds none of them.
  fs::create_directories(dir_ / "empty");
  r = eval(coco(2), dir_ / "empty", "none_there");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "none of its 2 captioned images is in '" + (dir_ / "empty").string() +
                                  "'; missing: '"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "no such folder")) << r.err;

  // No images or no annotations at all.
  for (const std::string& json :
       {std::string(R"({"images": [], "annotations": []})"),
        std::string(R"({"images": [{"id": 1, "file_name": "a.png"}], "annotations": []})")}) {
    r = eval(json, fs::path(kScene).parent_path(), "empty_lists");
    EXPECT_EQ(r.status, 1) << json << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "no image was found to score: it lists no image with a caption"))
        << r.err;
    EXPECT_FALSE(contains(r.out, "BLEU")) << r.out;
  }

  // The images there: scored, exit 0.
  r = eval(coco(1), fs::path(kScene).parent_path(), "found");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, ": 1 images, 1 reference captions")) << r.out;
}

}  // namespace
