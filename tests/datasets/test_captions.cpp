// Caption files (datasets/captions.h): the COCO captions JSON with vitk's scene key, Flickr8k's
// token file and Flickr30k's results.csv read from the committed fixtures in
// tests/fixtures/captions/ (the images they name are made here, in a temporary folder), every
// kind of bad input answered by a vitk::Error that says where, and normalize_caption.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "datasets/captions.h"
#include "util/test_util.h"

namespace {

namespace fs = std::filesystem;
using vitk::datasets::CaptionReadOptions;
using vitk::datasets::CaptionSet;
using vitk::datasets::normalize_caption;
using vitk::datasets::read_captions;
using vitk::datasets::read_coco_captions;
using vitk::datasets::read_flickr_captions;
using vitk::datasets::swap_words;
using vitk::test::contains;
using vitk::test::error_of;
using Strings = std::vector<std::string>;

const std::string kFixtures = std::string(VITK_SOURCE_DIR) + "/tests/fixtures/captions/";
const std::string kCoco = kFixtures + "coco.json";
const std::string kFlickr8k = kFixtures + "Flickr8k.token.txt";
const std::string kFlickr30k = kFixtures + "results.csv";

CaptionReadOptions no_folder() {
  CaptionReadOptions o;
  o.check_images = false;
  return o;
}

CaptionReadOptions missing_is_error() {
  CaptionReadOptions o;
  o.skip_missing_images = false;
  return o;
}

// A COCO file around one image entry and its annotations, for the cases of bad input.
std::string coco_with(
    const std::string& image,
    const std::string& annotations = R"([{"id": 1, "image_id": 5, "caption": "x"}])") {
  return R"({"images": [)" + image + R"(], "annotations": )" + annotations + "}";
}

// An image entry of id 5 and file s.png with a "vitk_scene" value.
std::string scene_image(const std::string& scene) {
  return R"({"id": 5, "file_name": "s.png", "vitk_scene": )" + scene + "}";
}

class Captions : public ::testing::Test {
 protected:
  // A 4×4 grey PNG at images/NAME (folders made as needed).
  void image(const std::string& name) {
    const fs::path p = images_ / name;
    fs::create_directories(p.parent_path());
    ASSERT_TRUE(cv::imwrite(p.string(), cv::Mat(4, 4, CV_8UC1, cv::Scalar(128))));
  }
  std::string write(const std::string& name, const std::string& text) {
    return dir_.write(name, text);
  }
  // The error of reading `json` as a COCO file named bad.json (the folder not looked at).
  std::string coco_error(const std::string& json) {
    const std::string path = write("bad.json", json);
    return error_of([&] { read_coco_captions(path, "", no_folder()); });
  }
  std::string flickr_error(const std::string& name, const std::string& text) {
    const std::string path = write(name, text);
    return error_of([&] { read_flickr_captions(path, "", no_folder()); });
  }

