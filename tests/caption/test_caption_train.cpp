// Training and running a captioning model end to end on tiny generated scenes: a short run learns
// to caption its scenes, beam search never scores below greedy search, a resumed run is exactly
// the uninterrupted one. (The commands, caption-train, caption and caption-eval:
// tools/test_caption_cli.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "common/io/checkpoint.h"
#include "common/io/json.h"
#include "common/params.h"
#include "common/progress.h"
#include "datasets/captions.h"
#include "datasets/dataset.h"
#include "datasets/loader.h"
#include "datasets/scenes.h"
#include "util/caption_scenes.h"
#include "util/test_util.h"
#include "vit/caption/captioner.h"
#include "vit/caption/scenes/extras.h"
#include "vit/caption/task.h"
#include "vit/evaluate.h"

using namespace vitk;
namespace fs = std::filesystem;
using vitk::testing::save_classifier;
using vitk::testing::TinyScenes;

namespace {

// The options of a run that has to learn its scenes: the articles differ by faint textures, so the
// encoder gets a little more capacity.
caption::CaptionTrainOptions learning_options(const TinyScenes& s, const std::string& output,
                                              int epochs) {
  caption::CaptionTrainOptions o = s.options(output);
  o.model.encoder.d_model = 64;
  o.model.encoder.d_ff = 128;
  o.model.encoder.layers = 2;
  o.loop.epochs = epochs;
  return o;
}

// The mirror image of every file of `from`, under its name in a new folder `to`.
fs::path mirror_images(const std::string& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& f : fs::directory_iterator(from)) {
    cv::Mat image = cv::imread(f.path().string(), cv::IMREAD_UNCHANGED);
    if (image.empty()) throw std::runtime_error("cannot read " + f.path().string());
    cv::flip(image, image, 1);
    if (!cv::imwrite((to / f.path().filename()).string(), image))
      throw std::runtime_error("cannot write " + (to / f.path().filename()).string());
  }
  return to;
}

caption::CaptionRunOptions greedy_options() {
  caption::CaptionRunOptions r;
  r.search.method = decode::SearchMethod::greedy;
  return r;
}

}  // namespace

// 300 epochs of eight scenes (600 steps, a few seconds) are enough to caption every training scene
// exactly; beam search finds captions that score at least as well as greedy search's.
TEST(CaptionTrain, ATinyRunLearnsItsScenesAndBeamScoresAtLeastGreedy) {
  TinyScenes s;
  const std::string out = (s.dir / "run").string();
  std::ostringstream log;
  caption::CaptionTrainOptions o = learning_options(s, out, 300);
  const train::Result r = caption::train_captions(o, log);
  ASSERT_EQ(r.end, train::End::finished) << log.str();
  caption::LoadedCaptioner m = caption::load_captioner(out + "/last.h5");
  const datasets::CaptionSet train =
      datasets::read_captions(s.root + "/captions_train.json", s.root + "/images/train");
  const auto greedy = caption::caption_set(*m.model, m.tokenizer, train, greedy_options());
  int exact = 0;
  for (const auto& g : greedy) {
    ASSERT_TRUE(g.read);
    const auto& image = train.images[static_cast<size_t>(g.image)];
    const bool match = datasets::caption_matches_scene(g.texts.front(), image.objects);
    exact += match ? 1 : 0;
    if (!match)
      ADD_FAILURE() << "scene " << g.image << ": '" << g.texts.front() << "', not '"
                    << image.captions.front() << "'";
  }
  EXPECT_EQ(exact, 8) << log.str();

  caption::CaptionRunOptions beam;
  beam.search.method = decode::SearchMethod::beam;
  beam.search.beam_size = 3;
  const auto beamed = caption::caption_set(*m.model, m.tokenizer, train, beam);
  ASSERT_EQ(beamed.size(), greedy.size());
  for (size_t i = 0; i < beamed.size(); ++i)
    EXPECT_GE(beamed[i].hypotheses.front().score, greedy[i].hypotheses.front().score - 1e-9)
        << "image " << i;
}

