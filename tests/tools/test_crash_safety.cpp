// Hard stops, as tests so that they stay safe: training runs (ViT and translation) killed with
// SIGKILL at many moments, many of them while last.h5 is being written (--checkpoint-every 1 makes
// that frequent); the temporaries a killed save leaves, removed by the next run; SIGTERM; and a
// full disk while writing a checkpoint, metrics.csv, a PNG or a translation, injected by
// tests/full_disk (a preloaded write(2) that fails with ENOSPC for one named file).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "util/mt_corpus.h"
#include "util/test_util.h"
#include "util/texture_data.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using Result = vitk::testing::ProcessResult;
using vitk::test::contains;
using vitk::testing::Command;
using vitk::testing::slurp_file;

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<std::string> temporaries_in(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (contains(e.path().filename().string(), ".tmp-")) found.push_back(e.path().filename());
  return found;
}

// Opens a checkpoint as a loader does (names, shapes, dtypes, every tensor read); its step.
int64_t open_checkpoint(const fs::path& path) {
  vitk::ParamStore store;
  for (const auto& [name, shape] : vitk::io::list_checkpoint(path.string())) store.add(name, shape);
  store.finalize();
  return vitk::io::load_checkpoint(path.string(), store).step;
}

// A write that a full disk refused: exit 1, and the error names the file and the reason.
void expect_full_disk_error(const Result& r, const std::string& file) {
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, file)) << r.err;
  EXPECT_TRUE(contains(r.err, "No space left on device")) << r.err;
}

class CrashSafety : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_ = std::make_unique<vitk::test::TempDir>("vitk_crash_data");
    data_ = suite_->path();
    vitk::testing::write_textures(data_, "train", 32, 1);
    vitk::testing::write_textures(data_, "val", 8, 2);
    vitk::testing::write_tsv(data_ / "train.tsv", vitk::testing::sentences(300, 1));
    vitk::testing::write_tsv(data_ / "valid.tsv", vitk::testing::sentences(30, 2));
  }
  static void TearDownTestSuite() { suite_.reset(); }
  void SetUp() override { std::ofstream(dir_ / "tiny.ini") << vitk::testing::kTextureVitConfig; }

  // `vitk train` of the textures into dir_/OUTPUT, and `vitk mt-train` of the copy task.
  std::vector<std::string> vit_train(const std::string& output,
                                     const std::string& epochs = "1000") const {
    return {"train",          "--config", "tiny.ini", "--data", data_.string(), "--output", output,
            "--log-interval", "1",        "--epochs", epochs,   "--threads",    "1"};
  }
  std::vector<std::string> mt_train(const std::string& output) const {
    return std::vector<std::string>{"mt-train",
                                    "--train",
                                    (data_ / "train.tsv").string(),
                                    "--valid",
                                    (data_ / "valid.tsv").string(),
                                    "--output",
                                    output,
                                    "--log-interval",
                                    "1",
                                    "--epochs",
                                    "1000"} +
           vitk::testing::kTinyMtModel;
  }

  Result run(const std::vector<std::string>& args, const std::string& tag,
             const std::string& full_disk = "") {
    Command c = vitk::testing::vitk_command(dir_, args, tag);
    if (!full_disk.empty())
      c.env = {{"LD_PRELOAD", VITK_FULL_DISK},
               {"VITK_FULL_DISK", full_disk},
               // Sanitizer builds: the preloaded library comes before the ASan runtime.
               {"ASAN_OPTIONS", "verify_asan_link_order=0"}};
    c.timeout_seconds = 300;
    return vitk::testing::run_process(c);
  }

  // Starts `args` again and again, each time resuming from OUTPUT/last.h5 once there is one, and
  // kills it with SIGKILL: on even rounds as soon as a temporary of last.h5 shows (a save under
  // way), on odd ones after a delay. After every kill each .h5 of the output must open and keep
  // the step reached; then a last run resumes and ends normally.
  void kill_again_and_again(const std::vector<std::string>& args, const std::string& output,
                            int rounds) {
    const fs::path out = dir_ / output;
    int64_t step = 0;
    int caught_saving = 0;
    for (int round = 0; round < rounds; ++round) {
      const std::string tag = "kill" + std::to_string(round);
      const bool resume = fs::exists(out / "last.h5");
      const std::vector<std::string> argv =
          args + (resume ? std::vector<std::string>{"--resume", (out / "last.h5").string()}
                         : std::vector<std::string>{});
      Command c = vitk::testing::vitk_command(dir_, argv, tag);
      const pid_t pid = vitk::testing::spawn_process(c);
      ASSERT_GT(pid, 0);
      if (round % 2 == 0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        bool saving = false;
        while (!saving && std::chrono::steady_clock::now() < deadline) {
          for (const std::string& t : temporaries_in(out))
            saving = saving || t.rfind("last.h5.tmp-" + std::to_string(pid), 0) == 0;
          if (!saving) std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        caught_saving += saving;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(300 + 170 * round));
      }
      ASSERT_EQ(kill(pid, SIGKILL), 0);
      const Result r = vitk::testing::wait_process(c, pid);
      ASSERT_EQ(r.signal, SIGKILL) << "round " << round << " ended before the kill:\n"
                                   << r.out << r.err;
      for (const auto& e : fs::directory_iterator(out)) {
        if (e.path().extension() != ".h5") continue;
        SCOPED_TRACE("round " + std::to_string(round) + ": " + e.path().string());
        int64_t at = -1;
        EXPECT_NO_THROW(at = open_checkpoint(e.path()));
        if (e.path().filename() == "last.h5") {
          EXPECT_GE(at, step) << "last.h5 went back";
          step = std::max(step, at);
        }
      }
    }
    // The kills above that found a save under way are the ones this test is about.
    std::cout << "[ info ] " << caught_saving << " of " << (rounds + 1) / 2
              << " kills landed while last.h5 was being written\n";
    ASSERT_TRUE(fs::exists(out / "last.h5")) << "no checkpoint after " << rounds << " rounds";
    const std::string stop_at = std::to_string(step + 2);
    const Result last = run(args + std::vector<std::string>{"--resume", (out / "last.h5").string(),
                                                            "--max-steps", stop_at},
                            "last");
    ASSERT_EQ(last.status, 0) << last.out << last.err;
    EXPECT_TRUE(contains(last.out, "stopped at step " + stop_at)) << last.out;
    EXPECT_EQ(open_checkpoint(out / "last.h5"), step + 2);
    EXPECT_TRUE(temporaries_in(out).empty()) << "a temporary outlived the resume";
  }

  static std::unique_ptr<vitk::test::TempDir> suite_;  // the data, for the whole suite
  static fs::path data_;
  vitk::test::TempDir scratch_{"vitk_crash"};  // each test's own directory
  const fs::path dir_ = scratch_.path();
};