  vitk::test::TempDir dir_{"vitk_captions"};
  const fs::path images_ = dir_ / "images";
};

TEST_F(Captions, CocoFixture) {
  image("scenes/scene.png");
  image("a.png");
  // no_captions.png is not made: an image without captions is left out before its file is looked
  // at, so it counts as without captions, not as missing.
  const CaptionSet set = read_coco_captions(kCoco, images_.string(), missing_is_error());
  EXPECT_EQ(set.source, kCoco);
  EXPECT_EQ(set.image_dir, images_.string());
  ASSERT_EQ(set.images.size(), 2u);
  // The order of the "images" array; each image's captions in annotation order, trimmed.
  const auto& scene = set.images[0];
  EXPECT_EQ(scene.id, 7);
  EXPECT_EQ(scene.file_name, "scenes/scene.png");
  EXPECT_EQ(fs::path(scene.path), images_ / "scenes/scene.png");
  EXPECT_EQ(scene.captions,
            (Strings{"a sandal above a ankle boot", "a ankle boot below a sandal"}));
  const auto& a = set.images[1];
  EXPECT_EQ(a.id, 1);
  EXPECT_EQ(a.file_name, "a.png");
  EXPECT_EQ(fs::path(a.path), images_ / "a.png");
  EXPECT_EQ(a.captions, (Strings{"A grey square on its own.", "Four by four pixels"}));
  EXPECT_EQ(set.captions(), 4);
  EXPECT_EQ(set.unknown_image_captions, 1);  // image_id 99
  EXPECT_EQ(set.images_without_captions, 1);
  EXPECT_EQ(set.missing_images, 0);

  // The scene as the fixture gives it; an image without the key has none.
  EXPECT_EQ(scene.grid, 2);
  ASSERT_EQ(scene.objects.size(), 2u);
  EXPECT_EQ(scene.objects[0].name, "sandal");
  EXPECT_EQ(scene.objects[0].row, 0);
  EXPECT_EQ(scene.objects[0].col, 1);
  EXPECT_EQ(scene.objects[0].box.x, 49);
  EXPECT_EQ(scene.objects[0].box.y, 3);
  EXPECT_EQ(scene.objects[0].box.width, 28);
  EXPECT_EQ(scene.objects[0].box.height, 28);
  EXPECT_EQ(scene.objects[0].cell.x, 42);
  EXPECT_EQ(scene.objects[0].cell.width, 42);
  EXPECT_EQ(scene.objects[1].name, "ankle boot");
  EXPECT_EQ(scene.objects[1].row, 1);
  EXPECT_EQ(scene.objects[1].col, 0);
  EXPECT_EQ(scene.objects[1].cell.y, 42);
  EXPECT_TRUE(scene.objects[1].cell.contains(41.5, 83.5));
  EXPECT_FALSE(scene.objects[1].cell.contains(42, 60));
  EXPECT_EQ(a.grid, 0);
  EXPECT_TRUE(a.objects.empty());
}

TEST_F(Captions, CocoMissingImages) {
  image("a.png");  // scenes/scene.png is not there
  const CaptionSet skipped = read_coco_captions(kCoco, images_.string());
  ASSERT_EQ(skipped.images.size(), 1u);
  EXPECT_EQ(skipped.images[0].file_name, "a.png");
  EXPECT_EQ(skipped.missing_images, 1);
  EXPECT_EQ(skipped.images_without_captions, 1);
  EXPECT_EQ(skipped.captions(), 2);

  const std::string e =
      error_of([&] { read_coco_captions(kCoco, images_.string(), missing_is_error()); });
  EXPECT_TRUE(contains(e, (images_ / "scenes/scene.png").string())) << e;
  EXPECT_TRUE(contains(e, "not found")) << e;
  EXPECT_TRUE(contains(e, "coco.json: images[0].file_name")) << e;

  // A folder where the image should be is no image either.
  fs::create_directories(images_ / "scenes/scene.png");
  EXPECT_EQ(read_coco_captions(kCoco, images_.string()).missing_images, 1);

  // Not looking at the folder keeps every image with captions, even from a folder that is not
  // there.
  const CaptionSet unchecked = read_coco_captions(kCoco, (dir_ / "nowhere").string(), [] {
    CaptionReadOptions o = missing_is_error();
    o.check_images = false;
    return o;
  }());
  EXPECT_EQ(unchecked.images.size(), 2u);
  EXPECT_EQ(unchecked.missing_images, 0);
}

TEST_F(Captions, MalformedJsonSaysWhere) {
  const std::string e = coco_error("{\"images\": [],\n  \"annotations\": [,]\n}");
  EXPECT_TRUE(contains(e, "bad.json")) << e;
  EXPECT_TRUE(contains(e, "line 2")) << e;
  EXPECT_TRUE(contains(e, "byte")) << e;
  // The strict reader's rules hold here too: a key given twice is refused.
  EXPECT_TRUE(
      contains(coco_error(R"({"images": [], "images": [], "annotations": []})"), "duplicate key"));
  EXPECT_TRUE(contains(coco_error(""), "bad.json")) << coco_error("");
}

TEST_F(Captions, WrongKindsNameTheJsonPath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[]", "bad.json: the top level: expected an object"},
      {R"({"annotations": []})", "bad.json: missing key \"images\""},
      {R"({"images": []})", "bad.json: missing key \"annotations\""},
      {R"({"images": {}, "annotations": []})", "bad.json: images: expected an array"},
      {R"({"images": [], "annotations": 3})", "bad.json: annotations: expected an array"},
      {coco_with("7"), "bad.json: images[0]: expected an object"},
      {coco_with(R"({"file_name": "a.png"})"), "bad.json: images[0]: missing key \"id\""},
      {coco_with(R"({"id": 5})"), "bad.json: images[0]: missing key \"file_name\""},
      {coco_with(R"({"id": "5", "file_name": "a.png"})"), "bad.json: images[0].id: expected"},
      {coco_with(R"({"id": -5, "file_name": "a.png"})"), "bad.json: images[0].id: expected"},
      {coco_with(R"({"id": 5.5, "file_name": "a.png"})"), "bad.json: images[0].id: expected"},
      {coco_with(R"({"id": 9223372036854775808, "file_name": "a.png"})"),
       "bad.json: images[0].id: 9223372036854775808 is larger than"},
      {coco_with(R"({"id": 5, "file_name": 12})"), "bad.json: images[0].file_name: expected"},
      {coco_with(R"({"id": 5, "file_name": "a.png"})", R"([{"id": 1, "caption": "x"}])"),
       "bad.json: annotations[0]: missing key \"image_id\""},
      {coco_with(R"({"id": 5, "file_name": "a.png"})",
                 R"([{"image_id": 5, "caption": "x"}, {"image_id": "5", "caption": "y"}])"),
       "bad.json: annotations[1].image_id: expected"},
      {coco_with(R"({"id": 5, "file_name": "a.png"})", R"([{"image_id": 5, "caption": 3}])"),
       "bad.json: annotations[0].caption: expected a string, got a number"},
      {coco_with(R"({"id": 5, "file_name": "a.png"})", R"([{"image_id": 5}])"),
       "bad.json: annotations[0]: missing key \"caption\""},
      {coco_with(R"({"id": 5, "file_name": "a.png"})",
                 R"([{"image_id": 5, "caption": "x"}, {"image_id": 5, "caption": " \t\n"}])"),
       "bad.json: annotations[1].caption: an empty caption"},
  };
  for (const auto& [json, part] : cases) {
    const std::string e = coco_error(json);
    EXPECT_TRUE(contains(e, part)) << json << "\n -> " << e;
  }
  // A well-formed file of the same shape reads.
  const std::string good = write("good.json", coco_with(R"({"id": 5, "file_name": "a.png"})"));
  EXPECT_EQ(read_coco_captions(good, "", no_folder()).captions(), 1);
}

