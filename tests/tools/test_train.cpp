// Training a ViT: the model options, and `vitk train` / `vitk eval` end to end on a tiny generated
// dataset (learning, exact resume, Ctrl-C, reports, errors). (The soft-target cross-entropy it
// trains with: common/test_ops_loss.cpp.)
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/ops/ops.h"
#include "common/optim/optim.h"
#include "common/params.h"
#include "tools/vit_options.h"
#include "util/profile_table.h"
#include "util/test_util.h"
#include "util/texture_data.h"
#include "util/vitk_process.h"
#include "vit/checkpoint.h"

using namespace vitk;
using namespace vitk::test;

// ---- Model options ------------------------------------------------------------------------------

namespace {

namespace po = boost::program_options;

po::variables_map parse_model_options(const std::vector<std::string>& args) {
  po::options_description d;
  tools::add_vit_options(d);
  po::variables_map vm;
  po::store(tools::parse_command_line(args, d), vm);
  po::notify(vm);
  return vm;
}

std::string usage_error(const std::vector<std::string>& args) {
  try {
    tools::vit_config_from(parse_model_options(args), vit::VitConfig{});
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(VitOptions, GivenOptionsOverrideTheBase) {
  auto vm = parse_model_options({"--model.image_size", "28", "--model.patch_size", "4",
                                 "--model.channels", "1", "--model.mean", "0.286", "--model.std",
                                 "0.353", "--model.d_model", "64", "--model.heads", "2",
                                 "--model.drop_path", "0.1", "--model.patch_drop", "0.25"});
  vit::VitConfig base;
  base.layers = 3;  // not given: kept
  const vit::VitConfig c = tools::vit_config_from(vm, base);
  EXPECT_EQ(c.image_height, 28);
  EXPECT_EQ(c.image_width, 28);
  EXPECT_EQ(c.patch_size, 4);
  EXPECT_EQ(c.channels, 1);
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.heads, 2);
  EXPECT_EQ(c.layers, 3);
  EXPECT_FLOAT_EQ(c.drop_path, 0.1f);
  EXPECT_FLOAT_EQ(c.patch_drop, 0.25f);
  ASSERT_EQ(c.preprocess.mean.size(), 1u);
  EXPECT_FLOAT_EQ(c.preprocess.std[0], 0.353f);
  auto given = tools::given_vit_options(vm);
  EXPECT_EQ(given.size(), 9u);
  EXPECT_NE(std::find(given.begin(), given.end(), "patch_size"), given.end());
}

TEST(VitOptions, EveryConfigKeyIsAnOption) {
  po::options_description d;
  tools::add_vit_options(d);
  for (const auto& [key, value] : vit::to_config_map(vit::VitConfig{}))
    EXPECT_NE(d.find_nothrow("model." + key, false), nullptr) << key;
}

TEST(VitOptions, BadValuesNameTheOption) {
  EXPECT_NE(usage_error({"--model.patch_size", "5"}).find("model.patch_size"), std::string::npos);
  EXPECT_NE(usage_error({"--model.image_size", "abc"}).find("--model.image_size"),
            std::string::npos);
  EXPECT_NE(usage_error({"--model.mean", "0.5,x,0.5"}).find("--model.mean"), std::string::npos);
  EXPECT_NE(usage_error({"--model.heads", "5"}).find("heads"), std::string::npos);
  EXPECT_NE(usage_error({"--model.stem_channels", "48,x"}).find("--model.stem_channels"),
            std::string::npos);
  // 16 / 2^5: five stride-2 stages are more than the stem allows, three do not divide patch 4
  EXPECT_NE(usage_error({"--model.stem_channels", "8,8,8,8,8"}).find("--model.stem_channels"),
            std::string::npos);
  EXPECT_NE(usage_error({"--model.patch_size", "4", "--model.image_size", "32",
                         "--model.stem_channels", "8,8,8"})
                .find("--model.stem_channels"),
            std::string::npos);
  EXPECT_EQ(usage_error({"--model.patch_size", "4", "--model.image_size", "32",
                         "--model.stem_channels", "8,8"}),
            "");
  // Strides: 1 or 2 each, one per stage; a stride-1 stage makes room for one more stage.
  EXPECT_NE(usage_error({"--model.stem_channels", "8,8", "--model.stem_strides", "1,3"})
                .find("--model.stem_strides"),
            std::string::npos);
  EXPECT_NE(usage_error({"--model.stem_channels", "8,8", "--model.stem_strides", "1"})
                .find("stem_strides"),
            std::string::npos);
  EXPECT_EQ(usage_error({"--model.patch_size", "4", "--model.image_size", "32",
                         "--model.stem_channels", "8,8,8", "--model.stem_strides", "1,2,2"}),
            "");
  // Positional convolutions: block indices of the model, not with patch dropout.
  EXPECT_NE(usage_error({"--model.pos_conv_blocks", "0,x"}).find("--model.pos_conv_blocks"),
            std::string::npos);
  EXPECT_NE(usage_error({"--model.layers", "3", "--model.pos_conv_blocks", "0,3"})
                .find("pos_conv_blocks: block 3 does not exist"),
            std::string::npos);
  EXPECT_NE(usage_error({"--model.pos_conv_blocks", "0", "--model.patch_drop", "0.25"})
                .find("pos_conv_blocks"),
            std::string::npos);
  EXPECT_EQ(usage_error({"--model.layers", "3", "--model.pos_conv_blocks", "0,1,2"}), "");
  EXPECT_NE(usage_error({"--model.type", "transformer"}).find("--model.type"), std::string::npos);
  EXPECT_NE(usage_error({"--model.channels", "1"}).find("mean"), std::string::npos)
      << "one channel with three mean values";
  EXPECT_EQ(usage_error({"--model.channels", "1", "--model.mean", "0.5", "--model.std", "0.5"}),
            "");
}

// ---- `vitk train` and `vitk eval` end to end ---------------------------------------------------
//
// A tiny image folder written by the test: 16×16 grey images of 4 classes told apart by their
// texture (dark noise, bright noise, vertical stripes, horizontal stripes), 64 training and 16
// validation images each. A 2-layer ViT of width 32 learns it in a few seconds.

namespace {

namespace fs = std::filesystem;

using Result = vitk::testing::ProcessResult;
using vitk::testing::expect_one_error_line;
using vitk::testing::slurp_file;

using vitk::test::contains;

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in(line);
  for (std::string f; std::getline(in, f, ',');) fields.push_back(f);
  return fields;
}

const int kClasses = 4;
const std::vector<std::string>& kClassNames = vitk::testing::kTextureClasses;
using vitk::testing::write_textures;

const char* const kTinyConfig = vitk::testing::kTextureVitConfig;

class TrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = new TempDir("vitk_train_data");
    data_ = data_dir_->path();
    write_textures(data_, "train", 64, 1);
    write_textures(data_, "val", 16, 2);
  }
  static void TearDownTestSuite() { delete data_dir_; }
  void SetUp() override { std::ofstream(dir_ / "tiny.ini") << kTinyConfig; }

