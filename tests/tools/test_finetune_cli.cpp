// Fine-tuning through the options and the executable: the recipes and the option defaults they
// give, and `vitk finetune` / `vitk eval --image-size` end to end on tiny generated data (8×8 →
// 12×12, a new head, SGD with clipping against a hand computation, exact resume, bad flags). (The
// loading and layer-wise scales themselves: vit/test_finetune.cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/optim/ema.h"
#include "common/optim/optim.h"
#include "common/params.h"
#include "tools/train_options.h"
#include "util/op_test_util.h"
#include "util/test_util.h"
#include "util/texture_data.h"
#include "util/vitk_process.h"
#include "vit/checkpoint.h"
#include "vit/finetune.h"

using namespace vitk;
namespace fs = std::filesystem;
namespace po = boost::program_options;

// ---- Recipes and the option defaults they give -------------------------------------------------

namespace {

vit::TrainOptions parse_train(tools::TrainCommand command, std::vector<std::string> args) {
  po::options_description d;
  tools::add_train_options(d, command);
  po::variables_map vm;
  po::store(tools::parse_command_line(args, d), vm);
  po::notify(vm);
  return tools::train_options(vm, command);
}

vit::TrainOptions parse_finetune(std::vector<std::string> args) {
  return parse_train(tools::TrainCommand::finetune, std::move(args));
}

}  // namespace

TEST(Recipes, ValuesAndErrors) {
  const vit::Recipe& v = vit::recipe("vit");
  EXPECT_EQ(v.optimizer, "sgd");
  EXPECT_FLOAT_EQ(v.lr(512), 0.03f);
  EXPECT_FLOAT_EQ(v.lr(128), 0.0075f);
  EXPECT_EQ(v.min_lr(0.0075f), 0.f);
  EXPECT_EQ(v.weight_decay, 0.f);
  EXPECT_EQ(v.clip_grad, 1.f);
  EXPECT_EQ(v.momentum, 0.9f);
  const vit::Recipe& d = vit::recipe("deit");
  EXPECT_EQ(d.optimizer, "adamw");
  EXPECT_FLOAT_EQ(d.lr(512), 5e-6f);
  EXPECT_FLOAT_EQ(d.lr(32), 3.125e-7f);
  EXPECT_EQ(d.min_lr(1e-6f), 1e-6f);
  EXPECT_EQ(d.weight_decay, 1e-8f);
  EXPECT_EQ(d.warmup_epochs(30), 5.f);
  EXPECT_EQ(&vit::recipe_for_optimizer("sgd"), &v);
  EXPECT_EQ(&vit::recipe_for_optimizer("adamw"), &d);
  try {
    vit::recipe("beit");
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--recipe"), std::string::npos);
  }
  try {
    vit::recipe_for_optimizer("rmsprop");
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--opt"), std::string::npos);
  }
}

TEST(Recipes, FinetuneDefaultsComeFromTheRecipeAndGivenOptionsWin) {
  // No recipe, no --opt: the ViT paper's, scaled to the batch.
  vit::TrainOptions t = parse_finetune({"--from", "a.h5", "-b", "128"});
  EXPECT_TRUE(t.finetune.enabled);
  EXPECT_EQ(t.finetune.from, "a.h5");
  EXPECT_EQ(t.opt, "sgd");
  EXPECT_FLOAT_EQ(t.lr, 0.0075f);
  EXPECT_EQ(t.min_lr, 0.f);
  EXPECT_EQ(t.weight_decay, 0.f);
  EXPECT_EQ(t.loop.clip_grad, 1.f);
  EXPECT_EQ(t.smoothing, 0.f);
  EXPECT_EQ(t.augment.smoothing, 0.f);
  EXPECT_EQ(t.loop.epochs, 10);
  EXPECT_FLOAT_EQ(t.warmup_epochs, 0.5f);
  EXPECT_EQ(t.momentum, 0.9f);
  EXPECT_EQ(t.layer_decay, 1.f);
  EXPECT_EQ(t.finetune.num_classes, 0);
  EXPECT_FALSE(t.finetune.align_corners.has_value());

  // --opt adamw picks DeiT's recipe; --recipe deit the same.
  for (auto args : {std::vector<std::string>{"--opt", "adamw", "-b", "64"},
                    std::vector<std::string>{"--recipe", "deit", "-b", "64"}}) {
    t = parse_finetune(args);
    EXPECT_EQ(t.opt, "adamw");
    EXPECT_FLOAT_EQ(t.lr, 6.25e-7f);
    EXPECT_EQ(t.min_lr, t.lr);
    EXPECT_EQ(t.weight_decay, 1e-8f);
    EXPECT_EQ(t.loop.clip_grad, 0.f);
    EXPECT_FLOAT_EQ(t.smoothing, 0.1f);
    EXPECT_EQ(t.loop.epochs, 30);
    EXPECT_FLOAT_EQ(t.warmup_epochs, 5.f);
  }

  // Given options win; a shorter run keeps the recipe's share of warmup.
  t = parse_finetune({"--recipe", "deit", "--epochs", "3", "--lr", "1e-4", "--opt", "sgd",
                      "--layer-decay", "0.65", "--image-size", "384x256", "--align-corners",
                      "--num-classes", "10", "--clip-grad", "2"});
  EXPECT_EQ(t.opt, "sgd");
  EXPECT_FLOAT_EQ(t.lr, 1e-4f);
  EXPECT_FLOAT_EQ(t.min_lr, 1e-4f);
  EXPECT_FLOAT_EQ(t.warmup_epochs, 0.5f);
  EXPECT_FLOAT_EQ(t.layer_decay, 0.65f);
  EXPECT_EQ(t.finetune.image_height, 384);
  EXPECT_EQ(t.finetune.image_width, 256);
  EXPECT_EQ(t.finetune.align_corners, std::optional<bool>(true));
  EXPECT_EQ(t.finetune.num_classes, 10);
  EXPECT_EQ(t.loop.clip_grad, 2.f);
  EXPECT_FALSE(parse_finetune({"--align-corners=false"}).finetune.align_corners.value());

  EXPECT_THROW(parse_finetune({"--num-classes", "0"}), po::error);
  EXPECT_THROW(parse_finetune({"--image-size", "12x"}), UsageError);
  EXPECT_THROW(parse_finetune({"--recipe", "beit"}), UsageError);
}

