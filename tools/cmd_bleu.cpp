// `vitk bleu --ref REF [--ref REF2 ...] HYP`: corpus BLEU as sacreBLEU prints it. Wiring only;
// the metric lives in common/decode/bleu.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "common/decode/bleu.h"
#include "common/error.h"
#include "common/io/input_file.h"
#include "tools/cli.h"

namespace vitk::tools {
namespace {

// One segment per line; the line break (\n or \r\n) is not part of the segment.
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    io::require_regular_file(path, "a text file");
    file.open(path, std::ios::binary);
    if (!file) throw Error(path + ": cannot open for reading");
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

int run_bleu(const po::variables_map& vm) {
  const std::string hyp_path = vm["hypothesis"].as<std::string>();
  const auto ref_paths = vm["ref"].as<std::vector<std::string>>();
  const std::string hyp_name = hyp_path == "-" ? "standard input" : hyp_path;
  const auto hyps = read_lines(hyp_path);
  std::vector<std::vector<std::string>> refs;
  for (const auto& path : ref_paths) {
    refs.push_back(read_lines(path));
    if (refs.back().size() != hyps.size()) {
      throw Error("the hypotheses and a reference differ in length: " + hyp_name + " has " +
                  std::to_string(hyps.size()) + " lines, " + path + " has " +
                  std::to_string(refs.back().size()));
    }
  }
  // sacreBLEU skips empty references of a segment and then reports nrefs:var.
  bool variable = false;
  for (size_t i = 0; i < hyps.size(); ++i) {
    size_t present = 0;
    for (const auto& r : refs) present += !r[i].empty();
    if (present == 0) {
      throw Error("line " + std::to_string(i + 1) + " is empty in every reference (" +
                  ref_paths.front() + (ref_paths.size() > 1 ? ", ..." : "") + ")");
    }
    variable |= present != refs.size();
  }
  const auto result = decode::corpus_bleu(hyps, refs);
  if (vm["score-only"].as<bool>()) {
    std::printf("%.2f\n", result.score);
    return kExitOk;
  }
  std::cout << decode::format_bleu(result) << "\n"
            << decode::bleu_signature(variable ? -1 : static_cast<int>(refs.size())) << "\n";
  return kExitOk;
}

}  // namespace

void register_bleu_commands(Registry& registry) {
  Subcommand c;
  c.name = "bleu";
  c.summary = "corpus BLEU of a translation, as sacreBLEU computes it by default";
  c.example =
      "vitk bleu --ref data/bible/test.en runs/mt/test.hyp\n"
      "vitk translate ... | vitk bleu --ref ref1.en --ref ref2.en -       # two references\n"
      "vitk bleu --ref data/bible/test.en runs/mt/test.hyp --score-only";
  c.usage = "--ref REF [--ref REF2 ...] HYP [options]";
  c.add_options = [](po::options_description& o) {
    o.add_options()("ref", po::value<std::vector<std::string>>()->required()->value_name("FILE"),
                    "a reference translation, one segment per line (repeat for several)")(
        "hypothesis", po::value<std::string>()->required()->value_name("HYP"),
        "the translation to score, one segment per line; - reads standard input")(
        "score-only", switch_value(), "print only the score");
  };
  c.add_positional = [](po::positional_options_description& p) { p.add("hypothesis", 1); };
  c.run = run_bleu;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