  // Starts vitk in the test's directory with stdout and stderr going to files named by `tag`.
  pid_t spawn(const std::vector<std::string>& args, const std::string& tag) {
    const pid_t pid = vitk::testing::spawn_vitk(dir_, args, tag);
    EXPECT_GT(pid, 0);
    return pid;
  }
  Result wait_for(pid_t pid, const std::string& tag) {
    return vitk::testing::wait_vitk(dir_, pid, tag);
  }
  Result run(const std::vector<std::string>& args, const std::string& tag = "run") {
    return vitk::testing::run_vitk(dir_, args, tag);
  }

  // `vitk train` on the textures with the tiny config, into dir_/output.
  Result train(const std::string& output, std::vector<std::string> extra,
               const std::string& tag = "train") {
    std::vector<std::string> args{"train",        "--config", "tiny.ini", "--data",
                                  data_.string(), "--output", output};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args, tag);
  }

  static TempDir* data_dir_;
  static fs::path data_;
  TempDir temp_{"vitk_train"};
  fs::path dir_ = temp_.path();
};

TempDir* TrainCli::data_dir_ = nullptr;
fs::path TrainCli::data_;

// All tensors of a checkpoint (parameters and optimizer buffers) as raw bytes by name.
class AnyOptimizer : public optim::Optimizer {
 public:
  AnyOptimizer(const ParamStore& params, std::vector<std::string> names)
      : names_(std::move(names)) {
    for (size_t i = 0; i < names_.size(); ++i)
      buffers_.emplace_back(Shape{static_cast<int64_t>(params.arena_floats())});
  }
  void step(float) override {}
  std::string kind() const override { return "adamw"; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    std::vector<std::pair<std::string, Tensor*>> s;
    for (size_t i = 0; i < names_.size(); ++i) s.emplace_back(names_[i], &buffers_[i]);
    return s;
  }

