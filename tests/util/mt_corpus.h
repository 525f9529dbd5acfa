#pragma once
// A made-up corpus for the translation command tests: sentences of 2 to 6 words drawn from 16
// made-up words, and the copy task (each sentence its own translation) as a TSV file.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace vitk::testing {

inline std::vector<std::string> sentences(int count, uint32_t seed) {
  static const std::vector<std::string> kWords = {"kalo", "mine", "suta", "ripo", "dena", "lomi",
                                                  "neka", "tari", "pode", "sumi", "kane", "lori",
                                                  "mepo", "tade", "nilo", "resa"};
  std::mt19937 gen(seed);
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    const int n = 2 + static_cast<int>(gen() % 5);
    std::string s;
    for (int k = 0; k < n; ++k) s += (k ? " " : "") + kWords[gen() % kWords.size()];
    out.push_back(s);
  }
  return out;
}

// The copy task as a TSV file.
inline void write_tsv(const std::filesystem::path& path, const std::vector<std::string>& s) {
  std::ofstream out(path);
  for (const auto& x : s) out << x << "\t" << x << "\n";
}

// A model that learns the copy task in a few hundred steps of a few milliseconds.
// clang-format off
inline const std::vector<std::string> kTinyMtModel = {
    "--model.d_model", "64", "--model.heads", "4", "--model.d_ff", "128", "--model.layers", "2",
    "--model.decoder_layers", "2", "--model.dropout", "0", "--model.max_length", "24",
    "--vocab-size", "40", "--max-tokens", "480", "--warmup-steps", "100", "--threads", "1"};
// clang-format on

}  // namespace vitk::testing