TEST(Recipes, StepsSetTheRunsLengthAndTheRecipesWarmupIsAShareOfThem) {
  vit::TrainOptions t = parse_finetune({"--from", "a.h5", "--steps", "350", "-b", "64"});
  EXPECT_EQ(t.loop.steps, 350);
  EXPECT_FLOAT_EQ(t.warmup_share, static_cast<float>(vit::recipe("vit").warmup_fraction));
  t.data = "imgs";
  EXPECT_NO_THROW(t.validate());
  // A warmup given is kept in epochs; training from scratch has no recipe to take a share of.
  t = parse_finetune({"--steps", "350", "--warmup-epochs", "0.02"});
  EXPECT_EQ(t.warmup_share, 0.f);
  EXPECT_FLOAT_EQ(t.warmup_epochs, 0.02f);
  t = parse_train(tools::TrainCommand::train, {"--steps", "100", "--warmup-epochs", "0.5"});
  EXPECT_EQ(t.loop.steps, 100);
  EXPECT_EQ(t.warmup_share, 0.f);
  EXPECT_EQ(parse_train(tools::TrainCommand::train, {}).loop.steps, 0);
  // Both lengths at once is a mistake; so is a run of no steps.
  try {
    parse_finetune({"--steps", "350", "--epochs", "2"});
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_TRUE(vitk::test::contains(e.what(), "give --epochs or --steps, not both")) << e.what();
  }
  EXPECT_THROW(parse_finetune({"--steps", "0"}), po::error);
}

TEST(Recipes, RecordedAugmentationRoundTripsAndBadValuesNameTheAttribute) {
  vit::TrainOptions o;
  datasets::AugmentOptions a;
  a.random_resized_crop = false;
  a.scale = {0.25f, 0.9f};
  a.ratio = {0.5f, 2.f / 3.f};  // not a short decimal: must come back as the same float
  a.hflip = 0.3f;
  a.crop_padding = 2;
  a.reprob = 0.25f;
  a.mixup = 0.8f;
  a.cutmix = 1.f;
  a.mixup_prob = 0.5f;
  a.mixup_switch_prob = 0.1f;
  const auto record = vit::recipe_record(o, a);
  datasets::AugmentOptions b;
  EXPECT_EQ(vit::take_recorded_augment(record, {}, b, "m.h5").size(), 10u);
  EXPECT_EQ(b.random_resized_crop, a.random_resized_crop);
  EXPECT_EQ(b.scale, a.scale);
  EXPECT_EQ(b.ratio, a.ratio);
  EXPECT_EQ(b.hflip, a.hflip);
  EXPECT_EQ(b.crop_padding, a.crop_padding);
  EXPECT_EQ(b.reprob, a.reprob);
  EXPECT_EQ(b.mixup, a.mixup);
  EXPECT_EQ(b.cutmix, a.cutmix);
  EXPECT_EQ(b.mixup_prob, a.mixup_prob);
  EXPECT_EQ(b.mixup_switch_prob, a.mixup_switch_prob);

  // A given option is kept; --no-aug keeps the crop, flip, shift and erasing off.
  datasets::AugmentOptions c;
  c.hflip = 0.9f;
  vit::take_recorded_augment(record, {"hflip"}, c, "m.h5");
  EXPECT_EQ(c.hflip, 0.9f);
  datasets::AugmentOptions d;
  d.random_resized_crop = false, d.hflip = 0, d.reprob = 0, d.crop_padding = 0;
  EXPECT_EQ(vit::take_recorded_augment(record, {"no-aug"}, d, "m.h5"),
            (std::vector<std::string>{"mixup", "cutmix", "mixup-prob", "mixup-switch-prob"}));
  EXPECT_EQ(d.hflip, 0.f);
  EXPECT_EQ(d.reprob, 0.f);
  // No record (an older or imported checkpoint): nothing taken.
  datasets::AugmentOptions e;
  EXPECT_TRUE(vit::take_recorded_augment({{"opt", "sgd"}}, {}, e, "m.h5").empty());

  for (const auto& [key, bad] :
       std::vector<std::pair<std::string, std::string>>{{"hflip", "1.5"},
                                                        {"hflip", "x"},
                                                        {"hflip", "nan"},
                                                        {"scale", "0.5"},
                                                        {"scale", "0.9 0.5"},
                                                        {"scale", "0.5 2"},
                                                        {"ratio", "0 1"},
                                                        {"crop-padding", "1.5"},
                                                        {"crop-padding", "-1"},
                                                        {"mixup", "-1"},
                                                        {"random-resized-crop", "yes"}}) {
    auto damaged = record;
    damaged[key] = bad;
    datasets::AugmentOptions f;
    try {
      vit::take_recorded_augment(damaged, {}, f, "m.h5");
      ADD_FAILURE() << key << " = " << bad << " was taken";
    } catch (const Error& err) {
      EXPECT_TRUE(vitk::test::contains(err.what(), "m.h5: attribute recipe." + key + " is"))
          << err.what();
    }
  }
}

