// `vitk mt-train`, `vitk translate` and `vitk average` end to end, run as a user would: a tiny
// corpus written here (the copy task on sentences of made-up words), a tiny model trained for a
// few hundred steps, then translation, averaging, resuming and bad inputs.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/optim/optim.h"
#include "common/seq2seq/checkpoint.h"
#include "util/mt_corpus.h"
#include "util/profile_table.h"
#include "util/suite_cache.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::testing::run_vitk;
using vitk::testing::sentences;
using vitk::testing::slurp_file;
using vitk::testing::VitkResult;
using vitk::testing::write_tsv;
const std::vector<std::string>& kTiny = vitk::testing::kTinyMtModel;

using vitk::test::contains;

using vitk::test::lines_of;

std::vector<std::string> fields_of(const std::string& line, char sep) {
  std::vector<std::string> f;
  std::istringstream in(line);
  for (std::string x; std::getline(in, x, sep);) f.push_back(x);
  return f;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Parameters and Adam moments of a checkpoint, by name, as raw bytes.
std::vector<std::pair<std::string, std::string>> all_tensors(const std::string& path,
                                                             bool with_optimizer) {
  // A store with gradients, as training builds it (load_translation's has none: an optimizer
  // refuses it).
  const auto meta = vitk::seq2seq::read_translation_meta(path);
  vitk::ParamStore params;
  vitk::seq2seq::Transformer model(params, meta.config);
  params.finalize();
  vitk::optim::AdamW adam(params, {});
  vitk::io::load_checkpoint(path, params, with_optimizer ? &adam : nullptr);
  std::vector<std::pair<std::string, std::string>> out;
  auto bytes = [](const float* p, int64_t n) {
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n) * 4);
  };
  for (const auto& p : params.params()) {
    out.emplace_back(p.name, bytes(p.value.f32(), p.numel()));
    if (!with_optimizer) continue;
    for (const auto& [name, buffer] : adam.state())
      out.emplace_back(name + "/" + p.name, bytes(buffer->f32() + p.offset, p.numel()));
  }
  return out;
}

class MtCli : public ::testing::Test {
 protected:
  // One trained model for the whole suite: 600 steps, validation every 200, the last 3 kept;
  // made once per build of vitk (util/suite_cache.h) and read-only to the tests.
  static void SetUpTestSuite() {
    const auto train = sentences(600, 1), valid = sentences(60, 2);
    const std::vector<std::string> args =
        with({"mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "base",
              "--max-steps", "600", "--valid-freq", "200", "--keep-last", "3", "--epochs", "1000"},
             kTiny);
    std::string key;
    for (const auto& part : {args, train, valid})
      for (const auto& word : part) key += word + '\n';
    suite_ = vitk::testing::suite_cache("MtCli", key, [&](const fs::path& dir) {
      write_tsv(dir / "train.tsv", train);
      write_tsv(dir / "valid.tsv", valid);
      trained_ = run_vitk(dir, args, "base");
      return trained_.status == 0;
    });
    if (suite_.empty()) return;  // trained_ says why (SetUp fails every test with it)
    // Made by this process or an earlier one: its output, as the tests read it.
    trained_.status = 0;
    trained_.out = slurp_file(suite_ / "base.out");
    trained_.err = slurp_file(suite_ / "base.err");
  }
  void SetUp() override {
    ASSERT_EQ(trained_.status, 0) << trained_.out << trained_.err;
    for (const char* f : {"train.tsv", "valid.tsv"}) fs::copy_file(suite_ / f, dir_ / f);
  }
  VitkResult run(const std::vector<std::string>& args, const std::string& tag = "run",
                 const std::string& stdin_file = "") {
    return run_vitk(dir_, args, tag, stdin_file);
  }
  static std::string model(const char* name = "best.h5") {
    return (suite_ / "base" / name).string();
  }

  static fs::path suite_;
  static VitkResult trained_;
  vitk::test::TempDir temp_{"vitk_mt_case"};
  fs::path dir_ = temp_.path();
};

fs::path MtCli::suite_;
VitkResult MtCli::trained_;

using vitk::testing::expect_one_error_line;

}  // namespace

// ---- Translation checkpoints in-process ---------------------------------------------------------