// --references likeliest: on scenes of two articles with both captions as references, the model
// settles on one caption per image (most of its probability on it) and captions every scene
// exactly, where training on either at random leaves the two nearly even (and greedy search may
// then start one caption and end the other).
TEST(CaptionTrain, TheLikeliestReferencesSettleOnOneCaptionPerImage) {
  TinyScenes s(/*captions_per_image=*/2);
  const datasets::CaptionSet train =
      datasets::read_captions(s.root + "/captions_train.json", s.root + "/images/train");
  std::map<std::string, double> settled;  // the mean share of the likelier caption
  for (const std::string references : {"random", "likeliest"}) {
    SCOPED_TRACE(references);
    const std::string out = (s.dir / references).string();
    std::ostringstream log;
    caption::CaptionTrainOptions o = learning_options(s, out, 200);
    o.references = references;
    ASSERT_EQ(caption::train_captions(o, log).end, train::End::finished) << log.str();
    caption::LoadedCaptioner m = caption::load_captioner(out + "/last.h5");
    const auto greedy = caption::caption_set(*m.model, m.tokenizer, train, greedy_options());
    int exact = 0;
    for (const auto& g : greedy)
      exact += datasets::caption_matches_scene(g.texts.front(),
                                               train.images[static_cast<size_t>(g.image)].objects);
    if (references == "likeliest") {
      EXPECT_EQ(exact, 8);
    }
    datasets::LoaderOptions lo = vit::eval_loader_options(m.config.encoder, 8, 1);
    std::unique_ptr<datasets::Dataset> images = datasets::caption_images(train);
    lo.num_classes = images->size();
    datasets::Loader loader(*images, lo);
    loader.start_epoch(0);
    datasets::Batch batch;
    ASSERT_TRUE(loader.next(batch));
    ASSERT_EQ(batch.labels.numel(), 8);
    std::vector<std::vector<int32_t>> ids;
    std::vector<int64_t> image_of;
    for (int64_t b = 0; b < 8; ++b)
      for (const std::string& c :
           train.images[static_cast<size_t>(batch.labels.i32()[b])].captions) {
        const std::vector<int> t = m.tokenizer.encode(datasets::normalize_caption(c));
        ids.emplace_back(t.begin(), t.end());
        image_of.push_back(b);
      }
    ASSERT_EQ(ids.size(), 16u);
    std::vector<const std::vector<int32_t>*> rows;
    for (const auto& x : ids) rows.push_back(&x);
    Arena arena;
    nn::Context ctx{false, &arena, nullptr};
    const std::vector<double> lp =
        caption::caption_log_probs(*m.model, ctx, batch.images, rows, image_of);
    double share = 0;
    for (size_t k = 0; k < 16; k += 2)
      share += std::exp(std::max(lp[k], lp[k + 1])) / (std::exp(lp[k]) + std::exp(lp[k + 1]));
    settled[references] = share / 8;
  }
  EXPECT_GT(settled["likeliest"], 0.9);
  EXPECT_LT(settled["random"], 0.75);
}

// --hflip: a mirrored training image trains on its captions with "left" and "right" exchanged.
// With --hflip 1 the model only ever sees mirror images, so it captions the mirror of each training
// scene with a caption that is true of the mirror: the original scene's once the words are swapped
// back, and false of the original scene wherever it says left or right.
TEST(CaptionTrain, MirroredImagesTrainOnTheirCaptionsWithLeftAndRightSwapped) {
  TinyScenes s;
  const std::string out = (s.dir / "run").string();
  std::ostringstream log;
  caption::CaptionTrainOptions o = learning_options(s, out, 300);
  o.hflip = 1.f;
  ASSERT_EQ(caption::train_captions(o, log).end, train::End::finished) << log.str();
  EXPECT_TRUE(test::contains(log.str(), "mirrored left-right with probability 1")) << log.str();
  EXPECT_EQ(io::read_checkpoint_meta(out + "/last.h5").recipe.at("hflip-swap"), "left:right");

  const fs::path mirrored = mirror_images(s.root + "/images/train", s.dir / "mirrored");
  const datasets::CaptionSet train =
      datasets::read_captions(s.root + "/captions_train.json", mirrored.string());
  caption::LoadedCaptioner m = caption::load_captioner(out + "/last.h5");
  const auto greedy = caption::caption_set(*m.model, m.tokenizer, train, greedy_options());
  ASSERT_EQ(greedy.size(), 8u);
  const caption::WordSwaps lr{{"left", "right"}};
  int exact = 0, sideways = 0;
  for (const auto& g : greedy) {
    const std::string& text = g.texts.front();
    const auto& objects = train.images[static_cast<size_t>(g.image)].objects;
    const bool match = datasets::caption_matches_scene(datasets::swap_words(text, lr), objects);
    exact += match ? 1 : 0;
    if (!match) ADD_FAILURE() << "mirror of scene " << g.image << ": '" << text << "'";
    if (text.find("left") != std::string::npos || text.find("right") != std::string::npos) {
      ++sideways;
      EXPECT_FALSE(datasets::caption_matches_scene(text, objects)) << text;
    }
  }
  EXPECT_EQ(exact, 8) << log.str();
  EXPECT_GE(sideways, 1) << "no scene of the test says left or right";
}