TEST_F(Captions, DuplicateIdsAndFileNames) {
  const std::string id =
      coco_error(coco_with(R"({"id": 5, "file_name": "a.png"}, {"id": 5, "file_name": "b.png"})"));
  EXPECT_TRUE(contains(id, "bad.json: images[1].id: 5 is also the id of images[0]")) << id;
  // The same file spelled two ways is still one file.
  const std::string name = coco_error(
      coco_with(R"({"id": 5, "file_name": "d/a.png"}, {"id": 6, "file_name": "./d//a.png"})"));
  EXPECT_TRUE(contains(name,
                       "bad.json: images[1].file_name: './d//a.png' is also the file of "
                       "images[0]"))
      << name;
}

TEST_F(Captions, FileNamesThatLeaveTheFolderAreRefused) {
  for (const std::string file :
       {"../a.png", "/etc/passwd", "d/../../a.png", "d/..", "", ".", "d/", "..", "a\\u0000.png"}) {
    const std::string json = coco_with(R"({"id": 5, "file_name": ")" + file + R"("})");
    const std::string e = coco_error(json);
    EXPECT_TRUE(contains(e, "bad.json: images[0].file_name: ")) << json << "\n -> " << e;
  }
  // ".." inside a name is no component.
  const std::string ok = write("ok.json", coco_with(R"({"id": 5, "file_name": "a..b/c..png"})"));
  EXPECT_EQ(read_coco_captions(ok, "", no_folder()).images.at(0).file_name, "a..b/c..png");
  // Flickr file names go through the same check.
  const std::string e = flickr_error("up.txt", "ok.jpg#0\tfine\n../up.jpg#0\tnot fine\n");
  EXPECT_TRUE(contains(e, "up.txt:2: '../up.jpg'")) << e;
  EXPECT_TRUE(contains(flickr_error("abs.csv", "/abs.jpg| 0| x\n"), "abs.csv:1: '/abs.jpg'"));
}

TEST_F(Captions, SceneIsChecked) {
  const std::string box_a = R"("box": [0, 0, 28, 28], "cell": [0, 0, 42, 42])";
  const std::string box_b = R"("box": [42, 0, 28, 28], "cell": [42, 0, 42, 42])";
  const std::string at = "bad.json: images[0].vitk_scene";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[]", at + ": expected an object"},
      {R"({"objects": []})", at + ": missing key \"grid\""},
      {R"({"grid": 4, "objects": []})", at + ".grid: expected 2 or 3, got 4"},
      {R"({"grid": "2", "objects": []})", at + ".grid: expected"},
      {R"({"grid": 2})", at + ": missing key \"objects\""},
      {R"({"grid": 2, "objects": []})", at + ".objects: a scene has at least one article"},
      {R"({"grid": 2, "objects": [3]})", at + ".objects[0]: expected an object"},
      {R"({"grid": 2, "objects": [{"row": 0, "col": 0, )" + box_a + "}]}",
       at + ".objects[0]: missing key \"name\""},
      {R"({"grid": 2, "objects": [{"name": " ", "row": 0, "col": 0, )" + box_a + "}]}",
       at + ".objects[0].name: an empty name"},
      {R"({"grid": 2, "objects": [{"name": "bag", "row": 2, "col": 0, )" + box_a + "}]}",
       at + ".objects[0].row: 2 is outside the grid of 2 rows"},
      {R"({"grid": 3, "objects": [{"name": "bag", "row": 0, "col": -1, )" + box_a + "}]}",
       at + ".objects[0].col: expected"},
      {R"({"grid": 2, "objects": [{"name": "bag", "row": 0, "col": 0, )" + box_a +
           R"(}, {"name": "coat", "row": 0, "col": 0, )" + box_b + "}]}",
       at + ".objects[1]: cell (0, 0) already holds objects[0]"},
      {R"({"grid": 2, "objects": [{"name": "bag", "row": 0, "col": 0, "box": [0, 0, 28],
           "cell": [0, 0, 42, 42]}]})",
       at + ".objects[0].box: expected [x, y, width, height], got an array of 3"},
      {R"({"grid": 2, "objects": [{"name": "bag", "row": 0, "col": 0, "box": [0, -1, 28, 28],
           "cell": [0, 0, 42, 42]}]})",
       at + ".objects[0].box[1]: expected"},
      {R"({"grid": 2, "objects": [{"name": "bag", "row": 0, "col": 0, "box": [0, 0, 0, 28],
           "cell": [0, 0, 42, 42]}]})",
       at + ".objects[0].box: an empty box"},
      {R"({"grid": 2, "objects": [{"name": "bag", "row": 0, "col": 0, "box": [20, 0, 28, 28],
           "cell": [0, 0, 42, 42]}]})",
       at + ".objects[0].box: [20, 0, 28, 28] is not inside its cell [0, 0, 42, 42]"},
      {R"({"grid": 2, "objects": [{"name": "bag", "row": 0, "col": 0, "box": [0, 0, 28, 28],
           "cell": [0, 0, 4294967296, 42]}]})",
       at + ".objects[0].cell[2]: 4294967296 is larger than"},
      {R"({"grid": 2, "objects": [{"name": "bag", "row": 0, "col": 0, "box": [0, 0, 28, 28]}]})",
       at + ".objects[0]: missing key \"cell\""},
  };
  for (const auto& [scene, part] : cases) {
    const std::string json = coco_with(scene_image(scene));
    const std::string e = coco_error(json);
    EXPECT_TRUE(contains(e, part)) << scene << "\n -> " << e;
  }
  // A box filling its cell exactly is inside it; a 3×3 grid has row 2.
  const std::string good =
      write("good.json",
            coco_with(scene_image(R"({"grid": 3, "objects": [{"name": "bag", "row": 2, "col": 1,
          "box": [28, 56, 28, 28], "cell": [28, 56, 28, 28]}]})")));
  const CaptionSet set = read_coco_captions(good, "", no_folder());
  ASSERT_EQ(set.images.size(), 1u);
  EXPECT_EQ(set.images[0].grid, 3);
  ASSERT_EQ(set.images[0].objects.size(), 1u);
  EXPECT_EQ(set.images[0].objects[0].row, 2);
  EXPECT_EQ(set.images[0].objects[0].col, 1);
}

