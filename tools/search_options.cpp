// The decoding options shared by the commands that search.
#include "tools/search_options.h"

#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace vitk::tools {

void add_search_options(po::options_description& o) {
  o.add_options()                                                                              //
      ("beam-size", po::value<int>()->default_value(4)->value_name("K"), "beam search width")  //
      ("length-penalty", po::value<float>()->default_value(0.6f, "0.6")->value_name("ALPHA"),
       "GNMT length penalty ((5 + n) / 6)^alpha; 0: raw log-probability")  //
      ("greedy", switch_value(), "greedy search instead of beam search")   //
      ("nbest", value_in(1, 1024)->default_value(1)->value_name("N"),
       "the N best hypotheses of beam search")                                     //
      ("sample", switch_value(), "draw each token from the model's distribution")  //
      ("temperature", po::value<float>()->default_value(1.f, "1")->value_name("T"),
       "--sample: p ~ exp(logit / T); 0 is greedy")  //
      ("top-k", value_in<int64_t>(0, kMaxVocabulary)->default_value(0)->value_name("K"),
       "--sample: draw among the K most likely tokens only (0: all)")  //
      ("seed", po::value<uint64_t>()->default_value(0)->value_name("S"), "--sample: seed");
  add_precision_option(o);
}

SearchOptions search_options(const po::variables_map& vm) {
  const bool greedy = vm["greedy"].as<bool>(), sample = vm["sample"].as<bool>();
  if (greedy && sample) throw UsageError("--greedy and --sample exclude each other");
  for (const char* name : {"temperature", "top-k", "seed"})
    if (!vm[name].defaulted() && !sample)
      throw UsageError(std::string("--") + name + " needs --sample");
  SearchOptions o;
  o.method = sample   ? SearchOptions::Method::sample
             : greedy ? SearchOptions::Method::greedy
                      : SearchOptions::Method::beam;
  o.beam_size = vm["beam-size"].as<int>();
  o.nbest = vm["nbest"].as<int>();
  o.length_penalty = vm["length-penalty"].as<float>();
  o.temperature = vm["temperature"].as<float>();
  o.top_k = vm["top-k"].as<int64_t>();
  o.seed = vm["seed"].as<uint64_t>();
  precision_from(vm);  // a bad value or bf16 on this CPU, before anything is read
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError(what);
  };
  need(o.beam_size >= 1, "--beam-size must be at least 1, got " + std::to_string(o.beam_size));
  need(o.nbest == 1 || o.method == SearchOptions::Method::beam,
       "--nbest needs beam search (not --greedy or --sample)");
  need(o.nbest <= o.beam_size, "--nbest " + std::to_string(o.nbest) + " is more than --beam-size " +
                                   std::to_string(o.beam_size));
  need(o.length_penalty >= 0 && std::isfinite(o.length_penalty),
       "--length-penalty must be finite and >= 0");
  need(o.temperature >= 0 && std::isfinite(o.temperature), "--temperature must be >= 0");
  return o;
}

std::string precision_option(const po::variables_map& vm) {
  return vm["precision"].defaulted() ? "" : vm["precision"].as<std::string>();
}

int attention_index(const po::variables_map& vm, const char* option, const char* word) {
  const std::string text = vm[option].as<std::string>();
  if (text == word) return -1;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0 || v > 100000)
    throw UsageError(std::string("--") + option + ": expected '" + word +
                     "' or a number from 0, got '" + text + "'");
  return static_cast<int>(v);
}

}  // namespace vitk::tools