// --guided-attention: in a run on its own scenes, the words that name an article come to look at
// that article's cell (attention-in-cell, as caption-eval measures it) far more often than in the
// same run without it; with every image mirrored (--hflip 1), at the mirrored cells.
TEST(CaptionTrain, GuidedAttentionPointsTheNounsAtTheirArticles) {
  TinyScenes s;
  const fs::path mirrored = mirror_images(s.root + "/images/train", s.dir / "mirrored");
  auto in_cell = [&](float guided, float hflip) {
    const std::string out =
        (s.dir / ("run" + std::to_string(guided) + "_" + std::to_string(hflip))).string();
    std::ostringstream log;
    caption::CaptionTrainOptions o = learning_options(s, out, 150);
    caption::scenes::SceneTrainOptions so;
    so.guided_attention = guided;
    o.hflip = hflip;
    EXPECT_EQ(caption::scenes::train_captions(o, so, log).end, train::End::finished) << log.str();
    caption::LoadedCaptioner m = caption::load_captioner(out + "/last.h5");
    if (guided > 0.f) {
      EXPECT_TRUE(test::contains(log.str(), "guided attention 1 (nouns to their cells)"))
          << log.str();
      EXPECT_EQ(m.meta.recipe.at("guided-attention"), "1");
    }
    datasets::CaptionSet train =
        datasets::read_captions(s.root + "/captions_train.json",
                                hflip > 0.f ? mirrored.string() : s.root + "/images/train");
    if (hflip > 0.f)
      for (auto& image : train.images)
        for (auto& object : image.objects) object.cell.x = 84 - object.cell.x - object.cell.width;
    caption::CaptionRunOptions ro = greedy_options();
    ro.attention = true;
    const caption::CaptionScores sc = caption::score_captions(
        m.config, m.tokenizer, train, caption::caption_set(*m.model, m.tokenizer, train, ro));
    EXPECT_GE(sc.nouns, 12) << "most of the 16 articles named";
    return sc.in_cell_percent();
  };
  const double plain = in_cell(0.f, 0.f), guided = in_cell(1.f, 0.f);
  EXPECT_GE(guided, 90.0);
  EXPECT_GE(guided, plain + 20.0) << "without guidance " << plain << "%";
  EXPECT_GE(in_cell(1.f, 1.f), 90.0) << "the mirrored scenes";
}