 private:
  std::vector<std::string> names_;
  std::deque<Tensor> buffers_;
};

struct CheckpointBytes {
  io::CheckpointMeta meta;
  std::vector<std::pair<std::string, std::string>> tensors;  // name, bytes
  int64_t optimizer_steps = 0;
};

CheckpointBytes read_all(const std::string& path, std::vector<std::string> buffers) {
  ParamStore store;
  for (const auto& [name, shape] : io::list_checkpoint(path)) store.add(name, shape);
  store.finalize();
  AnyOptimizer opt(store, buffers);
  CheckpointBytes c;
  c.meta = io::load_checkpoint(path, store, buffers.empty() ? nullptr : &opt);
  c.optimizer_steps = opt.steps();
  auto bytes = [](const float* p, int64_t n) {
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n) * 4);
  };
  for (const auto& p : store.params())
    c.tensors.emplace_back(p.name, bytes(p.value.f32(), p.numel()));
  for (const auto& [name, t] : opt.state())
    for (const auto& p : store.params())
      c.tensors.emplace_back(name + "/" + p.name, bytes(t->f32() + p.offset, p.numel()));
  return c;
}

// The CSV without the timing columns (images_per_s, seconds, the last two), which differ between
// runs.
std::vector<std::vector<std::string>> metrics_without_timing(const fs::path& csv) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : lines_of(slurp_file(csv))) {
    auto f = split_csv(line);
    if (f.size() >= 2) f.resize(f.size() - 2);
    rows.push_back(f);
  }
  return rows;
}

}  // namespace

TEST_F(TrainCli, LearnsTheTexturesAndEvalReportsIt) {
  Result r = train("out", {"--epochs", "4"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "parameters: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "threads 2")) << r.out;
  EXPECT_TRUE(contains(r.out, "img/s")) << r.out;
  EXPECT_TRUE(contains(r.out, "epoch 4/4: train loss")) << r.out;
  EXPECT_TRUE(contains(r.out, "finished 4 epochs")) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "out/last.h5"));
  EXPECT_TRUE(fs::exists(dir_ / "out/best.h5"));

  auto lines = lines_of(slurp_file(dir_ / "out/metrics.csv"));
  ASSERT_EQ(lines.size(), 5u) << slurp_file(dir_ / "out/metrics.csv");
  EXPECT_EQ(lines[0],
            "step,epoch,lr,train_loss,train_acc,val_loss,val_top1,val_top5,images_per_s,seconds");
  auto last = split_csv(lines.back());
  ASSERT_EQ(last.size(), 10u);
  EXPECT_EQ(last[0], "32");  // 256 images / 32 per batch × 4 epochs
  EXPECT_EQ(last[1], "4");
  const double top1 = std::stod(last[6]);
  EXPECT_GT(top1, 80.0) << "chance is 25%\n" << r.out;
  EXPECT_LT(std::stod(last[3]), std::stod(split_csv(lines[1])[3])) << "the loss falls";

  // The best checkpoint carries the model, the class names and evaluates the same.
  vit::LoadedVit best = vit::load_vit((dir_ / "out/best.h5").string());
  EXPECT_EQ(best.config.num_classes, kClasses);
  EXPECT_EQ(best.meta.class_names, kClassNames);

  Result e = run({"eval", "--model", "out/best.h5", "--data", data_.string()}, "eval");
  ASSERT_EQ(e.status, 0) << e.out << e.err;
  EXPECT_TRUE(contains(e.out, "top-1 accuracy: ")) << e.out;
  EXPECT_TRUE(contains(e.out, "top-5 accuracy: 100.00% (64 of 64 images)")) << e.out;
  EXPECT_TRUE(contains(e.out, "per-class accuracy:")) << e.out;
  EXPECT_TRUE(contains(e.out, "hstripes")) << e.out;
  // The confusion matrix: 4 rows after its heading, each "  k  NAME  n0 n1 n2 n3", summing
  // to the 64 validation images, 16 per row.
  auto out_lines = lines_of(e.out);
  auto heading = std::find_if(out_lines.begin(), out_lines.end(), [](const std::string& l) {
    return l.rfind("confusion matrix", 0) == 0;
  });
  ASSERT_NE(heading, out_lines.end()) << e.out;
  ASSERT_GE(out_lines.end() - heading, 2 + kClasses) << e.out;
  int64_t total = 0, diagonal = 0;
  for (int k = 0; k < kClasses; ++k) {
    std::istringstream row(*(heading + 2 + k));
    int index;
    std::string name;
    row >> index >> name;
    EXPECT_EQ(index, k);
    EXPECT_EQ(name, kClassNames[static_cast<size_t>(k)]);
    int64_t row_sum = 0;
    for (int p = 0; p < kClasses; ++p) {
      int64_t v = -1;
      row >> v;
      ASSERT_GE(v, 0) << *(heading + 2 + k);
      row_sum += v;
      if (p == k) diagonal += v;
    }
    EXPECT_EQ(row_sum, 16) << *(heading + 2 + k);
    total += row_sum;
  }
  EXPECT_EQ(total, 64);
  // Top-1 printed equals the diagonal.
  EXPECT_TRUE(contains(e.out, "(" + std::to_string(diagonal) + " of 64 images)")) << e.out;
}

