// `vitk text-train`, `vitk text-classify` and `vitk text-eval` end to end, run as a user would: a
// tiny task written here (is the marker word "zq" in the sentence?), a tiny model trained on it,
// then classification, evaluation, resuming, starting from a translation model's encoder and bad
// inputs.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/text_checkpoint.h"
#include "util/mt_corpus.h"
#include "util/suite_cache.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::lines_of;
using vitk::testing::expect_one_error_line;
using vitk::testing::run_vitk;
using vitk::testing::slurp_file;
using vitk::testing::VitkResult;

// Sentences of the made-up words, half of them with the marker "zq" somewhere: label "marked" or
// "plain".
std::vector<std::pair<std::string, std::string>> marker_task(int count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& s : vitk::testing::sentences(count, seed)) {
    if (gen() % 2) {
      out.emplace_back(s, "plain");
      continue;
    }
    std::vector<std::string> words;
    for (size_t at = 0, next; at <= s.size(); at = next + 1) {
      next = std::min(s.find(' ', at), s.size());
      words.push_back(s.substr(at, next - at));
    }
    words.insert(words.begin() + static_cast<long>(gen() % (words.size() + 1)), "zq");
    std::string marked;
    for (const auto& w : words) marked += (marked.empty() ? "" : " ") + w;
    out.emplace_back(marked, "marked");
  }
  return out;
}

void write_labelled(const fs::path& path, const std::vector<std::pair<std::string, std::string>>& s,
                    bool fasttext = false) {
  std::ofstream out(path);
  for (const auto& [text, label] : s)
    out << (fasttext ? "__label__" + label + " " + text : text + "\t" + label) << "\n";
}

// A model that learns the marker task in a few hundred steps of a few milliseconds.
// clang-format off
const std::vector<std::string> kTiny = {
    "--model.d_model", "32", "--model.heads", "2", "--model.d_ff", "64", "--model.layers", "1",
    "--model.dropout", "0", "--model.max_length", "24", "--vocab-size", "40", "--batch-size", "16",
    "--lr", "0.003", "--threads", "1"};
// clang-format on

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The parameters of a text classifier checkpoint, by name, as raw bytes.
std::map<std::string, std::string> tensors_of(const std::string& path) {
  const auto loaded = vitk::seq2seq::load_text_classifier(path);
  std::map<std::string, std::string> out;
  for (const auto& p : loaded.params->params())
    out[p.name] = std::string(reinterpret_cast<const char*>(p.value.f32()), p.value.nbytes());
  return out;
}

class TextCli : public ::testing::Test {
 protected:
  // One trained model for the whole suite, made once per build of vitk (util/suite_cache.h).
  static void SetUpTestSuite() {
    const auto train = marker_task(600, 1), valid = marker_task(100, 2);
    const std::vector<std::string> args = with({"text-train", "--train", "train.tsv", "--valid",
                                                "valid.tsv", "--output", "base", "--epochs", "8"},
                                               kTiny);
    std::string key;
    for (const auto& word : args) key += word + '\n';
    for (const auto& [text, label] : train) key += text + '\t' + label + '\n';
    suite_ = vitk::testing::suite_cache("TextCli", key, [&](const fs::path& dir) {
      write_labelled(dir / "train.tsv", train);
      write_labelled(dir / "valid.tsv", valid);
      trained_ = run_vitk(dir, args, "base");
      return trained_.status == 0;
    });
    if (suite_.empty()) return;
    trained_.status = 0;
    trained_.out = slurp_file(suite_ / "base.out");
  }
  void SetUp() override {
    ASSERT_EQ(trained_.status, 0) << trained_.out << trained_.err;
    for (const char* f : {"train.tsv", "valid.tsv"}) fs::copy_file(suite_ / f, dir_ / f);
    write_labelled(dir_ / "test.tsv", marker_task(200, 3));
  }
  VitkResult run(const std::vector<std::string>& args, const std::string& tag = "run",
                 const std::string& stdin_file = "") {
    return run_vitk(dir_, args, tag, stdin_file);
  }
  static std::string model() { return (suite_ / "base" / "best.h5").string(); }
  nlohmann::json eval_json(const std::string& data, const std::string& precision = "f32") {
    const VitkResult r = run({"text-eval", "--model", model(), "--data", data, "--json",
                              "--precision", precision, "--threads", "1"});
    EXPECT_EQ(r.status, 0) << r.err;
    return nlohmann::json::parse(r.out);
  }

  static fs::path suite_;
  static VitkResult trained_;
  vitk::test::TempDir temp_{"vitk_text_case"};
  fs::path dir_ = temp_.path();
};

fs::path TextCli::suite_;
VitkResult TextCli::trained_;

}  // namespace

