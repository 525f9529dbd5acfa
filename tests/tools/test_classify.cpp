// `vitk classify` end to end: a tiny checkpoint built here, images of every kind (generated with
// OpenCV, plus the fixtures OpenCV cannot write) and every kind of bad file, run through the
// executable as a user would; the output is parsed (JSON strictly, by nlohmann/json) and checked
// against the model run in-process on the same files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>

#include "common/io/checkpoint.h"
#include "datasets/image_io.h"
#include "datasets/preprocess.h"
#include "tools/classify_output.h"
#include "util/profile_table.h"
#include "util/test_util.h"
#include "util/vitk_process.h"
#include "vit/checkpoint.h"
#include "vit/classify.h"
#include "vit/vit.h"

namespace {

namespace fs = std::filesystem;

// The JSON output is read back with nlohmann/json, which is strict (RFC 8259) and keeps the
// document's key order in an ordered_json.
using Json = nlohmann::ordered_json;

Json parse_json(const std::string& text) {
  return Json::parse(text);
}

// The keys of an object in document order.
std::vector<std::string> keys_of(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  return keys;
}

// What the end-to-end tests rely on when they read the output back: strictness and key order.
TEST(JsonParserSelfTest, AcceptsValidAndRejectsInvalid) {
  Json v = parse_json(R"({"b\"\u00e9": {"c": "x\ny"}, "a": [1, -2.5e3, true, null]})");
  EXPECT_EQ(keys_of(v), (std::vector<std::string>{"b\"\xC3\xA9", "a"}));
  EXPECT_EQ(v["a"][1].get<double>(), -2500);
  for (const char* bad :
       {"{", "{\"a\": 1,}", "[1 2]", "{'a': 1}", "\"a\nb\"", "nan", "[01]", "{} {}"})
    EXPECT_THROW(parse_json(bad), Json::parse_error) << bad;
}

