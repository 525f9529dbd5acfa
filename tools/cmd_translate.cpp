// `vitk translate` (one sentence per line in, one translation or an n-best list out) and
// `vitk average` (the mean of checkpoints). Wiring only: the batched search is
// common/seq2seq/translator, checkpoints and averaging common/seq2seq/checkpoint.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "common/decode/search.h"
#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/io/folder_lock.h"
#include "common/io/input_file.h"
#include "common/memory.h"
#include "common/ops/profile.h"
#include "common/plot/plot.h"
#include "common/progress.h"
#include "common/seq2seq/alignment.h"
#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/translator.h"
#include "common/timer.h"
#include "datasets/tokenizer.h"
#include "tools/api/internal.h"
#include "tools/cli.h"
#include "tools/search_options.h"

namespace vitk::tools {
namespace {

// One sentence per line; a final line without a line break counts, "\r\n" is a line break.
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    io::require_regular_file(path, "a text file");
    file.open(path, std::ios::binary);
    if (!file) throw Error(path + ": cannot open for reading: " + std::strerror(errno));
    in = &file;
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(*in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  if (in->bad()) throw Error((path == "-" ? std::string("standard input") : path) + ": read error");
  return lines;
}

template <typename T>
T get(const po::variables_map& vm, const char* name) {
  return vm[name].as<T>();
}

// The search the options ask for (tools/search_options.h), with translation's length limit.
SearchOptions translation_search(const po::variables_map& vm) {
  SearchOptions o = search_options(vm);
  o.max_length_offset = get<int64_t>(vm, "max-length-offset");
  return o;
}

// --attention-layer last|N and --attention-head mean|N.
seq2seq::AlignmentOptions alignment_options(const po::variables_map& vm) {
  seq2seq::AlignmentOptions o;
  o.layer = attention_index(vm, "attention-layer", "last");
  o.head = attention_index(vm, "attention-head", "mean");
  return o;
}

// At most `limit` characters of UTF-8 text (whole code points), with "…" when cut.
std::string shorten(const std::string& text, size_t limit) {
  size_t i = 0, chars = 0;
  while (i < text.size() && chars < limit) {
    ++i;
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
    ++chars;
  }
  return i < text.size() ? text.substr(0, i) + "\xE2\x80\xA6" : text;
}

// One heat map per translated line: DIR/0001.png for line 1 (more digits past 9999 lines).
int64_t write_alignments(const std::string& dir, const std::string& input_name,
                         seq2seq::Transformer& model, const datasets::Tokenizer& tokenizer,
                         const std::vector<std::string>& lines,
                         const std::vector<seq2seq::Translation>& results,
                         const seq2seq::AlignmentOptions& options) {
  const std::string what = seq2seq::describe(model, options);
  const int digits = std::max<int>(4, static_cast<int>(std::to_string(lines.size()).size()));
  int64_t written = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const seq2seq::Translation& r = results[i];
    if (r.hypotheses.empty()) continue;  // an empty line: nothing was translated
    const decode::Hypothesis& best = r.hypotheses[0];
    const std::vector<int> source =
        seq2seq::source_ids(tokenizer, lines[i], model.config().max_length);
    plot::Heatmap h;
    h.values = seq2seq::cross_attention(model, source, best.tokens, best.finished, options);
    h.x_ticks = tokenizer.pieces(std::vector<int>(source.begin(), source.end() - 1));
    h.x_ticks.push_back("</s>");
    h.y_ticks = tokenizer.pieces(std::vector<int>(best.tokens.begin(), best.tokens.end()));
    if (best.finished) h.y_ticks.push_back("</s>");
    h.title = input_name + ":" + std::to_string(i + 1) + ": cross-attention, " + what;
    h.subtitle = {"source: " + shorten(lines[i], 110), "translation: " + shorten(r.texts[0], 110)};
    h.x_label = "source subwords (\xE2\x96\x81 starts a word)";
    h.y_label = "target subwords, each on the row that produced it";
    h.bar.label = "attention weight (each row sums to 1)";
    h.bar.vmin = 0;
    h.bar.vmax = plot::value_range(h.values).second;
    std::string name = std::to_string(i + 1);  // zero-padded to the same width for every line
    if (static_cast<int>(name.size()) < digits) name.insert(0, digits - name.size(), '0');
    plot::write_png((std::filesystem::path(dir) / (name + ".png")).string(),
                    plot::render_heatmap(h));
    ++written;
  }
  return written;
}

int run_translate(const po::variables_map& vm) {
  const std::string model_path = get<std::string>(vm, "model");
  const std::string input = get<std::string>(vm, "input"), output = get<std::string>(vm, "output");
  check_input_file("--input", input);
  const SearchOptions asked = translation_search(vm);
  const bool nbest = !vm["nbest"].defaulted();
  const std::string pictures =
      vm.count("attention-dir") ? get<std::string>(vm, "attention-dir") : "";
  seq2seq::AlignmentOptions alignment = alignment_options(vm);
  if (pictures.empty() && (!vm["attention-layer"].defaulted() || !vm["attention-head"].defaulted()))
    throw UsageError("--attention-layer and --attention-head need --attention-dir");

  {  // a search the machine cannot hold is a usage error, found before the model is loaded
    const seq2seq::TransformerConfig config = seq2seq::read_translation_meta(model_path).config;
    Translator::Impl::check_memory(config,
                                   api::to_search(asked, ops::Precision::f32, config.vocab_size));
  }
  TranslatorOptions options;
  options.precision = precision_option(vm);
  options.batch_size = get<int64_t>(vm, "batch-size");
  const Translator api(model_path, options);
  Translator::Impl& translator = api.impl();
  const decode::SearchOptions search =
      api::to_search(asked, translator.precision, translator.loaded.meta.config.vocab_size);
  alignment.precision = translator.precision;
  seq2seq::Transformer& model = *translator.loaded.model;
  const datasets::Tokenizer& tokenizer = translator.tokenizer;
  const std::vector<std::string> lines = read_lines(input);
  const std::string input_name = input == "-" ? "standard input" : input;
  io::FolderLock pictures_lock;  // one run writes into --attention-dir at a time
  if (!pictures.empty()) {
    seq2seq::describe(model, alignment);  // a layer or head the model lacks: fail now
    pictures_lock = io::FolderLock(pictures, "--attention-dir");
  }

  std::unique_ptr<Progress> progress;
  if (is_terminal(STDERR_FILENO) && !is_terminal(STDOUT_FILENO) && !lines.empty()) {
    ProgressOptions bar;
    bar.tty = true;
    bar.unit = "sentence";
    bar.rate_unit = "sent/s";
    progress =
        std::make_unique<Progress>(std::cerr, "translate", static_cast<int64_t>(lines.size()), bar);
  }
  std::optional<ops::profile::StepProfile> profile;  // the whole run is one step
  if (get<bool>(vm, "profile")) profile.emplace("run", 0, 0);
  Timer timer;
  if (profile) profile->begin();
  const std::vector<seq2seq::Translation> results = translator.run(lines, search, progress.get());
  if (profile) profile->end();
  const double seconds = timer.seconds();
  if (progress) progress->finish();

  std::ostringstream text;
  int64_t empty = 0, truncated = 0;
  char score[32];
  for (size_t i = 0; i < results.size(); ++i) {
    const seq2seq::Translation& r = results[i];
    if (r.truncated) {
      ++truncated;
      std::cerr << "vitk: warning: " << input_name << ":" << i + 1 << ": " << r.source_tokens
                << " pieces, more than the model's limit of " << api.max_source_tokens()
                << "; translated the first " << api.max_source_tokens() << std::endl;
    }
    if (r.hypotheses.empty()) ++empty;
    if (!nbest) {
      text << (r.texts.empty() ? std::string() : r.texts[0]) << "\n";
      continue;
    }
    if (r.hypotheses.empty()) text << i << " |||  ||| 0\n";
    for (size_t k = 0; k < r.hypotheses.size(); ++k) {
      std::snprintf(score, sizeof score, "%.6f", r.hypotheses[k].score);
      text << i << " ||| " << r.texts[k] << " ||| " << score << "\n";
    }
  }
  write_output_text(output, text.str());
  if (!pictures.empty()) {
    const int64_t n =
        write_alignments(pictures, input_name, model, tokenizer, lines, results, alignment);
    std::fprintf(stderr, "vitk: wrote %lld alignment picture%s to %s\n", static_cast<long long>(n),
                 n == 1 ? "" : "s", pictures.c_str());
  }
  const int64_t searched = static_cast<int64_t>(lines.size()) - empty;
  std::fprintf(stderr,
               "vitk: translated %lld sentences (%lld empty, %lld truncated) in %.2f s: "
               "%.1f sentences/s, %s%s\n",
               static_cast<long long>(lines.size()), static_cast<long long>(empty),
               static_cast<long long>(truncated), seconds,
               seconds > 0 ? static_cast<double>(searched) / seconds : 0.0,
               decode::search_method_name(search.method),
               search.method == decode::SearchMethod::beam
                   ? (" " + std::to_string(search.beam_size)).c_str()
                   : "");
  if (profile)
    profile->print(std::cerr, "--profile, " + std::to_string(lines.size()) +
                                  " sentences, the first batch's primitive creation included");
  return kExitOk;
}

int run_average(const po::variables_map& vm) {
  const auto inputs = get<std::vector<std::string>>(vm, "checkpoints");
  const std::string out = get<std::string>(vm, "out");
  refuse_output_over_input(out, inputs, "one of the checkpoints being averaged");
  const int64_t n = seq2seq::average_checkpoints(inputs, out);
  std::cout << "averaged " << inputs.size() << " checkpoints (" << n << " parameters) into " << out
            << "\n";
  return kExitOk;
}

}  // namespace