// --article-loss: in a run on its own scenes, the output layer reading the mean of an article's
// cell (in the memory of the trained encoder) writes that article's noun, which it does far less
// often in the same run without the loss: the cells have learnt their articles in its words.
namespace {

// What the output layer writes from the mean of each named article's cell (as the article loss
// reads it) for the first caption of every training scene: (the piece it writes, the caption's).
std::vector<std::pair<int32_t, int32_t>> cell_words(const caption::LoadedCaptioner& m,
                                                    const TinyScenes& s) {
  const datasets::CaptionSet train =
      datasets::read_captions(s.root + "/captions_train.json", s.root + "/images/train");
  const std::unique_ptr<datasets::Dataset> images = datasets::caption_images(train);
  datasets::LoaderOptions lo = vit::eval_loader_options(m.config.encoder, 8, 1);
  lo.num_classes = images->size();
  datasets::Loader loader(*images, lo);
  loader.start_epoch(0);
  datasets::Batch batch;
  const Parameter& W = *m.params->find("decoder.embed_tokens.weight");  // tied
  const int64_t V = W.shape[0], d = W.shape[1];
  std::vector<std::pair<int32_t, int32_t>> out;
  while (loader.next(batch)) {
    Arena arena;
    nn::Context ctx{false, &arena, nullptr};
    const Tensor memory = m.model->encode(ctx, batch.images);  // [B, Tm, d]
    const int64_t Tm = memory.dim(1);
    for (int64_t b = 0; b < batch.labels.numel(); ++b) {
      const auto& image = train.images.at(static_cast<size_t>(batch.labels.i32()[b]));
      const std::string text = datasets::normalize_caption(image.captions.at(0));
      const std::vector<int> encoded = m.tokenizer.encode(text);
      const std::vector<int32_t> ids(encoded.begin(), encoded.end());
      for (const caption::NamedCell& c :
           caption::named_cells(m.tokenizer, ids, text, image.objects)) {
        if (!c.object || c.token < 0) continue;
        const std::vector<int32_t> rows = caption::patches_in(m.config, c.object->cell);
        std::vector<double> mean(static_cast<size_t>(d), 0.0);
        for (const int32_t i : rows)
          for (int64_t k = 0; k < d; ++k)
            mean[static_cast<size_t>(k)] += memory.f32()[(b * Tm + i) * d + k];
        int32_t best = 0;
        double top = -1e300;
        for (int64_t v = 0; v < V; ++v) {
          double z = 0;
          for (int64_t k = 0; k < d; ++k)
            z += W.value.f32()[v * d + k] * mean[static_cast<size_t>(k)];
          if (z > top) top = z, best = static_cast<int32_t>(v);
        }
        out.emplace_back(best, ids[static_cast<size_t>(c.token)]);
      }
    }
  }
  return out;
}

}  // namespace

TEST(CaptionTrain, ArticleLossTeachesEachCellToWriteItsNoun) {
  TinyScenes s;
  auto cells_named = [&](float lambda) {
    const std::string out = (s.dir / ("run" + std::to_string(lambda))).string();
    std::ostringstream log;
    caption::CaptionTrainOptions o = learning_options(s, out, 150);
    caption::scenes::SceneTrainOptions so;
    so.article_loss = lambda;
    EXPECT_EQ(caption::scenes::train_captions(o, so, log).end, train::End::finished) << log.str();
    caption::LoadedCaptioner m = caption::load_captioner(out + "/last.h5");
    if (lambda > 0.f) {
      EXPECT_TRUE(test::contains(log.str(), "article loss 1 (cells to their nouns)")) << log.str();
      EXPECT_EQ(m.meta.recipe.at("article-loss"), "1");
    }
    const auto words = cell_words(m, s);
    EXPECT_GE(words.size(), 12u) << "most of the 16 articles named";
    int right = 0;
    for (const auto& [said, noun] : words) right += said == noun ? 1 : 0;
    return 100.0 * right / std::max<double>(static_cast<double>(words.size()), 1);
  };
  const double plain = cells_named(0.f), taught = cells_named(1.f);
  EXPECT_GE(taught, 90.0);
  EXPECT_GE(taught, plain + 30.0) << "without the loss " << plain << "%";
}