TEST(Recipes, TrainKeepsItsDefaults) {
  const vit::TrainOptions t = parse_train(tools::TrainCommand::train, {});
  EXPECT_FALSE(t.finetune.enabled);
  EXPECT_EQ(t.opt, "adamw");
  EXPECT_FLOAT_EQ(t.lr, 5e-4f);
  EXPECT_FLOAT_EQ(t.min_lr, 1e-5f);
  EXPECT_FLOAT_EQ(t.weight_decay, 0.05f);
  EXPECT_EQ(t.loop.clip_grad, 0.f);
  EXPECT_FLOAT_EQ(t.smoothing, 0.1f);
  EXPECT_EQ(t.loop.epochs, 30);
  EXPECT_EQ(t.warmup_epochs, 5.f);
  EXPECT_EQ(t.layer_decay, 1.f);
  EXPECT_EQ(t.model.d_model, 768);
}

// ---- `vitk finetune` and `vitk eval --image-size` end to end ------------------------------------
//
// Textures as in test_train.cpp (dark and bright noise, vertical and horizontal stripes), 16×16
// grey PNGs squashed to the model's size. A 2-layer ViT of width 32 is trained at 8×8 (a 2×2
// grid of 4×4 patches) on the four classes, then fine-tuned at 12×12 (3×3) on the two stripe
// classes with a new head.

namespace {

using Result = vitk::testing::ProcessResult;
using vitk::test::contains;
using vitk::testing::run_vitk;

using vitk::testing::write_textures;

const char* kTinyConfig =
    "[model]\n"
    "image_size = 8\n"
    "patch_size = 4\n"
    "channels = 1\n"
    "d_model = 32\n"
    "heads = 2\n"
    "d_ff = 64\n"
    "layers = 2\n"
    "resize = squash\n"
    "crop_fraction = 1\n"
    "mean = 0.3\n"
    "std = 0.35\n";

// Parameters and optimizer buffers of a checkpoint, read with the optimizer kind it holds.
struct Checkpoint {
  io::CheckpointMeta meta;
  std::map<std::string, Tensor> values;
  std::map<std::string, Tensor> buffers;  // "<buffer>/<name>"
};

Checkpoint read_checkpoint(const std::string& path, const std::vector<std::string>& extra = {}) {
  ParamStore store;
  for (const auto& [name, shape] : io::list_checkpoint(path)) store.add(name, shape);
  store.finalize();
  Checkpoint c;
  const std::string kind = io::read_checkpoint_meta(path).optimizer;
  std::unique_ptr<optim::Optimizer> opt;
  if (kind == "sgd") opt = std::make_unique<optim::Sgd>(store, optim::SgdOptions{});
  if (kind == "adamw") opt = std::make_unique<optim::AdamW>(store, optim::AdamWOptions{});
  std::unique_ptr<optim::ModelEma> ema;
  std::unique_ptr<optim::WithEma> with_ema;
  optim::Optimizer* o = opt.get();
  if (opt && std::find(extra.begin(), extra.end(), "ema") != extra.end()) {
    ema = std::make_unique<optim::ModelEma>(store, 0.0);
    with_ema = std::make_unique<optim::WithEma>(*opt, *ema, store);
    o = with_ema.get();
  }
  c.meta = io::load_checkpoint(path, store, o);
  for (const Parameter& p : store.params()) c.values.emplace(p.name, p.value.clone());
  if (o)
    for (const auto& [buffer, t] : o->state())
      for (const Parameter& p : store.params())
        c.buffers.emplace(buffer + "/" + p.name,
                          Tensor::view(t->f32() + p.offset, p.shape).clone());
  return c;
}

class FinetuneCli : public ::testing::Test {
 protected:
  // The data and the 8×8 source model, made once for all tests.
  static void SetUpTestSuite() {
    root_dir_ = new test::TempDir("vitk_finetune_data");
    root_ = root_dir_->path();
    const std::vector<std::string> four{"bright", "dark", "hstripes", "vstripes"};
    const std::vector<std::string> two{"hstripes", "vstripes"};
    write_textures(root_ / "pre", "train", four, 32, 1);
    write_textures(root_ / "pre", "val", four, 8, 2);
    write_textures(root_ / "fine", "train", two, 32, 3);
    write_textures(root_ / "fine", "val", two, 16, 4);
    std::ofstream(root_ / "tiny.ini") << kTinyConfig;
    Result r = run_vitk(
        root_,
        {"train", "--config", "tiny.ini", "--data", "pre", "--output", "src", "--epochs", "2",
         "--batch-size", "32", "--lr", "0.003", "--warmup-epochs", "0.5", "--threads", "2",
         // Not vitk's defaults: what a fine-tuning run takes from the checkpoint shows.
         "--hflip", "0.25", "--reprob", "0.1"},
        "src");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    source_ = (root_ / "src/best.h5").string();
  }
  static void TearDownTestSuite() { delete root_dir_; }
  void SetUp() override {
    if (source_.empty()) GTEST_SKIP() << "the source model was not trained";
  }

