// Options that would do nothing or be silently changed, and messages that must say what is wrong
// and where: a checkpoint of another model named as such, int8 files that are damaged or given
// where f32 weights are read, non-finite logits naming the model and the image, and usage errors
// that name the option. Each runs vitk as a user would, on tiny models made here.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/nn/nn.h"
#include "common/seq2seq/checkpoint.h"
#include "common/train/state.h"
#include "util/caption_scenes.h"
#include "util/test_util.h"
#include "util/texture_data.h"
#include "util/tiny_models.h"
#include "util/vitk_process.h"
#include "vit/caption/model.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::TempDir;
using vitk::testing::ProcessResult;

// A command's arguments, then `extra`, then --output OUTPUT.
std::vector<std::string> with_output(std::vector<std::string> args,
                                     const std::vector<std::string>& extra,
                                     const std::string& output) {
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--output", output});
  return args;
}

// A tiny captioning model with random weights (no tokenizer: the type is refused before one is
// looked for).
void save_random_captioner(const std::string& path) {
  vitk::caption::CaptionConfig c;
  c.encoder = vitk::testing::tiny_grey_vit(16, 0, 1);
  c.encoder.pool = "token";
  c.vocab_size = 16;
  c.max_length = 8;
  c.decoder_layers = 2;
  c.decoder_heads = 2;
  c.decoder_d_ff = 32;
  vitk::ParamStore params;
  vitk::caption::CaptionModel model(params, c);
  params.finalize();
  vitk::ops::Rng rng(4);
  model.init(rng);
  vitk::io::CheckpointMeta meta;
  meta.config = vitk::caption::to_config_map(c);
  vitk::io::save_checkpoint(path, params, meta);
}

// A tiny translation model as a run's last.h5 would hold it: with a training state.
void save_translation_run(const std::string& path) {
  vitk::testing::TinyTranslation t;
  vitk::io::CheckpointMeta meta;
  meta.config = vitk::seq2seq::to_config_map(t.config);
  meta.files[vitk::seq2seq::kTokenizerFile] = "tokenizer bytes";
  vitk::train::TrainState s;
  s.step = meta.step = 1;
  s.batches_in_epoch = 4;
  s.batching = "max-tokens";
  s.batch_size = 64;
  meta.train_state = s.values();
  vitk::io::save_checkpoint(path, t.params, meta);
}