TEST_F(Captions, Flickr8kFixture) {
  image("1000268201_693b08cb0e.jpg");
  image("1001773457_577c3a7d70.jpg");
  const CaptionSet set = read_flickr_captions(kFlickr8k, images_.string(), missing_is_error());
  EXPECT_EQ(set.source, kFlickr8k);
  ASSERT_EQ(set.images.size(), 2u);
  EXPECT_EQ(set.images[0].id, 0);
  EXPECT_EQ(set.images[0].file_name, "1000268201_693b08cb0e.jpg");
  EXPECT_EQ(fs::path(set.images[0].path), images_ / "1000268201_693b08cb0e.jpg");
  EXPECT_EQ(set.images[0].captions,
            (Strings{"A small girl walks up the stairs of a wooden house .",
                     "A child in pink climbs steps .", "A girl goes into a playhouse ."}));
  EXPECT_EQ(set.images[1].id, 1);
  EXPECT_EQ(set.images[1].file_name, "1001773457_577c3a7d70.jpg");
  EXPECT_EQ(set.images[1].captions,
            (Strings{"Two dogs play on the road .", "A black dog and a spotted dog on asphalt ."}));
  EXPECT_EQ(set.captions(), 5);
  EXPECT_EQ(set.images[0].grid, 0);
  EXPECT_EQ(set.unknown_image_captions + set.missing_images + set.images_without_captions, 0);
}