TEST(TranslationCheckpoint, RoundTripsWeightsConfigTokenizerAndState) {
  const fs::path dir = fs::temp_directory_path() / ("vitk_mt_ckpt_" + std::to_string(getpid()));
  fs::create_directories(dir);
  vitk::seq2seq::TransformerConfig c;
  c.vocab_size = 11, c.d_model = 8, c.heads = 2, c.d_ff = 16;
  c.layers = 1, c.decoder_layers = 2, c.dropout = 0.25f, c.max_length = 17;
  vitk::ParamStore params;
  vitk::seq2seq::Transformer model(params, c);
  params.finalize();
  vitk::ops::Rng rng(3);
  model.init(rng);
  vitk::optim::AdamW adam(params, {});
  params.grads().f32()[0] = 1.f;
  adam.step(0.1f);
  const char raw[] = "spm\0bytes\xff with NUL";
  const std::string tokenizer(raw, sizeof raw - 1);
  const std::string path = (dir / "t.h5").string();
  vitk::seq2seq::save_translation(path, params, c, tokenizer, 41);

  const auto meta = vitk::seq2seq::read_translation_meta(path);
  EXPECT_EQ(meta.tokenizer, tokenizer);
  EXPECT_EQ(vitk::seq2seq::to_config_map(meta.config), vitk::seq2seq::to_config_map(c));
  EXPECT_EQ(meta.meta.step, 41);
  EXPECT_FALSE(meta.state.has_value());
  const auto loaded = vitk::seq2seq::load_translation(path);
  for (const auto& p : params.params()) {
    const auto* q = loaded.params->find(p.name);
    ASSERT_NE(q, nullptr) << p.name;
    EXPECT_EQ(0, std::memcmp(p.value.f32(), q->value.f32(), p.value.nbytes())) << p.name;
  }
  // With a training state (a run's last.h5).
  vitk::io::CheckpointMeta with_state;
  with_state.config = vitk::seq2seq::to_config_map(c);
  with_state.step = 41;
  with_state.files[vitk::seq2seq::kTokenizerFile] = tokenizer;
  vitk::train::TrainState s;
  s.step = 41, s.epoch = 2, s.batch = 5, s.batches_in_epoch = 9, s.batching = "max-tokens";
  s.batch_size = 300;
  with_state.train_state = s.values();
  vitk::io::save_checkpoint(path, params, with_state, &adam);
  const auto resumable = vitk::seq2seq::read_translation_meta(path);
  ASSERT_TRUE(resumable.state.has_value());
  EXPECT_EQ(resumable.state->values(), s.values());
  // Without a tokenizer it is not a translation checkpoint.
  vitk::io::CheckpointMeta bare;
  bare.config = vitk::seq2seq::to_config_map(c);
  vitk::io::save_checkpoint(path, params, bare);
  try {
    vitk::seq2seq::read_translation_meta(path);
    ADD_FAILURE() << "no error";
  } catch (const vitk::Error& e) {
    EXPECT_TRUE(contains(e.what(), path) && contains(e.what(), "no tokenizer")) << e.what();
  }
  // A tensor of another shape is named with the file.
  vitk::seq2seq::TransformerConfig wider = c;
  wider.d_ff = 32;
  vitk::ParamStore other;
  vitk::seq2seq::Transformer other_model(other, wider);
  other.finalize();
  vitk::io::CheckpointMeta m;
  m.config = vitk::seq2seq::to_config_map(c);
  m.files[vitk::seq2seq::kTokenizerFile] = tokenizer;
  vitk::io::save_checkpoint(path, other, m);
  try {
    vitk::seq2seq::load_translation(path);
    ADD_FAILURE() << "no error";
  } catch (const vitk::Error& e) {
    EXPECT_TRUE(contains(e.what(), path) && contains(e.what(), "mlp.fc1.weight")) << e.what();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_F(MtCli, TrainingRaisesBleuAndWritesTheRun) {
  const std::string& out = trained_.out;
  EXPECT_TRUE(contains(out, "train: 600 pairs")) << out;
  EXPECT_TRUE(contains(out, "tokenizer: SentencePiece bpe of 40 pieces")) << out;
  EXPECT_TRUE(contains(out, "stopped at step 600")) << out;
  for (const char* f :
       {"last.h5", "best.h5", "metrics.csv", "step-200.h5", "step-400.h5", "step-600.h5"})
    EXPECT_TRUE(fs::exists(suite_ / "base" / f)) << f;
  const auto rows = lines_of(slurp_file(suite_ / "base/metrics.csv"));
  ASSERT_EQ(rows.size(), 4u) << slurp_file(suite_ / "base/metrics.csv");
  EXPECT_EQ(rows[0], "step,epoch,lr,train_loss,val_loss,val_bleu,target_tokens_per_s,seconds");
  std::vector<double> bleu, loss;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto f = fields_of(rows[i], ',');
    ASSERT_EQ(f.size(), 8u) << rows[i];
    EXPECT_EQ(std::stoll(f[0]), 200 * static_cast<int64_t>(i));
    loss.push_back(std::stod(f[4]));
    bleu.push_back(std::stod(f[5]));
  }
  // Chance (a random word per position) is near 0 BLEU; the copy task is nearly solved.
  EXPECT_GT(bleu.back(), 60.0) << rows.back();
  EXPECT_LT(loss.back(), loss.front());
  const auto meta = vitk::seq2seq::read_translation_meta(model("last.h5"));
  ASSERT_TRUE(meta.state.has_value());
  EXPECT_EQ(meta.meta.step, 600);
  EXPECT_EQ(meta.config.d_model, 64);
  EXPECT_EQ(meta.config.vocab_size, 40);
  EXPECT_FALSE(vitk::seq2seq::read_translation_meta(model("best.h5")).state.has_value());
}

TEST_F(MtCli, TranslatesGreedyBeamAndNbestKeepingEmptyLines) {
  const auto test = sentences(8, 3);
  {
    std::ofstream in(dir_ / "in.txt");
    for (size_t i = 0; i < test.size(); ++i) in << (i == 3 ? "\n" : "") << test[i] << "\n";
  }
  const size_t n = test.size() + 1;  // with the empty line at index 3
  auto expected = [&](size_t i) { return i == 3 ? std::string() : test[i < 3 ? i : i - 1]; };

  VitkResult g = run({"translate", "--model", model(), "--input", "in.txt", "--greedy"}, "greedy");
  ASSERT_EQ(g.status, 0) << g.err;
  const auto greedy = lines_of(g.out);
  ASSERT_EQ(greedy.size(), n) << g.out;
  int right = 0;
  for (size_t i = 0; i < n; ++i) right += greedy[i] == expected(i);
  EXPECT_GE(right, 5) << g.out;
  EXPECT_EQ(greedy[3], "");
  EXPECT_TRUE(contains(g.err, "translated 9 sentences (1 empty")) << g.err;

  // Beam search from standard input into a file; small batches so that several are needed.
  VitkResult b = run({"translate", "--model", model(), "--output", "beam.txt", "--batch-size", "3"},
                     "beam", "in.txt");
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(b.out, "");
  const auto beam = lines_of(slurp_file(dir_ / "beam.txt"));
  ASSERT_EQ(beam.size(), n);
  right = 0;
  for (size_t i = 0; i < n; ++i) right += beam[i] == expected(i);
  EXPECT_GE(right, 5);
  EXPECT_EQ(beam[3], "");

  // An output that is a device is written in place: the atomic rename must not replace it.
  VitkResult dn = run(
      {"translate", "--model", model(), "--input", "in.txt", "--output", "/dev/null"}, "devnull");
  EXPECT_EQ(dn.status, 0) << dn.err;
  EXPECT_EQ(dn.out, "");
  struct stat null_stat {};
  ASSERT_EQ(::stat("/dev/null", &null_stat), 0);
  EXPECT_TRUE(S_ISCHR(null_stat.st_mode)) << "translate --output /dev/null replaced the device";

  VitkResult nb = run({"translate", "--model", model(), "--input", "in.txt", "--nbest", "3"}, "nb");
  ASSERT_EQ(nb.status, 0) << nb.err;
  const auto rows = lines_of(nb.out);
  ASSERT_EQ(rows.size(), 3 * (n - 1) + 1) << nb.out;
  size_t row = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t k = i == 3 ? 1 : 3;
    double previous = INFINITY;
    for (size_t j = 0; j < k; ++j, ++row) {
      const std::string& line = rows[row];
      const size_t a = line.find(" ||| "), z = line.rfind(" ||| ");
      ASSERT_TRUE(a != std::string::npos && z > a) << line;
      EXPECT_EQ(line.substr(0, a), std::to_string(i)) << line;
      const double score = std::stod(line.substr(z + 5));
      EXPECT_LE(score, previous) << line;
      previous = score;
      if (j == 0) {
        EXPECT_EQ(line.substr(a + 5, z - a - 5), beam[i]) << line;
      }
    }
  }

  // Sampling is reproducible with a seed.
  VitkResult s1 = run({"translate", "--model", model(), "--input", "in.txt", "--sample",
                       "--temperature", "0.8", "--top-k", "5", "--seed", "3"},
                      "s1");
  VitkResult s2 = run({"translate", "--model", model(), "--input", "in.txt", "--sample",
                       "--temperature", "0.8", "--top-k", "5", "--seed", "3"},
                      "s2");
  ASSERT_EQ(s1.status, 0) << s1.err;
  EXPECT_EQ(s1.out, s2.out);
  EXPECT_EQ(lines_of(s1.out).size(), n);
}

