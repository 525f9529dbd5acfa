#pragma once
// Decoding with the translation model on the decoder's cached keys and values: greedy search,
// beam search with the GNMT length penalty and n-best lists, and sampling with a temperature and
// an optional top-k, all batched over sentences and stopping when every sentence is done.
//
// Scores. A hypothesis y of |Y| tokens (its EOS counted when it has one) has
//   log_prob = Σ_t log p(y_t | y_<t, x)      and      score = log_prob / lp(|Y|),
//   lp(n) = ((5 + n) / 6)^α                  (Wu et al. 2016, GNMT; α = 0 gives the raw sum).
// Beam search ranks finished hypotheses by score; the beam itself is pruned by log_prob, as in
// fairseq and CTranslate2.
//
// Beam search and greedy search. A beam can lose the greedy path: its prefix is pruned when K
// other prefixes are more likely, and they may end worse. With keep_greedy (the default), each
// sentence decodes one more row that follows the arg-max, and its hypothesis competes with the
// beam's finished ones, so that the best hypothesis returned never scores below greedy search's;
// the cost is one row in K + 1.
#include <cstdint>
#include <string>
#include <vector>

#include "common/seq2seq/model.h"

namespace vitk::seq2seq {

enum class SearchMethod { greedy, beam, sample };
SearchMethod parse_search_method(const std::string& name);  // "greedy" | "beam" | "sample"
const char* search_method_name(SearchMethod method);

struct SearchOptions {
  SearchMethod method = SearchMethod::beam;
  int beam_size = 4;            // K (beam)
  int nbest = 1;                // hypotheses returned per sentence: ≤ K for beam, 1 otherwise
  float length_penalty = 0.6f;  // α of lp(n); 0: rank by the sum of log-probabilities
  // At most source length + max_length_offset target tokens (EOS included), never more than
  // max_length when that is set, nor more than the model's max_length.
  int64_t max_length_offset = 50;
  int64_t max_length = 0;
  bool keep_greedy = true;  // beam: the greedy row described above
  float temperature = 1.f;  // sample: p ∝ exp(logit / T); T = 0 is greedy search
  int64_t top_k = 0;        // sample: draw among the k most likely tokens only (0: all)
  uint64_t seed = 0;        // sample
  int32_t bos = kBosId, eos = kEosId;
  // Of the model's matrix products; f32 also reads weights in oneDNN's blocked layout where that
  // is faster (packed once: the model must not change while a Searcher uses it).
  ops::Precision precision = ops::Precision::f32;

  void validate(int64_t vocab_size) const;  // vitk::UsageError naming the option at fault
};

struct Hypothesis {
  std::vector<int32_t> tokens;  // without BOS and EOS
  double log_prob = 0;          // sum over the tokens and the EOS
  double score = 0;             // log_prob / lp(|Y|)
  bool finished = true;         // false: stopped at the length limit without an EOS
};

// ((5 + length) / 6)^α
double length_penalty(int64_t length, float alpha);

// The least memory a search with these options takes for one sentence (a lower bound: each row
// of the search, K + 1 for beam search and 1 otherwise, holds its logits and log-probabilities
// and the decoder's caches for one position); saturates instead of overflowing. `vitk translate`
// weighs it against the machine's before it translates.
uint64_t search_bytes(const TransformerConfig& config, const SearchOptions& options);

// Runs searches batch after batch with one set of buffers (activations, caches) and one random
// stream. The model must stay alive and unchanged while the searcher is used.
class Searcher {
 public:
  Searcher(Transformer& model, const SearchOptions& options);  // validates the options
  // source i32 [B, Ts] (padded), source_lengths i32 [B] -> per sentence, its n-best hypotheses,
  // best first. Sampling draws sentence b's step t from (seed, a counter reserved per call), so a
  // sentence's sample does not depend on when the others finish.
  std::vector<std::vector<Hypothesis>> search(const Tensor& source, const Tensor& source_lengths);
  const SearchOptions& options() const { return options_; }

 private:
  std::vector<std::vector<Hypothesis>> one_row(const Tensor& source, const Tensor& source_lengths);
  std::vector<std::vector<Hypothesis>> beam(const Tensor& source, const Tensor& source_lengths);

  Transformer& model_;
  SearchOptions options_;
  Arena arena_;
  nn::Decoder::State state_;
  ops::Rng rng_;
};

// Forced decoding: log p(target + EOS | source) of each sentence (targets without BOS and EOS),
// e.g. to rescore hypotheses; with append_eos = false, log p(target | source) (a hypothesis
// stopped by the length limit). The second value of each pair is the score log_prob / lp(|Y|)
// with |Y| = |target| (+ 1 for the EOS) and α = length_penalty_alpha. Uses the fixed ids kBosId
// and kEosId.
std::vector<std::pair<double, double>> score_targets(
    Transformer& model, const Tensor& source, const Tensor& source_lengths,
    const std::vector<std::vector<int32_t>>& targets, float length_penalty_alpha = 0.f,
    bool append_eos = true, ops::Precision precision = ops::Precision::f32);

}  // namespace vitk::seq2seq