  Result run(const std::vector<std::string>& args, const std::string& tag = "run") {
    return run_vitk(dir_, args, tag);
  }
  // `vitk finetune` from the source model on the stripes, into dir_/output.
  Result finetune(const std::string& output, std::vector<std::string> extra,
                  const std::string& tag = "finetune", const std::string& data = fine()) {
    std::vector<std::string> args{"finetune", "--from",    source_, "--data",
                                  data,       "--output",  output,  "--batch-size",
                                  "16",       "--threads", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args, tag);
  }
  static std::string fine() { return (root_ / "fine").string(); }
  static std::string pre() { return (root_ / "pre").string(); }

  static test::TempDir* root_dir_;
  static fs::path root_;
  static std::string source_;
  test::TempDir temp_{"vitk_finetune"};
  fs::path dir_ = temp_.path();
};

test::TempDir* FinetuneCli::root_dir_ = nullptr;
fs::path FinetuneCli::root_;
std::string FinetuneCli::source_;

using vitk::testing::expect_one_error_line;

double top1_of(const std::string& eval_out) {
  const std::string key = "top-1 accuracy: ";
  const size_t at = eval_out.find(key);
  return at == std::string::npos ? -1 : std::stod(eval_out.substr(at + key.size()));
}

}  // namespace

TEST_F(FinetuneCli, HigherResolutionWithANewHeadThenEval) {
  // DeiT's recipe (AdamW, the rate held after warmup) with a rate for a tiny model and a new head.
  Result r =
      finetune("ft", {"--image-size", "12", "--num-classes", "2", "--recipe", "deit", "--epochs",
                      "3", "--lr", "0.003", "--warmup-epochs", "0.25", "--no-aug"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "fine-tuning from " + source_ +
                                  ": vit 8x8 -> 12x12, positions resampled from 2x2 to 3x3 "
                                  "(bicubic, align_corners false); new zero head of 2 classes "
                                  "(was 4)"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "model: vit 12x12x1, patch 4 (9 patches + class token)")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "optimizer: AdamW, lr 0.003 (warmup 0.25 epochs = 1 steps, cosine "
                       "to 0.003 at step 12), weight decay 1e-08 (not on"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "clip-grad off\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "label smoothing 0.1")) << r.out;
  EXPECT_TRUE(contains(r.out, "finished 3 epochs")) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "ft/last.h5"));
  EXPECT_TRUE(fs::exists(dir_ / "ft/metrics.csv"));

  // The fine-tuned model: 12×12, a 3×3 grid, 2 classes named from the data.
  vit::LoadedVit m = vit::load_vit((dir_ / "ft/best.h5").string());
  EXPECT_EQ(m.config.image_height, 12);
  EXPECT_EQ(m.config.num_classes, 2);
  EXPECT_EQ(m.meta.class_names, (std::vector<std::string>{"hstripes", "vstripes"}));
  EXPECT_EQ(m.params->get("pos_embed").shape, (Shape{1, 10, 32}));
  EXPECT_EQ(m.params->get("head.weight").shape, (Shape{2, 32}));
  EXPECT_EQ(m.config.d_model, 32);

  Result e = run({"eval", "--model", "ft/best.h5", "--data", fine()}, "eval");
  ASSERT_EQ(e.status, 0) << e.out << e.err;
  EXPECT_TRUE(contains(e.out, "(vit 12x12x1, 2 classes")) << e.out;
  EXPECT_TRUE(contains(e.out, "of 32 images)")) << e.out;
  EXPECT_FALSE(contains(e.out, "resampled")) << e.out;
  EXPECT_GT(top1_of(e.out), 75.0) << "chance is 50%\n" << r.out << e.out;

  // The source at 12×12 without fine-tuning: positions resampled, the old head and classes.
  Result o = run({"eval", "--model", source_, "--data", pre(), "--image-size", "12"}, "eval12");
  ASSERT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_TRUE(contains(o.out, "(vit 12x12x1, 4 classes")) << o.out;
  EXPECT_TRUE(contains(o.out,
                       "positions resampled from 8x8 (grid 2x2) to 12x12 (grid 3x3), "
                       "bicubic, align_corners false"))
      << o.out;
  EXPECT_TRUE(contains(o.out, "of 32 images)")) << o.out;
  Result t =
      run({"eval", "--model", source_, "--data", pre(), "--image-size", "12x8", "--align-corners"},
          "eval12x8");
  ASSERT_EQ(t.status, 0) << t.out << t.err;
  EXPECT_TRUE(contains(t.out, "to 12x8 (grid 3x2), bicubic, align_corners true")) << t.out;
  // The ViT paper's bilinear resampling, in eval and in a fine-tuning run; a mode it lacks fails.
  Result bl = run({"eval", "--model", source_, "--data", pre(), "--image-size", "12",
                   "--pos-interpolation", "bilinear"},
                  "eval12bl");
  ASSERT_EQ(bl.status, 0) << bl.out << bl.err;
  EXPECT_TRUE(contains(bl.out, "to 12x12 (grid 3x3), bilinear, align_corners false")) << bl.out;
  Result fb = finetune("ftbl", {"--image-size", "12", "--num-classes", "2", "--max-steps", "1",
                                "--pos-interpolation", "bilinear"});
  ASSERT_EQ(fb.status, 0) << fb.out << fb.err;
  EXPECT_TRUE(
      contains(fb.out, "positions resampled from 2x2 to 3x3 (bilinear, align_corners false)"))
      << fb.out;
  Result bad = run({"eval", "--model", source_, "--data", pre(), "--image-size", "12",
                    "--pos-interpolation", "nearest"},
                   "evalbad");
  EXPECT_NE(bad.status, 0);
  EXPECT_TRUE(
      contains(bad.err, "--pos-interpolation must be 'bicubic' or 'bilinear', got 'nearest'"))
      << bad.err;
}