TEST_F(Captions, Flickr30kFixture) {
  const CaptionSet set = read_flickr_captions(kFlickr30k, "imgs", no_folder());
  ASSERT_EQ(set.images.size(), 2u);
  EXPECT_EQ(set.images[0].id, 0);
  EXPECT_EQ(set.images[0].file_name, "1000092795.jpg");
  EXPECT_EQ(fs::path(set.images[0].path), fs::path("imgs") / "1000092795.jpg");
  // A bar inside a caption belongs to it.
  EXPECT_EQ(set.images[0].captions, (Strings{"Two young men stand beside a garden fence .",
                                             "A sign reads \"open | closed\" by the gate ."}));
  EXPECT_EQ(set.images[1].id, 1);
  EXPECT_EQ(set.images[1].file_name, "10002456.jpg");
  // The second line of this image lacks its second bar, as one line of the published file does.
  EXPECT_EQ(set.images[1].captions, (Strings{"Several workers look at a large machine .",
                                             "Men in hard hats stand near a crane ."}));
  EXPECT_EQ(set.captions(), 4);
}

TEST_F(Captions, FlickrMissingImages) {
  image("1001773457_577c3a7d70.jpg");
  const CaptionSet set = read_flickr_captions(kFlickr8k, images_.string());
  ASSERT_EQ(set.images.size(), 1u);
  // Ids are the order of first appearance in the file, whatever the folder holds.
  EXPECT_EQ(set.images[0].id, 1);
  EXPECT_EQ(set.missing_images, 1);
  const std::string e =
      error_of([&] { read_flickr_captions(kFlickr8k, images_.string(), missing_is_error()); });
  EXPECT_TRUE(contains(e, (images_ / "1000268201_693b08cb0e.jpg").string())) << e;
  EXPECT_TRUE(contains(e, "Flickr8k.token.txt:1")) << e;  // where the image first appears
}