// --teacher: distillation onto the article loss. A teacher that calls every article a bag, given
// the whole loss (hard, alpha 1), makes every cell write the piece of "bag", whatever its caption
// says; the log gives how many articles it read and how many it names as the scenes do.
TEST(CaptionTrain, AHardTeacherGivenTheWholeArticleLossTeachesItsOwnNames) {
  TinyScenes s;
  const std::string teacher = (s.dir / "bags.h5").string();
  save_classifier(s.options("").model.encoder, datasets::fashion_mnist_classes(), teacher,
                  [](ParamStore& store) {  // logits 0 but for "Bag", 5
                    Parameter* w = store.find("head.weight");
                    std::fill_n(w->value.f32(), w->numel(), 0.f);
                    store.find("head.bias")->value.f32()[8] = 5.f;
                  });
  auto bag_share = [&](bool taught) {
    const std::string out = (s.dir / (taught ? "taught" : "plain")).string();
    caption::CaptionTrainOptions o = learning_options(s, out, 150);
    caption::scenes::SceneTrainOptions so;
    so.article_loss = 1.f;
    if (taught) {
      so.teacher = teacher;
      so.distillation_type = "hard";
      so.distillation_alpha = 1.f;
    }
    std::ostringstream log;
    EXPECT_EQ(caption::scenes::train_captions(o, so, log).end, train::End::finished) << log.str();
    caption::LoadedCaptioner m = caption::load_captioner(out + "/last.h5");
    const int32_t bag =
        caption::scenes::teacher_tokens(m.tokenizer, datasets::fashion_mnist_classes(), teacher)
            .at(8);
    if (taught) {
      int64_t articles = 0, bags = 0;
      const datasets::CaptionSet train =
          datasets::read_captions(s.root + "/captions_train.json", s.root + "/images/train");
      for (const auto& image : train.images)
        for (const auto& object : image.objects) ++articles, bags += object.name == "bag" ? 1 : 0;
      const std::string read = "it read " + std::to_string(articles) + " articles in ";
      const std::string names =
          format_fixed(100.0 * static_cast<double>(bags) / static_cast<double>(articles), 2) +
          "% of them as the scenes do";
      EXPECT_TRUE(test::contains(log.str(), "teacher: " + teacher +
                                                ", hard distillation onto the article loss, "
                                                "alpha 1; " +
                                                read))
          << log.str();
      EXPECT_TRUE(test::contains(log.str(), names)) << log.str();
      EXPECT_EQ(m.meta.recipe.at("teacher"), teacher);
      EXPECT_EQ(m.meta.recipe.at("distillation-type"), "hard");
      EXPECT_EQ(m.meta.recipe.at("distillation-alpha"), "1");
    }
    const auto words = cell_words(m, s);
    EXPECT_GE(words.size(), 12u) << "most of the 16 articles named";
    int said_bag = 0, noun_bag = 0;
    for (const auto& [said, noun] : words) said_bag += said == bag, noun_bag += noun == bag;
    EXPECT_LT(noun_bag, static_cast<int>(words.size()) / 2) << "the scenes are not mostly bags";
    return 100.0 * said_bag / std::max<double>(static_cast<double>(words.size()), 1);
  };
  const double plain = bag_share(false), taught = bag_share(true);
  EXPECT_GE(taught, 90.0);
  EXPECT_LE(plain, 60.0);
}

// --phrases: the run's tokenizer keeps each phrase as one piece, and the words of a caption are
// still counted right after it (attention-in-cell finds a noun's row by its word).
TEST(CaptionTrain, PhrasesAreOnePieceOfTheRunsTokenizer) {
  TinyScenes s;
  const std::string out = (s.dir / "run").string();
  std::ostringstream log;
  caption::CaptionTrainOptions o = s.options(out);
  o.phrases = {"to the left of", "to the right of"};
  o.loop.max_steps = 1;
  caption::train_captions(o, log);
  caption::LoadedCaptioner m = caption::load_captioner(out + "/last.h5");
  const std::vector<int> ids = m.tokenizer.encode("a bag to the left of a coat");
  const std::vector<std::string> pieces = m.tokenizer.pieces(ids);
  const std::string phrase = "\xe2\x96\x81to\xe2\x96\x81the\xe2\x96\x81left\xe2\x96\x81of";
  const auto at = std::find(pieces.begin(), pieces.end(), phrase);
  ASSERT_NE(at, pieces.end()) << log.str();
  const std::vector<int64_t> words =
      caption::word_of_pieces(m.tokenizer, std::vector<int32_t>(ids.begin(), ids.end()));
  ASSERT_EQ(words.size(), pieces.size());
  const size_t k = static_cast<size_t>(at - pieces.begin());
  EXPECT_EQ(words[k], 2);      // "to" is the caption's third word
  EXPECT_EQ(words[k + 1], 6);  // "a", after "to the left of"
  EXPECT_EQ(words.back(), 7);  // "coat"
}