TEST(ClassifyOutput, EscapingAndWidths) {
  EXPECT_EQ(vitk::tools::json_string("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  EXPECT_EQ(vitk::tools::json_string("\xC3\xA9"), "\"\xC3\xA9\"");
  EXPECT_EQ(vitk::tools::json_string("\xFF"
                                     "a"),
            "\"\xEF\xBF\xBD"
            "a\"");  // not UTF-8
  EXPECT_EQ(parse_json(vitk::tools::json_string("x\ty\x7f")), "x\ty\x7f");
  EXPECT_EQ(vitk::tools::csv_field("plain"), "plain");
  EXPECT_EQ(vitk::tools::csv_field("a,\"b\""), "\"a,\"\"b\"\"\"");
  EXPECT_EQ(vitk::tools::display_width("\xC3\xA9t\xC3\xA9"), 3u);
}

// The --json document as written: one entry a line in input order, keys in the documented order,
// each probability in the fewest digits that read back as the same float, null when it is not
// finite, file names that are not UTF-8 made valid.
TEST(ClassifyOutput, JsonDocumentIsWrittenAsItGoes) {
  const std::vector<std::string> labels = {"cat", "dog \"big\""};
  std::ostringstream out;
  auto writer = vitk::tools::make_json_writer(out, labels);
  writer->begin();
  vitk::Classification good;
  good.path = "a.png";
  good.classes = {1, 0};
  good.probabilities = {0.7f, 0.3f};
  writer->write(good);
  EXPECT_EQ(out.str(),
            "{\n  \"a.png\": {\"labels\":[\"dog \\\"big\\\"\",\"cat\"],\"probabilities\":[0.7,0.3],"
            "\"classes\":[1,0]}")
      << "each entry is out before the next image is classified";
  vitk::Classification bad;
  bad.path = "b\xFF.png";
  bad.error = "not an image";
  writer->write(bad);
  vitk::Classification odd;
  odd.path = "c.png";
  odd.classes = {0};
  odd.probabilities = {std::nanf("")};
  writer->write(odd);
  writer->end();
  EXPECT_EQ(
      out.str(),
      "{\n  \"a.png\": {\"labels\":[\"dog \\\"big\\\"\",\"cat\"],\"probabilities\":[0.7,0.3],"
      "\"classes\":[1,0]},\n  \"b\xEF\xBF\xBD.png\": {\"error\":\"not an image\"},\n  \"c.png\": "
      "{\"labels\":[\"cat\"],\"probabilities\":[null],\"classes\":[0]}\n}\n");
  const Json doc = parse_json(out.str());
  EXPECT_EQ(doc["a.png"]["probabilities"][0].get<float>(), 0.7f) << "reads back as the same float";
  std::ostringstream empty;
  auto none = vitk::tools::make_json_writer(empty, labels);
  none->begin();
  none->end();
  EXPECT_EQ(empty.str(), "{}\n");
}

TEST(TopK, SoftmaxOrderAndTies) {
  const float logits[5] = {1.f, 3.f, 3.f, -2.f, 0.f};
  std::vector<int> idx;
  std::vector<float> p;
  vitk::vit::top_k(logits, 5, 3, idx, p);
  EXPECT_EQ(idx, (std::vector<int>{1, 2, 0}));
  double z = std::exp(1.) + 2 * std::exp(3.) + std::exp(-2.) + std::exp(0.);
  EXPECT_NEAR(p[0], std::exp(3.) / z, 1e-6);
  EXPECT_EQ(p[0], p[1]);
  vitk::vit::top_k(logits, 5, 99, idx, p);  // capped at the class count; sums to 1
  EXPECT_EQ(idx.size(), 5u);
  double sum = 0;
  for (float v : p) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

// ---- End to end ---------------------------------------------------------------------------------

using Result = vitk::testing::ProcessResult;
using vitk::test::contains;
using vitk::test::lines_of;

const std::vector<std::string> kClasses = {"cat", "dog, big", "bird \"tweety\"", "fish \xC3\xA9"};

// Writes a randomly initialised model whose head is scaled up, so that different images get
// clearly different top classes (a batching mix-up would show).
void write_checkpoint(const std::string& path, int64_t channels, uint64_t seed) {
  vitk::vit::VitConfig c;
  c.image_height = c.image_width = 16;
  c.patch_size = 8;
  c.channels = channels;
  c.num_classes = static_cast<int64_t>(kClasses.size());
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.layers = 1;
  c.pool = "avg";  // the mean of the patch tokens depends on the image more than a class token
  if (channels == 1) c.preprocess.mean = {0.5f}, c.preprocess.std = {0.5f};
  vitk::ParamStore params;
  vitk::vit::VisionTransformer model(params, c);
  params.finalize();
  vitk::ops::Rng rng(seed);
  model.init(rng);
  if (vitk::Parameter* head = params.find("head.weight")) {
    float* w = head->value.f32();
    for (int64_t i = 0; i < head->numel(); ++i) w[i] *= 200.f;
  }
  vitk::io::CheckpointMeta meta;
  meta.config = vitk::vit::to_config_map(c);
  meta.class_names = kClasses;
  vitk::io::save_checkpoint(path, params, meta);
}

class Classify : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    temp_ = new vitk::test::TempDir("vitk_classify");
    dir_ = &temp_->path();
    write_checkpoint((*dir_ / "rgb.h5").string(), 3, 7);
    write_checkpoint((*dir_ / "gray.h5").string(), 1, 8);
    make_images();
  }
  static void TearDownTestSuite() { delete temp_; }

  static std::string put(const std::string& name, const std::vector<uint8_t>& bytes) {
    fs::path p = *dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }
  static std::vector<uint8_t> encode(const std::string& ext, const cv::Mat& m,
                                     const std::vector<int>& params = {}) {
    std::vector<uint8_t> b;
    EXPECT_TRUE(cv::imencode(ext, m, b, params)) << ext;
    return b;
  }

  // Every kind of good image, each different (gradients of different directions and colours
  // at different sizes), and every kind of bad file; paths relative to dir_.
  static void make_images() {
    auto scene = [](int rows, int cols, int type, int seed) {
      cv::Mat m(rows, cols, type);
      const double top = CV_MAT_DEPTH(type) == CV_16U ? 65535 : 255;
      for (int y = 0; y < rows; ++y)
        for (int x = 0; x < cols; ++x)
          for (int c = 0; c < m.channels(); ++c) {
            double v = std::fmod(
                0.5 + 0.5 * std::sin(0.3 * (seed + 1) * (x + 2 * c) + 0.2 * seed * y + seed), 1.0);
            if (CV_MAT_DEPTH(type) == CV_16U)
              m.ptr<uint16_t>(y)[x * m.channels() + c] = static_cast<uint16_t>(v * top);
            else
              m.ptr<uint8_t>(y)[x * m.channels() + c] = static_cast<uint8_t>(v * top);
          }
      return m;
    };
    int seed = 0;
    auto add = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
      good_->push_back(name);
      put(name, bytes);
      ++seed;
    };
    good_ = new std::vector<std::string>;
    bad_ = new std::vector<std::pair<std::string, std::string>>;
    add("rgb.png", encode(".png", scene(30, 40, CV_8UC3, seed)));
    add("gray.png", encode(".png", scene(40, 30, CV_8UC1, seed)));
    add("alpha.png", encode(".png", scene(20, 20, CV_8UC4, seed)));
    add("rgb16.png", encode(".png", scene(24, 36, CV_16UC3, seed)));
    add("gray16.png", encode(".png", scene(36, 24, CV_16UC1, seed)));
    add("photo.jpg", encode(".jpg", scene(48, 64, CV_8UC3, seed)));
    add("gray.jpg", encode(".jpg", scene(64, 48, CV_8UC1, seed)));
    add("progressive.jpg",
        encode(".jpg", scene(50, 50, CV_8UC3, seed), {cv::IMWRITE_JPEG_PROGRESSIVE, 1}));
    add("image.bmp", encode(".bmp", scene(17, 23, CV_8UC3, seed)));
    add("image.tif", encode(".tif", scene(23, 17, CV_8UC3, seed)));
    add("image.webp", encode(".webp", scene(32, 32, CV_8UC3, seed)));
    add("image.ppm", encode(".ppm", scene(16, 16, CV_8UC3, seed)));
    add("sub dir/we\"ird, name \xC3\xBC.png", encode(".png", scene(33, 33, CV_8UC3, seed)));
    const std::string fixtures = std::string(VITK_SOURCE_DIR) + "/tests/fixtures/images/";
    for (const char* f : {"cmyk.jpg", "palette.png", "palette_alpha.png", "gray_alpha.png",
                          "bilevel.png", "exif_rotate90.jpg"}) {
      std::ifstream in(fixtures + f, std::ios::binary);
      add(std::string("fixtures/") + f, std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                                                             std::istreambuf_iterator<char>()));
    }

    // Bad files and the words their error must contain.
    const std::vector<uint8_t> jpg = encode(".jpg", scene(40, 40, CV_8UC3, 99));
    const std::vector<uint8_t> png = encode(".png", scene(40, 40, CV_8UC3, 98));
    auto bad = [&](const std::string& name, const std::string& why) {
      bad_->emplace_back(name, why);
    };
    bad("missing.png", "file not found");
    fs::create_directories(*dir_ / "folder.png");
    bad("folder.png", "is a directory");
    put("empty.png", {});
    bad("empty.png", "empty file");
    put("truncated.jpg", std::vector<uint8_t>(jpg.begin(), jpg.begin() + jpg.size() / 2));
    bad("truncated.jpg", "truncated JPEG");
    put("truncated.png", std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2));
    bad("truncated.png", "truncated PNG");
    const std::string text = "this is a text file, not a JPEG\n";
    put("text.jpg", std::vector<uint8_t>(text.begin(), text.end()));
    bad("text.jpg", "not an image");
    std::vector<uint8_t> bomb = png;  // IHDR says 100000 x 100000; the CRC is fixed below
    auto be32 = [](uint8_t* p, uint32_t v) {
      p[0] = uint8_t(v >> 24), p[1] = uint8_t(v >> 16), p[2] = uint8_t(v >> 8), p[3] = uint8_t(v);
    };
    be32(&bomb[16], 100000);
    be32(&bomb[20], 100000);
    uint32_t crc = 0xFFFFFFFFu;
    for (int i = 12; i < 29; ++i) {
      crc ^= bomb[i];
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    be32(&bomb[29], ~crc);
    put("bomb.png", bomb);
    bad("bomb.png", "exceeds --max-pixels");
    std::ifstream gif(fixtures + "unsupported.gif", std::ios::binary);
    put("animation.gif", std::vector<uint8_t>((std::istreambuf_iterator<char>(gif)),
                                              std::istreambuf_iterator<char>()));
    bad("animation.gif", "unsupported image format (GIF)");
    ASSERT_EQ(mkfifo((*dir_ / "pipe.png").c_str(), 0600), 0);
    bad("pipe.png", "not a regular file");
  }

  // Runs vitk in dir_ with stdin from `input` (a string) and captures stdout and stderr.
  static Result run(const std::vector<std::string>& args, const std::string& input = "") {
    std::ofstream(*dir_ / "stdin.txt", std::ios::binary) << input;
    return vitk::testing::run_vitk(*dir_, args, "run", "stdin.txt");
  }

  static std::vector<std::string> all_files() {
    std::vector<std::string> files;
    // Bad files between good ones, so that batches mix both.
    for (size_t i = 0; i < std::max(good_->size(), bad_->size()); ++i) {
      if (i < good_->size()) files.push_back((*good_)[i]);
      if (i < bad_->size()) files.push_back((*bad_)[i].first);
    }
    return files;
  }

  // What the model gives for a file, computed in-process: decode, eval transform, forward.
  static std::vector<float> expected_probabilities(
      const std::string& checkpoint, const std::string& file,
      const vitk::datasets::Preprocess* override = nullptr) {
    vitk::vit::LoadedVit m = vitk::vit::load_vit((*dir_ / checkpoint).string());
    const auto& c = m.config;
    cv::Mat decoded;
    std::string error;
    EXPECT_TRUE(vitk::datasets::decode_image_file((*dir_ / file).string(), decoded, error))
        << error;
    vitk::Tensor x({1, c.channels, c.image_height, c.image_width});
    vitk::datasets::preprocess_image(
        vitk::datasets::to_channels(decoded, static_cast<int>(c.channels)),
        override ? *override : c.preprocess, c.image_height, c.image_width, x.f32());
    vitk::Arena arena;
    vitk::nn::Context ctx;
    ctx.arena = &arena;
    vitk::Tensor logits = m.model->forward(ctx, x);
    std::vector<int> idx;
    std::vector<float> p;
    vitk::vit::top_k(logits.f32(), c.num_classes, static_cast<int>(c.num_classes), idx, p);
    std::vector<float> by_class(static_cast<size_t>(c.num_classes));
    for (size_t i = 0; i < idx.size(); ++i) by_class[static_cast<size_t>(idx[i])] = p[i];
    return by_class;
  }

  // Checks one JSON entry of a good file against the in-process model.
  static void check_entry(const Json& entry, const std::vector<float>& want, size_t k,
                          const std::string& file) {
    ASSERT_TRUE(entry.is_object()) << file;
    ASSERT_FALSE(entry.contains("error")) << file << ": " << entry["error"];
    // The documented order of the keys.
    ASSERT_EQ(keys_of(entry), (std::vector<std::string>{"labels", "probabilities", "classes"}))
        << file;
    const Json &labels = entry["labels"], &probs = entry["probabilities"],
               &classes = entry["classes"];
    ASSERT_EQ(labels.size(), k) << file;
    ASSERT_EQ(probs.size(), k) << file;
    double sum = 0;
    for (size_t i = 0; i < k; ++i) {
      const int cls = classes[i].get<int>();
      ASSERT_GE(cls, 0);
      ASSERT_LT(cls, static_cast<int>(kClasses.size()));
      EXPECT_EQ(labels[i], kClasses[static_cast<size_t>(cls)]) << file;
      EXPECT_NEAR(probs[i].get<double>(), want[static_cast<size_t>(cls)], 2e-5) << file;
      if (i) {
        EXPECT_LE(probs[i].get<double>(), probs[i - 1].get<double>()) << file;
      }
      sum += probs[i].get<double>();
    }
    if (k == kClasses.size()) {
      EXPECT_NEAR(sum, 1.0, 1e-5) << file;
    }
  }

  static vitk::test::TempDir* temp_;
  static const fs::path* dir_;
  static std::vector<std::string>* good_;
  static std::vector<std::pair<std::string, std::string>>* bad_;
};

