// Nothing a user wrote is lost or overwritten, run as a user would: one run per output folder (two
// real vitk processes: the second is refused naming the holder's pid, and a kill -9 of the holder
// leaves no stale lock), `vitk average` refuses to overwrite one of its inputs, and an interrupted
// `vitk make-scenes` leaves no half-made folder that blocks the next run.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "common/io/checkpoint.h"
#include "common/io/folder_lock.h"
#include "common/seq2seq/checkpoint.h"
#include "datasets/scenes.h"
#include "util/scene_data.h"
#include "util/test_util.h"
#include "util/texture_data.h"
#include "util/tiny_models.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::files_under;
using vitk::test::read_file;
using vitk::test::TempDir;
using vitk::testing::expect_one_error_line;
using vitk::testing::ProcessResult;
using vitk::testing::run_vitk;
using vitk::testing::slurp_file;

// Waits until `done` holds (true) or `seconds` pass (false).
template <typename Done>
bool wait_until(Done done, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::string in_use(const std::string& option, const std::string& dir, pid_t pid) {
  return option + " " + dir + " is in use by another vitk run (pid " + std::to_string(pid) + ")";
}

class OutputFolders : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ / "tiny.ini") << vitk::testing::kTextureVitConfig;
    vitk::testing::write_textures(dir_ / "data", "train", 16, 1);
    vitk::testing::write_textures(dir_ / "data", "val", 4, 2);
  }
  std::vector<std::string> train(const std::string& output, std::vector<std::string> extra) {
    std::vector<std::string> args{"train", "--config",       "tiny.ini", "--data",
                                  "data",  "--output",       output,     "--threads",
                                  "1",     "--log-interval", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  ProcessResult run(const std::vector<std::string>& args, const std::string& tag) {
    return run_vitk(dir_, args, tag);
  }

  TempDir temp_{"vitk_output_folders"};
  fs::path dir_ = temp_.path();
};

TEST_F(OutputFolders, ASecondTrainingRunIntoAHeldFolderIsRefusedAndAKilledHolderFreesIt) {
  const pid_t holder =
      vitk::testing::spawn_vitk(dir_, train("run", {"--epochs", "100000"}), "holder");
  ASSERT_GT(holder, 0);
  ASSERT_TRUE(wait_until([&] { return fs::exists(dir_ / "run/last.h5"); }, 120))
      << slurp_file(dir_ / "holder.out") << slurp_file(dir_ / "holder.err");

  // A new run, and a resume of the holder's own checkpoint: both refused, naming the holder.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--epochs", "2"}, {"--resume", "run/last.h5"}}) {
    const ProcessResult second = run(train("run", extra), "second");
    EXPECT_EQ(second.status, 2) << second.out << second.err;
    expect_one_error_line(second);
    EXPECT_TRUE(contains(second.err, in_use("--output", "run", holder))) << second.err;
  }
  // A finetune into it too (the same loop).
  ProcessResult finetune = run({"finetune", "--from", "run/last.h5", "--data", "data", "--output",
                                "run", "--threads", "1", "--epochs", "2"},
                               "finetune");
  EXPECT_EQ(finetune.status, 2) << finetune.err;
  EXPECT_TRUE(contains(finetune.err, in_use("--output", "run", holder))) << finetune.err;

  ASSERT_EQ(kill(holder, SIGKILL), 0);
  const ProcessResult killed = vitk::testing::wait_vitk(dir_, holder, "holder");
  ASSERT_EQ(killed.signal, SIGKILL);
  // No stale lock: the killed run's folder resumes at once, and a clean end removes the lock file.
  const int64_t step = vitk::io::read_checkpoint_meta((dir_ / "run/last.h5").string()).step;
  const ProcessResult resumed = run(train("run", {"--epochs", "100000", "--resume", "run/last.h5",
                                                  "--max-steps", std::to_string(step + 2)}),
                                    "resumed");
  EXPECT_EQ(resumed.status, 0) << resumed.out << resumed.err;
  EXPECT_FALSE(fs::exists(dir_ / "run" / vitk::io::FolderLock::kFileName));
}

TEST_F(OutputFolders, TwoRunsStartedTogetherIntoOneFolderDoNotBothWriteIt) {
  const pid_t a = vitk::testing::spawn_vitk(
      dir_, train("run", {"--steps", "3", "--max-steps", "3", "--seed", "1"}), "a");
  const pid_t b = vitk::testing::spawn_vitk(
      dir_, train("run", {"--steps", "3", "--max-steps", "3", "--seed", "2"}), "b");
  const ProcessResult ra = vitk::testing::wait_vitk(dir_, a, "a");
  const ProcessResult rb = vitk::testing::wait_vitk(dir_, b, "b");
  ASSERT_EQ((ra.status == 0) + (rb.status == 0), 1) << ra.out << ra.err << rb.out << rb.err;
  const ProcessResult& refused = ra.status == 0 ? rb : ra;
  EXPECT_EQ(refused.status, 2) << refused.err;
  expect_one_error_line(refused);
  // Refused while the other held the folder, or after it had written its run there.
  EXPECT_TRUE(contains(refused.err, "in use by another vitk run") ||
              contains(refused.err, "already holds a run"))
      << refused.err;
  EXPECT_TRUE(contains((ra.status == 0 ? ra : rb).out, "run/last.h5"));
}