TEST_F(TextCli, LearnsWhetherTheMarkerWordOccurs) {
  EXPECT_TRUE(contains(trained_.out, "2 labels")) << trained_.out;
  const nlohmann::json j = eval_json("test.tsv");
  EXPECT_EQ(j["count"], 200);
  EXPECT_GE(j["top1"].get<double>(), 95.0) << j.dump();
  EXPECT_GE(j["macro_f1"].get<double>(), 95.0) << j.dump();
  ASSERT_EQ(j["per_class"].size(), 2u);
  EXPECT_EQ(j["per_class"][0]["label"], "plain");  // labels in order of first appearance
  // metrics.csv has a row per validation with the task's figures.
  const auto csv = lines_of(slurp_file(suite_ / "base" / "metrics.csv"));
  ASSERT_EQ(csv.size(), 9u);
  EXPECT_TRUE(contains(csv[0], "val_top1") && contains(csv[0], "val_macro_f1")) << csv[0];
}

TEST_F(TextCli, ClassifiesLinesWithTopKJsonAndInt8) {
  const auto test = marker_task(200, 3);
  {
    std::ofstream in(dir_ / "in.txt");
    for (const auto& [text, label] : test) in << text << "\n";
  }
  const VitkResult top2 =
      run({"text-classify", "--model", model(), "--input", "in.txt", "--top-k", "2"});
  ASSERT_EQ(top2.status, 0) << top2.err;
  const auto lines = lines_of(top2.out);
  ASSERT_EQ(lines.size(), test.size());
  int right = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    // LABEL<TAB>P<TAB>LABEL<TAB>P, the two labels, probabilities in order and summing to 1.
    std::vector<std::string> f;
    for (size_t at = 0, next; at <= lines[i].size(); at = next + 1) {
      next = std::min(lines[i].find('\t', at), lines[i].size());
      f.push_back(lines[i].substr(at, next - at));
    }
    ASSERT_EQ(f.size(), 4u) << lines[i];
    EXPECT_NE(f[0], f[2]);
    EXPECT_GE(std::stod(f[1]), std::stod(f[3]));
    EXPECT_NEAR(std::stod(f[1]) + std::stod(f[3]), 1.0, 2e-4);
    right += f[0] == test[i].second;
  }
  EXPECT_GE(right, 190);
  // From standard input, as JSON lines, at int8: nearly every verdict is the f32 one.
  const VitkResult json =
      run({"text-classify", "--model", model(), "--json", "--precision", "int8"}, "json", "in.txt");
  ASSERT_EQ(json.status, 0) << json.err;
  const auto rows = lines_of(json.out);
  ASSERT_EQ(rows.size(), test.size());
  int agree = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto j = nlohmann::json::parse(rows[i]);
    EXPECT_EQ(j["line"], i + 1);
    agree += j["labels"][0] == lines[i].substr(0, lines[i].find('\t'));
  }
  EXPECT_GE(agree, 196);
  EXPECT_TRUE(contains(json.err, "int8")) << json.err;
  // `vitk quantize` writes the same int8 model: the same output, read from the file.
  const VitkResult q = run({"quantize", model(), "--out", "q.h5"}, "quantize");
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_TRUE(contains(q.out, "of the text classifier")) << q.out;
  const VitkResult from_file = run({"text-classify", "--model", "q.h5", "--json"}, "q", "in.txt");
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  EXPECT_EQ(from_file.out, json.out);
}

TEST_F(TextCli, ReadsFastTextFormatAsTsv) {
  write_labelled(dir_ / "test.ft", marker_task(200, 3), /*fasttext=*/true);
  EXPECT_EQ(eval_json("test.ft")["top1"], eval_json("test.tsv")["top1"]);
}