TEST_F(Captions, FlickrMalformedLinesNameTheLine) {
  const std::vector<std::pair<std::string, std::string>> token_cases = {
      {"a.jpg#0\tone\n\na.jpg#1 two\n", "t.txt:3: expected \"image#number<TAB>caption\""},
      {"a.jpg#0\tone\na.jpg\ttwo\n", "t.txt:2: expected \"image#number<TAB>caption\""},
      {"a.jpg#0\tone\na.jpg#x\ttwo\n", "t.txt:2: expected \"image#number<TAB>caption\""},
      {"a.jpg#0\tone\na.jpg#1\t  \n", "t.txt:2: an empty caption"},
      {"a.jpg#0\tone\n#1\ttwo\n", "t.txt:2: '' is an empty file name"},
      {"a.jpg#0\tone\na.jpg#1\tcaf\xe9\n", "t.txt:2: invalid UTF-8 at byte 11"},
      {"just some words\n", "t.txt:1: neither a Flickr8k token line"},
  };
  for (const auto& [text, part] : token_cases) {
    const std::string e = flickr_error("t.txt", text);
    EXPECT_TRUE(contains(e, part)) << text << "\n -> " << e;
  }
  const std::string header = "image_name| comment_number| comment\n";
  const std::vector<std::pair<std::string, std::string>> results_cases = {
      {header + "a.jpg| 0| one\na.jpg| x| two\n",
       "results.csv:3: expected \"image| number| caption\""},
      {header + "a.jpg| 0| one\n\na.jpg 1 two\n",
       "results.csv:4: expected \"image| number| caption\""},
      {header + "a.jpg| 0| one\na.jpg| 1two\n",
       "results.csv:3: expected \"image| number| caption\""},
      {header + "a.jpg| 0|   \n", "results.csv:2: an empty caption"},
      {header + header, "results.csv:2: expected \"image| number| caption\""},
  };
  for (const auto& [text, part] : results_cases) {
    const std::string e = flickr_error("results.csv", text);
    EXPECT_TRUE(contains(e, part)) << text << "\n -> " << e;
  }
}

TEST_F(Captions, CrlfBomAndBlankLines) {
  const std::string bom = "\xef\xbb\xbf";
  const std::string token = write(
      "t.txt", bom + "a.jpg#0\tFirst one .\r\n\r\n  \r\nb.jpg#0\tSecond .\r\na.jpg#1\tThird\r\n");
  const CaptionSet t = read_flickr_captions(token, "", no_folder());
  ASSERT_EQ(t.images.size(), 2u);
  EXPECT_EQ(t.images[0].file_name, "a.jpg");
  EXPECT_EQ(t.images[0].captions, (Strings{"First one .", "Third"}));
  EXPECT_EQ(t.images[1].captions, (Strings{"Second ."}));

  const std::string csv =
      write("r.csv", bom + "image_name| comment_number| comment\r\n\r\nc.jpg| 0| Only one .\r\n");
  const CaptionSet r = read_flickr_captions(csv, "", no_folder());
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_EQ(r.images[0].file_name, "c.jpg");
  EXPECT_EQ(r.images[0].captions, (Strings{"Only one ."}));

  // A results file without its header is still told apart from a token file.
  const CaptionSet headerless =
      read_flickr_captions(write("h.csv", "c.jpg| 0| One .\n"), "", no_folder());
  EXPECT_EQ(headerless.images.at(0).captions, (Strings{"One ."}));

  // A COCO file with a byte order mark (which RFC 8259 lets a reader ignore) and CRLF.
  const std::string json =
      write("crlf.json", bom +
                             "{\r\n\"images\": [{\"id\": 1, \"file_name\": \"a.png\"}],\r\n"
                             "\"annotations\": [{\"image_id\": 1, \"caption\": \"x\"}]\r\n}\r\n");
  EXPECT_EQ(read_coco_captions(json, "", no_folder()).captions(), 1);

  // Blank lines only: an empty set, no error.
  EXPECT_TRUE(read_flickr_captions(write("empty.txt", "\n\r\n"), "", no_folder()).images.empty());
}