TEST_F(MtCli, TruncatesOverlongLinesWithAWarning) {
  std::string long_line;
  for (int i = 0; i < 40; ++i) long_line += (i ? " " : "") + std::string("kalo");
  std::ofstream(dir_ / "in.txt") << "kalo mine\n" << long_line << "\n";
  VitkResult r = run({"translate", "--model", model(), "--input", "in.txt", "--greedy"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 2u);
  EXPECT_TRUE(contains(r.err, "warning: in.txt:2: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "limit of 23")) << r.err;
  EXPECT_FALSE(contains(r.err, "in.txt:1:")) << r.err;
}

TEST_F(MtCli, ACheckpointAloneTranslates) {
  fs::create_directories(dir_ / "alone");
  fs::copy_file(model(), dir_ / "alone/model.h5");
  std::ofstream(dir_ / "in.txt") << "kalo mine suta\nripo dena\n";
  VitkResult a = run({"translate", "--model", "alone/model.h5", "--input", "in.txt"}, "a");
  VitkResult b = run({"translate", "--model", model(), "--input", "in.txt"}, "b");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  const auto lines = lines_of(a.out);
  ASSERT_EQ(lines.size(), 2u) << a.out;
  EXPECT_FALSE(lines[0].empty() || lines[1].empty()) << a.out;
}

// int8 translation: the f32 checkpoint at --precision int8 and its `vitk quantize` copy (int8 by
// default) translate alike; training refuses the copy.
TEST_F(MtCli, AQuantisedCheckpointTranslatesAsTheF32OneAtInt8) {
  VitkResult q = run({"quantize", model(), "--out", "q.h5"}, "q");
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_TRUE(contains(q.out, "matrices of the translation model")) << q.out;
  std::ofstream(dir_ / "in.txt") << "kalo mine suta\nripo dena\n\nneka tari pode sumi\n";
  for (const std::vector<std::string>& search : {std::vector<std::string>{"--greedy"}, {}}) {
    VitkResult f32 = run(with({"translate", "--model", model(), "--input", "in.txt"}, search), "f");
    VitkResult at_int8 = run(
        with({"translate", "--model", model(), "--input", "in.txt", "--precision", "int8"}, search),
        "i");
    VitkResult quantised =
        run(with({"translate", "--model", "q.h5", "--input", "in.txt"}, search), "qt");
    ASSERT_EQ(at_int8.status, 0) << at_int8.err;
    ASSERT_EQ(quantised.status, 0) << quantised.err;
    EXPECT_EQ(quantised.out, at_int8.out);
    // The copy task is learnt: int8 changes no word of it.
    EXPECT_EQ(at_int8.out, f32.out);
    EXPECT_EQ(lines_of(at_int8.out).size(), 4u) << at_int8.out;
  }
  VitkResult averaged = run({"average", "q.h5", model(), "--out", "avg.h5"}, "avg");
  EXPECT_EQ(averaged.status, 1) << averaged.err;
  EXPECT_TRUE(contains(averaged.err, "q.h5: is quantised to int8")) << averaged.err;
  EXPECT_FALSE(fs::exists(dir_ / "avg.h5"));
}

TEST_F(MtCli, AverageIsTheMeanOfTheTensors) {
  VitkResult r = run({"average", model("step-400.h5"), model("step-600.h5"), "--out", "avg.h5"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto a = all_tensors(model("step-400.h5"), false);
  const auto b = all_tensors(model("step-600.h5"), false);
  const auto avg = all_tensors((dir_ / "avg.h5").string(), false);
  ASSERT_EQ(avg.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(avg[i].first, a[i].first);
    const size_t n = a[i].second.size() / 4;
    const float* x = reinterpret_cast<const float*>(a[i].second.data());
    const float* y = reinterpret_cast<const float*>(b[i].second.data());
    const float* m = reinterpret_cast<const float*>(avg[i].second.data());
    for (size_t k = 0; k < n; ++k)
      ASSERT_EQ(m[k], static_cast<float>((static_cast<double>(x[k]) + y[k]) / 2.0))
          << a[i].first << "[" << k << "]";
  }
  const auto meta = vitk::seq2seq::read_translation_meta((dir_ / "avg.h5").string());
  EXPECT_FALSE(meta.state.has_value());
  EXPECT_TRUE(meta.meta.optimizer.empty());
  EXPECT_EQ(meta.meta.step, 600);
  std::ofstream(dir_ / "in.txt") << "kalo mine\n";
  VitkResult t = run({"translate", "--model", "avg.h5", "--input", "in.txt"}, "t");
  EXPECT_EQ(t.status, 0) << t.err;

  // Another model, and a tensor of another shape, are refused with the file and what differs.
  {
    auto meta0 = vitk::seq2seq::read_translation_meta(model());
    vitk::seq2seq::TransformerConfig other = meta0.config;
    other.d_model = 32;
    vitk::ParamStore params;
    vitk::seq2seq::Transformer m(params, other);
    params.finalize();
    vitk::seq2seq::save_translation((dir_ / "other.h5").string(), params, other, meta0.tokenizer,
                                    1);
    vitk::ParamStore bent;
    for (const auto& [name, shape] : vitk::io::list_checkpoint(model())) {
      vitk::Shape s = shape;
      if (name == "decoder.layers.1.mlp.fc2.bias") s[0] += 1;
      bent.add(name, s);
    }
    bent.finalize();
    vitk::seq2seq::save_translation((dir_ / "bent.h5").string(), bent, meta0.config,
                                    meta0.tokenizer, 1);
  }
  r = run({"average", model(), "other.h5", "--out", "x.h5"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "other.h5") && contains(r.err, "d_model")) << r.err;
  r = run({"average", model(), "bent.h5", "--out", "x.h5"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(contains(r.err, "bent.h5") && contains(r.err, "decoder.layers.1.mlp.fc2.bias"))
      << r.err;
  expect_one_error_line(r);
  EXPECT_FALSE(fs::exists(dir_ / "x.h5"));
}

TEST_F(MtCli, ResumedRunEndsWithIdenticalWeights) {
  // Dropout and scheduled sampling on, so that every random part must be restored; 40 steps
  // cross an epoch boundary (about 20 batches per epoch).
  const auto common = with(
      kTiny, {"--train", "train.tsv", "--valid", "valid.tsv", "--epochs", "100", "--valid-freq",
              "15", "--model.dropout", "0.1", "--scheduled-sampling", "0.3", "--seed", "5"});
  // kTiny sets dropout 0 first; the later value would be a second occurrence: drop it.
  std::vector<std::string> args;
  for (size_t i = 0; i < common.size(); ++i) {
    if (common[i] == "--model.dropout" && common[i + 1] == "0") {
      ++i;
      continue;
    }
    args.push_back(common[i]);
  }
  VitkResult full =
      run(with(with({"mt-train", "--output", "full"}, args), {"--max-steps", "40"}), "full");
  ASSERT_EQ(full.status, 0) << full.out << full.err;
  VitkResult part =
      run(with(with({"mt-train", "--output", "part"}, args), {"--max-steps", "23"}), "part");
  ASSERT_EQ(part.status, 0) << part.out << part.err;
  EXPECT_TRUE(contains(part.out, "--resume part/last.h5")) << part.out;
  VitkResult rest = run(with(with({"mt-train", "--output", "part"}, args),
                             {"--max-steps", "40", "--resume", "part/last.h5"}),
                        "rest");
  ASSERT_EQ(rest.status, 0) << rest.out << rest.err;
  EXPECT_TRUE(contains(rest.out, "resumed from part/last.h5")) << rest.out;
  const auto a = all_tensors((dir_ / "full/last.h5").string(), true);
  const auto b = all_tensors((dir_ / "part/last.h5").string(), true);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(a[i].second == b[i].second) << a[i].first << " differs";
  }
}

TEST_F(MtCli, SigintSavesLastAndExits130) {
  pid_t pid =
      vitk::testing::spawn_vitk(dir_,
                                with({"mt-train", "--train", "train.tsv", "--valid", "valid.tsv",
                                      "--output", "run", "--epochs", "1000", "--log-interval", "1"},
                                     kTiny),
                                "sigint");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!contains(slurp_file(dir_ / "sigint.out"), "step 3 ") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(kill(pid, SIGINT), 0);
  VitkResult r = vitk::testing::wait_vitk(dir_, pid, "sigint");
  EXPECT_EQ(r.status, 130) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "interrupted at step ")) << r.out;
  const auto meta = vitk::seq2seq::read_translation_meta((dir_ / "run/last.h5").string());
  EXPECT_GE(meta.meta.step, 3);
  ASSERT_TRUE(meta.state.has_value());
}

TEST_F(MtCli, BadInputsFailNamingTheFileOrOption) {
  {
    std::ofstream a(dir_ / "a.txt"), b(dir_ / "b.txt");
    for (int i = 0; i < 10; ++i) a << "kalo mine\n";
    for (int i = 0; i < 9; ++i) b << "kalo mine\n";
  }
  struct Case {
    std::vector<std::string> args;
    int status;
    std::string message;
    std::string never;  // a file or directory that must not exist afterwards
  };
  const std::string m = model();
  const std::vector<Case> cases{
      {with({"mt-train", "--train", "a.txt", "--train-target", "b.txt", "--valid", "valid.tsv",
             "--output", "never"},
            kTiny),
       1, "b.txt", "never"},
      {{"mt-train", "--train", "missing.tsv", "--valid", "valid.tsv", "--output", "never"},
       1,
       "missing.tsv",
       "never"},
      {{"mt-train", "--train", "train.tsv", "--output", "never"}, 2, "--valid", "never"},
      {{"mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "never",
        "--scheduled-sampling", "2"},
       2,
       "--scheduled-sampling",
       "never"},
      {{"mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "never",
        "--model.d_model", "abc"},
       2,
       "model.d_model",
       "never"},
      {{"mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "never",
        "--spm-type", "word"},
       2,
       "--spm-type",
       "never"},
      {{"mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "never", "--resume",
        m},
       1,
       "no training state",
       "never"},
      {{"translate", "--model", "missing.h5", "--output", "out.txt"}, 1, "missing.h5", "out.txt"},
      {{"translate", "--model", m, "--input", "missing.txt", "--output", "out.txt"},
       1,
       "missing.txt",
       "out.txt"},
      {{"translate", "--model", m, "--output", "out.txt", "--bogus"}, 2, "--bogus", "out.txt"},
      {{"translate", "--model", m, "--output", "out.txt", "--nbest", "5", "--beam-size", "2"},
       2,
       "--nbest",
       "out.txt"},
      {{"translate", "--model", m, "--output", "out.txt", "--greedy", "--sample"},
       2,
       "--greedy",
       "out.txt"},
      {{"translate", "--model", "train.tsv", "--output", "out.txt"}, 1, "train.tsv", "out.txt"},
      {{"average", m, m}, 2, "--out", ""},
      {{"average", m, "missing.h5", "--out", "x.h5"}, 1, "missing.h5", "x.h5"},
  };
  for (const Case& c : cases) {
    VitkResult r = run(c.args);
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    EXPECT_EQ(r.status, c.status) << shown << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << shown << "\n" << r.err;
    expect_one_error_line(r);
    if (!c.never.empty()) {
      EXPECT_FALSE(fs::exists(dir_ / c.never)) << shown;
    }
  }
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_FALSE(contains(entry.path().filename().string(), ".tmp")) << entry.path();

  // A run directory is not overwritten.
  fs::create_directories(dir_ / "taken");
  fs::copy_file(model("last.h5"), dir_ / "taken/last.h5");
  VitkResult r = run(with(
      {"mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "taken"}, kTiny));
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "already holds a run")) << r.err;
}

TEST_F(MtCli, ProfilePrintsWhereTrainingAndTranslationSpendTheirTime) {
  VitkResult r = run(with({"mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output",
                           "prof", "--max-steps", "5", "--valid-freq", "3", "--profile-every", "2"},
                          kTiny));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  // Steps 2-3 and 4-5 (validation at step 3 in between is not profiled); the first is left out.
  EXPECT_TRUE(contains(r.out, "breakdown (--profile, steps 2-3, exclusive ms per step; total "))
      << r.out;
  EXPECT_TRUE(contains(r.out, "breakdown (--profile, steps 4-5, exclusive ms per step; total "))
      << r.out;
  EXPECT_TRUE(vitk::test::breakdown_adds_up(r.out, "breakdown (--profile, steps 2-3, ")) << r.out;
  EXPECT_TRUE(vitk::test::breakdown_adds_up(r.out, "breakdown (--profile, steps 4-5, ")) << r.out;
  for (const char* part : {"linear_forward ", "linear_backward_data ", "linear_backward_weights ",
                           "cross-entropy", "optimizer", "step (rest)"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;

  // translate --profile: the breakdown on stderr, the translations on stdout unchanged.
  std::ofstream(dir_ / "in.txt") << "kalo mine suta\nripo dena\n";
  VitkResult plain = run({"translate", "--model", model(), "--input", "in.txt"}, "plain");
  VitkResult prof = run({"translate", "--model", model(), "--input", "in.txt", "--profile"}, "p");
  ASSERT_EQ(prof.status, 0) << prof.err;
  EXPECT_EQ(prof.out, plain.out);
  EXPECT_TRUE(contains(prof.err, "breakdown (--profile, 2 sentences")) << prof.err;
  EXPECT_TRUE(vitk::test::breakdown_adds_up(prof.err, "breakdown (--profile, 2 sentences"))
      << prof.err;
  EXPECT_TRUE(contains(prof.err, "linear_forward ")) << prof.err;
  EXPECT_TRUE(contains(prof.err, "run (rest)")) << prof.err;
}

// mt-train with bf16 products learns the copy task as f32 does, and translate with bf16 products
// gives f32's translations nearly always (skipped on CPUs without AVX512_BF16).
TEST(MtCliPrecision, MtTrainLearnsInBf16AndTranslateAgreesWithF32) {
  SKIP_WITHOUT_BF16();
  const vitk::test::TempDir dir;
  using vitk::testing::sentences;
  vitk::testing::write_tsv(dir.path() / "train.tsv", sentences(600, 1));
  vitk::testing::write_tsv(dir.path() / "valid.tsv", sentences(60, 2));
  {
    std::ofstream in(dir.path() / "in.txt");
    for (const auto& s : sentences(60, 3)) in << s << "\n";
  }
  const VitkResult trained = run_vitk(
      dir.path(),
      with({"mt-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "run",
            "--max-steps", "600", "--valid-freq", "300", "--epochs", "1000", "--precision", "bf16"},
           vitk::testing::kTinyMtModel),
      "train");
  ASSERT_EQ(trained.status, 0) << trained.out << trained.err;
  EXPECT_TRUE(contains(trained.out, "precision bf16")) << trained.out;
  const std::vector<std::string> rows = lines_of(slurp_file(dir.path() / "run/metrics.csv"));
  ASSERT_GE(rows.size(), 2u);
  // The val_bleu column, found by its name in the header.
  const auto fields = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream in(line);
    for (std::string f; std::getline(in, f, ',');) out.push_back(f);
    return out;
  };
  const std::vector<std::string> header = fields(rows.front()), last = fields(rows.back());
  const auto column = std::find(header.begin(), header.end(), "val_bleu");
  ASSERT_NE(column, header.end()) << rows.front();
  ASSERT_EQ(last.size(), header.size()) << rows.back();
  const double bleu = std::stod(last[static_cast<size_t>(column - header.begin())]);
  EXPECT_GT(bleu, 60.0) << "the copy task is nearly solved in bf16 as in f32: " << rows.back();

  const auto translate = [&](const char* precision) {
    return run_vitk(dir.path(),
                    {"translate", "--model", "run/best.h5", "--input", "in.txt", "--threads", "1",
                     "--precision", precision},
                    std::string("translate_") + precision);
  };
  const VitkResult f32 = translate("f32"), bf16 = translate("bf16");
  ASSERT_EQ(f32.status, 0) << f32.err;
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  const auto a = lines_of(f32.out), b = lines_of(bf16.out);
  ASSERT_EQ(a.size(), 60u);
  ASSERT_EQ(b.size(), 60u);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  EXPECT_GE(same, 54) << "of 60 translations identical in bf16 and f32";
}