void register_translate_commands(Registry& registry) {
  Subcommand t;
  t.name = "translate";
  t.summary = "translate text, one sentence per line, with a vitk mt-train checkpoint";
  t.example =
      "vitk translate --model runs/mt/best.h5 --input test.es --output test.hyp\n"
      "echo 'En el principio creó Dios los cielos y la tierra.' | vitk translate --model m.h5\n"
      "vitk translate --model m.h5 --input test.es --nbest 4 --beam-size 8   # i ||| hyp ||| "
      "score\n"
      "vitk translate --model m.h5 --sample --temperature 0.7 --top-k 20 --seed 1 < in.txt\n"
      "vitk translate --model m.h5 --input test.es --precision bf16\n"
      "vitk translate --model m.h5 --input test.es --attention-dir align   # align/0001.png, ...";
  t.add_options = [](po::options_description& o) {
    o.add_options()  //
        ("model", po::value<std::string>()->required()->value_name("CKPT"),
         "a translation checkpoint (it holds its tokenizer)")  //
        ("input", po::value<std::string>()->default_value("-")->value_name("FILE"),
         "sentences, one a line ('-': standard input); an empty line gives an empty line")  //
        ("output", po::value<std::string>()->default_value("-")->value_name("FILE"),
         "translations, one a line ('-': standard output); a file is written whole or not at "
         "all")  //
        ("max-length-offset", value_in<int64_t>(0, 65536)->default_value(50)->value_name("N"),
         "at most source length + N target tokens (and never more than the model's limit)")  //
        ("batch-size", value_in<int64_t>(1, kMaxBatchSize)->default_value(32)->value_name("N"),
         "sentences per search (sorted by length inside, output in input order)")  //
        ("attention-dir", po::value<std::string>()->value_name("DIR"),
         "also draw, per translated line, the cross-attention between its subwords and the "
         "translation's (of the best hypothesis) as DIR/0001.png, ... (line numbers)")  //
        ("attention-layer", po::value<std::string>()->default_value("last")->value_name("N"),
         "--attention-dir: the decoder layer, 0-based, or 'last'")  //
        ("attention-head", po::value<std::string>()->default_value("mean")->value_name("N"),
         "--attention-dir: one head, 0-based, or 'mean' of all heads")  //
        ("profile", switch_value(),
         "at the end, print to stderr where the translation spent its time: exclusive wall time "
         "per op and shape over the whole run");
    add_search_options(o);
  };
  t.run = run_translate;
  registry.add(std::move(t));

  Subcommand a;
  a.name = "average";
  a.summary = "average the parameters of translation checkpoints (the paper averages the last 5)";
  a.usage = "CKPT... --out OUT [options]";
  a.example = "vitk average runs/mt/step-*.h5 --out runs/mt/avg.h5";
  a.add_options = [](po::options_description& o) {
    o.add_options()  //
        ("checkpoints", po::value<std::vector<std::string>>()->required()->value_name("CKPT"),
         "checkpoints of one model (same configuration, tokenizer, tensors)")  //
        ("out", po::value<std::string>()->required()->value_name("FILE"),
         "the averaged checkpoint, without training state (written atomically)");
  };
  a.add_positional = [](po::positional_options_description& p) { p.add("checkpoints", -1); };
  a.run = run_average;
  registry.add(std::move(a));
}

}  // namespace vitk::tools