std::unique_ptr<vitk::test::TempDir> CrashSafety::suite_;
fs::path CrashSafety::data_;

TEST_F(CrashSafety, VitTrainingKilledAtManyMomentsLeavesCheckpointsThatOpenAndResume) {
  kill_again_and_again(vit_train("run") + std::vector<std::string>{"--checkpoint-every", "1"},
                       "run", 8);
}

TEST_F(CrashSafety, TranslationTrainingKilledAtManyMomentsLeavesCheckpointsThatOpenAndResume) {
  kill_again_and_again(mt_train("run") + std::vector<std::string>{"--checkpoint-every", "1",
                                                                  "--valid-freq", "100000"},
                       "run", 8);
}

// --checkpoint-every N rewrites last.h5 after every N-th step, not only at the epoch's end: with
// the disk full for last.h5, a run of 4 steps an epoch fails right after step 2 (a 2-layer ViT
// at a few milliseconds a step: with every step saving, a save is a large share of a step).
TEST_F(CrashSafety, CheckpointEveryNStepsSavesInTheMiddleOfAnEpoch) {
  const Result r = run(vit_train("run", "2") + std::vector<std::string>{"--checkpoint-every", "2"},
                       "every", "last.h5");
  expect_full_disk_error(r, "run/last.h5");
  EXPECT_TRUE(contains(r.out, "last.h5 also every 2 steps")) << r.out;
  EXPECT_TRUE(contains(r.out, " 2/4 ")) << r.out;
  EXPECT_FALSE(contains(r.out, " 3/4 ")) << r.out;
  const Result bad =
      run(vit_train("bad") + std::vector<std::string>{"--checkpoint-every", "-1"}, "bad");
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--checkpoint-every")) << bad.err;
}

// Issue 31, defect 7: temporaries of a killed save (LAST.h5.tmp-PID-N) stayed in the output
// through every later resume. A run removes those whose writer is gone, and keeps those of a live
// process and files that only look alike.
TEST_F(CrashSafety, ARunRemovesTheTemporariesOfAKilledSaveButNotOfALiveWriter) {
  const Result first = run(vit_train("run") + std::vector<std::string>{"--max-steps", "2"}, "a");
  ASSERT_EQ(first.status, 0) << first.out << first.err;
  // A process that has ended: its pid names no live writer.
  Command gone;
  gone.argv = {"/bin/true"};
  gone.dir = dir_;
  gone.tag = "true";
  const pid_t dead = vitk::testing::spawn_process(gone);
  ASSERT_GT(dead, 0);
  vitk::testing::wait_process(gone, dead);
  const std::string d = std::to_string(dead), live = std::to_string(getpid());
  const std::vector<std::string> stale = {"last.h5.tmp-" + d + "-5", "best.h5.tmp-" + d + "-0"};
  const std::vector<std::string> kept = {"last.h5.tmp-" + live + "-1", "notes.tmp-x",
                                         "last.h5.tmp-" + d};
  for (const auto& name : stale) std::ofstream(dir_ / "run" / name) << "half a file";
  for (const auto& name : kept) std::ofstream(dir_ / "run" / name) << "not ours to remove";

  const Result again = run(
      vit_train("run") + std::vector<std::string>{"--max-steps", "3", "--resume", "run/last.h5"},
      "b");
  ASSERT_EQ(again.status, 0) << again.out << again.err;
  EXPECT_TRUE(contains(again.out, "removed 2 temporary file(s)")) << again.out;
  for (const auto& name : stale) {
    EXPECT_FALSE(fs::exists(dir_ / "run" / name)) << name;
    EXPECT_TRUE(contains(again.out, name)) << again.out;
  }
  for (const auto& name : kept) EXPECT_TRUE(fs::exists(dir_ / "run" / name)) << name;
}