namespace {

// The train_loss column of a run's metrics.csv, one value per report.
std::vector<double> train_losses(const std::string& run) {
  auto cells = [](const std::string& line) {
    std::vector<std::string> out;
    std::istringstream in(line);
    for (std::string cell; std::getline(in, cell, ',');) out.push_back(cell);
    return out;
  };
  std::istringstream csv(test::read_file(run + "/metrics.csv"));
  std::string line;
  std::getline(csv, line);
  const std::vector<std::string> header = cells(line);
  const size_t column =
      static_cast<size_t>(std::find(header.begin(), header.end(), "train_loss") - header.begin());
  std::vector<double> losses;
  while (std::getline(csv, line)) losses.push_back(std::stod(cells(line).at(column)));
  return losses;
}

// An extension that records which hooks the task calls, and what it finds there, and adds a loss
// term of `value` to every step (no gradient).
class RecordingExtension : public caption::TaskExtension {
 public:
  explicit RecordingExtension(double value) : value_(value) {}
  std::map<std::string, int> calls;
  int64_t rows_augmented = 0, rows_added = 0;
  std::vector<Shape> attention;  // of the weights each add_loss found kept

  void check_data(const caption::CaptionTask& task) override {
    ++calls["check_data"];
    EXPECT_EQ(task.train_set().images.size(), 8u);
  }
  void setup(const caption::CaptionTask& task) override {
    ++calls["setup"];
    EXPECT_EQ(task.caption_ids(0, false).size(), 1u);  // one caption per image
    EXPECT_EQ(task.config().vocab_size, task.tokenizer().size());
  }
  bool keeps_attention() const override { return true; }
  void augment(const caption::CaptionTask&, datasets::Batch& batch) override {
    ++calls["augment"];
    rows_augmented += batch.labels.numel();
  }
  void start_batch(const caption::CaptionTask& task) override {
    ++calls["start_batch"];
    for (int64_t r = 0; r < task.batch().labels.numel(); ++r) EXPECT_EQ(task.target_index(r), 0u);
  }
  double add_loss(const caption::CaptionTask&, const caption::CaptionModel::LossHooks& model,
                  int64_t begin, int64_t end) override {
    ++calls["add_loss"];
    rows_added += end - begin;
    attention.push_back(model.attention("the recording extension").shape());
    return value_;
  }
  std::vector<std::string> loss_terms() const override {
    return {"recorded term " + format_general(value_)};
  }
  void log_setup(std::ostream& log) const override {
    log << "recording: " << calls.at("setup") << " setup\n";
  }
  void recipe(std::map<std::string, std::string>& recipe) const override {
    recipe["recorded"] = "yes";
  }

 private:
  double value_;
};

}  // namespace

// The general captioner trains without any extension: its loss falls, and neither its run header
// nor its checkpoint says a word of the generated scenes' extras.
TEST(CaptionTrain, TheGeneralTaskTrainsWithoutAnExtension) {
  TinyScenes s;
  caption::CaptionTrainOptions o = s.options((s.dir / "general").string());
  o.loop.epochs = 5;  // 10 steps
  o.attention_penalty = 0.1f;
  std::ostringstream log;
  const train::Result r = caption::train_captions(o, log);
  ASSERT_EQ(r.end, train::End::finished) << log.str();
  EXPECT_EQ(r.steps, 10);
  const std::vector<double> losses = train_losses(o.loop.output);
  ASSERT_EQ(losses.size(), 5u) << log.str();
  EXPECT_LT(losses.back(), losses.front()) << log.str();
  EXPECT_TRUE(test::contains(log.str(), "attention penalty 0.1; references")) << log.str();
  for (const char* scene : {"guided attention", "article loss", "teacher", "article"})
    EXPECT_FALSE(test::contains(log.str(), scene)) << scene << "\n" << log.str();
  const io::CheckpointMeta meta = io::read_checkpoint_meta(o.loop.output + "/last.h5");
  for (const char* key : {"guided-attention", "article-loss", "article-flip", "teacher"})
    EXPECT_EQ(meta.recipe.count(key), 0u) << key;
  caption::LoadedCaptioner m = caption::load_captioner(o.loop.output + "/last.h5");
  const datasets::CaptionSet train =
      datasets::read_captions(s.root + "/captions_train.json", s.root + "/images/train");
  for (const auto& g : caption::caption_set(*m.model, m.tokenizer, train, greedy_options()))
    EXPECT_TRUE(g.read && !g.texts.front().empty()) << g.image;
}

