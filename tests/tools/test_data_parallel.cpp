// Data-parallel training end to end (common/train/trainer.h): `mpirun -np 2 vitk
// train|mt-train|caption-train|text-train` against one process with two threads and against one
// process with --accum-steps 2, on a tiny ViT, translation model, captioning model and text
// classifier, with dropout and drop-path off (the one draw that depends on the number of ranks).
// Only the order of the sums differs, so the weights agree to 1e-5; two 2-rank runs agree
// bitwise; validation figures equal a single process's exactly; a 2-rank run resumes on 2 ranks
// (bitwise) and on 1; a rank asked to stop stops them all after a consistent last.h5; a killed
// rank ends the job. One thread per rank, as on a machine with one core per rank (mpirun
// --oversubscribe on this 2-core one).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "datasets/scenes.h"
#include "util/mt_corpus.h"
#include "util/parallel_runs.h"
#include "util/scene_data.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::TempDir;
using vitk::testing::Command;
using vitk::testing::expect_same_weights;
using vitk::testing::mt_args;
using vitk::testing::out_of;
using vitk::testing::ProcessResult;
using vitk::testing::run_on;
using vitk::testing::vit_args;
using vitk::testing::vitk_on;
using vitk::testing::weights_of;
using vitk::testing::with;

// The metrics.csv rows' validation columns (val_...), as text.
std::vector<std::string> validation_columns(const fs::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::stringstream h(line);
  for (std::string f; std::getline(h, f, ',');) header.push_back(f);
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    std::stringstream r(line);
    size_t k = 0;
    std::string keep;
    for (std::string f; std::getline(r, f, ','); ++k)
      if (k < header.size() && header[k].rfind("val_", 0) == 0) keep += header[k] + "=" + f + " ";
    out.push_back(keep);
  }
  return out;
}

// ---- the two models

// Eight scenes of two articles (util/scene_data.h), batches of 4 (2 per rank), 3 epochs of 2 steps;
// validation (loss, greedy BLEU, exact match) on four scenes each epoch. A tiny model, dropout and
// drop-path off. The loss is the mean over the global batch's target tokens, which the parts hold
// in unequal numbers. No attention penalty: on the near-uniform attention of a tiny model, its
// gradient on the scores is a difference of nearly equal terms, rounding noise that Adam scales
// up to steps of the learning rate (as for key biases), so that the order of the sums decides it.
std::vector<std::string> caption_args(const fs::path& dir, const std::string& out) {
  if (!fs::exists(dir / "scenes")) {
    vitk::test::TempDir articles;
    vitk::datasets::SceneOptions o;
    o.fashion_mnist = vitk::testing::write_fashion_mnist(articles);
    o.output = (dir / "scenes").string();
    o.train = 8;
    o.val = o.test = 4;
    o.captions_per_image = 2;
    o.min_objects = o.max_objects = 2;
    o.seed = 5;
    vitk::datasets::make_scenes(o);
  }
  return {"caption-train",
          "--data",
          "scenes",
          "--output",
          out,
          "--epochs",
          "3",
          "--batch-size",
          "4",
          "--vocab-size",
          "40",
          "--warmup-epochs",
          "1",
          "--lr",
          "0.003",
          "--seed",
          "5",
          "--model.image_size",
          "84",
          "--model.patch_size",
          "14",
          "--model.channels",
          "1",
          "--model.mean",
          "0.5",
          "--model.std",
          "0.5",
          "--model.d_model",
          "32",
          "--model.heads",
          "2",
          "--model.d_ff",
          "64",
          "--model.layers",
          "1",
          "--model.drop_path",
          "0",
          "--model.decoder_layers",
          "1",
          "--model.decoder_heads",
          "2",
          "--model.decoder_d_ff",
          "64",
          "--model.decoder_dropout",
          "0",
          "--model.max_length",
          "64"};
}

// ---- the tests

