#pragma once
// The translation model's side of decoding. The search itself (greedy, beam, sampling, n-best,
// length penalty) is the core's, common/decode/search.h, over the Transformer as a
// decode::StepModel; here: a search from source ids (encode, then search), the memory estimate
// of a search from the model's configuration, and forced decoding (the score of given targets).
#include <cstdint>
#include <utility>
#include <vector>

#include "common/decode/search.h"
#include "common/seq2seq/model.h"

namespace vitk::seq2seq {

// Encodes source i32 [B, Ts] (padded), source_lengths i32 [B] on the searcher's arena and
// searches from that memory: per sentence, its n-best hypotheses, best first. `searcher` must
// have been made with `model`.
std::vector<std::vector<decode::Hypothesis>> search_source(Transformer& model,
                                                           decode::Searcher& searcher,
                                                           const Tensor& source,
                                                           const Tensor& source_lengths);

// The sizes of this model's search of one sentence of the least length (one token, its EOS):
// what any sentence's search needs at least.
decode::SearchSizes search_sizes(const TransformerConfig& config,
                                 const decode::SearchOptions& options);
// decode::search_bytes of one such sentence.
uint64_t search_bytes(const TransformerConfig& config, const decode::SearchOptions& options);

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
