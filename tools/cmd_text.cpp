// `vitk text-classify` (one sentence per line in, its likeliest labels out) and `vitk text-eval`
// (top-1, macro-F1, per label and per group, the confusion matrix). Wiring only: the model runs
// through the public API (vitk::TextClassifier, tools/api/text_classifier.cpp), the batching in
// common/seq2seq/text_classify.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/io/folder_lock.h"
#include "common/ops/profile.h"
#include "common/plot/plot.h"
#include "common/progress.h"
#include "common/seq2seq/text_task.h"
#include "common/timer.h"
#include "datasets/labelled_text.h"
#include "datasets/text_lines.h"
#include "tools/api/internal.h"
#include "tools/cli.h"
#include "tools/search_options.h"

namespace vitk::tools {
namespace {

using Json = nlohmann::ordered_json;

TextClassifier load(const po::variables_map& vm, int top_k) {
  TextClassifierOptions o;
  o.precision = precision_option(vm);
  o.batch_size = vm["batch-size"].as<int64_t>();
  o.top_k = top_k;
  return TextClassifier(vm["model"].as<std::string>(), o);
}

std::unique_ptr<Progress> progress_bar(const char* label, size_t lines) {
  if (!is_terminal(STDERR_FILENO) || is_terminal(STDOUT_FILENO) || lines == 0) return nullptr;
  ProgressOptions bar;
  bar.tty = true;
  bar.unit = "sentence";
  bar.rate_unit = "sent/s";
  return std::make_unique<Progress>(std::cerr, label, static_cast<int64_t>(lines), bar);
}

// ---- text-classify ----------------------------------------------------------------------------

// One picture per line: DIR/0001.png, the weight the pooled vector gives each subword in the last
// encoder layer.
void write_attention(const std::string& dir, const std::string& input_name, TextClassifier& api,
                     const std::vector<std::string>& lines) {
  TextClassifier::Impl& m = api.impl();
  const int digits = std::max<int>(4, static_cast<int>(std::to_string(lines.size()).size()));
  const auto& c = m.loaded.meta.config;
  const std::string pooled = c.pool == seq2seq::TextPool::cls ? "the class token's attention"
                                                              : "the mean attention of the tokens";
  for (size_t i = 0; i < lines.size(); ++i) {
    const seq2seq::TextAttention a = m.attention(lines[i]);
    plot::Heatmap h;
    h.values = Tensor({1, static_cast<int64_t>(a.weights.size())});
    std::copy(a.weights.begin(), a.weights.end(), h.values.f32());
    h.x_ticks = a.pieces;
    h.y_ticks = {"pooled"};
    const std::string& label = api.classes()[static_cast<size_t>(a.prediction.labels[0])];
    h.title = input_name + ":" + std::to_string(i + 1) + ": " + pooled + " in encoder layer " +
              std::to_string(c.layers) + " of " + std::to_string(c.layers) + ", mean of " +
              std::to_string(c.heads) + " heads";
    h.subtitle = {
        lines[i].size() > 200 ? lines[i].substr(0, 200) + "..." : lines[i],
        "predicted: " + label + " (" + format_fixed(100.0 * a.prediction.probs[0], 1) + "%)"};
    h.x_label = "subwords (\xE2\x96\x81 starts a word)";
    h.bar.label = "weight (sums to 1)";
    h.bar.vmin = 0;
    h.bar.vmax = plot::value_range(h.values).second;
    std::string name = std::to_string(i + 1);
    if (static_cast<int>(name.size()) < digits) name.insert(0, digits - name.size(), '0');
    plot::write_png((std::filesystem::path(dir) / (name + ".png")).string(),
                    plot::render_heatmap(h));
  }
}

std::string format_predictions(const std::vector<seq2seq::TextPrediction>& results,
                               const std::vector<std::string>& labels, bool json) {
  std::ostringstream out;
  for (size_t i = 0; i < results.size(); ++i) {
    const seq2seq::TextPrediction& r = results[i];
    if (json) {
      Json j;
      j["line"] = i + 1;
      j["labels"] = Json::array();
      for (int32_t c : r.labels) j["labels"].push_back(labels[static_cast<size_t>(c)]);
      j["probabilities"] = r.probs;
      if (r.cut) j["truncated"] = true;
      out << j.dump() << "\n";
      continue;
    }
    for (size_t k = 0; k < r.labels.size(); ++k) {
      char p[32];
      std::snprintf(p, sizeof p, "%.4f", static_cast<double>(r.probs[k]));
      out << (k ? "\t" : "") << labels[static_cast<size_t>(r.labels[k])] << "\t" << p;
    }
    out << "\n";
  }
  return out.str();
}

int run_text_classify(const po::variables_map& vm) {
  const std::string input = vm["input"].as<std::string>(), output = vm["output"].as<std::string>();
  check_input_file("--input", input);
  const std::string pictures =
      vm.count("attention-dir") ? vm["attention-dir"].as<std::string>() : "";
  TextClassifier api = load(vm, vm["top-k"].as<int>());
  const std::vector<std::string> lines = datasets::read_sentences(input);
  const std::string input_name = input == "-" ? "stdin" : input;
  io::FolderLock pictures_lock;  // one run writes into --attention-dir at a time
  if (!pictures.empty()) pictures_lock = io::FolderLock(pictures, "--attention-dir");

  auto progress = progress_bar("classify", lines.size());
  std::optional<ops::profile::StepProfile> profile;  // the whole run is one step
  if (vm["profile"].as<bool>()) profile.emplace("run", 0, 0);
  Timer timer;
  if (profile) profile->begin();
  const auto results = api.impl().run(lines, 0, progress.get(), nullptr);
  if (profile) profile->end();
  const double seconds = timer.seconds();
  if (progress) progress->finish();
  int64_t cut = 0;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].cut && ++cut <= 5)
      std::cerr << "vitk: warning: " << input_name << ":" << i + 1
                << ": more subwords than the model's limit of " << api.max_tokens()
                << "; classified the first " << api.max_tokens() << "\n";
  write_output_text(output, format_predictions(results, api.classes(), vm["json"].as<bool>()));
  if (!pictures.empty()) {
    write_attention(pictures, input_name, api, lines);
    std::fprintf(stderr, "vitk: wrote %zu attention picture%s to %s\n", lines.size(),
                 lines.size() == 1 ? "" : "s", pictures.c_str());
  }
  std::fprintf(
      stderr, "vitk: classified %zu sentences (%lld cut) in %.2f s: %.0f sentences/s, %s\n",
      lines.size(), static_cast<long long>(cut), seconds,
      seconds > 0 ? static_cast<double>(lines.size()) / seconds : 0.0, api.precision().c_str());
  if (profile)
    profile->print(std::cerr, "--profile, " + std::to_string(lines.size()) +
                                  " sentences, the first batches' primitive creation included");
  return kExitOk;
}