// SIGTERM (a scheduler's stop) saves last.h5 and exits 143, for both models.
TEST_F(CrashSafety, SigtermSavesLastAndExits143) {
  for (const auto& args : {vit_train("vit"), mt_train("mt")}) {
    const std::string output = args[0] == "train" ? "vit" : "mt";
    SCOPED_TRACE(args[0]);
    Command c = vitk::testing::vitk_command(dir_, args, "term-" + output);
    const pid_t pid = vitk::testing::spawn_process(c);
    ASSERT_GT(pid, 0);
    // Training has begun once a few steps are logged.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!contains(slurp_file(dir_ / ("term-" + output + ".out")), "lr ") &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    const Result r = vitk::testing::wait_process(c, pid);
    EXPECT_EQ(r.status, 143) << r.out << r.err;
    EXPECT_TRUE(contains(r.out, "interrupted at step ")) << r.out;
    EXPECT_GE(open_checkpoint(dir_ / output / "last.h5"), 1);
    EXPECT_TRUE(temporaries_in(dir_ / output).empty());
  }
}

// ---- A full disk: the previous file stays, the run says which file and exits 1 ----------------

TEST_F(CrashSafety, AFullDiskWhileSavingACheckpointKeepsThePreviousOne) {
  ASSERT_EQ(run(vit_train("run") + std::vector<std::string>{"--max-steps", "2"}, "a").status, 0);
  const std::string before = slurp_file(dir_ / "run/last.h5");
  const Result r = run(
      vit_train("run") + std::vector<std::string>{"--max-steps", "4", "--resume", "run/last.h5"},
      "full", "last.h5");
  expect_full_disk_error(r, "run/last.h5");
  EXPECT_TRUE(slurp_file(dir_ / "run/last.h5") == before) << "last.h5 changed";
  EXPECT_EQ(open_checkpoint(dir_ / "run/last.h5"), 2);
  EXPECT_TRUE(temporaries_in(dir_ / "run").empty());
}

TEST_F(CrashSafety, AFullDiskWhileWritingMetricsKeepsThePreviousRows) {
  ASSERT_EQ(run(vit_train("run", "2") + std::vector<std::string>{"--max-steps", "4"}, "a").status,
            0);
  const std::string before = slurp_file(dir_ / "run/metrics.csv");
  ASSERT_TRUE(contains(before, "\n4,")) << before;  // the first epoch's row
  const Result r = run(vit_train("run", "2") + std::vector<std::string>{"--resume", "run/last.h5"},
                       "full", "metrics.csv");
  expect_full_disk_error(r, "run/metrics.csv");
  EXPECT_EQ(slurp_file(dir_ / "run/metrics.csv"), before);
  EXPECT_TRUE(temporaries_in(dir_ / "run").empty());
}

TEST_F(CrashSafety, AFullDiskWhileWritingAPictureKeepsThePreviousOne) {
  ASSERT_EQ(run({"plot", "positions", "--d-model", "32", "--length", "16", "--out", "pos.png"}, "a")
                .status,
            0);
  const std::string before = slurp_file(dir_ / "pos.png");
  const Result r =
      run({"plot", "positions", "--d-model", "64", "--length", "16", "--out", "pos.png"}, "full",
          "pos.png");
  expect_full_disk_error(r, "pos.png");
  EXPECT_TRUE(slurp_file(dir_ / "pos.png") == before) << "pos.png changed";
  EXPECT_TRUE(temporaries_in(dir_).empty());
}

TEST_F(CrashSafety, AFullDiskWhileWritingATranslationKeepsThePreviousOne) {
  ASSERT_EQ(run(mt_train("mt") + std::vector<std::string>{"--max-steps", "4"}, "train").status, 0);
  std::ofstream(dir_ / "in.txt") << "kalo mine suta\n";
  const std::vector<std::string> translate = {"translate", "--model",  "mt/last.h5", "--input",
                                              "in.txt",    "--output", "out.txt"};
  ASSERT_EQ(run(translate, "a").status, 0);
  const std::string before = slurp_file(dir_ / "out.txt");
  ASSERT_FALSE(before.empty());
  std::ofstream(dir_ / "in.txt") << "kalo mine suta\nripo dena\n";
  expect_full_disk_error(run(translate, "full", "out.txt"), "out.txt");
  EXPECT_EQ(slurp_file(dir_ / "out.txt"), before);
  EXPECT_TRUE(temporaries_in(dir_).empty());
}

}  // namespace