// Edits a checkpoint with the HDF5 C API, as a user with h5py would.
class Edit {
 public:
  explicit Edit(const std::string& path) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(file_, 0) << path;
  }
  ~Edit() { H5Fclose(file_); }
  void remove_attr(const std::string& name) { EXPECT_GE(H5Adelete(file_, name.c_str()), 0); }
  // Every value of the f32 dataset `name` set to `value`.
  void fill(const std::string& name, float value) {
    hid_t ds = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
    ASSERT_GE(ds, 0) << name;
    hid_t space = H5Dget_space(ds);
    std::vector<float> values(static_cast<size_t>(H5Sget_simple_extent_npoints(space)), value);
    EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    H5Sclose(space), H5Dclose(ds);
  }
  // The dataset `name` stored again with the integer type `type` (its values as they were).
  void retype(const std::string& name, hid_t type) {
    hid_t ds = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
    ASSERT_GE(ds, 0) << name;
    hid_t space = H5Dget_space(ds);
    std::vector<int> values(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
    EXPECT_GE(H5Dread(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    H5Dclose(ds);
    EXPECT_GE(H5Ldelete(file_, name.c_str(), H5P_DEFAULT), 0);
    for (int& v : values) v = v < 0 ? v + 256 : v;  // representable as u8 too
    ds = H5Dcreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(ds, 0) << name;
    EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    H5Sclose(space), H5Dclose(ds);
  }

 private:
  hid_t file_ = H5I_INVALID_HID;
};

class Messages : public ::testing::Test {
 protected:
  void SetUp() override {
    vitk::testing::save_random_vit(path("vit.h5"), vitk::testing::tiny_grey_vit(16, 4, 1),
                                   vitk::testing::kTextureClasses);
    save_random_captioner(path("captioner.h5"));
    save_translation_run(path("translation.h5"));
    vitk::testing::write_textures(dir_ / "data", "train", 2, 1);
    vitk::testing::write_textures(dir_ / "data", "val", 1, 2);
    cv::imwrite(path("image.png"), cv::Mat(16, 16, CV_8UC1, cv::Scalar(90)));
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  ProcessResult run(const std::vector<std::string>& args, const std::string& tag = "run") {
    vitk::testing::Command c = vitk::testing::vitk_command(dir_.path(), args, tag);
    c.timeout_seconds = 120;
    ProcessResult r = vitk::testing::run_process(c);
    EXPECT_FALSE(r.timed_out) << "timed out: vitk " << args[0];
    return r;
  }

  // caption-train of a small model on the scenes at `root`, in batches of 4.
  static std::vector<std::string> caption_train(const std::string& root) {
    // clang-format off
    return {"caption-train", "--data", root, "--batch-size", "4", "--threads", "1",
            "--vocab-size", "40", "--model.image_size", "84", "--model.patch_size", "14",
            "--model.channels", "1", "--model.mean", "0.5", "--model.std", "0.5",
            "--model.d_model", "32", "--model.heads", "2", "--model.d_ff", "64",
            "--model.layers", "1", "--model.decoder_layers", "1", "--model.decoder_heads", "2",
            "--model.max_length", "64"};
    // clang-format on
  }

  // `vitk quantize` of the tiny ViT, as q.h5.
  std::string quantized() {
    const ProcessResult q = run({"quantize", path("vit.h5"), "--out", path("q.h5")}, "quantize");
    EXPECT_EQ(q.status, 0) << q.err;
    return path("q.h5");
  }

  TempDir dir_{"vitk_messages"};
};

// ---- options that would do nothing or be silently changed

TEST_F(Messages, TrainRefusesAFreezeOrAWarmupAsLongAsTheRun) {
  const std::vector<std::string> train = {
      "train", "--data",          path("data"), "--batch-size",       "2",  "--threads",
      "1",     "--model.d_model", "16",         "--model.image_size", "16", "--model.patch_size",
      "4",     "--model.heads",   "2",          "--model.layers",     "1"};
  auto with = [&](const std::vector<std::string>& extra, const std::string& output) {
    return with_output(train, extra, path(output));
  };
  ProcessResult r = run(with({"--steps", "3", "--freeze-patch-embed", "100"}, "freeze"), "freeze");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "--freeze-patch-embed must be less than the run's 3 steps "
                       "(--steps 3), got 100"))
      << r.err;
  // An epoch of these 8 images is 4 steps: 100 epochs of warmup in a run of 5 steps.
  r = run(with({"--steps", "5", "--warmup-epochs", "100"}, "warm"), "warm");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "--warmup-epochs must be in [0, 1.25) with --steps 5 (an epoch is "
                       "4 steps), got 100"))
      << r.err;
  // With --epochs it was already refused, in the same words.
  r = run(with({"--epochs", "2", "--warmup-epochs", "100"}, "epochs"), "epochs");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--warmup-epochs must be in [0, --epochs), got 100")) << r.err;
  EXPECT_FALSE(fs::exists(path("freeze")) && fs::exists(path("freeze/last.h5")));
  // What fits is taken: a freeze and a warmup shorter than the run.
  r = run(with({"--steps", "3", "--freeze-patch-embed", "2", "--warmup-epochs", "0.5"}, "ok"),
          "ok");
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(Messages, CaptionTrainRefusesAWarmupAsLongAsTheRunAndAnAbsurdTemperature) {
  vitk::testing::TinyScenes s;
  const std::vector<std::string> base = caption_train(s.root);
  auto with = [&](const std::vector<std::string>& extra, const std::string& output) {
    return with_output(base, extra, (s.dir / output).string());
  };
  // 8 training scenes in batches of 4: an epoch is 2 steps.
  ProcessResult r = run(with({"--steps", "5", "--warmup-epochs", "100"}, "w"), "caption-warm");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "--warmup-epochs must be in [0, 2.5) with --steps 5 (an epoch is "
                       "2 steps), got 100"))
      << r.err;
  r = run(with({"--epochs", "2", "--warmup-epochs", "3"}, "e"), "caption-epochs");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--warmup-epochs must be in [0, --epochs), got 3")) << r.err;
  for (const char* tau : {"1e30", "101", "0"}) {
    r = run(with({"--steps", "1", "--distillation-tau", tau}, "t"), "caption-tau");
    EXPECT_EQ(r.status, 2) << tau << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "--distillation-tau must be in (0, 100]")) << r.err;
  }
}

