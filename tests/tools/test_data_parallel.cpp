// Data-parallel training end to end (common/train/trainer.h): `mpirun -np 2 vitk
// train|mt-train|caption-train` against one process with two threads and against one process with
// --accum-steps 2, on a tiny ViT, a tiny translation model and a tiny captioning model, with
// dropout and drop-path off (the one draw that depends on the number of ranks). Only the order of
// the sums differs, so the weights agree to 1e-5; two 2-rank runs agree bitwise; validation figures
// equal a single process's exactly; a 2-rank run resumes on 2 ranks (bitwise) and on 1; a rank
// asked to stop stops them all after a consistent last.h5; a killed rank ends the job. One thread
// per rank, as on a machine with one core per rank (mpirun --oversubscribe on this 2-core one).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "datasets/scenes.h"
#include "util/mt_corpus.h"
#include "util/scene_data.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::TempDir;
using vitk::testing::Command;
using vitk::testing::ProcessResult;

const char* const kMpirun = VITK_MPIEXEC;  // CMake's FindMPI: Open MPI's mpiexec

#define SKIP_WITHOUT_MPIRUN() \
  if (!fs::exists(kMpirun)) GTEST_SKIP() << kMpirun << " is missing (tools/setup.sh installs it)"

// `vitk args...` in dir on `ranks` processes of `threads` threads each (ranks 0: no mpirun).
Command vitk_on(const fs::path& dir, int ranks, int threads, std::vector<std::string> args,
                const std::string& tag) {
  args.insert(args.end(), {"--threads", std::to_string(threads)});
  Command c = ranks > 0 ? vitk::testing::mpirun_vitk_command(dir, ranks, args, tag)
                        : vitk::testing::vitk_command(dir, args, tag);
  bool set = false;
  for (auto& [name, value] : c.env)
    if (name == "OMP_NUM_THREADS") value = std::to_string(threads), set = true;
  if (!set) c.env.emplace_back("OMP_NUM_THREADS", std::to_string(threads));
  c.timeout_seconds = 300;
  return c;
}

ProcessResult run_on(const fs::path& dir, int ranks, int threads,
                     const std::vector<std::string>& args, const std::string& tag) {
  return vitk::testing::run_process(vitk_on(dir, ranks, threads, args, tag));
}

std::string out_of(const fs::path& dir, const std::string& tag) {
  return vitk::testing::slurp_file(dir / (tag + ".out")) +
         vitk::testing::slurp_file(dir / (tag + ".err"));
}

#define ASSERT_RAN(dir, r, tag) \
  ASSERT_EQ((r).status, 0) << out_of(dir, tag) << ((r).timed_out ? " (timed out)" : "")

std::map<std::string, std::vector<float>> weights_of(const fs::path& path) {
  vitk::ParamStore store;
  for (const auto& [name, shape] : vitk::io::list_checkpoint(path.string())) store.add(name, shape);
  store.finalize();
  vitk::io::load_checkpoint(path.string(), store);
  std::map<std::string, std::vector<float>> out;
  for (const auto& p : store.params())
    out[p.name] = std::vector<float>(p.value.f32(), p.value.f32() + p.numel());
  return out;
}

// The elements of a bias that are key biases: a shift of every score by the same amount leaves the
// softmax as it is, so their gradient is zero but for rounding, and Adam scales that noise up to
// steps of the learning rate. They are left out of the comparison in tolerance (not of the bitwise
// one): any change of summation order moves them.
bool key_bias(const std::string& name, size_t i, size_t n) {
  auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends("attn.qkv.bias")) return i >= n / 3 && i < 2 * n / 3;
  if (ends("attn.kv.bias")) return i < n / 2;
  return false;
}

