// The memory ceilings of beam search, end to end: `caption`, `caption-eval` and `translate`
// weigh a search's memory (decode::search_bytes) against the machine's before they search, and
// refuse one that cannot fit as a usage error (exit 2) that names the option and what would fit,
// quickly and without allocating it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/decode/search.h"
#include "common/io/checkpoint.h"
#include "common/memory.h"
#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/search.h"
#include "util/test_util.h"
#include "util/tiny_models.h"
#include "util/vitk_process.h"
#include "vit/caption/captioner.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::testing::ProcessResult;

const std::string kCaptioner = std::string(VITK_SOURCE_DIR) + "/vit/models/scenes-caption.h5";
const std::string kScene = std::string(VITK_SOURCE_DIR) + "/datasets/scene-samples/test-000001.png";

bool fits(const vitk::decode::SearchSizes& sizes, const vitk::decode::SearchOptions& o,
          int64_t inputs) {
  return vitk::memory_shortfall(vitk::decode::search_bytes(sizes, o, inputs)).empty();
}

class SearchCeilings : public ::testing::Test {
 protected:
  // The bundled captioner's search sizes at a beam of `beam` (the commands' other defaults).
  static vitk::decode::SearchSizes caption_sizes(vitk::decode::SearchOptions& o, int beam) {
    const vitk::caption::CaptionConfig c = vitk::caption::caption_stored_config(
        kCaptioner, vitk::io::read_checkpoint_meta(kCaptioner));
    o.beam_size = beam;
    return vitk::caption::caption_search_sizes(c, o);
  }

  // The least beam from 100000 up (doubling) whose search of one image of the bundled captioner
  // does not fit this machine, and the beam the refusal should offer instead.
  static int beam_beyond_memory(int& would_fit) {
    vitk::decode::SearchOptions o;
    int beam = 100000;
    while (fits(caption_sizes(o, beam), o, 1) && beam < (1 << 29)) beam *= 2;
    would_fit = vitk::decode::fitting_beam_size(caption_sizes(o, beam), o, 1);
    return beam;
  }

  // vitk with args in the test's directory, under a 3 GB memory ceiling and a time limit (as
  // Hostile's): without the check the searches below would take tens of gigabytes.
  ProcessResult run(const std::vector<std::string>& args) {
    vitk::testing::Command c = vitk::testing::vitk_command(dir_.path(), args);
    vitk::testing::under_3gb_ceiling(c);
    c.timeout_seconds = 30;
    const auto start = std::chrono::steady_clock::now();
    ProcessResult r = vitk::testing::run_process(c);
    EXPECT_FALSE(r.timed_out) << "timed out: vitk " << args[0];
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20)
        << "a refusal should be quick";
    return r;
  }

  vitk::test::TempDir dir_{"vitk_search_ceilings"};
};

TEST_F(SearchCeilings, ABeamBeyondMemoryIsAUsageErrorNamingABeamThatFits) {
  int would_fit = 0;
  const int beam = beam_beyond_memory(would_fit);
  ASSERT_GT(would_fit, 0);
  const std::string expected =
      "--beam-size " + std::to_string(beam) + ": the search of one image needs at least ";
  const std::string offer = "; a beam of " + std::to_string(would_fit) + " would fit.";

  ProcessResult r =
      run({"caption", "--model", kCaptioner, kScene, "--beam-size", std::to_string(beam)});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, expected)) << r.err;
  EXPECT_TRUE(contains(r.err, offer)) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  vitk::testing::expect_one_error_line(r);

  // caption-eval refuses it too, before it reads an image.
  std::ofstream(dir_ / "captions.json")
      << R"({"images": [{"id": 1, "file_name": "test-000001.png"}],
             "annotations": [{"id": 1, "image_id": 1, "caption": "a bag"}]})";
  r = run({"caption-eval", "--model", kCaptioner, "--captions", (dir_ / "captions.json").string(),
           "--images", fs::path(kScene).parent_path().string(), "--beam-size",
           std::to_string(beam)});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, expected)) << r.err;
  EXPECT_TRUE(contains(r.err, offer)) << r.err;
}

