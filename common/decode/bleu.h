#pragma once
// Corpus BLEU exactly as sacreBLEU 2.x computes it by default (`sacrebleu -tok 13a`): the mteval
// v13a tokenizer, n-grams up to 4, clipped counts against the maximum count over the references,
// the reference length closest to each hypothesis (the shorter on a tie), the brevity penalty and
// the 'exp' smoothing of mteval (the k-th order with no match counts 1/2^k matches), no effective
// order, case-sensitive. Same statistics, same rounding in the printed line.
#include <cstdint>
#include <string>
#include <vector>

namespace vitk::decode {

// The sacreBLEU release whose default BLEU this reproduces (its behaviour is unchanged across the
// 2.x series); printed in the signature.
constexpr const char* kSacreBleuVersion = "2.4.0";

struct BleuResult {
  double score = 0;           // 0..100
  double precisions[4] = {};  // percent, after smoothing
  double bp = 0, ratio = 0;   // brevity penalty; hyp_len / ref_len (0 when ref_len is 0)
  int64_t hyp_len = 0, ref_len = 0;
  int64_t counts[4] = {}, totals[4] = {};  // matched and hypothesis n-grams per order
};

// hyps[i] is scored against refs[k][i] for every reference set k. Empty references of a
// segment are skipped (sacreBLEU's variable number of references); a segment whose references
// are all empty, or reference sets of another length than hyps, throw vitk::Error.
BleuResult corpus_bleu(const std::vector<std::string>& hyps,
                       const std::vector<std::vector<std::string>>& refs);

// The score from its sufficient statistics (sacreBLEU's compute_bleu with smooth_method='exp').
BleuResult bleu_from_statistics(const int64_t counts[4], const int64_t totals[4], int64_t hyp_len,
                                int64_t ref_len);

// mteval-v13a tokenization as sacreBLEU's tokenizer_13a does it: removes "<skipped>", joins
// "-\n" line breaks, decodes &quot; &amp; &lt; &gt;, splits off ASCII punctuation and symbols,
// periods and commas unless next to a digit, and a dash after a digit; single spaces.
std::string tokenize_13a(const std::string& line);

// "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0"; nrefs < 0 prints "var".
std::string bleu_signature(int nrefs);

// "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)"
std::string format_bleu(const BleuResult& result);

}  // namespace vitk::decode