TEST_F(TrainCli, ResumeContinuesExactlyWithEveryRandomPart) {
  // Random crop, flips, erasing, Mixup and CutMix (soft targets), dropout, drop-path, patch
  // dropout and the EMA:
  // every random draw and every state a resume must restore.
  const std::vector<std::string> opts{"--epochs",
                                      "2",
                                      "--scale",
                                      "0.6",
                                      "1",
                                      "--hflip",
                                      "0.5",
                                      "--reprob",
                                      "0.25",
                                      "--mixup",
                                      "0.8",
                                      "--cutmix",
                                      "1.0",
                                      "--mixup-prob",
                                      "0.8",
                                      "--model.dropout",
                                      "0.1",
                                      "--model.drop_path",
                                      "0.1",
                                      "--model.patch_drop",
                                      "0.25",
                                      "--model-ema",
                                      "--model-ema-decay",
                                      "0.9",
                                      "--clip-grad",
                                      "1"};
  Result a = train("full", opts, "full");
  ASSERT_EQ(a.status, 0) << a.out << a.err;

  // The same run stopped twice: in the middle of epoch 1 and in the middle of epoch 2.
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = opts;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  Result b1 = train("parts", with({"--max-steps", "3"}), "b1");
  ASSERT_EQ(b1.status, 0) << b1.out << b1.err;
  EXPECT_TRUE(contains(b1.out, "stopped at step 3 (--max-steps 3)")) << b1.out;
  EXPECT_FALSE(fs::exists(dir_ / "parts/best.h5")) << "no epoch finished yet";
  Result b2 = train("parts", with({"--resume", "parts/last.h5", "--max-steps", "13"}), "b2");
  ASSERT_EQ(b2.status, 0) << b2.out << b2.err;
  EXPECT_TRUE(contains(b2.out, "resumed from parts/last.h5: epoch 1/2, batch 3/8, step 3"))
      << b2.out;
  Result b3 = train("parts", with({"--resume", "parts/last.h5"}), "b3");
  ASSERT_EQ(b3.status, 0) << b3.out << b3.err;
  EXPECT_TRUE(contains(b3.out, "epoch 2/2, batch 5/8, step 13")) << b3.out;
  // A resumed run keeps its model: a stem the checkpoint does not have is refused.
  Result stem =
      train("parts", with({"--resume", "parts/last.h5", "--model.stem_channels", "4"}), "stem");
  EXPECT_EQ(stem.status, 2) << stem.out << stem.err;
  EXPECT_TRUE(contains(stem.err, "--model.stem_channels 4 differs from the checkpoint's none"))
      << stem.err;

  const std::vector<std::string> buffers{"exp_avg", "exp_avg_sq", "ema"};
  CheckpointBytes full = read_all((dir_ / "full/last.h5").string(), buffers);
  CheckpointBytes parts = read_all((dir_ / "parts/last.h5").string(), buffers);
  EXPECT_EQ(full.meta.step, 16);
  EXPECT_EQ(parts.meta.step, 16);
  EXPECT_EQ(full.optimizer_steps, parts.optimizer_steps);
  EXPECT_EQ(full.meta.rng_state, parts.meta.rng_state) << "RNG, position and epoch statistics";
  ASSERT_EQ(full.tensors.size(), parts.tensors.size());
  for (size_t i = 0; i < full.tensors.size(); ++i) {
    EXPECT_EQ(full.tensors[i].first, parts.tensors[i].first);
    EXPECT_TRUE(full.tensors[i].second == parts.tensors[i].second)
        << full.tensors[i].first << " differs";
  }
  EXPECT_EQ(metrics_without_timing(dir_ / "full/metrics.csv"),
            metrics_without_timing(dir_ / "parts/metrics.csv"));
  // The best checkpoints hold the same tensors and attributes (not byte for byte: HDF5 stamps the
  // root group with the time it was written).
  CheckpointBytes full_best = read_all((dir_ / "full/best.h5").string(), {});
  CheckpointBytes parts_best = read_all((dir_ / "parts/best.h5").string(), {});
  EXPECT_EQ(full_best.meta.epoch, parts_best.meta.epoch);
  EXPECT_EQ(full_best.meta.step, parts_best.meta.step);
  EXPECT_TRUE(full_best.tensors == parts_best.tensors);
}