// ---- text-eval ---------------------------------------------------------------------------------

// label -> group from `path` (label<TAB>group lines); every label of the model must have one.
std::map<std::string, std::string> read_groups(const std::string& path,
                                               const std::vector<std::string>& labels) {
  std::map<std::string, std::string> groups;
  if (path.empty()) return groups;
  const datasets::LabelledLines g = datasets::read_labelled(path);  // label<TAB>group
  for (size_t i = 0; i < g.text.size(); ++i) groups[g.text[i]] = g.labels[i];
  for (const std::string& l : labels)
    if (!groups.count(l))
      throw Error(path + ": no group for the model's label '" + l +
                  "' (lines are label<TAB>group)");
  return groups;
}

struct ClassRow {
  std::string label;
  int64_t count = 0, predicted = 0, correct = 0;
  double precision() const { return predicted ? 100.0 * correct / predicted : 0.0; }
  double recall() const { return count ? 100.0 * correct / count : 0.0; }
  double f1() const { return count + predicted ? 200.0 * correct / (count + predicted) : 0.0; }
};

std::vector<ClassRow> class_rows(const seq2seq::ClassScores& s,
                                 const std::vector<std::string>& labels) {
  const auto C = static_cast<int64_t>(labels.size());
  std::vector<ClassRow> rows(labels.size());
  for (int64_t t = 0; t < C; ++t)
    for (int64_t p = 0; p < C; ++p) {
      const int64_t n = s.confusion[static_cast<size_t>(t * C + p)];
      rows[static_cast<size_t>(t)].count += n;
      rows[static_cast<size_t>(p)].predicted += n;
      if (t == p) rows[static_cast<size_t>(t)].correct += n;
    }
  for (size_t c = 0; c < labels.size(); ++c) rows[c].label = labels[c];
  return rows;
}

struct GroupRow {
  std::string group;
  int64_t count = 0, correct = 0, right_group = 0;
};

