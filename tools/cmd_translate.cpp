// `vitk translate` (one sentence per line in, one translation or an n-best list out) and
// `vitk average` (the mean of checkpoints). Wiring only: the batched search is
// common/seq2seq/translator, checkpoints and averaging common/seq2seq/checkpoint.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "common/error.h"
#include "common/progress.h"
#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/translator.h"
#include "common/timer.h"
#include "tools/cli.h"

namespace vitk::tools {
namespace {

// One sentence per line; a final line without a line break counts, "\r\n" is a line break.
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
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

// The whole text to standard output, or to a temporary file beside `path` renamed over it once
// complete: a failure never leaves half a file.
void write_output(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text << std::flush;
    if (!std::cout) throw Error("cannot write to standard output");
    return;
  }
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error(path + ": cannot write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename " + tmp + " over it: " + why);
  }
}

template <typename T>
T get(const po::variables_map& vm, const char* name) {
  return vm[name].as<T>();
}

// The search the options ask for, each option checked by name.
seq2seq::SearchOptions search_options(const po::variables_map& vm) {
  const bool greedy = get<bool>(vm, "greedy"), sample = get<bool>(vm, "sample");
  if (greedy && sample) throw UsageError("--greedy and --sample exclude each other");
  for (const char* name : {"temperature", "top-k", "seed"})
    if (!vm[name].defaulted() && !sample)
      throw UsageError(std::string("--") + name + " needs --sample");
  seq2seq::SearchOptions o;
  o.method = sample   ? seq2seq::SearchMethod::sample
             : greedy ? seq2seq::SearchMethod::greedy
                      : seq2seq::SearchMethod::beam;
  o.beam_size = get<int>(vm, "beam-size");
  o.nbest = get<int>(vm, "nbest");
  o.length_penalty = get<float>(vm, "length-penalty");
  o.max_length_offset = get<int64_t>(vm, "max-length-offset");
  o.temperature = get<float>(vm, "temperature");
  o.top_k = get<int64_t>(vm, "top-k");
  o.seed = get<uint64_t>(vm, "seed");
  o.precision = precision_from(vm);
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError(what);
  };
  need(o.beam_size >= 1, "--beam-size must be at least 1, got " + std::to_string(o.beam_size));
  need(o.nbest >= 1, "--nbest must be at least 1, got " + std::to_string(o.nbest));
  need(o.nbest == 1 || o.method == seq2seq::SearchMethod::beam,
       "--nbest needs beam search (not --greedy or --sample)");
  need(o.nbest <= o.beam_size, "--nbest " + std::to_string(o.nbest) + " is more than --beam-size " +
                                   std::to_string(o.beam_size));
  need(o.length_penalty >= 0 && std::isfinite(o.length_penalty),
       "--length-penalty must be finite and >= 0");
  need(o.max_length_offset >= 0, "--max-length-offset must be >= 0");
  need(o.temperature >= 0 && std::isfinite(o.temperature), "--temperature must be >= 0");
  need(o.top_k >= 0, "--top-k must be >= 0 (0: all tokens)");
  return o;
}

int run_translate(const po::variables_map& vm) {
  const std::string model_path = get<std::string>(vm, "model");
  const std::string input = get<std::string>(vm, "input"), output = get<std::string>(vm, "output");
  const int64_t batch_size = get<int64_t>(vm, "batch-size");
  if (batch_size < 1) throw UsageError("--batch-size must be at least 1");
  const seq2seq::SearchOptions search = search_options(vm);
  const bool nbest = !vm["nbest"].defaulted();

  seq2seq::LoadedTranslation loaded = seq2seq::load_translation(model_path);
  const datasets::Tokenizer tokenizer = [&] {
    try {
      return datasets::Tokenizer::from_bytes(loaded.meta.tokenizer);
    } catch (const Error& e) {
      throw Error(model_path + ": " + e.what());
    }
  }();
  const std::vector<std::string> lines = read_lines(input);
  const std::string input_name = input == "-" ? "standard input" : input;

  seq2seq::Translator translator(*loaded.model, tokenizer, search, batch_size);
  std::unique_ptr<Progress> progress;
  if (is_terminal(STDERR_FILENO) && !is_terminal(STDOUT_FILENO) && !lines.empty()) {
    ProgressOptions bar;
    bar.tty = true;
    bar.unit = "sentence";
    bar.rate_unit = "sent/s";
    progress =
        std::make_unique<Progress>(std::cerr, "translate", static_cast<int64_t>(lines.size()), bar);
  }
  Timer timer;
  const std::vector<seq2seq::Translation> results = translator.translate(lines, progress.get());
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
                << " pieces, more than the model's limit of " << translator.max_source_pieces()
                << "; translated the first " << translator.max_source_pieces() << std::endl;
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
  write_output(output, text.str());
  const int64_t searched = static_cast<int64_t>(lines.size()) - empty;
  std::fprintf(stderr,
               "vitk: translated %lld sentences (%lld empty, %lld truncated) in %.2f s: "
               "%.1f sentences/s, %s%s\n",
               static_cast<long long>(lines.size()), static_cast<long long>(empty),
               static_cast<long long>(truncated), seconds,
               seconds > 0 ? static_cast<double>(searched) / seconds : 0.0,
               seq2seq::search_method_name(search.method),
               search.method == seq2seq::SearchMethod::beam
                   ? (" " + std::to_string(search.beam_size)).c_str()
                   : "");
  return kExitOk;
}

int run_average(const po::variables_map& vm) {
  const auto inputs = get<std::vector<std::string>>(vm, "checkpoints");
  const std::string out = get<std::string>(vm, "out");
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
      "vitk translate --model m.h5 --input test.es --precision bf16";
  t.add_options = [](po::options_description& o) {
    o.add_options()  //
        ("model", po::value<std::string>()->required()->value_name("CKPT"),
         "a translation checkpoint (it holds its tokenizer)")  //
        ("input", po::value<std::string>()->default_value("-")->value_name("FILE"),
         "sentences, one a line ('-': standard input); an empty line gives an empty line")  //
        ("output", po::value<std::string>()->default_value("-")->value_name("FILE"),
         "translations, one a line ('-': standard output); a file is written whole or not at "
         "all")                                                                                  //
        ("beam-size", po::value<int>()->default_value(4)->value_name("K"), "beam search width")  //
        ("length-penalty", po::value<float>()->default_value(0.6f, "0.6")->value_name("ALPHA"),
         "GNMT length penalty ((5 + n) / 6)^alpha; 0: raw log-probability")    //
        ("greedy", po::bool_switch(), "greedy search instead of beam search")  //
        ("nbest", po::value<int>()->default_value(1)->value_name("N"),
         "print the N best hypotheses of beam search as 'i ||| hypothesis ||| score' lines")  //
        ("sample", po::bool_switch(), "draw each token from the model's distribution")        //
        ("temperature", po::value<float>()->default_value(1.f, "1")->value_name("T"),
         "--sample: p ~ exp(logit / T); 0 is greedy")  //
        ("top-k", po::value<int64_t>()->default_value(0)->value_name("K"),
         "--sample: draw among the K most likely tokens only (0: all)")                       //
        ("seed", po::value<uint64_t>()->default_value(0)->value_name("S"), "--sample: seed")  //
        ("max-length-offset", po::value<int64_t>()->default_value(50)->value_name("N"),
         "at most source length + N target tokens (and never more than the model's limit)")  //
        ("batch-size", po::value<int64_t>()->default_value(32)->value_name("N"),
         "sentences per search (sorted by length inside, output in input order)");
    add_precision_option(o);
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