namespace {

// Checks one SGD step from `start` (momentum buffer zero before it, no weight decay): the buffer
// is the clipped gradient g, and each weight moved to p − lr·scale·g with the scale of its layer.
// Returns the number of weights that moved and the norm of g.
std::pair<int64_t, double> check_sgd_step(const Checkpoint& after,
                                          const std::map<std::string, Tensor>& start, float lr,
                                          int layers, double layer_decay) {
  double norm2 = 0;
  int64_t moved = 0;
  for (const auto& [name, value] : after.values) {
    const Tensor& g = after.buffers.at("momentum_buffer/" + name);
    const float* old = start.at(name).f32();
    // As Sgd::step forms it: the f32 base rate times the scale, in double, rounded once.
    const float lr_p = static_cast<float>(static_cast<double>(lr) *
                                          vit::layer_decay_scale(name, layers, layer_decay));
    for (int64_t i = 0; i < value.numel(); ++i) {
      // p − lr·g, with the product rounded or fused (the compiler may contract it).
      volatile float product = lr_p * g.f32()[i];
      const float rounded = old[i] - product, fused = std::fma(-lr_p, g.f32()[i], old[i]);
      EXPECT_TRUE(value.f32()[i] == rounded || value.f32()[i] == fused)
          << name << "[" << i << "] lr " << lr_p << ": " << value.f32()[i] << " vs " << rounded;
      if (value.f32()[i] != rounded && value.f32()[i] != fused) return {-1, 0};
      norm2 += static_cast<double>(g.f32()[i]) * g.f32()[i];
      moved += value.f32()[i] != old[i];
    }
  }
  return {moved, std::sqrt(norm2)};
}

std::map<std::string, Tensor> weights_of(vit::LoadedVit& m) {
  std::map<std::string, Tensor> out;
  for (const Parameter& p : m.params->params()) out.emplace(p.name, p.value.clone());
  return out;
}

}  // namespace

TEST_F(FinetuneCli, AugmentationNotGivenIsTheCheckpointsOwn) {
  // The source recorded how it was trained; a fine-tuning run takes what it is not given.
  const io::CheckpointMeta src = io::read_checkpoint_meta(source_);
  EXPECT_EQ(src.recipe.at("hflip"), "0.25");
  EXPECT_EQ(src.recipe.at("reprob"), "0.1");
  EXPECT_EQ(src.recipe.at("scale"), "0.08 1");
  EXPECT_EQ(src.recipe.at("opt"), "adamw");
  EXPECT_EQ(src.recipe.at("lr"), "0.003");
  const Result shown = run({"inspect", source_});
  EXPECT_TRUE(contains(shown.out, "\n  --hflip 0.25\n")) << shown.out;

  Result r = finetune("taken", {"--num-classes", "2", "--epochs", "1", "--max-steps", "1"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "augment: random resized crop scale 0.08-1 ratio 0.75-1.333, hflip "
                       "0.25, reprob 0.1 (as " +
                           source_ +
                           " was trained: random-resized-crop, scale, ratio, hflip, "
                           "crop-padding, reprob, mixup, cutmix, mixup-prob, "
                           "mixup-switch-prob)\n"))
      << r.out;
  // The run records the augmentation it used, and its own optimizer (the vit recipe's).
  const io::CheckpointMeta ft = io::read_checkpoint_meta((dir_ / "taken/last.h5").string());
  EXPECT_EQ(ft.recipe.at("hflip"), "0.25");
  EXPECT_EQ(ft.recipe.at("opt"), "sgd");

  // Given options win, from the command line or a config file.
  std::ofstream(dir_ / "aug.ini") << "[augment]\nscale = 0.5 1\n";
  r = finetune("given", {"--num-classes", "2", "--epochs", "1", "--max-steps", "1", "--reprob", "0",
                         "--config", (dir_ / "aug.ini").string()});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "scale 0.5-1 ratio 0.75-1.333, hflip 0.25, reprob 0 (as " + source_ +
                                  " was trained: random-resized-crop, ratio, hflip, "
                                  "crop-padding, mixup, cutmix, mixup-prob, mixup-switch-prob)"))
      << r.out;
  r = finetune("plain", {"--num-classes", "2", "--epochs", "1", "--max-steps", "1", "--no-aug"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "augment: eval transform (no random crop), hflip 0, reprob 0 (as " +
                                  source_ +
                                  " was trained: mixup, cutmix, mixup-prob, "
                                  "mixup-switch-prob)"))
      << r.out;
}

