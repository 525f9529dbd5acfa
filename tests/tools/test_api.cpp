// The public API (<vitk/vitk.h>) in-process: each object against the internal code it wraps
// (classify_files, seq2seq::Translator, caption_set), images in memory against the same pictures
// read from files, several threads against one, and every bad input a vitk::Exception naming it.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/seq2seq/translator.h"
#include "datasets/captions.h"
#include "tools/api/internal.h"
#include "util/mt_corpus.h"
#include "util/test_util.h"
#include "util/vitk_process.h"
#include "vitk/opencv.h"
#include "vitk/vitk.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::TempDir;

const std::string kModel = std::string(VITK_SOURCE_DIR) + "/vit/models/fmnist-vit.h5";
const std::string kCaptioner = std::string(VITK_SOURCE_DIR) + "/vit/models/scenes-caption.h5";

std::vector<std::string> samples() {
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(std::string(VITK_SOURCE_DIR) + "/datasets/samples"))
    if (e.path().extension() == ".png") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

// What a call threw: its message, and whether it was a UsageError, an Error or something else.
struct Thrown {
  std::string kind, message;
};
template <typename F>
Thrown thrown_by(F&& f) {
  try {
    f();
  } catch (const vitk::UsageError& e) {
    return {"usage", e.what()};
  } catch (const vitk::Error& e) {
    return {"error", e.what()};
  } catch (const std::exception& e) {
    return {"other", e.what()};
  }
  return {"none", ""};
}

vitk::ClassifierOptions at_precision(const std::string& precision) {
  vitk::ClassifierOptions o;
  o.precision = precision;
  return o;
}

void expect_same(const vitk::Classification& a, const vitk::Classification& b) {
  EXPECT_EQ(a.classes, b.classes);
  EXPECT_EQ(a.labels, b.labels);
  ASSERT_EQ(a.probabilities.size(), b.probabilities.size());
  for (size_t k = 0; k < a.probabilities.size(); ++k)
    EXPECT_NEAR(a.probabilities[k], b.probabilities[k], 1e-6f) << "rank " << k;
}

TEST(ApiClassifier, FilesGiveWhatTheInternalPipelineGives) {
  const vitk::Classifier clf(kModel, {});
  EXPECT_EQ(clf.image_height(), 28);
  EXPECT_EQ(clf.channels(), 1);
  EXPECT_EQ(clf.precision(), "f32");
  ASSERT_EQ(clf.classes().size(), 10u);
  const std::vector<std::string> paths = samples();
  ASSERT_FALSE(paths.empty());
  const std::vector<vitk::Classification> got = clf.classify(paths, 3);
  ASSERT_EQ(got.size(), paths.size());

  vitk::vit::LoadedVit m = vitk::vit::load_vit(kModel);
  vitk::vit::ClassifyOptions o;
  o.top_k = 3;
  o.preprocess = m.config.preprocess;
  std::vector<vitk::vit::ImageResult> want;
  vitk::vit::classify_files(*m.model, paths, o,
                            [&](const vitk::vit::ImageResult& r) { want.push_back(r); });
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(paths[i]);
    EXPECT_EQ(got[i].path, paths[i]);
    ASSERT_TRUE(got[i].ok()) << got[i].error;
    EXPECT_EQ(got[i].classes, want[i].classes);
    EXPECT_EQ(got[i].probabilities, want[i].probabilities);
    ASSERT_EQ(got[i].labels.size(), 3u);
    EXPECT_EQ(got[i].labels[0], m.meta.class_names[static_cast<size_t>(want[i].classes[0])]);
  }
}

TEST(ApiClassifier, ImagesInMemoryGiveWhatTheirFilesGive) {
  const vitk::Classifier clf(kModel, {});
  const std::vector<std::string> paths = samples();
  std::vector<cv::Mat> mats;
  for (const std::string& p : paths) mats.push_back(cv::imread(p, cv::IMREAD_UNCHANGED));
  const std::vector<vitk::Classification> from_files = clf.classify(paths);
  const std::vector<vitk::Classification> from_memory = vitk::classify_images(clf, mats);
  ASSERT_EQ(from_memory.size(), from_files.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    SCOPED_TRACE(paths[i]);
    EXPECT_TRUE(from_memory[i].path.empty());
    expect_same(from_memory[i], from_files[i]);
  }

  // The logits: a row per image whose softmax ranks the classes as classify() does.
  const std::vector<float> logits = clf.logits(vitk::images_of(mats));
  ASSERT_EQ(logits.size(), paths.size() * clf.classes().size());
  for (size_t i = 0; i < paths.size(); ++i) {
    const float* row = logits.data() + i * clf.classes().size();
    const int best = static_cast<int>(std::max_element(row, row + clf.classes().size()) - row);
    EXPECT_EQ(best, from_files[i].classes[0]) << paths[i];
  }
}