TEST_F(Captions, ReadCaptionsChoosesByExtension) {
  const std::string json = write("C.JSON", coco_with(R"({"id": 5, "file_name": "a.png"})"));
  const CaptionSet coco = read_captions(json, "", no_folder());
  ASSERT_EQ(coco.images.size(), 1u);
  EXPECT_EQ(coco.images[0].id, 5);
  const CaptionSet flickr = read_captions(kFlickr30k, "", no_folder());
  EXPECT_EQ(flickr.images.size(), 2u);
  // A token file named .json is read as JSON, and fails as JSON.
  const std::string wrong = write("t.json", "a.jpg#0\tcaption\n");
  EXPECT_TRUE(contains(error_of([&] { read_captions(wrong, "", no_folder()); }), "JSON error"));
}

TEST_F(Captions, FileProblems) {
  const std::string missing = (dir_ / "none.json").string();
  EXPECT_TRUE(contains(error_of([&] { read_coco_captions(missing, ""); }), missing));
  EXPECT_TRUE(contains(error_of([&] { read_flickr_captions(dir_.path().string(), ""); }),
                       "is a directory"));
  // A file over the limit is refused before it is read (a sparse file: no disk used).
  const std::string huge = write("huge.json", "");
  std::error_code ec;
  fs::resize_file(huge, (uint64_t{2} << 30) + 1, ec);
  if (ec) GTEST_SKIP() << "cannot make a sparse file here: " << ec.message();
  const std::string e = error_of([&] { read_coco_captions(huge, "", no_folder()); });
  EXPECT_TRUE(contains(e, huge + ": 2147483649 bytes, more than a caption file can have")) << e;
  EXPECT_TRUE(contains(error_of([&] { read_flickr_captions(huge, "", no_folder()); }), "bytes"));
}

TEST(CaptionNormalize, Cases) {
  EXPECT_EQ(normalize_caption("A Dog, running!"), "a dog running");
  EXPECT_EQ(normalize_caption("  two   spaces\tand\r\nlines  "), "two spaces and lines");
  EXPECT_EQ(normalize_caption("a t-shirt's sleeve"), "a t-shirt's sleeve");
  EXPECT_EQ(normalize_caption("end.start"), "end start");
  EXPECT_EQ(normalize_caption("(left)[right]{x}\"q\"/y;z:w?"), "left right x q y z w");
  EXPECT_EQ(normalize_caption("3 DOGS & 2 cats"), "3 dogs 2 cats");
  EXPECT_EQ(normalize_caption("Caf\xc3\x89 \xc3\x89T\xc3\x89"), "caf\xc3\x89 \xc3\x89t\xc3\x89");
  EXPECT_EQ(normalize_caption("..."), "");
  EXPECT_EQ(normalize_caption(""), "");
  EXPECT_EQ(normalize_caption("a -- b"), "a -- b");
  EXPECT_EQ(normalize_caption("x\x01y"), "x y");
}

// What a mirrored image's caption says: whole words exchanged both ways, each word once (so
// "left right" becomes "right left", not "left left"), other words and parts of words kept.
TEST(CaptionSwapWords, ExchangesWholeWordsBothWays) {
  const std::vector<std::pair<std::string, std::string>> lr{{"left", "right"}};
  EXPECT_EQ(swap_words("a bag to the left of a coat", lr), "a bag to the right of a coat");
  EXPECT_EQ(swap_words("a bag to the right of a coat and a shirt to the left of it", lr),
            "a bag to the left of a coat and a shirt to the right of it");
  EXPECT_EQ(swap_words("left right", lr), "right left");
  EXPECT_EQ(swap_words("leftover rights bright", lr), "leftover rights bright");
  EXPECT_EQ(swap_words("right", lr), "left");
  EXPECT_EQ(swap_words("", lr), "");
  EXPECT_EQ(swap_words("a dog on the left", {}), "a dog on the left");
  const std::vector<std::pair<std::string, std::string>> two{{"left", "right"},
                                                             {"eastward", "westward"}};
  EXPECT_EQ(swap_words("westward on the left", two), "eastward on the right");
  // Mirroring twice is the identity.
  const std::string c = "a sandal to the left of a bag and a coat to the right of it";
  EXPECT_EQ(swap_words(swap_words(c, two), two), c);
}

}  // namespace