// An extension's hooks are called at their points of the run: the data and the set-up once, each
// batch's augmentation and start, each step's loss term on the attention weights it asked to keep
// (the step's reported loss then includes the term), its words in the run header and its recipe
// attribute in the checkpoint.
TEST(CaptionTrain, AnExtensionsHooksAreCalledAndItsLossIsReported) {
  TinyScenes s;
  caption::CaptionTrainOptions zero = s.options((s.dir / "zero").string());
  zero.loop.epochs = 2;  // 2 batches of 4 images an epoch: 4 steps
  caption::CaptionTrainOptions quarter = zero;
  quarter.loop.output = (s.dir / "quarter").string();
  RecordingExtension adds_zero(0.0), adds_quarter(0.25);
  std::ostringstream log;
  ASSERT_EQ(caption::train_captions(zero, {&adds_zero}, log).end, train::End::finished)
      << log.str();
  log.str("");
  ASSERT_EQ(caption::train_captions(quarter, {&adds_quarter}, log).end, train::End::finished)
      << log.str();
  EXPECT_EQ(
      adds_quarter.calls,
      (std::map<std::string, int>{
          {"check_data", 1}, {"setup", 1}, {"augment", 4}, {"start_batch", 4}, {"add_loss", 4}}));
  EXPECT_EQ(adds_quarter.rows_augmented, 16);
  EXPECT_EQ(adds_quarter.rows_added, 16);
  ASSERT_EQ(adds_quarter.attention.size(), 4u);
  for (const Shape& shape : adds_quarter.attention) {  // [B, heads, Tt, Tm]: the class token too
    ASSERT_EQ(shape.size(), 4u);
    EXPECT_EQ(shape[0], 4);
    EXPECT_EQ(shape[1], 2);
    EXPECT_EQ(shape[3], 37);
  }
  EXPECT_TRUE(test::contains(log.str(), "attention penalty off, recorded term 0.25; references"))
      << log.str();
  EXPECT_TRUE(test::contains(log.str(), "recording: 1 setup\n")) << log.str();
  EXPECT_EQ(io::read_checkpoint_meta(quarter.loop.output + "/last.h5").recipe.at("recorded"),
            "yes");
  // The term has no gradient: the runs train alike, and each report's loss is the term more.
  const std::vector<double> with = train_losses(quarter.loop.output),
                            without = train_losses(zero.loop.output);
  ASSERT_EQ(with.size(), 2u);
  ASSERT_EQ(without.size(), 2u);
  for (size_t k = 0; k < with.size(); ++k) EXPECT_NEAR(with[k] - without[k], 0.25, 2e-6) << k;
  caption::LoadedCaptioner a = caption::load_captioner(zero.loop.output + "/last.h5"),
                           b = caption::load_captioner(quarter.loop.output + "/last.h5");
  for (size_t i = 0; i < a.params->params().size(); ++i) {
    const Parameter& p = a.params->params()[i];
    const Parameter& q = b.params->params()[i];
    EXPECT_TRUE(std::equal(p.value.f32(), p.value.f32() + p.numel(), q.value.f32())) << p.name;
  }
}

