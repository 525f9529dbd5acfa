// The training state of a run's last.h5 (common/train/state.h): named attributes that round-trip
// through a checkpoint, refusals of damaged or missing states, and checkpoints written before the
// named format (numbered words in `rng_state`), which still read. (That the committed fixture of
// tests/fixtures/resume/, resumed by `vitk train`, ends where the vitk that wrote it ended:
// tools/test_old_checkpoint_resume.cpp.)
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/params.h"
#include "common/train/state.h"
#include "util/test_util.h"

namespace {

using vitk::test::contains;
using vitk::test::error_of;
using vitk::test::TempDir;
using vitk::train::TrainState;

// A checkpoint of one small parameter with the given metadata.
void save(const std::string& path, const vitk::io::CheckpointMeta& meta) {
  vitk::ParamStore params;
  params.add("w", {2, 3});
  params.finalize();
  vitk::io::save_checkpoint(path, params, meta);
}

TrainState example_state() {
  TrainState s;
  s.step = 41, s.epoch = 2, s.batch = 5, s.batches_in_epoch = 9;
  s.batching = "max-tokens", s.batch_size = 300, s.seed = 0xfedcba9876543210ull;
  s.rngs["dropout"] = {0x8000000000000001ull, 12};
  s.rngs["sampling"] = {7, 0};
  s.loss_sum = 1.5, s.loss_items = 6, s.correct = 2, s.seconds = 0.25, s.last_report = 40;
  s.has_best = true, s.best = 33.25, s.best_step = 40, s.best_epoch = 2;
  s.bad_validations = 1, s.has_ema = true;
  return s;
}

TEST(TrainState, RoundTripsAsNamedAttributesOfTheCheckpoint) {
  TempDir dir;
  const std::string path = (dir.path() / "last.h5").string();
  const TrainState s = example_state();
  vitk::io::CheckpointMeta meta;
  meta.step = s.step;
  meta.train_state = s.values();
  save(path, meta);

  const vitk::io::CheckpointMeta read = vitk::io::read_checkpoint_meta(path);
  EXPECT_EQ(read.train_state, s.values());
  ASSERT_TRUE(vitk::train::has_train_state(read));
  const TrainState back = vitk::train::read_train_state(read, path);
  EXPECT_EQ(back.values(), s.values());
  EXPECT_EQ(back.rngs.at("dropout").seed, 0x8000000000000001ull);  // all 64 bits, unsigned
  EXPECT_EQ(back.seed, s.seed);

  // What h5py sees: attributes of /train_state and of /train_state/rng/dropout.
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  EXPECT_GT(H5Aexists_by_name(file, "train_state", "epoch", H5P_DEFAULT), 0);
  EXPECT_GT(H5Aexists_by_name(file, "train_state", "last_report_step", H5P_DEFAULT), 0);
  EXPECT_GT(H5Aexists_by_name(file, "train_state/rng/dropout", "counter", H5P_DEFAULT), 0);
  EXPECT_GT(H5Aexists_by_name(file, "train_state/rng/sampling", "seed", H5P_DEFAULT), 0);
  H5Fclose(file);

  // A state without a best figure has none after the round trip.
  TrainState fresh;
  fresh.batching = "batch-size", fresh.batch_size = 8, fresh.batches_in_epoch = 4;
  meta.step = 0;
  meta.train_state = fresh.values();
  save(path, meta);
  EXPECT_FALSE(vitk::train::read_train_state(vitk::io::read_checkpoint_meta(path), path).has_best);
}

TEST(TrainState, DamagedOrMissingStatesAreRefusedNamingTheFile) {
  TempDir dir;
  const std::string path = (dir.path() / "x.h5").string();
  vitk::io::CheckpointMeta meta;
  save(path, meta);
  std::string e =
      error_of([&] { vitk::train::read_train_state(vitk::io::read_checkpoint_meta(path), path); });
  EXPECT_TRUE(contains(e, path) && contains(e, "has no training state")) << e;
  EXPECT_FALSE(vitk::train::has_train_state(vitk::io::read_checkpoint_meta(path)));

  TrainState s = example_state();
  s.batch = 10;  // more batches done than the epoch has
  meta.step = s.step;
  meta.train_state = s.values();
  save(path, meta);
  e = error_of([&] { vitk::train::read_train_state(vitk::io::read_checkpoint_meta(path), path); });
  EXPECT_TRUE(contains(e, path) && contains(e, "damaged") && contains(e, "batch 10 of 9")) << e;

  // A named value missing, or of the wrong type, is named.
  auto values = example_state().values();
  values.erase("batches_in_epoch");
  meta.train_state = values;
  save(path, meta);
  e = error_of([&] { vitk::train::read_train_state(vitk::io::read_checkpoint_meta(path), path); });
  EXPECT_TRUE(contains(e, "'train_state/batches_in_epoch' is missing")) << e;
  values = example_state().values();
  values["epoch"] = std::string("two");
  meta.train_state = values;
  save(path, meta);
  e = error_of([&] { vitk::train::read_train_state(vitk::io::read_checkpoint_meta(path), path); });
  EXPECT_TRUE(contains(e, "'train_state/epoch' is not an integer")) << e;

  // The state's step must be the checkpoint's.
  meta.train_state = example_state().values();
  meta.step = 40;
  save(path, meta);
  e = error_of([&] { vitk::train::read_train_state(vitk::io::read_checkpoint_meta(path), path); });
  EXPECT_TRUE(contains(e, "at step 41, the checkpoint at step 40")) << e;
}

// Rewrites a checkpoint's training state as the numbered words of a `vitk mt-train` run before
// the named format ("vitkmt01", 15 words in the root attribute rng_state).
void write_mt_words(const std::string& path, const std::vector<uint64_t>& words) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  if (H5Lexists(file, "train_state", H5P_DEFAULT) > 0) {
    ASSERT_GE(H5Ldelete(file, "train_state", H5P_DEFAULT), 0);
  }
  if (H5Aexists(file, "rng_state") > 0) {
    ASSERT_GE(H5Adelete(file, "rng_state"), 0);
  }
  const hsize_t n = words.size();
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t attr = H5Acreate2(file, "rng_state", H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(attr, 0);
  ASSERT_GE(H5Awrite(attr, H5T_NATIVE_UINT64, words.data()), 0);
  H5Aclose(attr);
  H5Sclose(space);
  H5Fclose(file);
}

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

TEST(TrainState, ReadsTheNumberedWordsOfOlderTranslationCheckpoints) {
  TempDir dir;
  const std::string path = (dir.path() / "last.h5").string();
  vitk::io::CheckpointMeta meta;
  meta.step = 23;
  meta.epoch = 1;
  save(path, meta);
  // epoch, batch, batches in epoch, max tokens, seed, dropout seed, dropout counter, best BLEU,
  // best step, bad validations, Σ loss, loss tokens, last validation, reserved.
  write_mt_words(path, {0x3130746d6b746976ull, 1, 3, 20, 480, 5, 99, 1234, bits(12.5), 15, 1,
                        bits(7.25), 30, 15, 0});
  const TrainState s = vitk::train::read_train_state(vitk::io::read_checkpoint_meta(path), path);
  EXPECT_EQ(s.step, 23);
  EXPECT_EQ(s.epoch, 1);
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.batches_in_epoch, 20);
  EXPECT_EQ(s.batching, "max-tokens");
  EXPECT_EQ(s.batch_size, 480);
  EXPECT_EQ(s.seed, 5u);
  EXPECT_EQ(s.rngs.at("dropout").seed, 99u);
  EXPECT_EQ(s.rngs.at("dropout").counter, 1234u);
  EXPECT_TRUE(s.has_best);
  EXPECT_EQ(s.best, 12.5);
  EXPECT_EQ(s.best_step, 15);
  EXPECT_EQ(s.bad_validations, 1);
  EXPECT_EQ(s.loss_sum, 7.25);
  EXPECT_EQ(s.loss_items, 30);
  EXPECT_EQ(s.last_report, 15);
  EXPECT_FALSE(s.has_ema);
  // A BLEU of -1 meant "no validation yet"; other words are not a training state.
  write_mt_words(path, {0x3130746d6b746976ull, 1, 3, 20, 480, 5, 99, 1234, bits(-1.0), 0, 0,
                        bits(7.25), 30, 0, 0});
  EXPECT_FALSE(vitk::train::read_train_state(vitk::io::read_checkpoint_meta(path), path).has_best);
  write_mt_words(path, {1, 2, 3});
  const std::string e =
      error_of([&] { vitk::train::read_train_state(vitk::io::read_checkpoint_meta(path), path); });
  EXPECT_TRUE(contains(e, "has no training state")) << e;
}

}  // namespace