TEST(ApiClassifier, ColourOrderStrideAndAlphaAreReadAsFilesAre) {
  TempDir dir("vitk_api");
  const vitk::Classifier clf(kModel, {});
  // A colour picture: the grey sample tinted per channel, so that the channel order matters.
  const cv::Mat grey = cv::imread(samples().front(), cv::IMREAD_GRAYSCALE);
  cv::Mat bgr;
  cv::merge(std::vector<cv::Mat>{grey, grey * 0.5, 255 - grey}, bgr);
  const std::string png = (dir / "colour.png").string();
  ASSERT_TRUE(cv::imwrite(png, bgr));
  const vitk::Classification file = clf.classify(std::vector<std::string>{png}).at(0);
  ASSERT_TRUE(file.ok()) << file.error;

  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  vitk::Image as_rgb{rgb.data, rgb.rows, rgb.cols, 3};
  expect_same(clf.classify(std::vector<vitk::Image>{as_rgb}).at(0), file);
  expect_same(vitk::classify_images(clf, {bgr}).at(0), file);
  // The colour orders told apart: the same bytes read as the other order classify otherwise.
  vitk::Image swapped = as_rgb;
  swapped.order = vitk::Image::Order::bgr;
  EXPECT_NE(clf.logits({swapped}), clf.logits({as_rgb}));

  // A view into a wider buffer: rows further apart than the pixels.
  cv::Mat wide(rgb.rows, rgb.cols + 5, CV_8UC3, cv::Scalar(7, 7, 7));
  rgb.copyTo(wide(cv::Rect(0, 0, rgb.cols, rgb.rows)));
  vitk::Image strided{wide.data, rgb.rows, rgb.cols, 3, static_cast<int64_t>(wide.step[0])};
  expect_same(clf.classify(std::vector<vitk::Image>{strided}).at(0), file);

  // Transparency on white, as a PNG with alpha is read.
  cv::Mat bgra;
  cv::cvtColor(bgr, bgra, cv::COLOR_BGR2BGRA);
  for (int y = 0; y < bgra.rows; ++y) bgra.at<cv::Vec4b>(y, y)[3] = static_cast<uint8_t>(y * 9);
  const std::string alpha_png = (dir / "alpha.png").string();
  ASSERT_TRUE(cv::imwrite(alpha_png, bgra));
  const vitk::Classification alpha_file = clf.classify(std::vector<std::string>{alpha_png}).at(0);
  expect_same(vitk::classify_images(clf, {bgra}).at(0), alpha_file);
  EXPECT_NE(clf.logits(vitk::images_of({bgra})), clf.logits(vitk::images_of({bgr})));
}

TEST(ApiClassifier, AnUnreadableFileIsItsOwnResultAndTheOthersGoOn) {
  TempDir dir("vitk_api");
  const std::string bad = (dir / "bad.png").string();
  std::ofstream(bad) << "not a picture";
  std::vector<std::string> paths = {samples()[0], bad, (dir / "missing.png").string(),
                                    samples()[1]};
  const std::vector<vitk::Classification> r = vitk::Classifier(kModel).classify(paths);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_TRUE(r[0].ok() && r[3].ok());
  EXPECT_FALSE(r[1].ok());
  EXPECT_NE(r[1].error.find("not an image"), std::string::npos) << r[1].error;
  EXPECT_NE(r[2].error.find("file not found"), std::string::npos) << r[2].error;
  EXPECT_TRUE(r[1].classes.empty() && r[1].labels.empty());
}