TEST_F(TrainCli, SigintSavesACheckpointThatResumes) {
  pid_t pid = spawn({"train", "--config", "tiny.ini", "--data", data_.string(), "--output", "run",
                     "--epochs", "1000", "--log-interval", "1"},
                    "sigint");
  // Wait until it is training (a few steps logged), then interrupt as Ctrl-C would.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!contains(slurp_file(dir_ / "sigint.out"), "step 3/8") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(kill(pid, SIGINT), 0);
  Result r = wait_for(pid, "sigint");
  EXPECT_EQ(r.status, 130) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "stopping after the current step")) << r.err;
  EXPECT_TRUE(contains(r.out, "interrupted at step ")) << r.out;
  EXPECT_TRUE(contains(r.out, "--resume run/last.h5")) << r.out;
  // A complete, loadable checkpoint and no temporary file left behind.
  vit::LoadedVit loaded = vit::load_vit((dir_ / "run/last.h5").string());
  EXPECT_GE(loaded.meta.step, 3);
  for (const auto& entry : fs::directory_iterator(dir_ / "run"))
    EXPECT_TRUE(entry.path().extension() == ".h5" || entry.path().extension() == ".csv")
        << entry.path();
  // And it resumes: two more steps.
  const std::string stop_at = std::to_string(loaded.meta.step + 2);
  Result again =
      train("run", {"--epochs", "1000", "--resume", "run/last.h5", "--max-steps", stop_at});
  EXPECT_EQ(again.status, 0) << again.out << again.err;
  EXPECT_TRUE(contains(again.out, "stopped at step " + stop_at)) << again.out;
}