// ---- a checkpoint of another model

TEST_F(Messages, ACheckpointOfAnotherModelIsNamedAsSuch) {
  const std::string vit_wanted = "not a ViT checkpoint (its model type is 'caption', not 'vit')";
  struct Case {
    std::vector<std::string> args;
    std::string said;
  };
  const std::vector<Case> cases = {
      {{"classify", "--model", path("captioner.h5"), path("image.png")},
       path("captioner.h5") + ": " + vit_wanted},
      {{"eval", "--model", path("captioner.h5"), "--data", path("data")},
       path("captioner.h5") + ": " + vit_wanted},
      {{"plot", "positions", "--model", path("captioner.h5"), "--out", path("p.png")},
       path("captioner.h5") + ": " + vit_wanted},
      {{"classify", "--model", path("translation.h5"), path("image.png")},
       path("translation.h5") + ": not a ViT checkpoint (its model type is 'transformer', not "
                                "'vit')"},
      {{"translate", "--model", path("vit.h5")},
       path("vit.h5") + ": not a translation checkpoint (its model type is 'vit', not "
                        "'transformer'); vitk mt-train and average write them"},
      {{"average", path("vit.h5"), path("vit.h5"), "--out", path("avg.h5")},
       path("vit.h5") + ": not a translation checkpoint (its model type is 'vit'"},
      {{"caption", "--model", path("translation.h5"), path("image.png")},
       path("translation.h5") + ": not a captioning checkpoint (its model type is 'transformer', "
                                "not 'caption'); vitk caption-train writes them"},
  };
  for (const Case& c : cases) {
    const ProcessResult r = run(c.args, c.args[0]);
    EXPECT_EQ(r.status, 1) << c.args[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, c.said)) << c.args[0] << ": " << r.err;
    EXPECT_FALSE(contains(r.err, "config.num_classes")) << r.err;
  }
}

TEST_F(Messages, CaptionTrainNamesTheOptionAndTheModelOfAWrongCheckpoint) {
  vitk::testing::TinyScenes s;
  std::vector<std::string> base = caption_train(s.root);
  base.insert(base.end(), {"--steps", "1"});
  auto with = [&](const std::vector<std::string>& extra, const std::string& output) {
    return with_output(base, extra, (s.dir / output).string());
  };
  ProcessResult r =
      run(with({"--resume", path("translation.h5"), "--phrases", "to the left of"}, "r"), "resume");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, path("translation.h5") + ": not a captioning checkpoint (its model "
                                                       "type is 'transformer', not 'caption')"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "--phrases")) << r.err;

  r = run(with({"--encoder-from", path("captioner.h5")}, "e"), "encoder-from");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--encoder-from " + path("captioner.h5") +
                                  ": not a ViT checkpoint (its model type is 'caption'"))
      << r.err;
  r = run(with({"--article-loss", "1", "--teacher", path("translation.h5")}, "t"), "teacher");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--teacher " + path("translation.h5") +
                                  ": not a ViT checkpoint (its model type is 'transformer'"))
      << r.err;

  // An int8 ViT is no teacher and no encoder to start from: both say so, naming the option.
  const std::string q = quantized();
  r = run(with({"--article-loss", "1", "--teacher", q}, "tq"), "teacher-int8");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--teacher " + q +
                                  ": is quantised to int8 (vitk quantize); a teacher must be an "
                                  "f32 checkpoint"))
      << r.err;
  r = run(with({"--encoder-from", q}, "eq"), "encoder-int8");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--encoder-from " + q +
                                  ": is quantised to int8 (vitk quantize); the encoder to start "
                                  "from must be an f32 checkpoint"))
      << r.err;
  EXPECT_FALSE(fs::exists(s.dir / "eq" / "last.h5"));
}