TEST_F(FinetuneCli, StepsOnTheCommandLineReplaceAConfigsEpochsAndEndValidated) {
  // 64 images in batches of 16: 4 steps an epoch, so 6 steps end half-way through epoch 2.
  std::ofstream(dir_ / "long.ini") << "[train]\nepochs = 4\n";
  Result r = finetune("steps", {"--num-classes", "2", "--config", (dir_ / "long.ini").string(),
                                "--steps", "6", "--model-ema", "--model-ema-decay", "0.5"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (const std::string part : {"run: 6 steps (--steps), 1.5 epochs of 4 steps",
                                 "cosine to 0 at step 6)", "finished 6 steps (--steps)"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  const std::vector<std::string> rows =
      vitk::test::lines_of(vitk::test::read_file(dir_ / "steps/metrics.csv"));
  ASSERT_EQ(rows.size(), 3u) << r.out;  // the header, epoch 1 and the end at step 6
  EXPECT_EQ(rows[2].substr(0, 6), "6,1.5,");
  EXPECT_TRUE(fs::exists(dir_ / "steps/ema.h5"));  // written at the last report, as after epochs
  const io::CheckpointMeta last = io::read_checkpoint_meta((dir_ / "steps/last.h5").string());
  EXPECT_EQ(last.recipe.at("steps"), "6");
  EXPECT_EQ(last.recipe.count("epochs"), 0u);
  EXPECT_EQ(last.recipe.at("warmup-epochs"), "0");  // 5% of 6 steps, rounded

  // Both on the command line: refused before anything is written.
  r = finetune("both", {"--num-classes", "2", "--epochs", "2", "--steps", "3"});
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.err, "give --epochs or --steps, not both")) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "both"));
}

TEST_F(FinetuneCli, FreezePatchEmbedHoldsItForTheFirstStepsOnly) {
  vit::LoadedVit src = vit::load_vit(source_);
  const std::map<std::string, Tensor> start = weights_of(src);
  // How many tensors of a run's last.h5 moved from the source: of the patch embedding, of the rest.
  auto moved = [&](const std::string& run_dir) {
    vit::LoadedVit m = vit::load_vit((dir_ / run_dir / "last.h5").string());
    std::pair<int, int> n{0, 0};
    for (const Parameter& p : m.params->params()) {
      if (p.name.rfind("head.", 0) == 0) continue;  // a new head of 2 classes
      const Tensor& a = start.at(p.name);
      const bool same = std::memcmp(a.f32(), p.value.f32(), a.nbytes()) == 0;
      (p.name.rfind("patch_embed.", 0) == 0 ? n.first : n.second) += !same;
    }
    return n;
  };
  const std::vector<std::string> common{
      "--num-classes",        "2", "--opt", "adamw", "--lr", "0.003", "--epochs", "2",
      "--freeze-patch-embed", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  Result r = finetune("held", with({"--max-steps", "2"}));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "patch embedding (2 tensors) held at lr 0 for steps 1-2\n")) << r.out;
  const auto held = moved("held");
  EXPECT_EQ(held.first, 0);   // patch_embed.proj.weight and .bias as loaded
  EXPECT_GT(held.second, 0);  // the blocks learnt
  r = finetune("free", with({"--max-steps", "3"}));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(moved("free").first, 2);  // step 3 moves them
  EXPECT_EQ(
      io::read_checkpoint_meta((dir_ / "free/last.h5").string()).recipe.at("freeze-patch-embed"),
      "2");
}