// --val-interval N validates after every N-th epoch and after the last one; the other epochs
// get a metrics row without validation figures. Skipping validations does not change training.
TEST_F(TrainCli, ValIntervalValidatesEveryNthAndTheLastEpoch) {
  Result every = train("every", {"--epochs", "3"}, "every");
  ASSERT_EQ(every.status, 0) << every.out << every.err;
  Result second = train("second", {"--epochs", "3", "--val-interval", "2"}, "second");
  ASSERT_EQ(second.status, 0) << second.out << second.err;
  EXPECT_TRUE(contains(second.out, "validation every 2 epochs and after the last")) << second.out;
  EXPECT_FALSE(contains(every.out, "validation every")) << every.out;

  auto rows = metrics_without_timing(dir_ / "second/metrics.csv");
  ASSERT_EQ(rows.size(), 4u);
  for (size_t r = 1; r < rows.size(); ++r) {
    ASSERT_EQ(rows[r].size(), 8u) << r;
    for (size_t c = 5; c < 8; ++c)
      EXPECT_EQ(rows[r][c].empty(), r == 1) << "row " << r << ", column " << rows[0][c];
  }
  // Epochs 2 and 3 were validated as in the run that validates every epoch; epoch 1's
  // training figures are the same too.
  auto all = metrics_without_timing(dir_ / "every/metrics.csv");
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(rows[2], all[2]);
  EXPECT_EQ(rows[3], all[3]);
  EXPECT_EQ(std::vector<std::string>(rows[1].begin(), rows[1].begin() + 5),
            std::vector<std::string>(all[1].begin(), all[1].begin() + 5));
  auto epoch_line = [](const std::string& out, int epoch) {
    for (const std::string& l : lines_of(out))
      if (l.rfind("epoch " + std::to_string(epoch) + "/3: ", 0) == 0) return l;
    return std::string();
  };
  EXPECT_FALSE(contains(epoch_line(second.out, 1), "val loss")) << second.out;
  EXPECT_TRUE(contains(epoch_line(second.out, 1), "train loss")) << second.out;
  EXPECT_TRUE(contains(epoch_line(second.out, 2), "val loss")) << second.out;
  EXPECT_TRUE(contains(epoch_line(second.out, 3), "val loss")) << second.out;
  const auto a = read_all((dir_ / "every/last.h5").string(), {"exp_avg", "exp_avg_sq"});
  const auto b = read_all((dir_ / "second/last.h5").string(), {"exp_avg", "exp_avg_sq"});
  EXPECT_TRUE(a.tensors == b.tensors) << "the weights and AdamW state differ";
  EXPECT_TRUE(fs::exists(dir_ / "second/best.h5"));

  // 0: only after the last epoch; the curves still plot, joining the validated rows.
  Result last = train("last", {"--epochs", "2", "--val-interval", "0"}, "last");
  ASSERT_EQ(last.status, 0) << last.out << last.err;
  EXPECT_TRUE(contains(last.out, "validation after the last epoch only")) << last.out;
  rows = metrics_without_timing(dir_ / "last/metrics.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[1][6].empty());
  EXPECT_FALSE(rows[2][6].empty());
  EXPECT_TRUE(contains(last.out, "% at epoch 2 (")) << last.out;
  Result plot = run({"plot", "metrics", "last/metrics.csv", "--out", "curves.png"}, "plot");
  ASSERT_EQ(plot.status, 0) << plot.out << plot.err;
  EXPECT_GT(fs::file_size(dir_ / "curves.png"), 0u);
}

TEST_F(TrainCli, BadOptionsAndPathsFailBeforeAnythingIsWritten) {
  struct Case {
    std::vector<std::string> args;
    int status;
    std::string message;
  };
  const std::string data = data_.string();
  const std::vector<Case> cases{
      {{"--data", "no/such/dir"}, 1, "no/such/dir"},
      {{}, 2, "--data"},
      {{"--data", data, "--lr", "-1"}, 2, "--lr"},
      {{"--data", data, "--epochs", "0"}, 2, "--epochs"},
      {{"--data", data, "--epochs", "2", "--warmup-epochs", "2"}, 2, "--warmup-epochs"},
      {{"--data", data, "--scale", "0.5"}, 2, "--scale"},
      {{"--data", data, "--scale", "0.9", "0.2"}, 2, "--scale"},
      {{"--data", data, "--smoothing", "1"}, 2, "--smoothing"},
      {{"--data", data, "--mixup-prob", "2"}, 2, "--mixup-prob"},
      {{"--data", data, "--model-ema-decay", "1"}, 2, "--model-ema-decay"},
      {{"--data", data, "--val-interval", "-1"}, 2, "--val-interval"},
      {{"--data", data, "--model.patch_size", "5"}, 2, "model.patch_size"},
      {{"--data", data, "--model.num_classes", "7"}, 2, "--model.num_classes"},
      {{"--data", data, "--model.stem_channels", "0"}, 2, "--model.stem_channels"},
      {{"--data", data, "--batch-size", "1000"}, 2, "--batch-size"},
      {{"--data", data, "--bogus", "1"}, 2, "--bogus"},
      {{"--data", data, "--lr", "abc"}, 2, "--lr"},
      {{"--data", data, "--resume", "missing.h5"}, 1, "missing.h5"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{"train", "--config", "tiny.ini", "--output", "never"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Result r = run(args);
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    EXPECT_EQ(r.status, c.status) << shown << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << shown << "\n" << r.err;
    expect_one_error_line(r);
    EXPECT_FALSE(fs::exists(dir_ / "never")) << shown;
  }
}

// bf16 products in training: the products round to bf16, the weights, gradients and AdamW state
// stay f32 (the checkpoint loads as any other), and the run learns the textures as in f32. Then
// eval runs the checkpoint at both precisions and reports how far they agree.
TEST_F(TrainCli, LearnsInBf16WithF32MasterWeightsAndEvalComparesThePrecisions) {
  if (!ops::bf16_supported()) GTEST_SKIP() << "no AVX512_BF16 (" << ops::cpu_isa() << ")";
  Result r = train("out", {"--epochs", "4", "--precision", "bf16"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "precision bf16")) << r.out;
  auto lines = lines_of(slurp_file(dir_ / "out/metrics.csv"));
  ASSERT_EQ(lines.size(), 5u) << slurp_file(dir_ / "out/metrics.csv");
  auto last = split_csv(lines.back());
  ASSERT_EQ(last.size(), 10u);
  EXPECT_GT(std::stod(last[6]), 80.0) << "chance is 25%\n" << r.out;
  EXPECT_LT(std::stod(last[3]), std::stod(split_csv(lines[1])[3])) << "the loss falls";
  const CheckpointBytes c = read_all((dir_ / "out/last.h5").string(), {"exp_avg", "exp_avg_sq"});
  EXPECT_EQ(c.optimizer_steps, 32);
  for (const auto& [name, bytes] : c.tensors) {
    // f32 master values: some of them use the 16 low bits that a bf16 weight would leave 0.
    bool low_bits = false;
    for (size_t i = 0; i + 4 <= bytes.size() && !low_bits; i += 4)
      low_bits = bytes[i] != 0 || bytes[i + 1] != 0;
    EXPECT_TRUE(low_bits) << name << " looks rounded to bf16";
  }

  Result e = run({"eval", "--model", "out/best.h5", "--data", data_.string(), "--precision", "bf16",
                  "--compare-precision", "f32"},
                 "eval");
  ASSERT_EQ(e.status, 0) << e.out << e.err;
  EXPECT_TRUE(contains(e.out, "precision: bf16, every batch also at f32")) << e.out;
  EXPECT_TRUE(contains(e.out, "f32 against bf16 on the same 64 images:")) << e.out;
  const size_t at = e.out.find("top-1 agreement: ");
  ASSERT_NE(at, std::string::npos) << e.out;
  const size_t open = e.out.find('(', at);
  ASSERT_NE(open, std::string::npos) << e.out;
  const int differ = std::stoi(e.out.substr(open + 1));
  EXPECT_LE(differ, 3) << "of 64 predictions differ between bf16 and f32\n" << e.out;
}

TEST_F(TrainCli, RefusesToOverwriteARunAndEvalChecksItsInputs) {
  Result r = train("out", {"--epochs", "2", "--no-aug", "--max-steps", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  Result again = train("out", {"--epochs", "2"});
  EXPECT_EQ(again.status, 2);
  EXPECT_TRUE(contains(again.err, "already holds a run")) << again.err;
  EXPECT_TRUE(contains(again.err, "--resume out/last.h5")) << again.err;

  Result e = run({"eval", "--model", "missing.h5", "--data", data_.string()});
  EXPECT_EQ(e.status, 1);
  EXPECT_TRUE(contains(e.err, "missing.h5")) << e.err;
  e = run({"eval", "--model", "out/last.h5", "--data", data_.string(), "--split", "test"});
  EXPECT_EQ(e.status, 2);
  EXPECT_TRUE(contains(e.err, "--split")) << e.err;
  e = run({"eval", "--data", data_.string()});
  EXPECT_EQ(e.status, 2);
  EXPECT_TRUE(contains(e.err, "--model")) << e.err;
  // Data with other classes than the model's.
  write_textures(dir_ / "other", "train", 2, 3);
  write_textures(dir_ / "other", "val", 2, 3);
  fs::rename(dir_ / "other/val/vstripes", dir_ / "other/val/zebra");
  e = run({"eval", "--model", "out/last.h5", "--data", (dir_ / "other").string()});
  EXPECT_EQ(e.status, 1);
  EXPECT_TRUE(contains(e.err, "zebra")) << e.err;
  // The training split evaluates too.
  e = run({"eval", "--model", "out/last.h5", "--data", data_.string(), "--split", "train"});
  EXPECT_EQ(e.status, 0) << e.err;
  EXPECT_TRUE(contains(e.out, "of 256 images")) << e.out;
}

namespace {

void write_be32(std::ofstream& out, uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
  out.write(b, 4);
}

// IDX files as Fashion-MNIST ships them (uncompressed): `prefix`-images-idx3-ubyte and
// `prefix`-labels-idx1-ubyte, 28×28, labels cycling through the 10 classes.
void write_idx(const fs::path& dir, const std::string& prefix, uint32_t count) {
  std::mt19937 gen(count);
  std::ofstream images(dir / (prefix + "-images-idx3-ubyte"), std::ios::binary);
  write_be32(images, 0x803), write_be32(images, count), write_be32(images, 28),
      write_be32(images, 28);
  std::ofstream labels(dir / (prefix + "-labels-idx1-ubyte"), std::ios::binary);
  write_be32(labels, 0x801), write_be32(labels, count);
  for (uint32_t i = 0; i < count; ++i) {
    for (int p = 0; p < 28 * 28; ++p) images.put(static_cast<char>(gen() % 256));
    labels.put(static_cast<char>(i % 10));
  }
}

}  // namespace

TEST_F(TrainCli, PresetRunsOnIdxFilesAndEvalTakesTheSameConfig) {
  fs::create_directories(dir_ / "idx");
  write_idx(dir_ / "idx", "train", 64);
  write_idx(dir_ / "idx", "t10k", 20);
  const std::string preset = std::string(VITK_SOURCE_DIR) + "/configs/vit-fmnist.ini";
  Result r = run({"train", "--config", preset, "--data", "idx", "--output", "o", "--batch-size",
                  "16", "--max-steps", "2", "--threads", "2"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "model: vit 28x28x1, patch 4 (49 patches + class token), conv stem 48,96 "
                       "(3x3, strides 2,2, LayerNorm, GELU), positional 3x3 depthwise "
                       "convolution after block(s) 0,1,2,3,4, MLP 3x3 depthwise convolution in "
                       "block(s) 0,1,2,3,4,5, d_model "))
      << r.out;
  EXPECT_TRUE(contains(r.out, "stopped at step 2")) << r.out;
  Result e = run({"eval", "--config", preset, "--model", "o/last.h5", "--data", "idx"}, "eval");
  ASSERT_EQ(e.status, 0) << e.out << e.err;
  EXPECT_TRUE(contains(e.out, "of 20 images)")) << e.out;
  Result i = run({"info", "--config", preset}, "info");
  EXPECT_EQ(i.status, 0) << i.err;
  EXPECT_TRUE(contains(i.out, "total parameters: ")) << i.out;
}

TEST_F(TrainCli, ProfilePrintsWhereTheStepsSpendTheirTime) {
  // Every 2 steps while training, the first step (primitive creation) left out: steps 2-3 and
  // 4-5, then nothing is left for the end of the run. Names only; timings are never checked.
  Result r = train("prof", {"--max-steps", "5", "--profile-every", "2"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "breakdown (--profile, steps 2-3, exclusive ms per step; total "))
      << r.out;
  EXPECT_TRUE(contains(r.out, "breakdown (--profile, steps 4-5, exclusive ms per step; total "))
      << r.out;
  EXPECT_FALSE(contains(r.out, "steps 6-")) << r.out;
  EXPECT_TRUE(vitk::test::breakdown_adds_up(r.out, "breakdown (--profile, steps 2-3, ")) << r.out;
  EXPECT_TRUE(vitk::test::breakdown_adds_up(r.out, "breakdown (--profile, steps 4-5, ")) << r.out;
  for (const char* part : {"linear_forward ", "linear_backward_data ", "linear_backward_weights ",
                           "layernorm_forward ", "model forward (rest)", "model backward (rest)",
                           "cross-entropy", "optimizer", "step (rest)"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;

  // --profile alone: one breakdown at the end, before the closing line.
  r = train("prof1", {"--max-steps", "3", "--profile"}, "train1");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const size_t table = r.out.find("breakdown (--profile, steps 2-3, exclusive ms per step");
  ASSERT_NE(table, std::string::npos) << r.out;
  EXPECT_LT(table, r.out.find("stopped at step 3")) << r.out;
  EXPECT_TRUE(contains(r.out.substr(table), "linear_forward ")) << r.out;

  r = train("prof2", {"--profile-every", "-1"}, "bad");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "--profile-every")) << r.err;
}