TEST(ApiClassifier, BadInputsThrowOneExceptionTypeNamingWhatIsWrong) {
  const vitk::Classifier clf(kModel);
  const uint8_t pixels[16] = {};
  struct Case {
    const char* what;
    std::function<void()> call;
    std::string kind, message;
  };
  const std::vector<Case> cases = {
      {"missing checkpoint", [] { vitk::Classifier("/nonexistent/model.h5"); }, "error",
       "/nonexistent/model.h5"},
      {"unknown precision", [] { vitk::Classifier(kModel, at_precision("f16")); }, "usage",
       "--precision must be f32, bf16 or int8, not 'f16'"},
      {"top-k 0",
       [] {
         vitk::ClassifierOptions o;
         o.top_k = 0;
         vitk::Classifier(kModel, o);
       },
       "usage", "--top-k must be at least 1"},
      {"labels of another count",
       [] {
         vitk::ClassifierOptions o;
         o.labels = {"a", "b"};
         vitk::Classifier(kModel, o);
       },
       "usage", "2 labels given, but the model has 10 classes"},
      {"null pixels",
       [&] {
         clf.logits({vitk::Image{nullptr, 4, 4, 1}});
       },
       "usage", "image 0: no pixels"},
      {"two channels",
       [&] {
         clf.logits({vitk::Image{pixels, 2, 2, 1}, vitk::Image{pixels, 2, 2, 2}});
       },
       "usage", "image 1: 2 channels"},
      {"short stride",
       [&] {
         clf.logits({vitk::Image{pixels, 2, 4, 1, 3}});
       },
       "usage", "image 0: rows of 3 bytes"},
      {"empty image",
       [&] {
         clf.logits({vitk::Image{pixels, 0, 4, 1}});
       },
       "usage", "image 0: a size of 0x4"},
      {"negative top-k", [&] { clf.classify(samples(), -1); }, "usage", "--top-k"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Thrown t = thrown_by(c.call);
    EXPECT_EQ(t.kind, c.kind) << t.message;
    EXPECT_NE(t.message.find(c.message), std::string::npos) << t.message;
  }
}

TEST(ApiClassifier, AnExceptionOfTheCallbackReachesTheCallerAsThrown) {
  struct Mine {};
  const vitk::Classifier clf(kModel);
  int seen = 0;
  EXPECT_THROW(clf.classify(samples(), [&](const vitk::Classification&) { ++seen, throw Mine{}; }),
               Mine);
  EXPECT_EQ(seen, 1);
  // And the classifier is still whole.
  EXPECT_EQ(clf.classify(samples()).size(), samples().size());
}

TEST(ApiClassifier, ThreadsSharingOneClassifierGetTheSequentialAnswers) {
  vitk::ClassifierOptions o;
  o.threads = 1;
  const vitk::Classifier clf(kModel, o);
  const std::vector<std::string> paths = samples();
  std::vector<cv::Mat> mats;
  for (const std::string& p : paths) mats.push_back(cv::imread(p, cv::IMREAD_UNCHANGED));
  const std::vector<vitk::Classification> files = clf.classify(paths);
  const std::vector<float> logits = clf.logits(vitk::images_of(mats));
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int round = 0; round < 3; ++round) {
          if (t % 2) {
            if (clf.logits(vitk::images_of(mats)) != logits) ++mismatches;
            continue;
          }
          const std::vector<vitk::Classification> r = clf.classify(paths);
          for (size_t i = 0; i < r.size(); ++i)
            if (r[i].classes != files[i].classes || r[i].probabilities != files[i].probabilities)
              ++mismatches;
        }
      } catch (...) {
        ++failures;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ApiClassifier, AQuantisedFileRunsAtInt8AndRefusesF32) {
  TempDir dir("vitk_api");
  const std::string q = (dir / "q.h5").string();
  const auto made = vitk::testing::run_vitk(dir.path(), {"quantize", kModel, "--out", q});
  ASSERT_EQ(made.status, 0) << made.err;
  const vitk::Classifier clf(q);
  EXPECT_EQ(clf.precision(), "int8");
  const std::vector<vitk::Classification> r8 = clf.classify(samples());
  const std::vector<vitk::Classification> r32 = vitk::Classifier(kModel).classify(samples());
  int agree = 0;
  for (size_t i = 0; i < r8.size(); ++i) agree += r8[i].classes[0] == r32[i].classes[0];
  EXPECT_GE(agree, static_cast<int>(r8.size()) - 1) << "int8 and f32 top-1 mostly agree";
  const Thrown t = thrown_by([&] { vitk::Classifier(q, at_precision("f32")); });
  EXPECT_EQ(t.kind, "usage");
  EXPECT_NE(t.message.find("runs at --precision int8 only"), std::string::npos) << t.message;
}

// ---- Translation -------------------------------------------------------------------------------