// The run args(out) on 2 ranks of 1 thread (twice), on 1 process of 2 threads and on 1 of 1
// thread with --accum-steps 2: the two 2-rank runs end bit for bit the same, the others within
// 1e-5 (in d/two, d/again, d/one, d/accum).
void expect_two_ranks_train_as_one(
    const fs::path& d, const std::function<std::vector<std::string>(const std::string&)>& args) {
  auto r = run_on(d, 2, 1, args("two"), "two");
  ASSERT_RAN(d, r, "two");
  r = run_on(d, 2, 1, args("again"), "again");
  ASSERT_RAN(d, r, "again");
  r = run_on(d, 0, 2, args("one"), "one");
  ASSERT_RAN(d, r, "one");
  r = run_on(d, 0, 1, with(args("accum"), "--accum-steps", "2"), "accum");
  ASSERT_RAN(d, r, "accum");
  expect_same_weights(d / "two/last.h5", d / "again/last.h5", 0);
  expect_same_weights(d / "two/last.h5", d / "one/last.h5", 1e-5);
  expect_same_weights(d / "accum/last.h5", d / "one/last.h5", 1e-5);
}

TEST(DataParallel, TwoRanksTrainTheViTThatOneProcessTrains) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(expect_two_ranks_train_as_one(d, vit_args));
  // Only rank 0 writes and prints: one header, one finished line.
  const std::string log = out_of(d, "two");
  EXPECT_TRUE(contains(log, "2 ranks (")) << log;
  EXPECT_EQ(log.find("finished 10 epochs"), log.rfind("finished 10 epochs")) << log;
}

TEST(DataParallel, TwoRanksTrainTheTranslationModelThatOneProcessTrains) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  expect_two_ranks_train_as_one(d, [&](const std::string& out) { return mt_args(d, out); });
}

// 120 sentences labelled by their length (2-3 words or 4-6), batches of 16, 20 steps, a tiny
// classifier with dropout off.
std::vector<std::string> text_args(const fs::path& dir, const std::string& out) {
  if (!fs::exists(dir / "train.tsv")) {
    for (const auto& [name, count, seed] :
         {std::tuple{"train.tsv", 120, 1u}, {"valid.tsv", 20, 2u}}) {
      std::ofstream f(dir / name);
      for (const std::string& s : vitk::testing::sentences(count, seed))
        f << s << "\t" << (std::count(s.begin(), s.end(), ' ') < 3 ? "short" : "long") << "\n";
    }
  }
  return {"text-train", "--train",
          "train.tsv",  "--valid",
          "valid.tsv",  "--output",
          out,          "--max-steps",
          "20",         "--epochs",
          "100",        "--batch-size",
          "16",         "--seed",
          "5",          "--lr",
          "0.003",      "--vocab-size",
          "40",         "--model.d_model",
          "32",         "--model.heads",
          "2",          "--model.d_ff",
          "64",         "--model.layers",
          "1",          "--model.dropout",
          "0",          "--model.max_length",
          "24"};
}

TEST(DataParallel, TwoRanksTrainTheTextClassifierThatOneProcessTrains) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  expect_two_ranks_train_as_one(d, [&](const std::string& out) { return text_args(d, out); });
}

TEST(DataParallel, TwoRanksTrainTheCaptioningModelThatOneProcessTrains) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(expect_two_ranks_train_as_one(
      d, [&](const std::string& out) { return caption_args(d, out); }));
  EXPECT_TRUE(contains(out_of(d, "two"), "2 ranks (")) << out_of(d, "two");
}

// --references likeliest: each rank chooses for its own rows what one process chooses for them.
// --guided-attention and --article-loss: each part's nouns weigh by the global batch's count of
// them.
TEST(DataParallel, TwoRanksChooseTheLikeliestReferencesAsOneProcessDoes) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(expect_two_ranks_train_as_one(d, [&](const std::string& out) {
    return with(
        with(with(caption_args(d, out), "--references", "likeliest"), "--guided-attention", "1"),
        "--article-loss", "0.5");
  }));
  EXPECT_TRUE(contains(out_of(d, "two"), "the likeliest of each image's")) << out_of(d, "two");
  EXPECT_TRUE(contains(out_of(d, "two"), "guided attention 1")) << out_of(d, "two");
  EXPECT_TRUE(contains(out_of(d, "two"), "article loss 0.5")) << out_of(d, "two");
}