TEST_F(TextCli, DrawsWhatThePooledVectorAttendsTo) {
  {
    std::ofstream in(dir_ / "in.txt");
    in << "kalo zq mine\nsuta ripo\n";
  }
  const VitkResult r =
      run({"text-classify", "--model", model(), "--input", "in.txt", "--attention-dir", "att"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::file_size(dir_ / "att" / "0001.png") > 1000);
  EXPECT_TRUE(fs::file_size(dir_ / "att" / "0002.png") > 1000);
}

TEST_F(TextCli, ResumesExactly) {
  const std::vector<std::string> base =
      with({"text-train", "--train", "train.tsv", "--valid", "valid.tsv", "--epochs", "2"}, kTiny);
  ASSERT_EQ(run(with(base, {"--output", "whole"}), "whole").status, 0);
  ASSERT_EQ(run(with(base, {"--output", "cut", "--max-steps", "50"}), "cut").status, 0);
  const VitkResult resumed =
      run(with(base, {"--output", "cut", "--resume", "cut/last.h5"}), "resumed");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(tensors_of((dir_ / "whole" / "last.h5").string()),
            tensors_of((dir_ / "cut" / "last.h5").string()));
}

TEST_F(TextCli, EncoderFromLoadsExactlyTheTranslationEncoder) {
  // A tiny translation model of the made-up words, then a classifier on its frozen encoder.
  vitk::testing::write_tsv(dir_ / "mt.tsv", vitk::testing::sentences(200, 4));
  const VitkResult mt = run(
      {"mt-train", "--train",      "mt.tsv", "--valid",         "mt.tsv", "--output",
       "mt",       "--max-steps",  "5",      "--model.d_model", "32",     "--model.heads",
       "2",        "--model.d_ff", "64",     "--model.layers",  "2",      "--model.decoder_layers",
       "1",        "--vocab-size", "40",     "--threads",       "1"},
      "mt");
  ASSERT_EQ(mt.status, 0) << mt.err;
  const VitkResult r = run({"text-train", "--train", "train.tsv", "--valid", "valid.tsv",
                            "--output", "from", "--encoder-from", "mt/last.h5",
                            "--encoder-lr-scale", "0", "--max-steps", "3", "--threads", "1"},
                           "from");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto translation = vitk::seq2seq::load_translation((dir_ / "mt" / "last.h5").string());
  const auto classifier = tensors_of((dir_ / "from" / "last.h5").string());
  int compared = 0;
  for (const auto& p : translation.params->params()) {
    if (p.name.rfind("decoder.", 0) == 0) continue;
    const std::string name =
        p.name == "embed_tokens.weight" ? "encoder.embed_tokens.weight" : p.name;
    ASSERT_TRUE(classifier.count(name)) << name;
    EXPECT_EQ(classifier.at(name),
              std::string(reinterpret_cast<const char*>(p.value.f32()), p.value.nbytes()))
        << name;
    ++compared;
  }
  EXPECT_EQ(compared, 1 + 2 * 12);  // the embedding and 2 layers of 12 tensors
  EXPECT_TRUE(contains(r.out, std::to_string(compared) + " tensors from mt/last.h5")) << r.out;
  EXPECT_TRUE(contains(r.out, "frozen")) << r.out;
  // The encoder's settings are the checkpoint's: another width is a usage error.
  const VitkResult wider =
      run({"text-train", "--train", "train.tsv", "--valid", "valid.tsv", "--output", "wider",
           "--encoder-from", "mt/last.h5", "--model.d_model", "64"},
          "wider");
  EXPECT_EQ(wider.status, 2) << wider.err;
  EXPECT_TRUE(contains(wider.err, "--model.d_model 64 differs from the encoder's 32")) << wider.err;
  // A classifier is not a translation model to start from.
  const VitkResult wrong = run({"text-train", "--train", "train.tsv", "--valid", "valid.tsv",
                                "--output", "wrong", "--encoder-from", model()},
                               "wrong");
  EXPECT_EQ(wrong.status, 1);
  EXPECT_TRUE(contains(wrong.err, "not a translation checkpoint")) << wrong.err;
  // Nor is a translation model a classifier.
  std::ofstream(dir_ / "in.txt") << "kalo mine\n";
  const VitkResult other = run({"text-classify", "--model", "mt/last.h5", "--input", "in.txt"});
  EXPECT_EQ(other.status, 1);
  EXPECT_TRUE(contains(other.err, "not a text classifier checkpoint")) << other.err;
  expect_one_error_line(other);
}

TEST_F(TextCli, BadInputIsNamedByFileAndLine) {
  auto expect_error = [&](const std::vector<std::string>& args, const std::string& part) {
    const VitkResult r = run(args);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_TRUE(contains(r.err, part)) << r.err;
    expect_one_error_line(r);
  };
  auto train_on = [&](const std::string& file) {
    return std::vector<std::string>{"text-train", "--train",  file,         "--valid",
                                    "valid.tsv",  "--output", "bad-" + file};
  };
  std::ofstream(dir_ / "empty_line.tsv") << "kalo mine\tplain\n\nsuta\tmarked\n";
  expect_error(train_on("empty_line.tsv"), "empty_line.tsv:2: empty line");
  std::ofstream(dir_ / "no_text.tsv") << "kalo mine\tplain\n\tmarked\n";
  expect_error(train_on("no_text.tsv"), "no_text.tsv:2: no text before the tab");
  std::ofstream(dir_ / "no_tab.tsv") << "kalo mine plain\n";
  expect_error(train_on("no_tab.tsv"), "no_tab.tsv:1: no tab");
  std::ofstream(dir_ / "two_labels.ft") << "__label__a __label__b kalo\n";
  expect_error(train_on("two_labels.ft"), "two_labels.ft:1: more than one __label__");
  std::ofstream(dir_ / "unknown.tsv") << "kalo mine\tplain\nsuta zq\tmaybe\n";
  expect_error({"text-eval", "--model", model(), "--data", "unknown.tsv"},
               "unknown.tsv:2: label 'maybe' is not one of the model's 2 labels");
  std::ofstream(dir_ / "blank.txt") << "kalo\n   \n";
  expect_error({"text-classify", "--model", model(), "--input", "blank.txt"},
               "blank.txt:2: empty line");
  expect_error({"text-classify", "--model",
                (fs::path(VITK_SOURCE_DIR) / "vit" / "models" / "fmnist-vit.h5").string()},
               "not a text classifier checkpoint");
}