TEST(ApiTranslator, TranslatesAsTheInternalTranslatorWithNbestAndEmptyLines) {
  TempDir dir("vitk_api_mt");
  vitk::testing::write_tsv(dir / "train.tsv", vitk::testing::sentences(200, 1));
  vitk::testing::write_tsv(dir / "valid.tsv", vitk::testing::sentences(20, 2));
  std::vector<std::string> args = {"mt-train", "--train", "train.tsv",   "--valid", "valid.tsv",
                                   "--output", "run",     "--max-steps", "30"};
  args.insert(args.end(), vitk::testing::kTinyMtModel.begin(), vitk::testing::kTinyMtModel.end());
  const auto trained = vitk::testing::run_vitk(dir.path(), args);
  ASSERT_EQ(trained.status, 0) << trained.out << trained.err;
  const std::string model = (dir / "run/last.h5").string();

  std::vector<std::string> lines = vitk::testing::sentences(6, 3);
  lines.insert(lines.begin() + 2, "");
  vitk::SearchOptions search;
  search.beam_size = 3;
  search.nbest = 2;
  const vitk::Translator translator(model);
  EXPECT_EQ(translator.precision(), "f32");
  const std::vector<vitk::Translation> got = translator.translate(lines, search);
  ASSERT_EQ(got.size(), lines.size());
  EXPECT_TRUE(got[2].hypotheses.empty()) << "an empty line is not searched";

  vitk::seq2seq::LoadedTranslation m = vitk::seq2seq::load_translation(model);
  const auto tokenizer = vitk::datasets::Tokenizer::from_bytes(m.meta.tokenizer);
  vitk::decode::SearchOptions so;
  so.beam_size = 3;
  so.nbest = 2;
  vitk::seq2seq::Translator internal(*m.model, tokenizer, so, 32);
  const std::vector<vitk::seq2seq::Translation> want = internal.translate(lines);
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    ASSERT_EQ(got[i].hypotheses.size(), want[i].hypotheses.size());
    for (size_t k = 0; k < want[i].hypotheses.size(); ++k) {
      EXPECT_EQ(got[i].hypotheses[k].text, want[i].texts[k]);
      EXPECT_EQ(got[i].hypotheses[k].tokens, want[i].hypotheses[k].tokens);
      EXPECT_EQ(got[i].hypotheses[k].score, want[i].hypotheses[k].score);
    }
    if (got[i].hypotheses.size() == 2) {
      EXPECT_GE(got[i].hypotheses[0].score, got[i].hypotheses[1].score) << "best first";
    }
  }

  search.method = vitk::SearchOptions::Method::greedy;  // n-best 2 needs beam search
  const Thrown t = thrown_by([&] { translator.translate(lines, search); });
  EXPECT_EQ(t.kind, "usage");
  EXPECT_NE(t.message.find("n-best lists need beam search"), std::string::npos) << t.message;
  const Thrown not_mt = thrown_by([&] { vitk::Translator{kModel}; });
  EXPECT_EQ(not_mt.kind, "error") << not_mt.message;
  EXPECT_NE(not_mt.message.find(kModel), std::string::npos) << not_mt.message;
}

// ---- Captioning --------------------------------------------------------------------------------

TEST(ApiCaptioner, CaptionsFilesAsTheSetRunnerAndMemoryAsFiles) {
  const std::vector<std::string> paths = samples();
  const vitk::Captioner captioner(kCaptioner);
  vitk::SearchOptions search;
  search.nbest = 2;
  const std::vector<vitk::Caption> got = captioner.caption(paths, search);
  ASSERT_EQ(got.size(), paths.size());

  // The set runner of `vitk caption-eval`, through the loader.
  vitk::caption::LoadedCaptioner m = vitk::caption::load_captioner(kCaptioner);
  vitk::datasets::CaptionSet set;
  for (const std::string& p : paths) {
    vitk::datasets::CaptionedImage image;
    image.file_name = image.path = p;
    set.images.push_back(image);
  }
  vitk::caption::CaptionRunOptions ro;
  ro.search.nbest = 2;
  // The bundled model is a file of vitk quantize: int8, its default.
  ro.precision = ro.search.precision = vitk::ops::parse_precision(captioner.precision());
  const std::vector<vitk::caption::CaptionResult> want =
      vitk::caption::caption_set(*m.model, m.tokenizer, set, ro);
  for (size_t i = 0; i < paths.size(); ++i) {
    SCOPED_TRACE(paths[i]);
    ASSERT_TRUE(got[i].ok()) << got[i].error;
    ASSERT_EQ(got[i].hypotheses.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(got[i].hypotheses[k].text, want[i].texts[k]);
      EXPECT_EQ(got[i].hypotheses[k].log_prob, want[i].hypotheses[k].log_prob);
    }
  }

  std::vector<cv::Mat> mats;
  for (const std::string& p : paths) mats.push_back(cv::imread(p, cv::IMREAD_UNCHANGED));
  const std::vector<vitk::Caption> memory = vitk::caption_images(captioner, mats, search);
  ASSERT_EQ(memory.size(), paths.size());
  for (size_t i = 0; i < paths.size(); ++i)
    EXPECT_EQ(memory[i].hypotheses.at(0).text, got[i].hypotheses.at(0).text) << paths[i];

  const std::vector<vitk::Caption> missing = captioner.caption({"/nonexistent.png", paths[0]});
  EXPECT_NE(missing.at(0).error.find("file not found"), std::string::npos) << missing[0].error;
  EXPECT_TRUE(missing.at(1).ok());
}

TEST(ApiCommand, RunsSubcommandsInProcessWithTheirExitCodes) {
  EXPECT_EQ(vitk::run_command({"inspect", kModel}), 0);
  EXPECT_EQ(vitk::run_command({"classify", "--top-k", "0"}), 2);
  EXPECT_EQ(vitk::run_command({"inspect", "/nonexistent.h5"}), 1);
  EXPECT_FALSE(vitk::version().empty());
}

}  // namespace