// Per group, in order of first appearance among the labels: its sentences, those whose label is
// right and those whose predicted label is of the right group.
std::vector<GroupRow> group_rows(const seq2seq::ClassScores& s,
                                 const std::vector<std::string>& labels,
                                 const std::map<std::string, std::string>& groups) {
  std::vector<GroupRow> rows;
  std::map<std::string, size_t> index;
  for (const std::string& l : labels)
    if (index.emplace(groups.at(l), rows.size()).second) rows.push_back({groups.at(l)});
  const auto C = static_cast<int64_t>(labels.size());
  for (int64_t t = 0; t < C; ++t)
    for (int64_t p = 0; p < C; ++p) {
      const int64_t n = s.confusion[static_cast<size_t>(t * C + p)];
      const std::string& g = groups.at(labels[static_cast<size_t>(t)]);
      GroupRow& r = rows[index.at(g)];
      r.count += n;
      if (t == p) r.correct += n;
      if (groups.at(labels[static_cast<size_t>(p)]) == g) r.right_group += n;
    }
  return rows;
}

std::string confusion_csv(const seq2seq::ClassScores& s, const std::vector<std::string>& labels) {
  std::ostringstream out;
  out << "true\\predicted";
  for (const std::string& l : labels) out << "," << l;
  out << "\n";
  const auto C = static_cast<int64_t>(labels.size());
  for (int64_t t = 0; t < C; ++t) {
    out << labels[static_cast<size_t>(t)];
    for (int64_t p = 0; p < C; ++p) out << "," << s.confusion[static_cast<size_t>(t * C + p)];
    out << "\n";
  }
  return out.str();
}

double percent(int64_t a, int64_t b) {
  return b ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0;
}

Json eval_json(const std::string& data, const TextClassifier& api, const seq2seq::ClassScores& s,
               const std::vector<ClassRow>& classes, const std::vector<GroupRow>& groups) {
  Json j;
  j["data"] = data;
  j["count"] = s.count;
  j["precision"] = api.precision();
  j["top1"] = s.top1_percent();
  j["macro_f1"] = s.macro_f1_percent();
  j["groups"] = Json::object();
  j["group_hits"] = Json::object();
  for (const GroupRow& g : groups) {
    j["groups"][g.group] = percent(g.correct, g.count);
    j["group_hits"][g.group] = percent(g.right_group, g.count);
  }
  j["per_class"] = Json::array();
  for (const ClassRow& c : classes)
    j["per_class"].push_back({{"label", c.label},
                              {"count", c.count},
                              {"precision", c.precision()},
                              {"recall", c.recall()},
                              {"f1", c.f1()}});
  return j;
}

std::string eval_text(const std::string& data, const TextClassifier& api,
                      const seq2seq::ClassScores& s, const std::vector<ClassRow>& classes,
                      const std::vector<GroupRow>& groups, double seconds) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%s: %lld sentences, %zu labels, %s, %.1f sentences/s\n",
                data.c_str(), static_cast<long long>(s.count), classes.size(),
                api.precision().c_str(), seconds > 0 ? s.count / seconds : 0.0);
  out << line;
  std::snprintf(line, sizeof line, "top-1 %.2f%%  macro-F1 %.2f%%\n", s.top1_percent(),
                s.macro_f1_percent());
  out << line;
  if (!groups.empty()) {
    out << "\ngroup                 sentences   top-1  right group\n";
    for (const GroupRow& g : groups) {
      std::snprintf(line, sizeof line, "%-20s %10lld %6.2f%% %10.2f%%\n", g.group.c_str(),
                    static_cast<long long>(g.count), percent(g.correct, g.count),
                    percent(g.right_group, g.count));
      out << line;
    }
  }
  out << "\nlabel        sentences  precision  recall      F1\n";
  for (const ClassRow& c : classes) {
    if (c.count == 0 && c.predicted == 0) continue;
    std::snprintf(line, sizeof line, "%-12s %9lld %9.2f%% %6.2f%% %6.2f%%\n", c.label.c_str(),
                  static_cast<long long>(c.count), c.precision(), c.recall(), c.f1());
    out << line;
  }
  return out.str();
}

