// Translation's side of decoding: search from source ids, the memory estimate, forced decoding.
#include "common/seq2seq/search.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace vitk::seq2seq {

std::vector<std::vector<decode::Hypothesis>> search_source(Transformer& model,
                                                           decode::Searcher& searcher,
                                                           const Tensor& source,
                                                           const Tensor& source_lengths) {
  nn::Context ctx = searcher.encode_context();
  // The encoder checks the shapes; the memory stays in the searcher's arena until the decoder's
  // start() has projected it.
  const Tensor memory = model.encode(ctx, source, source_lengths);  // [B, Ts, d]
  return searcher.search(memory, source_lengths);
}

decode::SearchSizes search_sizes(const TransformerConfig& config,
                                 const decode::SearchOptions& options) {
  decode::SearchSizes z;
  z.vocab_size = config.vocab_size;
  z.decoder_layers = config.decoder_layers;
  z.d_model = config.d_model;
  z.d_ff = config.d_ff;
  z.memory_length = 1;  // the shortest sentence: its EOS
  z.target_length = decode::target_limit(1, options, config.max_length);
  return z;
}

uint64_t search_bytes(const TransformerConfig& config, const decode::SearchOptions& options) {
  return decode::search_bytes(search_sizes(config, options), options);
}

std::vector<std::pair<double, double>> score_targets(
    Transformer& model, const Tensor& source, const Tensor& source_lengths,
    const std::vector<std::vector<int32_t>>& targets, float length_penalty_alpha, bool append_eos,
    ops::Precision precision) {
  if (source.rank() != 2 || static_cast<int64_t>(targets.size()) != source.dim(0))
    throw Error("score_targets: " + std::to_string(targets.size()) + " targets for source " +
                shape_str(source.shape()));
  const int64_t B = source.dim(0), V = model.config().vocab_size;
  int64_t Tt = 1;
  for (const auto& t : targets) Tt = std::max<int64_t>(Tt, static_cast<int64_t>(t.size()) + 1);
  Tensor target_in({B, Tt}, DType::i32), target_lengths({B}, DType::i32);  // pad = 0
  for (int64_t b = 0; b < B; ++b) {
    const auto& t = targets[static_cast<size_t>(b)];
    target_in.i32()[b * Tt] = kBosId;
    for (size_t j = 0; j < t.size(); ++j)
      target_in.i32()[b * Tt + 1 + static_cast<int64_t>(j)] = t[j];
    target_lengths.i32()[b] = static_cast<int32_t>(t.size() + 1);
  }
  Arena arena;
  nn::Context ctx = decode::inference_context(arena, precision);
  const Tensor logits =
      decode::finite_logits(model.forward(ctx, source, source_lengths, target_in, target_lengths));
  std::vector<std::pair<double, double>> out;
  for (int64_t b = 0; b < B; ++b) {
    const auto& t = targets[static_cast<size_t>(b)];
    double sum = 0;
    const size_t scored = t.size() + (append_eos ? 1 : 0);
    for (size_t j = 0; j < scored; ++j) {
      const float* row = logits.f32() + (b * Tt + static_cast<int64_t>(j)) * V;
      const int32_t next = j < t.size() ? t[j] : kEosId;
      sum += static_cast<double>(row[next]) - decode::log_sum_exp(row, V);
    }
    out.push_back(
        {sum, sum / decode::length_penalty(static_cast<int64_t>(scored), length_penalty_alpha)});
  }
  return out;
}

}  // namespace vitk::seq2seq