vitk::test::TempDir* Classify::temp_ = nullptr;
const fs::path* Classify::dir_ = nullptr;
std::vector<std::string>* Classify::good_ = nullptr;
std::vector<std::pair<std::string, std::string>>* Classify::bad_ = nullptr;

// Every error is one line "vitk: error: PATH: reason" and nothing else reaches stderr (no
// libpng or libjpeg chatter).
void expect_error_lines(const Result& r,
                        const std::vector<std::pair<std::string, std::string>>& bad) {
  const std::vector<std::string> got = lines_of(r.err);
  EXPECT_EQ(got.size(), bad.size()) << r.err;
  for (const auto& [file, why] : bad) {
    const std::string prefix = "vitk: error: " + file + ": ";
    auto it = std::find_if(got.begin(), got.end(),
                           [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
    ASSERT_NE(it, got.end()) << file << "\n" << r.err;
    EXPECT_TRUE(contains(*it, why)) << *it;
  }
}

TEST_F(Classify, JsonForEveryKindOfGoodAndBadFile) {
  std::vector<std::string> args = {"classify", "--model", "rgb.h5",       "--json",
                                   "--top-k",  "4",       "--batch-size", "3"};
  const std::vector<std::string> files = all_files();
  args.insert(args.end(), files.begin(), files.end());
  Result r = run(args);
  EXPECT_EQ(r.status, 1) << r.err;  // some files failed
  expect_error_lines(r, *bad_);
  Json doc;
  ASSERT_NO_THROW(doc = parse_json(r.out)) << r.out;
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(keys_of(doc), files);  // in order
  for (const auto& [file, why] : *bad_) {
    ASSERT_TRUE(doc.contains(file) && doc[file].contains("error")) << file;
    const std::string error = doc[file]["error"];
    EXPECT_TRUE(contains(error, why)) << file << ": " << error;
    EXPECT_FALSE(doc[file].contains("labels"));
  }
  std::set<int> top1;
  for (const std::string& file : *good_) {
    ASSERT_TRUE(doc.contains(file)) << file;
    check_entry(doc[file], expected_probabilities("rgb.h5", file), kClasses.size(), file);
    top1.insert(doc[file]["classes"][0].get<int>());
  }
  // The images differ enough for the model to disagree about them: results cannot have been
  // shuffled between files without the comparison above noticing.
  EXPECT_GE(top1.size(), 2u);
}

TEST_F(Classify, GreyModelTakesColourImagesAndTheReverse) {
  std::vector<std::string> args = {"classify", "--model", "gray.h5", "--json", "--top-k", "2"};
  args.insert(args.end(), good_->begin(), good_->end());
  Result r = run(args);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  Json doc = parse_json(r.out);
  for (const std::string& file : *good_)
    check_entry(doc.at(file), expected_probabilities("gray.h5", file), 2, file);
}

TEST_F(Classify, TableIsAlignedAndErrorsGoToStderr) {
  std::vector<std::string> args = {"classify", "--model", "rgb.h5", "--top-k", "2"};
  const std::vector<std::string> files = all_files();
  args.insert(args.end(), files.begin(), files.end());
  Result r = run(args);
  EXPECT_EQ(r.status, 1);
  expect_error_lines(r, *bad_);
  const std::vector<std::string> rows = lines_of(r.out);
  ASSERT_EQ(rows.size(), good_->size() + 1) << r.out;
  EXPECT_EQ(rows[0].rfind("image ", 0), 0u) << rows[0];
  EXPECT_TRUE(contains(rows[0], "label 1")) << rows[0];
  // The first label starts in the same column on every row (counted in characters: one path
  // holds a two-byte letter).
  const size_t column = rows[0].find("label 1");
  for (size_t i = 1; i < rows.size(); ++i) {
    const std::string& path = (*good_)[i - 1];
    ASSERT_EQ(rows[i].rfind(path, 0), 0u) << rows[i];
    const std::string rest = rows[i].substr(path.size());
    const size_t spaces = rest.find_first_not_of(' ');
    EXPECT_EQ(vitk::tools::display_width(path) + spaces, column) << rows[i];
    bool named = false;
    for (const std::string& c : kClasses) named |= rest.compare(spaces, c.size(), c) == 0;
    EXPECT_TRUE(named) << rows[i];
  }
}

TEST_F(Classify, CsvQuotesAndStdinList) {
  std::string list;
  for (const std::string& f : all_files()) list += f + "\n";
  Result r = run({"classify", "--model", "rgb.h5", "--csv", "--top-k", "3", "-"}, list);
  EXPECT_EQ(r.status, 1);
  expect_error_lines(r, *bad_);
  const std::vector<std::string> rows = lines_of(r.out);
  ASSERT_EQ(rows.size(), all_files().size() + 1);
  EXPECT_EQ(rows[0],
            "path,label_1,probability_1,label_2,probability_2,label_3,probability_3,error");
  for (const std::string& row : rows) {
    // Outside quotes, every row has 1 + 2·3 + 1 fields.
    int fields = 1;
    bool quoted = false;
    for (char c : row) {
      if (c == '"') quoted = !quoted;
      if (c == ',' && !quoted) ++fields;
    }
    EXPECT_EQ(fields, 8) << row;
  }
  EXPECT_TRUE(contains(r.out, "\"sub dir/we\"\"ird, name \xC3\xBC.png\",")) << r.out;
  EXPECT_TRUE(contains(r.out, "\nmissing.png,,,,,,,file not found\n")) << r.out;
}

TEST_F(Classify, DirectoryIsWalkedRecursively) {
  const fs::path tree = *dir_ / "tree";
  fs::create_directories(tree / "a" / "b");
  fs::copy_file(*dir_ / "rgb.png", tree / "z.png", fs::copy_options::overwrite_existing);
  fs::copy_file(*dir_ / "photo.jpg", tree / "a" / "b" / "x.JPG",
                fs::copy_options::overwrite_existing);
  std::ofstream(tree / "a" / "notes.txt") << "not an image";
  Result r = run({"classify", "--model", "rgb.h5", "--json", "--dir", "tree"});
  EXPECT_EQ(r.status, 0) << r.err;
  Json doc = parse_json(r.out);
  EXPECT_EQ(keys_of(doc), (std::vector<std::string>{"tree/a/b/x.JPG", "tree/z.png"})) << r.out;
  Result none = run({"classify", "--model", "rgb.h5", "--dir", "tree/a/b/x.JPG"});
  EXPECT_EQ(none.status, 1);
  EXPECT_TRUE(contains(none.err, "not a directory")) << none.err;
}

TEST_F(Classify, PreprocessingFlagsOverrideTheCheckpoint) {
  vitk::datasets::Preprocess p;
  p.resize = "squash";
  p.interpolation = "bilinear";
  p.mean = {0.5f, 0.5f, 0.5f};
  p.std = {0.25f, 0.5f, 0.5f};
  Result r = run({"classify", "--model", "rgb.h5", "--json", "--top-k", "4", "--resize", "squash",
                  "--interpolation", "bilinear", "--mean", "0.5,0.5,0.5", "--std", "0.25,0.5,0.5",
                  "photo.jpg", "rgb.png"});
  EXPECT_EQ(r.status, 0) << r.err;
  Json doc = parse_json(r.out);
  for (const char* f : {"photo.jpg", "rgb.png"})
    check_entry(doc.at(f), expected_probabilities("rgb.h5", f, &p), 4, f);

  p = vitk::datasets::Preprocess();
  p.crop_fraction = 0.5f;
  p.interpolation = "nearest";
  r = run({"classify", "--model", "rgb.h5", "--json", "--top-k", "4", "--crop-fraction", "0.5",
           "--interpolation", "nearest", "photo.jpg"});
  EXPECT_EQ(r.status, 0) << r.err;
  check_entry(parse_json(r.out).at("photo.jpg"), expected_probabilities("rgb.h5", "photo.jpg", &p),
              4, "photo.jpg");

  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--interpolation", "lanczos"},
        {"--mean", "0.5,0.5"},
        {"--std", "0,1,1"},
        {"--resize", "fit"},
        {"--crop-fraction", "1.5"},
        {"--mean", "a,b,c"},
        {"--top-k", "0"},
        {"--batch-size", "0"},
        {"--json", "--csv"}}) {
    std::vector<std::string> args = {"classify", "--model", "rgb.h5", "photo.jpg"};
    args.insert(args.end(), bad.begin(), bad.end());
    Result u = run(args);
    EXPECT_EQ(u.status, 2) << bad[0] << ": " << u.err;
    EXPECT_EQ(lines_of(u.err).size(), 1u) << u.err;
  }
}