// A beam one image's search holds but not the batch's: 20 images at once (--batch-size 32 holds
// them all) are refused, naming a batch that fits; one image at a time runs.
TEST_F(SearchCeilings, ABatchOfBeamsBeyondMemoryIsAUsageErrorNamingABatchThatFits) {
  const int images = 20;
  vitk::decode::SearchOptions o;
  int beam = 1024;
  while (fits(caption_sizes(o, beam), o, images) && beam < (1 << 29)) beam *= 2;
  const vitk::decode::SearchSizes sizes = caption_sizes(o, beam);
  ASSERT_TRUE(fits(sizes, o, 1)) << "no beam at which one image fits and " << images
                                 << " do not: " << beam;
  int64_t batch = images / 2;
  while (batch > 1 && !fits(sizes, o, batch)) batch /= 2;

  std::vector<std::string> args = {"caption", "--model", kCaptioner, "--beam-size",
                                   std::to_string(beam)};
  for (int i = 0; i < images; ++i) {
    const fs::path copy = dir_ / ("scene-" + std::to_string(i) + ".png");
    fs::copy_file(kScene, copy);
    args.push_back(copy.string());
  }
  const ProcessResult r = run(args);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--batch-size 32 with --beam-size " + std::to_string(beam) +
                                  ": a search of 20 images at once needs at least "))
      << r.err;
  EXPECT_TRUE(contains(r.err, "; a batch of " + std::to_string(batch) + " would fit.")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(SearchCeilings, TranslateNamesABeamThatFits) {
  vitk::testing::TinyTranslation t;
  const std::string model = (dir_ / "mt.h5").string();
  vitk::seq2seq::save_translation(model, t.params, t.config, "tokenizer bytes", 1);
  std::ofstream(dir_ / "in.txt") << "a sentence\n";
  vitk::decode::SearchOptions o;
  o.beam_size = 1000000000;
  const vitk::decode::SearchSizes sizes = vitk::seq2seq::search_sizes(t.config, o);
  ASSERT_FALSE(fits(sizes, o, 1));
  const int would_fit = vitk::decode::fitting_beam_size(sizes, o, 1);
  ASSERT_GT(would_fit, 0);

  const ProcessResult r = run({"translate", "--model", model, "--input", "in.txt", "--beam-size",
                               std::to_string(o.beam_size)});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--beam-size 1000000000: the search of one sentence needs at least"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "; a beam of " + std::to_string(would_fit) + " would fit.")) << r.err;
}

// The estimate grows with every size a search holds, and the beam offered fits.
TEST(SearchBytes, GrowsWithTheSearchAndOffersABeamThatFits) {
  vitk::decode::SearchSizes z;
  z.vocab_size = 128, z.decoder_layers = 2, z.d_model = 192, z.d_ff = 384;
  z.memory_length = 36, z.target_length = 40;
  vitk::decode::SearchOptions o;
  o.beam_size = 100;
  const uint64_t base = vitk::decode::search_bytes(z, o);
  // 101 rows of at least their caches: 4 bytes x 2 layers x (4 x 40 + 2 x 36) x 192.
  EXPECT_GT(base, 101u * 4 * 2 * (4 * 40 + 2 * 36) * 192);
  EXPECT_GT(vitk::decode::search_bytes(z, o, 3), 2 * base);
  z.target_length = 400;
  EXPECT_GT(vitk::decode::search_bytes(z, o), base);
  o.beam_size = 1 << 30;
  const int smaller = vitk::decode::fitting_beam_size(z, o);
  ASSERT_GT(smaller, 0);
  EXPECT_EQ((1 << 30) % smaller, 0) << smaller;  // a halving of the beam
  o.beam_size = smaller;
  EXPECT_EQ(vitk::memory_shortfall(vitk::decode::search_bytes(z, o)), "");
  o.method = vitk::decode::SearchMethod::greedy;  // one row, not 101
  z.target_length = 40;
  EXPECT_LT(vitk::decode::search_bytes(z, o), base / 50);
}

}  // namespace