// Every tensor of a within tol of b's in L2 norm, relative to b's norm (key biases aside); tol 0:
// equal bits.
void expect_same_weights(const fs::path& a, const fs::path& b, double tol) {
  const auto wa = weights_of(a), wb = weights_of(b);
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, x] : wb) {
    ASSERT_EQ(wa.count(name), 1u) << name;
    const std::vector<float>& y = wa.at(name);
    ASSERT_EQ(y.size(), x.size()) << name;
    if (tol == 0) {
      EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)))
          << name << ": " << a << " and " << b << " differ";
      continue;
    }
    double diff = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << name << "[" << i << "]";
      if (key_bias(name, i, x.size())) continue;
      const double d = static_cast<double>(y[i]) - x[i];
      diff += d * d;
      norm += static_cast<double>(x[i]) * x[i];
    }
    EXPECT_LE(std::sqrt(diff), tol * std::max(std::sqrt(norm), 1e-6))
        << name << ": " << a << " against " << b;
  }
}

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

// args with --key set to value: replaced where it is, added otherwise.
std::vector<std::string> with(std::vector<std::string> args, const std::string& key,
                              const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == key) {
      args[i + 1] = value;
      return args;
    }
  args.insert(args.end(), {key, value});
  return args;
}

// ---- the two models

// 10 images, batches of 4 (2 per rank), 10 epochs of 2 steps: 20 steps, a validation each epoch.
// Augmentation and Mixup/CutMix on (keyed by sample, not by rank); dropout and drop-path off.
std::vector<std::string> vit_args(const std::string& out) {
  const fs::path fixtures = fs::path(VITK_SOURCE_DIR) / "tests/fixtures/resume";
  return {"train",
          "--config",
          (fixtures / "vit.ini").string(),
          "--data",
          (fixtures / "samples.csv").string(),
          "--output",
          out,
          "--batch-size",
          "4",
          "--epochs",
          "10",
          "--model.dropout",
          "0",
          "--model.drop_path",
          "0",
          "--model.patch_drop",
          "0",
          "--warmup-epochs",
          "2"};
}

// The copy task: 20 steps of --max-tokens 160 (every batch has many sentences to share out).
std::vector<std::string> mt_args(const fs::path& dir, const std::string& out) {
  if (!fs::exists(dir / "train.tsv")) {
    vitk::testing::write_tsv(dir / "train.tsv", vitk::testing::sentences(120, 1));
    vitk::testing::write_tsv(dir / "valid.tsv", vitk::testing::sentences(20, 2));
  }
  std::vector<std::string> a = {"mt-train", "--train",  "train.tsv",   "--valid", "valid.tsv",
                                "--output", out,        "--max-steps", "20",      "--valid-freq",
                                "10",       "--epochs", "100",         "--seed",  "5"};
  a.insert(a.end(), vitk::testing::kTinyMtModel.begin(), vitk::testing::kTinyMtModel.end());
  // Without kTinyMtModel's --threads (vitk_on gives it).
  for (size_t i = 0; i + 1 < a.size(); ++i)
    if (a[i] == "--threads")
      a.erase(a.begin() + static_cast<std::ptrdiff_t>(i),
              a.begin() + static_cast<std::ptrdiff_t>(i) + 2);
  return with(a, "--max-tokens", "160");
}

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

// Waits until path exists (true) or `seconds` pass (false).
bool wait_for(const fs::path& path, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (fs::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// A long 2-rank run in dir/run, started and past its first checkpoint.
struct LongRun {
  Command command;
  pid_t mpirun = -1, rank = -1;  // mpirun, and one of the ranks it started
};

void start_long_run(const fs::path& d, LongRun& run) {
  run.command = vitk_on(d, 2, 1, with(vit_args("run"), "--epochs", "100000"), "run");
  run.mpirun = vitk::testing::spawn_process(run.command);
  ASSERT_GT(run.mpirun, 0);
  ASSERT_TRUE(wait_for(d / "run/last.h5", 120)) << out_of(d, "run");
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
  const int64_t step = vitk::io::read_checkpoint_meta((d / "run/last.h5").string()).step;
  auto rest = with(with(vit_args("run"), "--resume", "run/last.h5"), "--epochs", "100000");
  rest = with(rest, "--max-steps", std::to_string(step + 2));
  const auto r2 = run_on(d, 0, 1, rest, "rest");
  EXPECT_EQ(r2.status, 0) << out_of(d, "rest");
  EXPECT_TRUE(contains(out_of(d, "rest"), "stopped at step " + std::to_string(step + 2)))
      << out_of(d, "rest");
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

}  // namespace