int run_text_eval(const po::variables_map& vm) {
  const std::string data = vm["data"].as<std::string>();
  const std::string groups_path = vm.count("groups") ? vm["groups"].as<std::string>() : "";
  const std::string confusion = vm.count("confusion") ? vm["confusion"].as<std::string>() : "";
  check_input_file("--data", data);
  if (!groups_path.empty()) check_input_file("--groups", groups_path);
  TextClassifier api = load(vm, 1);
  const std::map<std::string, std::string> group_of = read_groups(groups_path, api.classes());
  const datasets::LabelledLines set = datasets::read_labelled(data);
  if (set.text.empty()) throw Error(data + ": no labelled sentences");
  std::map<std::string, int32_t> index;
  for (size_t c = 0; c < api.classes().size(); ++c)
    index[api.classes()[c]] = static_cast<int32_t>(c);
  std::vector<int32_t> truth;
  for (size_t i = 0; i < set.labels.size(); ++i) {
    auto it = index.find(set.labels[i]);
    if (it == index.end())
      throw Error(data + ":" + std::to_string(set.lines[i]) + ": label '" + set.labels[i] +
                  "' is not one of the model's " + std::to_string(index.size()) + " labels");
    truth.push_back(it->second);
  }
  auto progress = progress_bar("evaluate", set.text.size());
  Timer timer;
  const auto results = api.impl().run(set.text, 1, progress.get(), nullptr);
  const double seconds = timer.seconds();
  if (progress) progress->finish();
  std::vector<int32_t> predicted;
  for (const auto& r : results) predicted.push_back(r.labels[0]);
  const auto C = static_cast<int64_t>(api.classes().size());
  const seq2seq::ClassScores s = seq2seq::score_classes(truth, predicted, C);
  const std::vector<ClassRow> classes = class_rows(s, api.classes());
  const std::vector<GroupRow> groups =
      group_of.empty() ? std::vector<GroupRow>{} : group_rows(s, api.classes(), group_of);
  if (!confusion.empty()) io::write_file_atomic(confusion, confusion_csv(s, api.classes()));
  if (vm["json"].as<bool>())
    std::cout << eval_json(data, api, s, classes, groups).dump(2) << "\n";
  else
    std::cout << eval_text(data, api, s, classes, groups, seconds);
  return kExitOk;
}

void add_run_options(po::options_description& o) {
  o.add_options()  //
      ("model", po::value<std::string>()->required()->value_name("CKPT"),
       "a text classifier checkpoint (vitk text-train; it holds its tokenizer and labels)")  //
      ("batch-size", value_in<int64_t>(1, kMaxBatchSize)->default_value(64)->value_name("N"),
       "sentences per forward (sorted by length inside, output in input order)")  //
      ("json", switch_value(), "JSON instead of text");
  add_precision_option(o);
}

}  // namespace

void register_text_commands(Registry& registry) {
  Subcommand c;
  c.name = "text-classify";
  c.summary = "label sentences, one per line, with a vitk text-train checkpoint";
  c.example =
      "vitk text-classify --model runs/books-en/best.h5 --input verses.txt --top-k 3\n"
      "echo 'In the beginning God created the heavens and the earth.' | vitk text-classify "
      "--model m.h5 --json\n"
      "vitk text-classify --model m.h5 --input verses.txt --precision int8\n"
      "vitk text-classify --model m.h5 --input verses.txt --attention-dir att   # att/0001.png";
  c.add_options = [](po::options_description& o) {
    add_run_options(o);
    o.add_options()  //
        ("input", po::value<std::string>()->default_value("-")->value_name("FILE"),
         "sentences, one a line ('-': standard input); an empty line is an error")  //
        ("output", po::value<std::string>()->default_value("-")->value_name("FILE"),
         "per line LABEL<TAB>PROBABILITY (top-k: k pairs), or with --json one JSON object a "
         "line ('-': standard output); a file is written whole or not at all")  //
        ("top-k", value_in(1, 1 << 20)->default_value(1)->value_name("K"),
         "labels per sentence, likeliest first")  //
        ("attention-dir", po::value<std::string>()->value_name("DIR"),
         "also draw, per line, the weight the pooled vector gives each subword in the last "
         "encoder layer as DIR/0001.png, ... (line numbers)")  //
        ("profile", switch_value(),
         "at the end, print to stderr where the run spent its time: exclusive wall time per op "
         "and shape");
  };
  c.run = run_text_classify;
  registry.add(std::move(c));

  Subcommand e;
  e.name = "text-eval";
  e.summary = "top-1, macro-F1, per label and per group, and the confusion matrix on labelled text";
  e.example =
      "vitk text-eval --model runs/books-en/best.h5 --data data/bible/books/test.en.tsv "
      "--groups data/bible/books/groups.tsv\n"
      "vitk text-eval --model m.h5 --data test.ft --json --confusion confusion.csv";
  e.add_options = [](po::options_description& o) {
    add_run_options(o);
    o.add_options()  //
        ("data", po::value<std::string>()->required()->value_name("FILE"),
         "labelled sentences: text<TAB>label lines, or fastText's __label__LABEL text")  //
        ("groups", po::value<std::string>()->value_name("FILE"),
         "label<TAB>group lines: also the accuracy per group of labels")  //
        ("confusion", po::value<std::string>()->value_name("FILE"),
         "write the confusion matrix as CSV (rows: true label, columns: predicted)");
  };
  e.run = run_text_eval;
  registry.add(std::move(e));
}

}  // namespace vitk::tools