TEST_F(Classify, LabelsFileReplacesClassNames) {
  std::ofstream(*dir_ / "labels.txt") << "zero\none\r\ntwo\nthree\n";
  Result r = run({"classify", "--model", "rgb.h5", "--json", "--top-k", "4", "--labels",
                  "labels.txt", "rgb.png"});
  EXPECT_EQ(r.status, 0) << r.err;
  Json doc = parse_json(r.out);
  ASSERT_TRUE(doc.contains("rgb.png")) << r.out;
  const Json& e = doc["rgb.png"];
  const std::vector<std::string> names = {"zero", "one", "two", "three"};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(e["labels"][i], names[e["classes"][i].get<size_t>()]);

  std::ofstream(*dir_ / "three.txt") << "a\nb\nc\n";
  r = run({"classify", "--model", "rgb.h5", "--labels", "three.txt", "rgb.png"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "three.txt has 3 labels (one a line), but the model has 4 classes"))
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(Classify, MaxPixelsIsCheckedPerFile) {
  // 40 × 30 = 1200 pixels: over a limit of 1000; 20 × 20 = 400: under.
  Result r = run({"classify", "--model", "rgb.h5", "--max-pixels", "1000", "rgb.png", "alpha.png"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "vitk: error: rgb.png: image of 40x30 pixels exceeds --max-pixels 1000\n");
  EXPECT_EQ(lines_of(r.out).size(), 2u) << r.out;
}

TEST_F(Classify, UsageAndModelErrors) {
  Result r = run({"classify", "--model", "rgb.h5"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "no images given")) << r.err;
  r = run({"classify", "--model", "nothere.h5", "rgb.png"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "nothere.h5")) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  r = run({"classify", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(contains(r.out, "--max-pixels")) << r.out;
}

TEST_F(Classify, BundledModelOrAClearError) {
  // The bundled model is committed under vit/models once trained; until then the error says
  // where it looked. Either way the samples or the message are checked.
  const fs::path bundled = fs::path(VITK_SOURCE_DIR) / "vit/models/fmnist-vit.h5";
  const fs::path samples = fs::path(VITK_SOURCE_DIR) / "datasets/samples";
  std::error_code ec;
  if (!fs::exists(bundled, ec)) {
    Result r = run({"classify", "rgb.png"});
    EXPECT_EQ(r.status, 1);
    EXPECT_TRUE(contains(r.err, "bundled model")) << r.err;
    EXPECT_TRUE(contains(r.err, "--model")) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    return;
  }
  ASSERT_TRUE(fs::is_directory(samples, ec)) << "bundled model without datasets/samples";
  Result r = run({"classify", "--json", "--top-k", "1", "--dir", samples.string()});
  EXPECT_EQ(r.status, 0) << r.err;
  Json doc = parse_json(r.out);
  // Samples are named like 0003-sandal.png: most must be classified as their name says.
  int right = 0;
  for (const auto& item : doc.items()) {
    std::string stem = fs::path(item.key()).stem().string();
    std::string want = stem.substr(stem.find('-') + 1);
    std::string got = item.value()["labels"][0];
    std::string slug;
    for (char c : got) {
      if (std::isalnum(static_cast<unsigned char>(c)))
        slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      else if (!slug.empty() && slug.back() != '-')
        slug += '-';
    }
    while (!slug.empty() && slug.back() == '-') slug.pop_back();
    right += slug == want;
  }
  EXPECT_GE(right * 10, static_cast<int>(doc.size()) * 7) << r.out;
}

// `classify --json --top-k 10 --dir datasets/samples` with the bundled model, or nothing when
// the model or the samples are missing.
std::vector<std::string> bundled_samples_top10() {
  const fs::path bundled = fs::path(VITK_SOURCE_DIR) / "vit/models/fmnist-vit.h5";
  const fs::path samples = fs::path(VITK_SOURCE_DIR) / "datasets/samples";
  std::error_code ec;
  if (!fs::exists(bundled, ec) || !fs::is_directory(samples, ec)) return {};
  return {"classify", "--json", "--top-k", "10", "--dir", samples.string()};
}

// The bundled model at int8 (its linear layers on int8 weights and activations): every sample
// gets f32's class, and every probability is within 0.03 of f32's, without being f32's bits.
// On the whole test set: tests/README.md#int8.
TEST_F(Classify, BundledModelAtInt8AgreesWithF32) {
  const std::vector<std::string> args = bundled_samples_top10();
  if (args.empty()) GTEST_SKIP() << "no bundled model";
  std::vector<std::string> at_int8 = args;
  at_int8.insert(at_int8.end(), {"--precision", "int8"});
  const Result f32 = run(args), int8 = run(at_int8);
  ASSERT_EQ(f32.status, 0) << f32.err;
  ASSERT_EQ(int8.status, 0) << int8.err;
  const Json a = parse_json(f32.out), b = parse_json(int8.out);
  ASSERT_EQ(keys_of(a), keys_of(b));
  ASSERT_GE(a.size(), 10u);
  double worst = 0, total = 0;
  for (const auto& item : a.items()) {
    const Json& x = item.value();
    const Json& y = b.at(item.key());
    EXPECT_EQ(x["labels"][0], y["labels"][0]) << item.key();
    std::map<std::string, double> p;
    for (size_t i = 0; i < x["labels"].size(); ++i)
      p[x["labels"][i].get<std::string>()] = x["probabilities"][i].get<double>();
    ASSERT_EQ(y["labels"].size(), p.size());
    for (size_t i = 0; i < y["labels"].size(); ++i) {
      const double d =
          std::fabs(y["probabilities"][i].get<double>() - p.at(y["labels"][i].get<std::string>()));
      worst = std::max(worst, d);
      total += d;
    }
  }
  EXPECT_LT(worst, 0.03) << int8.out;
  EXPECT_GT(total, 0) << "int8 gave f32's probabilities to the last digit";
}

// The bundled model with vitk and oneDNN capped at each lower instruction-set level
// (VITK_MAX_ISA): the same class for every sample and the same probabilities to 1e-5 (other
// kernels sum in another order, so not to the bit).
TEST_F(Classify, BundledModelGivesTheSameAtEveryIsaLevel) {
  const std::vector<std::string> args = bundled_samples_top10();
  if (args.empty()) GTEST_SKIP() << "no bundled model";
  const Result top = run(args);
  ASSERT_EQ(top.status, 0) << top.err;
  const Json a = parse_json(top.out);
  ASSERT_GE(a.size(), 10u);
  int levels = 0;
  for (const vitk::ops::KernelIsa level :
       {vitk::ops::KernelIsa::baseline, vitk::ops::KernelIsa::avx2}) {
    if (level >= vitk::ops::kernel_isa()) continue;  // the CPU's own level is the run above
    ++levels;
    const vitk::test::EnvVar cap("VITK_MAX_ISA", vitk::ops::kernel_isa_name(level));
    const Result r = run(args);
    ASSERT_EQ(r.status, 0) << vitk::ops::kernel_isa_name(level) << ": " << r.err;
    const Json b = parse_json(r.out);
    ASSERT_EQ(keys_of(a), keys_of(b));
    for (const auto& item : a.items()) {
      const Json& x = item.value();
      const Json& y = b.at(item.key());
      ASSERT_EQ(x["labels"], y["labels"]) << vitk::ops::kernel_isa_name(level) << " " << item.key();
      for (size_t i = 0; i < x["probabilities"].size(); ++i)
        EXPECT_NEAR(x["probabilities"][i].get<double>(), y["probabilities"][i].get<double>(), 1e-5)
            << vitk::ops::kernel_isa_name(level) << " " << item.key();
    }
  }
  if (levels == 0)
    GTEST_SKIP() << "this CPU runs no level below "
                 << vitk::ops::kernel_isa_name(vitk::ops::kernel_isa());
}

TEST_F(Classify, ImageSizeRunsTheCheckpointAtAnotherResolution) {
  const fs::path bundled = fs::path(VITK_SOURCE_DIR) / "vit/models/fmnist-vit.h5";
  const fs::path sample = fs::path(VITK_SOURCE_DIR) / "datasets/samples/0002-trouser.png";
  std::error_code ec;
  if (!fs::exists(bundled, ec) || !fs::exists(sample, ec)) GTEST_SKIP() << "no bundled model";
  // 28x28 with patch 4 is a 7x7 grid; 56x56 a 14x14 one, with resampled positions.
  Result at56 = run({"classify", "--json", "--top-k", "10", "--image-size", "56", sample.string()});
  ASSERT_EQ(at56.status, 0) << at56.err;
  Json doc = parse_json(at56.out);
  ASSERT_EQ(doc.size(), 1u);
  const Json& probs = doc.begin()->at("probabilities");
  double sum = 0;
  for (const Json& p : probs) sum += p.get<double>();
  EXPECT_EQ(probs.size(), 10u);
  EXPECT_NEAR(sum, 1.0, 1e-4);
  // A size the patch does not divide is refused with the reason, not run.
  Result at30 = run({"classify", "--image-size", "30", sample.string()});
  EXPECT_NE(at30.status, 0);
  EXPECT_TRUE(contains(at30.err, "does not divide")) << at30.err;
  EXPECT_EQ(lines_of(at30.err).size(), 1u) << at30.err;
}

TEST_F(Classify, BenchmarkReportsImagesPerSecond) {
  Result r = run({"classify", "--model", "rgb.h5", "--benchmark", "--benchmark-seconds", "0.2",
                  "--batch-size", "4"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "images/s")) << r.out;
  r = run({"classify", "--model", "rgb.h5", "--benchmark", "rgb.png", "photo.jpg"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 3u);
  EXPECT_TRUE(contains(r.err, "classified 2 images (0 failed)")) << r.err;

  // Any preset without a checkpoint: random weights from --model.* options (or [model]).
  std::ofstream(*dir_ / "tiny.ini") << "[model]\nimage_size = 32\npatch_size = 8\nd_model = 24\n"
                                       "heads = 2\nd_ff = 48\nlayers = 2\nnum_classes = 5\n";
  r = run({"classify", "--benchmark", "--random-weights", "--config", "tiny.ini", "--model.layers",
           "1", "--benchmark-seconds", "0.1", "--batch-size", "2"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(
      contains(r.out, "random weights: 32x32, patch 8, 3 channels, 1 layers, width 24, 5 classes"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "images/s")) << r.out;
  r = run({"classify", "--random-weights", "rgb.png"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--random-weights is for --benchmark")) << r.err;
  r = run({"classify", "--benchmark", "--random-weights", "--model", "rgb.h5"});
  EXPECT_EQ(r.status, 2);
  r = run({"classify", "--benchmark", "--random-weights", "--model.heads", "5"});
  EXPECT_EQ(r.status, 2);  // 768 is not a multiple of 5
  EXPECT_TRUE(contains(r.err, "heads")) << r.err;
}

TEST_F(Classify, BenchmarkProfilePrintsWhereABatchSpendsItsTime) {
  std::ofstream(*dir_ / "tiny.ini") << "[model]\nimage_size = 32\npatch_size = 8\nd_model = 24\n"
                                       "heads = 2\nd_ff = 48\nlayers = 1\nnum_classes = 5\n";
  Result r = run({"classify", "--benchmark", "--random-weights", "--config", "tiny.ini",
                  "--benchmark-seconds", "0.05", "--batch-size", "2", "--profile"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "images/s")) << r.out;
  EXPECT_TRUE(contains(r.out, " timed batches of 2 (profiled while timed), exclusive ms per batch"))
      << r.out;
  for (const char* part : {"linear_forward ", "layernorm_forward ", "batch (rest)"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  EXPECT_FALSE(contains(r.out, "linear_backward")) << "inference only\n" << r.out;
  EXPECT_TRUE(vitk::test::breakdown_adds_up(r.out, "breakdown (--profile, the ")) << r.out;
  r = run({"classify", "--model", "rgb.h5", "--profile", "rgb.png"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--profile is for --benchmark")) << r.err;
}

// ---- The pipeline in-process -------------------------------------------------------------------

TEST_F(Classify, PipelineKeepsOrderAndStopsCleanlyOnACallbackError) {
  vitk::vit::LoadedVit m = vitk::vit::load_vit((*dir_ / "rgb.h5").string());
  vitk::vit::ClassifyOptions options;
  options.batch_size = 2;
  options.prefetch = 1;
  options.preprocess = m.config.preprocess;
  std::vector<std::string> paths;
  for (const std::string& f : all_files()) paths.push_back((*dir_ / f).string());

  std::vector<int64_t> order;
  vitk::vit::ClassifyStats stats = vitk::vit::classify_files(
      *m.model, paths, options, [&](const vitk::vit::ImageResult& r) { order.push_back(r.index); });
  ASSERT_EQ(order.size(), paths.size());
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int64_t>(i));
  EXPECT_EQ(stats.images, static_cast<int64_t>(good_->size()));
  EXPECT_EQ(stats.failed, static_cast<int64_t>(bad_->size()));

  // An exception from the consumer stops the decode thread and comes out; nothing hangs.
  int seen = 0;
  EXPECT_THROW(vitk::vit::classify_files(*m.model, paths, options,
                                         [&](const vitk::vit::ImageResult&) {
                                           if (++seen == 3) throw std::runtime_error("stop");
                                         }),
               std::runtime_error);
  EXPECT_EQ(seen, 3);
  // No files at all: nothing to do.
  stats = vitk::vit::classify_files(*m.model, {}, options, [](const vitk::vit::ImageResult&) {});
  EXPECT_EQ(stats.images + stats.failed, 0);
}

// ---- vitk export-samples
// ---------------------------------------------------------------------------

TEST_F(Classify, ExportSamplesNamesFilesByIndexAndClass) {
  // An image folder: "T-shirt/top"-like names become slugs.
  const fs::path root = *dir_ / "folder_data";
  fs::create_directories(root / "Ankle boot");
  fs::create_directories(root / "Sandal");
  cv::Mat a(9, 7, CV_8UC3, cv::Scalar(10, 20, 30)), b(5, 6, CV_8UC1, cv::Scalar(200));
  ASSERT_TRUE(cv::imwrite((root / "Ankle boot" / "x1.png").string(), a));
  ASSERT_TRUE(cv::imwrite((root / "Ankle boot" / "x2.jpg").string(), a));
  ASSERT_TRUE(cv::imwrite((root / "Sandal" / "y.png").string(), b));
  Result r = run({"export-samples", "folder_data", "--per-class", "1", "--out", "exported"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "exported/0000-ankle-boot.png\nexported/0002-sandal.png\n");
  cv::Mat back = cv::imread((*dir_ / "exported/0002-sandal.png").string(), cv::IMREAD_UNCHANGED);
  ASSERT_FALSE(back.empty());
  EXPECT_EQ(cv::norm(back, b, cv::NORM_INF), 0);

  r = run({"export-samples", "folder_data", "--count", "2", "--start", "1", "--out", "exported2"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "exported2/0001-ankle-boot.png\nexported2/0002-sandal.png\n");
  // What it writes, classify reads.
  r = run({"classify", "--model", "rgb.h5", "--dir", "exported2"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 3u);

  r = run({"export-samples", "nowhere", "--out", "x"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "nowhere")) << r.err;
  r = run({"export-samples", "folder_data"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--out")) << r.err;
}

}  // namespace

// The bundled model with bf16 products gives f32's labels on the samples (skipped on CPUs without
// AVX512_BF16), and not f32's probabilities to the last digit (the products were rounded).
TEST(ClassifyPrecision, Bf16GivesF32sLabelsWithTheBundledModel) {
  SKIP_WITHOUT_BF16();
  const fs::path root = VITK_SOURCE_DIR;
  std::error_code ec;
  if (!fs::exists(root / "vit/models/fmnist-vit.h5", ec) ||
      !fs::is_directory(root / "datasets/samples", ec))
    GTEST_SKIP() << "no bundled model or samples";
  const vitk::test::TempDir dir;
  const auto run = [&](const char* precision) {
    return vitk::testing::run_vitk(dir.path(),
                                   {"classify", "--dir", (root / "datasets/samples").string(),
                                    "--json", "--threads", "1", "--precision", precision},
                                   precision);
  };
  const Result f32 = run("f32"), bf16 = run("bf16");
  ASSERT_EQ(f32.status, 0) << f32.err;
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  // path -> first label
  const auto top1 = [](const std::string& out) {
    std::vector<std::pair<std::string, std::string>> labels;
    const Json doc = parse_json(out);
    for (const auto& item : doc.items()) labels.emplace_back(item.key(), item.value()["labels"][0]);
    return labels;
  };
  const auto a = top1(f32.out), b = top1(bf16.out);
  ASSERT_GE(a.size(), 5u) << f32.out;
  EXPECT_EQ(a, b);
  EXPECT_NE(f32.out, bf16.out) << "the probabilities should differ in their last digits";
}
