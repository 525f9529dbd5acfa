// A checkpoint written before the named training state (numbered words in `rng_state`) still
// resumes: the committed fixture of tests/fixtures/resume/, resumed by `vitk train` of this vitk,
// ends where the vitk that wrote it ended. (The training state itself:
// common/test_train_state.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "common/train/state.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::TempDir;
using vitk::train::TrainState;

// The f32 values of every tensor of a checkpoint, by name (parameters only).
std::map<std::string, std::vector<float>> weights_of(const std::string& path) {
  vitk::ParamStore store;
  for (const auto& [name, shape] : vitk::io::list_checkpoint(path)) store.add(name, shape);
  store.finalize();
  vitk::io::load_checkpoint(path, store);
  std::map<std::string, std::vector<float>> out;
  for (const auto& p : store.params())
    out[p.name] = std::vector<float>(p.value.f32(), p.value.f32() + p.numel());
  return out;
}

// tests/fixtures/resume/README.md: vit_step3_3e73305.h5 is the last.h5 of a run of vit.ini that
// vitk 3e73305 stopped at step 3 (in the middle of epoch 1, with augmentation, Mixup/CutMix,
// dropout, drop-path, patch dropout and the EMA on), vit_step10_3e73305.h5 the weights at the end
// of the same run uninterrupted.
TEST(TrainState, ACheckpointWrittenBeforeTheNamedStateResumesWhereItsRunWouldHaveGone) {
  const fs::path fixtures = fs::path(VITK_SOURCE_DIR) / "tests/fixtures/resume";
  const std::string old_ckpt = (fixtures / "vit_step3_3e73305.h5").string();
  const vitk::io::CheckpointMeta meta = vitk::io::read_checkpoint_meta(old_ckpt);
  ASSERT_TRUE(meta.train_state.empty()) << "the fixture must be in the old format";
  const TrainState s = vitk::train::read_train_state(meta, old_ckpt);
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(s.epoch, 0);
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.batches_in_epoch, 5);
  EXPECT_EQ(s.batch_size, 2);
  EXPECT_EQ(s.seed, 3u);
  EXPECT_EQ(s.rngs.at("dropout").counter, 2124u);
  EXPECT_EQ(s.loss_items, 6);
  EXPECT_FALSE(s.has_best);
  EXPECT_TRUE(s.has_ema);

  TempDir dir;
  fs::copy_file(old_ckpt, dir.path() / "old.h5");
  const vitk::testing::VitkResult r = vitk::testing::run_vitk(
      dir.path(), {"train", "--config", (fixtures / "vit.ini").string(), "--data",
                   (fixtures / "samples.csv").string(), "--output", "run", "--resume", "old.h5"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "resumed from old.h5: epoch 1/2, batch 3/5, step 3")) << r.out;
  EXPECT_TRUE(contains(r.out, "finished 2 epochs, step 10")) << r.out;

  const auto got = weights_of((dir.path() / "run/last.h5").string());
  const auto want = weights_of((fixtures / "vit_step10_3e73305.h5").string());
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_EQ(got.count(name), 1u) << name;
    const std::vector<float>& g = got.at(name);
    ASSERT_EQ(g.size(), w.size()) << name;
    // Equal bits on the machine that wrote the fixture; another CPU may round differently.
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], 1e-5 * std::max(1.f, std::fabs(w[i]))) << name << "[" << i << "]";
  }
}

}  // namespace
