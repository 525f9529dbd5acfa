#pragma once
// Training runs on several ranks, for the tests of data parallelism on one host
// (tools/test_data_parallel.cpp) and on hosts made of network namespaces (tools/test_hosts.cpp):
// the commands, tiny runs of the ViT and of the translation model, and their weights compared.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "util/mt_corpus.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace vitk::testing {

namespace fs = std::filesystem;

inline const char* const kMpirun = VITK_MPIEXEC;  // CMake's FindMPI: Open MPI's mpiexec

#define SKIP_WITHOUT_MPIRUN()                           \
  if (!std::filesystem::exists(vitk::testing::kMpirun)) \
  GTEST_SKIP() << vitk::testing::kMpirun << " is missing (tools/setup.sh installs it)"

// `vitk args...` in dir on `ranks` processes of `threads` threads each (ranks 0: no mpirun).
inline Command vitk_on(const fs::path& dir, int ranks, int threads, std::vector<std::string> args,
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

inline ProcessResult run_on(const fs::path& dir, int ranks, int threads,
                            const std::vector<std::string>& args, const std::string& tag) {
  return vitk::testing::run_process(vitk_on(dir, ranks, threads, args, tag));
}

inline std::string out_of(const fs::path& dir, const std::string& tag) {
  return vitk::testing::slurp_file(dir / (tag + ".out")) +
         vitk::testing::slurp_file(dir / (tag + ".err"));
}

#define ASSERT_RAN(dir, r, tag)                               \
  ASSERT_EQ((r).status, 0) << vitk::testing::out_of(dir, tag) \
                           << ((r).timed_out ? " (timed out)" : "")

inline std::map<std::string, std::vector<float>> weights_of(const fs::path& path) {
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
inline bool key_bias(const std::string& name, size_t i, size_t n) {
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
inline void expect_same_weights(const fs::path& a, const fs::path& b, double tol) {
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

// args with --key set to value: replaced where it is, added otherwise.
inline std::vector<std::string> with(std::vector<std::string> args, const std::string& key,
                                     const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == key) {
      args[i + 1] = value;
      return args;
    }
  args.insert(args.end(), {key, value});
  return args;
}

// 10 images, batches of 4 (2 per rank), 10 epochs of 2 steps: 20 steps, a validation each epoch.
// Augmentation and Mixup/CutMix on (keyed by sample, not by rank); dropout and drop-path off.
inline std::vector<std::string> vit_args(const std::string& out) {
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
inline std::vector<std::string> mt_args(const fs::path& dir, const std::string& out) {
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

// Polls done() every 0.1 s: true once it holds, false when `seconds` pass first.
inline bool wait_until(double seconds, const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

// The ViT run in dir/run (vit_args), ended however it ended, resumes from its last.h5 on one
// process of one thread and trains two more steps.
inline void expect_vit_run_resumes_for_two_steps(const fs::path& d) {
  const int64_t step = vitk::io::read_checkpoint_meta((d / "run/last.h5").string()).step;
  auto rest = with(with(vit_args("run"), "--resume", "run/last.h5"), "--epochs", "100000");
  rest = with(rest, "--max-steps", std::to_string(step + 2));
  const ProcessResult r = run_on(d, 0, 1, rest, "rest");
  EXPECT_EQ(r.status, 0) << out_of(d, "rest");
  EXPECT_TRUE(
      vitk::test::contains(out_of(d, "rest"), "stopped at step " + std::to_string(step + 2)))
      << out_of(d, "rest");
}

}  // namespace vitk::testing