// The README's demo: configs/vit-fmnist-finetune56.ini on the bundled model, one small step.
TEST_F(FinetuneCli, TheReadmesRecipeFineTunesTheBundledModelAt56) {
  const fs::path source(VITK_SOURCE_DIR);
  const fs::path data = "/usr/share/datasets/fashion-mnist";
  std::error_code ec;
  if (!fs::exists(data / "train-images-idx3-ubyte.gz", ec) &&
      !fs::exists(data / "train-images-idx3-ubyte", ec))
    GTEST_SKIP() << "no Fashion-MNIST in " << data << " (dataset-fashion-mnist)";
  Result r = run({"finetune", "--config", (source / "configs/vit-fmnist-finetune56.ini").string(),
                  "--from", (source / "vit/models/fmnist-vit.h5").string(), "--output", "fm56",
                  "--max-steps", "1", "--batch-size", "8", "--threads", "2"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (const std::string part :
       {": vit 28x28 -> 56x56, positions resampled from 7x7 to 14x14",
        "optimizer: AdamW, lr 0.0006",
        "augment: random resized crop scale 1-1 ratio 1-1, hflip 0.5, reprob 0 (as given or vitk's "
        "defaults: ",
        "stopped at step 1"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  EXPECT_EQ(vit::load_vit((dir_ / "fm56/last.h5").string()).config.image_height, 56);
}

TEST_F(FinetuneCli, SgdRecipeStepEqualsAHandComputation) {
  // One step, no warmup (lr(0) = --lr exactly), no augmentation, with the recipe's SGD and
  // clipping and a layer decay of 0.5; the head kept (the source's four classes), so that every
  // layer has a gradient.
  const std::vector<std::string> opts{
      "--image-size",  "12",  "--epochs", "1",           "--lr", "0.01", "--warmup-epochs", "0",
      "--layer-decay", "0.5", "--no-aug", "--max-steps", "1"};
  Result r = finetune("sgd", opts, "sgd", pre());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "head kept (4 classes)")) << r.out;
  EXPECT_TRUE(contains(r.out, "optimizer: SGD, momentum 0.9, lr 0.01")) << r.out;
  EXPECT_TRUE(contains(r.out, "weight decay 0 (L2, ")) << r.out;
  EXPECT_TRUE(contains(r.out, "clip-grad 1\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "label smoothing 0\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "layer decay 0.5: lr x 0.5^(3 - layer), from 0.125")) << r.out;
  const Checkpoint after = read_checkpoint((dir_ / "sgd/last.h5").string());
  EXPECT_EQ(after.meta.optimizer, "sgd");
  EXPECT_EQ(after.meta.step, 1);
  ASSERT_EQ(after.buffers.size(), after.values.size()) << "one buffer: momentum_buffer";
  vit::LoadedVit start = vit::load_vit(source_, 12, 12);
  auto [moved, norm] = check_sgd_step(after, weights_of(start), 0.01f, 2, 0.5);
  EXPECT_GT(moved, 10000) << "of 18,180 weights";
  EXPECT_LE(norm, 1.0 + 1e-5) << "clip-grad 1, the recipe's";
  EXPECT_GT(norm, 0.0);

  // With a tight clip the norm is the clip (up to torch's 1e-6 in the denominator).
  std::vector<std::string> tight = opts;
  tight.insert(tight.end(), {"--clip-grad", "0.001"});
  ASSERT_EQ(finetune("tight", tight, "tight", pre()).status, 0);
  const Checkpoint t = read_checkpoint((dir_ / "tight/last.h5").string());
  std::tie(moved, norm) = check_sgd_step(t, weights_of(start), 0.01f, 2, 0.5);
  EXPECT_GT(moved, 10000);
  EXPECT_NEAR(norm, 0.001, 2e-6);

  // A new head starts at zero, so the first step's gradient reaches only the head: everything
  // else is still the source's (resampled), and the head is −lr·g.
  ASSERT_EQ(finetune("head",
                     {"--image-size", "12", "--num-classes", "2", "--lr", "0.01", "--warmup-epochs",
                      "0", "--no-aug", "--max-steps", "1"},
                     "head")
                .status,
            0);
  const Checkpoint h = read_checkpoint((dir_ / "head/last.h5").string());
  std::map<std::string, Tensor> zero_head = weights_of(start);
  zero_head["head.weight"] = Tensor({2, 32});
  zero_head["head.bias"] = Tensor({2});
  zero_head["head.weight"].zero();
  zero_head["head.bias"].zero();
  std::tie(moved, norm) = check_sgd_step(h, zero_head, 0.01f, 2, 1.0);
  EXPECT_GT(moved, 0);
  EXPECT_LE(moved, 2 * 32 + 2) << "only the head moves";
  EXPECT_FALSE(test::bitwise_equal(h.values.at("head.weight"), zero_head.at("head.weight")));

  // The DeiT recipe: AdamW state.
  ASSERT_EQ(
      finetune("deit",
               {"--image-size", "12", "--num-classes", "2", "--recipe", "deit", "--max-steps", "1"},
               "deit")
          .status,
      0);
  const Checkpoint d = read_checkpoint((dir_ / "deit/last.h5").string());
  EXPECT_EQ(d.meta.optimizer, "adamw");
  EXPECT_EQ(d.buffers.size(), 2 * d.values.size()) << "exp_avg and exp_avg_sq";
}

TEST_F(FinetuneCli, ResumeIsExact) {
  // SGD with momentum, clipping, layer decay, drop-path, augmentation and the EMA.
  const std::vector<std::string> base{"--epochs",      "2",
                                      "--layer-decay", "0.75",
                                      "--model-ema",   "--model-ema-decay",
                                      "0.9",           "--model.drop_path",
                                      "0.1",           "--scale",
                                      "0.6",           "1",
                                      "--lr",          "0.01"};
  std::vector<std::string> opts = base;
  opts.insert(opts.end(), {"--image-size", "12", "--num-classes", "2"});
  Result a = finetune("full", opts, "full");
  ASSERT_EQ(a.status, 0) << a.out << a.err;
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = opts;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  Result b1 = finetune("parts", with({"--max-steps", "3"}), "b1");
  ASSERT_EQ(b1.status, 0) << b1.out << b1.err;
  EXPECT_TRUE(contains(b1.out, "stopped at step 3")) << b1.out;
  // A resumed run keeps its model and optimizer: other ones are refused.
  std::vector<std::string> at16 = base;
  at16.insert(at16.end(),
              {"--image-size", "16", "--num-classes", "2", "--resume", "parts/last.h5"});
  Result bad = finetune("parts", at16, "bad");
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--image-size 16x16 differs")) << bad.err;
  bad = finetune("parts", with({"--resume", "parts/last.h5", "--opt", "adamw"}), "bad");
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--opt adamw")) << bad.err;
  // The rest of the run, resumed without --from (the weights are in last.h5).
  std::vector<std::string> rest{"finetune", "--resume", "parts/last.h5", "--data", fine(),
                                "--output", "parts",    "--batch-size",  "16",     "--threads",
                                "2"};
  rest.insert(rest.end(), opts.begin(), opts.end());
  Result b2 = run(rest, "b2");
  ASSERT_EQ(b2.status, 0) << b2.out << b2.err;
  EXPECT_TRUE(contains(b2.out, "resumed from parts/last.h5: epoch 1/2, batch 3/4, step 3"))
      << b2.out;
  EXPECT_TRUE(contains(b2.out, "finished 2 epochs")) << b2.out;

  const Checkpoint full = read_checkpoint((dir_ / "full/last.h5").string(), {"ema"});
  const Checkpoint parts = read_checkpoint((dir_ / "parts/last.h5").string(), {"ema"});
  EXPECT_EQ(full.meta.step, 8);
  EXPECT_EQ(parts.meta.step, 8);
  EXPECT_EQ(full.meta.rng_state, parts.meta.rng_state);
  ASSERT_EQ(full.values.size(), parts.values.size());
  for (const auto& [name, v] : full.values)
    EXPECT_TRUE(test::bitwise_equal(v, parts.values.at(name))) << name;
  ASSERT_EQ(full.buffers.size(), 2 * full.values.size()) << "momentum_buffer and ema";
  for (const auto& [name, v] : full.buffers)
    EXPECT_TRUE(test::bitwise_equal(v, parts.buffers.at(name))) << name;
}

TEST_F(FinetuneCli, BadFlagsAndSizesFailBeforeAnythingIsWritten) {
  std::ofstream(dir_ / "three.txt") << "a\nb\nc\n";
  std::ofstream(dir_ / "two.txt") << "horizontal\nvertical\n";
  struct Case {
    std::vector<std::string> args;
    int status;
    std::string message;
  };
  const std::vector<Case> cases{
      {{"--recipe", "beit"}, 2, "--recipe"},
      {{"--opt", "rmsprop"}, 2, "--opt"},
      {{"--layer-decay", "0"}, 2, "--layer-decay"},
      {{"--layer-decay", "1.5"}, 2, "--layer-decay"},
      {{"--momentum", "-1"}, 2, "--momentum"},
      {{"--image-size", "abc"}, 2, "--image-size"},
      {{"--image-size", "10", "--num-classes", "2"},
       2,
       "--image-size 10x10: the patch size 4 of " + source_ +
           " does not divide it (8x8 or 12x12 would do)"},
      {{"--num-classes", "3"}, 2, "--num-classes 3: the data"},
      {{"--num-classes", "0"}, 2, "--num-classes"},
      {{"--num-classes", "2", "--labels", "three.txt"}, 2, "--labels three.txt has 3"},
      {{"--labels", "missing.txt"}, 1, "missing.txt"},
      {{}, 2, "--num-classes 2 for a new head"},
      {{"--model.d_model", "64", "--num-classes", "2"}, 2, "--model.d_model 64 differs"},
      // A stem the source does not have (it has none).
      {{"--model.stem_channels", "8", "--num-classes", "2"},
       2,
       "--model.stem_channels 8 differs from the none of"},
      {{"--model.pos_conv_blocks", "0", "--num-classes", "2"},
       2,
       "--model.pos_conv_blocks 0 differs from the none of"},
      {{"--model.image_size", "12", "--num-classes", "2"}, 2, "--image-size"},
      {{"--model.drop_path", "1.5", "--num-classes", "2"}, 2, "drop_path"},
      {{"--align-corners=maybe"}, 2, "align-corners"},
      {{"--warmup-epochs", "20"}, 2, "--warmup-epochs"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> extra = c.args;
    Result r = finetune("never", extra);
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    EXPECT_EQ(r.status, c.status) << shown << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << shown << "\n" << r.err;
    expect_one_error_line(r);
    EXPECT_FALSE(fs::exists(dir_ / "never")) << shown;
  }
  // No --from; a missing one.
  Result r = run({"finetune", "--data", fine(), "--output", "never", "-b", "16"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--from")) << r.err;
  r = run({"finetune", "--from", "missing.h5", "--data", fine(), "--output", "never", "-b", "16"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "missing.h5")) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "never"));

  // Keeping the head needs the data's classes to be its own: four classes of other names fail,
  // and --labels names them (the run then starts).
  const fs::path other = dir_ / "other";
  write_textures(other, "train", {"bright", "dark", "hstripes", "vstripes"}, 4, 5);
  write_textures(other, "val", {"bright", "dark", "hstripes", "vstripes"}, 1, 6);
  fs::rename(other / "train/dark", other / "train/black");
  fs::rename(other / "val/dark", other / "val/black");
  r = run(
      {"finetune", "--from", source_, "--data", other.string(), "--output", "never", "-b", "4"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "class 0 is 'black'")) << r.err;
  EXPECT_TRUE(contains(r.err, "--labels")) << r.err;
  std::ofstream(dir_ / "four.txt") << "bright\ndark\nhstripes\nvstripes\n";
  r = run({"finetune", "--from", source_, "--data", other.string(), "--output", "kept", "-b", "4",
           "--labels", "four.txt", "--max-steps", "1"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "head kept (4 classes)")) << r.out;
  EXPECT_EQ(vit::load_vit((dir_ / "kept/last.h5").string()).meta.class_names,
            (std::vector<std::string>{"bright", "dark", "hstripes", "vstripes"}));
  // --labels also names the classes of a new head.
  r = finetune("named", {"--num-classes", "2", "--labels", "two.txt", "--max-steps", "1"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(vit::load_vit((dir_ / "named/last.h5").string()).meta.class_names,
            (std::vector<std::string>{"horizontal", "vertical"}));

  // eval: a size the patches do not tile, and a malformed one.
  r = run({"eval", "--model", source_, "--data", pre(), "--image-size", "10"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--image-size 10x10")) << r.err;
  EXPECT_TRUE(contains(r.err, "does not divide")) << r.err;
  expect_one_error_line(r);
  r = run({"eval", "--model", source_, "--data", pre(), "--image-size", "x"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--image-size")) << r.err;
}