// With a learning rate of 1e-30 the weights stay as drawn but for the zeros (which move by about
// 1e-30, far below what the outputs resolve), so both runs validate the same model.
TEST(DataParallel, ValidationFiguresEqualASingleProcessExactly) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  for (const auto& [tag, ranks, threads] :
       std::vector<std::tuple<std::string, int, int>>{{"vit2", 2, 1}, {"vit1", 0, 2}}) {
    const auto a =
        with(with(with(vit_args(tag), "--lr", "1e-30"), "--min-lr", "0"), "--epochs", "3");
    const auto r = run_on(d, ranks, threads, a, tag);
    ASSERT_RAN(d, r, tag);
  }
  const auto two = validation_columns(d / "vit2/metrics.csv");
  ASSERT_EQ(two.size(), 3u);
  EXPECT_EQ(two, validation_columns(d / "vit1/metrics.csv"));
  for (const auto& [tag, ranks, threads] :
       std::vector<std::tuple<std::string, int, int>>{{"mt2", 2, 1}, {"mt1", 0, 2}}) {
    const auto a = with(mt_args(d, tag), "--lr-factor", "1e-30");
    const auto r = run_on(d, ranks, threads, a, tag);
    ASSERT_RAN(d, r, tag);
  }
  const auto mt_two = validation_columns(d / "mt2/metrics.csv");
  ASSERT_EQ(mt_two.size(), 2u);
  EXPECT_EQ(mt_two, validation_columns(d / "mt1/metrics.csv"));
  for (const auto& [tag, ranks, threads] :
       std::vector<std::tuple<std::string, int, int>>{{"cap2", 2, 1}, {"cap1", 0, 2}}) {
    const auto a = with(with(caption_args(d, tag), "--lr", "1e-30"), "--min-lr", "0");
    const auto r = run_on(d, ranks, threads, a, tag);
    ASSERT_RAN(d, r, tag);
  }
  const auto cap_two = validation_columns(d / "cap2/metrics.csv");
  ASSERT_EQ(cap_two.size(), 3u);
  EXPECT_TRUE(contains(cap_two.front(), "val_exact=")) << cap_two.front();
  EXPECT_EQ(cap_two, validation_columns(d / "cap1/metrics.csv"));
}

TEST(DataParallel, ATwoRankRunResumesOnTwoRanksAndOnOne) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  auto r = run_on(d, 2, 1, vit_args("whole"), "whole");
  ASSERT_RAN(d, r, "whole");
  for (const std::string run : {"two", "one"}) {
    const auto first = with(vit_args(run), "--max-steps", "7");  // in the middle of epoch 4
    r = run_on(d, 2, 1, first, run + "-first");
    ASSERT_RAN(d, r, run + "-first");
    const auto rest = with(vit_args(run), "--resume", run + "/last.h5");
    r = run_on(d, run == "two" ? 2 : 0, run == "two" ? 1 : 2, rest, run + "-rest");
    ASSERT_RAN(d, r, run + "-rest");
    EXPECT_TRUE(contains(out_of(d, run + "-rest"), "resumed from " + run + "/last.h5"))
        << out_of(d, run + "-rest");
  }
  expect_same_weights(d / "two/last.h5", d / "whole/last.h5", 0);
  expect_same_weights(d / "one/last.h5", d / "whole/last.h5", 1e-5);
}

// The pid of a vitk rank that mpirun started (a child of mpirun running the vitk binary), or -1.
pid_t rank_pid(pid_t mpirun) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == mpirun && line.find("(vitk)") != std::string::npos) return std::stoi(name);
  }
  return -1;
}

// A long 2-rank run in dir/run, started and past its first checkpoint.
struct LongRun {
  Command command;
  pid_t mpirun = -1, rank = -1;  // mpirun, and one of the ranks it started
};

void start_long_run(const fs::path& d, LongRun& run, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = with(vit_args("run"), "--epochs", "100000");
  args.insert(args.end(), extra.begin(), extra.end());
  run.command = vitk_on(d, 2, 1, args, "run");
  run.mpirun = vitk::testing::spawn_process(run.command);
  ASSERT_GT(run.mpirun, 0);
  ASSERT_TRUE(vitk::testing::wait_until(120, [&] { return fs::exists(d / "run/last.h5"); }))
      << out_of(d, "run");
  run.rank = rank_pid(run.mpirun);
  ASSERT_GT(run.rank, 0);
}