// A run interrupted after an epoch and resumed ends with the weights, the optimizer state and
// the figures of the run that was never stopped, with random or with likeliest references.
TEST(CaptionTrain, AResumedRunIsTheUninterruptedOne) {
  TinyScenes s(/*captions_per_image=*/2);
  for (const std::string references : {"random", "likeliest"}) {
    SCOPED_TRACE(references);
    caption::CaptionTrainOptions whole = s.options((s.dir / ("whole-" + references)).string());
    whole.loop.epochs = 3;
    whole.attention_penalty = 0.1f;  // the penalty's path too
    whole.references = references;
    caption::scenes::SceneTrainOptions so;
    if (references == "likeliest") {  // and the augmentation, whose draws are keyed, and the
      whole.hflip = 0.5f;             // guided attention at the mirrored cells
      so.article_flip = 0.5f;
      so.article_erase = 0.5f;
      so.guided_attention = 0.5f;
      so.article_loss = 0.5f;
    }
    std::ostringstream log;
    ASSERT_EQ(caption::scenes::train_captions(whole, so, log).end, train::End::finished)
        << log.str();

    caption::CaptionTrainOptions first = whole;
    first.loop.output = (s.dir / ("parts-" + references)).string();
    first.loop.max_steps = 3;  // an epoch is 2 steps of 4 scenes: stopped inside the second
    ASSERT_EQ(caption::scenes::train_captions(first, so, log).end, train::End::max_steps)
        << log.str();
    caption::CaptionTrainOptions rest = whole;
    rest.loop.output = first.loop.output;
    rest.loop.resume = first.loop.output + "/last.h5";
    // A resumed run keeps its tokenizer: phrases it does not hold as pieces are refused.
    caption::CaptionTrainOptions other = rest;
    other.phrases = {"to the left of"};
    EXPECT_THROW(caption::scenes::train_captions(other, so, log), UsageError);
    ASSERT_EQ(caption::scenes::train_captions(rest, so, log).end, train::End::finished)
        << log.str();

    const io::CheckpointMeta meta = io::read_checkpoint_meta(whole.loop.output + "/last.h5");
    const caption::CaptionConfig c = caption::caption_config_from_map(meta.config, "whole");
    ParamStore a, b;
    caption::CaptionModel ma(a, c), mb(b, c);
    a.finalize();
    b.finalize();
    io::load_checkpoint(whole.loop.output + "/last.h5", a);
    io::load_checkpoint(rest.loop.output + "/last.h5", b);
    for (size_t i = 0; i < a.params().size(); ++i) {
      const Parameter& p = a.params()[i];
      const Parameter& q = b.params()[i];
      ASSERT_EQ(p.name, q.name);
      EXPECT_TRUE(std::equal(p.value.f32(), p.value.f32() + p.numel(), q.value.f32()))
          << p.name << " differs after the resume";
    }
  }
}

// --encoder-from: a classifier's encoder (here an average-pooling ViT at 28x28) starts the
// caption model at 84x84, its positions resampled and its fc_norm as the token norm; with
// --encoder-lr-scale 0 it stays exactly as loaded while the decoder trains.
TEST(CaptionTrain, AFrozenEncoderFromAClassifierStaysAsLoaded) {
  TinyScenes s;
  caption::CaptionTrainOptions o = s.options((s.dir / "frozen").string());
  const std::string classifier_path = (s.dir / "classifier.h5").string();
  std::vector<std::string> names;
  for (int k = 0; k < 10; ++k) names.push_back("c" + std::to_string(k));
  const std::unique_ptr<ParamStore> classifier =
      save_classifier(o.model.encoder, names, classifier_path, [](ParamStore& store) {
        for (Parameter& p : store.params())  // norms and biases away from their 1 and 0
          for (int64_t i = 0; i < p.numel(); ++i)
            p.value.f32()[i] += 0.01f * static_cast<float>(i % 7);
      });
  ParamStore& vstore = *classifier;
  const int64_t d_model = o.model.encoder.d_model;

  o.encoder_from = classifier_path;
  o.encoder_lr_scale = 0.f;
  o.loop.epochs = 2;
  std::ostringstream log;
  ASSERT_EQ(caption::train_captions(o, log).end, train::End::finished) << log.str();
  EXPECT_TRUE(test::contains(log.str(), "from " + classifier_path + ", frozen")) << log.str();
  caption::LoadedCaptioner m = caption::load_captioner(o.loop.output + "/last.h5");
  for (const Parameter& p : m.params->params()) {
    if (p.name.rfind("decoder.", 0) == 0 || p.name == "output_projection.weight") continue;
    const Parameter* src = vstore.find(p.name == "norm.weight" ? "fc_norm.weight"
                                       : p.name == "norm.bias" ? "fc_norm.bias"
                                                               : p.name);
    ASSERT_NE(src, nullptr) << p.name;
    if (p.name == "pos_embed") {  // resampled from 2x2 to 6x6 patches
      EXPECT_EQ(p.shape, (Shape{1, 37, d_model}));
      continue;
    }
    ASSERT_EQ(p.shape, src->shape) << p.name;
    EXPECT_TRUE(std::equal(p.value.f32(), p.value.f32() + p.numel(), src->value.f32())) << p.name;
  }
}