// ---- int8 files

TEST_F(Messages, Int8TensorsWithoutTheQuantizationAttributeAreRefusedNamingTheFile) {
  const std::string q = quantized();
  Edit(q).remove_attr("quantization");
  const std::string said = "' is int8, but the file has no attribute quantization = \"int8\"";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"classify", "--model", q, path("image.png")},
        std::vector<std::string>{"inspect", q},
        std::vector<std::string>{"eval", "--model", q, "--data", path("data")}}) {
    const ProcessResult r = run(args, args[0]);
    EXPECT_EQ(r.status, 1) << args[0] << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, q + ": tensor '")) << args[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, said)) << args[0] << ": " << r.err;
    EXPECT_FALSE(contains(r.err, "released")) << r.err;
  }
}

TEST_F(Messages, AnInt8MatrixStoredAsAnotherIntegerSaysInt8IsExpected) {
  const std::string q = quantized();
  const std::vector<std::pair<hid_t, std::string>> types = {
      {H5T_STD_U8LE, "u8"}, {H5T_STD_I16LE, "i16"}, {H5T_STD_I32LE, "i32"}};
  for (const auto& [type, name] : types) {
    const std::string copy = path("q-" + name + ".h5");
    fs::copy_file(q, copy, fs::copy_options::overwrite_existing);
    Edit(copy).retype("head.weight", type);
    const ProcessResult r = run({"classify", "--model", copy, path("image.png")}, name);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_TRUE(contains(r.err, copy + ": tensor 'head.weight' has dtype " + name +
                                    "; an int8 matrix of vitk quantize (its scales in "
                                    "'head.weight_scale') must be i8"))
        << r.err;
    EXPECT_FALSE(contains(r.err, "expects f32")) << r.err;
  }
}

// ---- messages

TEST_F(Messages, NonFiniteLogitsNameTheModelAndTheImage) {
  // Finite weights whose products overflow: every logit is infinite.
  Edit(path("vit.h5")).fill("head.weight", 3e38f);
  ProcessResult r = run({"classify", "--model", path("vit.h5"), path("image.png")}, "classify");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(
      contains(r.err, path("image.png") + ": the logits of " + path("vit.h5") + " are not finite"))
      << r.err;
  r = run({"eval", "--model", path("vit.h5"), "--data", path("data"), "--batch-size", "1"}, "eval");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(contains(r.err, (dir_ / "data" / "val" / "bright" / "0.png").string() +
                                  ": the logits of " + path("vit.h5") + " are not finite"))
      << r.err;
}

TEST_F(Messages, AnAttentionLayerOutOfRangeNamesTheSpellingThatWorks) {
  vitk::caption::CaptionConfig c;
  c.encoder = vitk::testing::tiny_grey_vit(16, 0, 1);
  c.encoder.pool = "token";
  c.vocab_size = 16;
  c.max_length = 8;
  c.decoder_layers = 2;
  c.decoder_heads = 2;
  c.decoder_d_ff = 32;
  vitk::ParamStore params;
  vitk::caption::CaptionModel model(params, c);
  params.finalize();
  vitk::ops::Rng rng(4);
  model.init(rng);
  vitk::Arena arena;
  vitk::nn::Context ctx;
  ctx.training = false;
  ctx.arena = &arena;
  const vitk::Tensor image({1, 1, 16, 16});
  auto said = [&](int layer, int head) {
    try {
      model.cross_attention(ctx, image, {3, 4}, true, layer, head);
    } catch (const vitk::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no usage error");
  };
  EXPECT_EQ(said(5, -1), "--attention-layer 5: the decoder has 2 layers (0..1, or 'last')");
  EXPECT_EQ(said(-1, 7), "--attention-head 7: the decoder has 2 heads (0..1, or 'mean' of them)");
}

TEST_F(Messages, QuantizeToAnEmptyOutIsAUsageError) {
  const ProcessResult r = run({"quantize", path("vit.h5"), "--out", ""});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--out is empty")) << r.err;
  EXPECT_FALSE(contains(r.err, "rename")) << r.err;
}

}  // namespace