TEST(DataParallel, ARankAskedToStopStopsThemAllAfterAConsistentCheckpoint) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  LongRun run;
  ASSERT_NO_FATAL_FAILURE(start_long_run(d, run));
  kill(run.rank, SIGTERM);  // one rank only, as a scheduler might
  const ProcessResult r = vitk::testing::wait_process(run.command, run.mpirun);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.status, 0);
  const std::string log = out_of(d, "run");
  EXPECT_TRUE(contains(log, "interrupted at step ")) << log;
  // The checkpoint resumes, on one process, for two more steps.
  vitk::testing::expect_vit_run_resumes_for_two_steps(d);
}

TEST(DataParallel, AKilledRankEndsTheJob) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  LongRun run;
  ASSERT_NO_FATAL_FAILURE(start_long_run(d, run));
  const auto t0 = std::chrono::steady_clock::now();
  kill(run.rank, SIGKILL);
  const ProcessResult r = vitk::testing::wait_process(run.command, run.mpirun);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.status, 0);
  EXPECT_LT(seconds, 30) << "the job took this long to end after a rank died";
  // Whatever was written is whole: last.h5 loads.
  EXPECT_NO_THROW(weights_of(d / "run/last.h5"));
}

// The MPI rank of a process that mpirun started (its OMPI_COMM_WORLD_RANK), or -1.
int mpi_rank_of(pid_t pid) {
  std::ifstream env_file("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string entry;
  const std::string key = "OMPI_COMM_WORLD_RANK=";
  while (std::getline(env_file, entry, '\0'))
    if (entry.rfind(key, 0) == 0) return std::stoi(entry.substr(key.size()));
  return -1;
}

// A rank that stops answering (SIGSTOP: as a host whose link is down looks to the others) does
// not hang the job: after --collective-timeout the rank waiting for it names it and its host and
// ends, mpirun ends the job, and the last checkpoint is whole and resumes.
TEST(DataParallel, ARankThatStopsAnsweringIsNamedAfterTheCollectiveTimeout) {
  SKIP_WITHOUT_MPIRUN();
  TempDir tmp;
  const fs::path d = tmp.path();
  LongRun run;
  ASSERT_NO_FATAL_FAILURE(start_long_run(d, run, {"--collective-timeout", "4"}));
  const int stalled = mpi_rank_of(run.rank);
  ASSERT_GE(stalled, 0);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(run.rank, SIGSTOP), 0);
  const ProcessResult r = vitk::testing::wait_process(run.command, run.mpirun);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kill(run.rank, SIGKILL);  // in case mpirun left it stopped
  const std::string log = out_of(d, "run");
  EXPECT_FALSE(r.timed_out) << log;
  EXPECT_NE(r.status, 0) << log;
  EXPECT_GE(seconds, 4) << log;
  EXPECT_LT(seconds, 4 + 30) << log;
  const std::string waiter = std::to_string(1 - stalled);
  const std::regex named("vitk: error: rank " + waiter +
                         ": no (gradients|answer in MPI_[A-Za-z]+) from rank " +
                         std::to_string(stalled) + " \\(host [^)]+\\) for 4 s");
  EXPECT_TRUE(std::regex_search(log, named)) << log;
  // The checkpoint is whole and the run goes on without the lost rank.
  vitk::testing::expect_vit_run_resumes_for_two_steps(d);
}

TEST(DataParallel, CollectiveTimeoutOutsideItsRangeIsRefused) {
  TempDir tmp;
  for (const char* bad : {"-1", "nan", "2e6"}) {
    const auto r = run_on(tmp.path(), 0, 1, with(vit_args("run"), "--collective-timeout", bad),
                          std::string("bad") + bad);
    EXPECT_EQ(r.status, 2) << out_of(tmp.path(), std::string("bad") + bad);
    EXPECT_TRUE(contains(out_of(tmp.path(), std::string("bad") + bad), "--collective-timeout"))
        << out_of(tmp.path(), std::string("bad") + bad);
  }
}

}  // namespace