TEST_F(OutputFolders, AttentionPicturesGoIntoAFolderNoOtherRunIsWriting) {
  vitk::testing::save_random_vit((dir_ / "m.h5").string(), vitk::testing::tiny_grey_vit(16, 4, 1),
                                 vitk::testing::kTextureClasses);
  const std::string image = (dir_ / "data/val/dark/0.png").string();
  const std::vector<std::string> classify = {"classify", "--model",         "m.h5",
                                             image,      "--attention-dir", "pics"};
  {
    const vitk::io::FolderLock held((dir_ / "pics").string(), "--attention-dir");
    const ProcessResult r = run(classify, "held");
    EXPECT_EQ(r.status, 2) << r.err;
    expect_one_error_line(r);
    EXPECT_TRUE(contains(r.err, "--attention-dir pics is in use by another vitk run (pid " +
                                    std::to_string(getpid()) + ")"))
        << r.err;
  }
  const ProcessResult r = run(classify, "free");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "pics/0.png"));
  EXPECT_FALSE(fs::exists(dir_ / "pics" / vitk::io::FolderLock::kFileName));
}

TEST_F(OutputFolders, AverageRefusesToOverwriteOneOfItsInputs) {
  for (const char* name : {"a.h5", "b.h5"}) {
    vitk::testing::TinyTranslation t;
    vitk::seq2seq::save_translation((dir_ / name).string(), t.params, t.config, "tokenizer", 1);
  }
  const std::string before = read_file(dir_ / "b.h5");
  for (const char* out : {"b.h5", "./b.h5"}) {
    const ProcessResult r = run({"average", "a.h5", "b.h5", "--out", out}, "same");
    EXPECT_EQ(r.status, 2) << out << ": " << r.err;
    expect_one_error_line(r);
    EXPECT_TRUE(
        contains(r.err, std::string("--out ") + out + " is one of the checkpoints being averaged"))
        << r.err;
    EXPECT_EQ(read_file(dir_ / "b.h5"), before) << "an input was replaced";
  }
  const ProcessResult ok = run({"average", "a.h5", "b.h5", "--out", "c.h5"}, "ok");
  EXPECT_EQ(ok.status, 0) << ok.err;
}

TEST(MakeScenesFolders, AKilledRunLeavesNoHalfFolderAndHeldFoldersAreRefused) {
  TempDir tmp;
  const std::string data = vitk::testing::write_fashion_mnist(tmp);
  const pid_t holder =
      vitk::testing::spawn_vitk(tmp.path(),
                                {"make-scenes", "--data", data, "--out", "made", "--train",
                                 "1000000", "--val", "0", "--test", "0"},
                                "holder");
  ASSERT_GT(holder, 0);
  const fs::path partial = tmp / ("made.tmp-" + std::to_string(holder));
  ASSERT_TRUE(wait_until([&] { return fs::exists(partial / "images/train/000010.png"); }, 60))
      << slurp_file(tmp / "holder.err");
  const ProcessResult second = run_vitk(
      tmp.path(), {"make-scenes", "--data", data, "--out", "made", "--train", "2"}, "second");
  EXPECT_EQ(second.status, 2) << second.err;
  expect_one_error_line(second);
  EXPECT_TRUE(contains(second.err, in_use("--out", "made", holder))) << second.err;

  ASSERT_EQ(kill(holder, SIGKILL), 0);
  ASSERT_EQ(vitk::testing::wait_vitk(tmp.path(), holder, "holder").signal, SIGKILL);
  // Nothing half-made where the set goes: the folder holds no scene.
  EXPECT_TRUE(!fs::exists(tmp / "made") || files_under(tmp / "made").size() <= 1u);
  const std::vector<std::string> small = {"make-scenes", "--data", data,    "--out", "made",
                                          "--train",     "4",      "--val", "2",     "--test",
                                          "3",           "--seed", "9"};
  const ProcessResult again = run_vitk(tmp.path(), small, "again");
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_FALSE(fs::exists(partial)) << "the dead run's temporary folder stays";
  vitk::datasets::SceneOptions o;
  o.fashion_mnist = data;
  o.output = (tmp / "library").string();
  o.train = 4, o.val = 2, o.test = 3, o.seed = 9;
  vitk::datasets::make_scenes(o);
  EXPECT_EQ(files_under(tmp / "made"), files_under(tmp / "library"));
}

}  // namespace
