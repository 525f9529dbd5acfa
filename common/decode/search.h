#pragma once
// Decoding one token at a time from an encoder's output, for any model that can take one step of
// its decoder (StepModel): greedy search, beam search with the GNMT length penalty and n-best
// lists, and sampling with a temperature and an optional top-k, all batched over inputs and
// stopping when every input is done. The translation model (common/seq2seq) and the captioning
// model (vit/) decode with it.
//
// Scores. A hypothesis y of |Y| tokens (its EOS counted when it has one) has
//   log_prob = Σ_t log p(y_t | y_<t, x)      and      score = log_prob / lp(|Y|),
//   lp(n) = ((5 + n) / 6)^α                  (Wu et al. 2016, GNMT; α = 0 gives the raw sum).
// Beam search ranks finished hypotheses by score; the beam itself is pruned by log_prob, as in
// fairseq and CTranslate2.
//
// Beam search and greedy search. A beam can lose the greedy path: its prefix is pruned when K
// other prefixes are more likely, and they may end worse. With keep_greedy (the default), each
// input decodes one more row that follows the arg-max, and its hypothesis competes with the
// beam's finished ones, so that the best hypothesis returned never scores below greedy search's;
// the cost is one row in K + 1.
#include <cstdint>
#include <string>
#include <vector>

#include "common/nn/nn.h"
#include "common/vocabulary.h"

namespace vitk::decode {

// A model that decodes one token at a time from a memory (the encoder's output).
class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual int64_t vocab_size() const = 0;
  // The most target positions (BOS included) it has positions for.
  virtual int64_t max_length() const = 0;
  // memory [B, Tm, d], memory_lengths i32 [B]: prepares state for up to `capacity` positions.
  // The memory is valid during start() only (the arena it may live in is reset before the
  // steps): nn::Decoder::start projects it into caches of its own. The Searcher passes a copy of
  // the lengths that the state may keep.
  virtual void start(nn::Context& ctx, const Tensor& memory, const Tensor& memory_lengths,
                     int64_t capacity, nn::Decoder::State& state) = 0;
  // tokens i32 [B] -> next-token logits [B, V] (in ctx.arena), at position state.position().
  virtual Tensor step(nn::Context& ctx, const Tensor& tokens, nn::Decoder::State& state) = 0;
};

enum class SearchMethod { greedy, beam, sample };
SearchMethod parse_search_method(const std::string& name);  // "greedy" | "beam" | "sample"
const char* search_method_name(SearchMethod method);

struct SearchOptions {
  SearchMethod method = SearchMethod::beam;
  int beam_size = 4;            // K (beam)
  int nbest = 1;                // hypotheses returned per input: ≤ K for beam, 1 otherwise
  float length_penalty = 0.6f;  // α of lp(n); 0: rank by the sum of log-probabilities
  // At most memory length + max_length_offset target tokens (EOS included), never more than
  // max_length when that is set, nor more than the model's max_length. For translation the
  // memory length is the source length.
  int64_t max_length_offset = 50;
  int64_t max_length = 0;
  bool keep_greedy = true;  // beam: the greedy row described above
  float temperature = 1.f;  // sample: p ∝ exp(logit / T); T = 0 is greedy search
  int64_t top_k = 0;        // sample: draw among the k most likely tokens only (0: all)
  uint64_t seed = 0;        // sample
  int32_t bos = Vocabulary::kBos, eos = Vocabulary::kEos;
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

// The most target tokens (EOS included) a search allows an input whose memory has memory_length
// positions, for a model with positions for model_max_length: memory_length +
// max_length_offset, at most options.max_length (when set) and model_max_length, at least 1.
int64_t target_limit(int64_t memory_length, const SearchOptions& options, int64_t model_max_length);

// The sizes of a model's decoder that the memory of its search depends on.
struct SearchSizes {
  int64_t vocab_size = 0, decoder_layers = 0, d_model = 0, d_ff = 0;
  int64_t memory_length = 1;  // Tm: positions of an input's memory (the encoder's output)
  int64_t target_length = 1;  // positions the self-attention caches are made for (the capacity)
};

// The least memory a search with these options takes for `inputs` inputs searched at once: a
// lower bound that saturates instead of overflowing. Each row of the search (K + 1 per input
// for beam search, 1 otherwise) holds its logits and log-probabilities, its self-attention keys
// and values for target_length positions and the copies reordering them, its cross-attention
// keys and values for memory_length positions, and one step's activations, over decoder_layers
// layers; beam search adds each input's prefixes and one input's candidates (K times min(2K,
// V)). The commands weigh it against the machine's memory (memory_shortfall) before they search.
uint64_t search_bytes(const SearchSizes& sizes, const SearchOptions& options, int64_t inputs = 1);

// The largest of beam_size / 2, beam_size / 4, ... down to 1 at which a beam search of `inputs`
// inputs fits the machine (memory_shortfall), or 0 when none does; the n-best list is cut to
// the beam.
int fitting_beam_size(const SearchSizes& sizes, const SearchOptions& options, int64_t inputs = 1);

// The settings a model decodes with: inference on `arena`, the products at `precision`, weights
// read packed (the model does not change during a search) and, at int8, in one copy only.
nn::Context inference_context(Arena& arena, ops::Precision precision);

// logits, or vitk::Error when one is NaN or infinite (weights that overflow): a search over them
// would rank a NaN as it pleases and print a result with a score of nan.
const Tensor& finite_logits(const Tensor& logits);

// log Σ_v exp(row[v]) over row [V], as the search normalises its log-probabilities (forced
// decoding uses it to score exactly as the search does).
double log_sum_exp(const float* row, int64_t V);

// log Σ_v exp(row[v]) and the arg-max (first index on ties, as torch.argmax) of one row of V
// logits: what the searches score tokens by (row[token] - lse), for any other scorer to agree.
struct RowStats {
  float max = 0;
  int32_t argmax = 0;
  double lse = 0;
};
RowStats row_stats(const float* row, int64_t V);

// Runs searches batch after batch with one set of buffers (activations, caches) and one random
// stream. The model must stay alive and unchanged while the searcher is used.
class Searcher {
 public:
  Searcher(StepModel& model, const SearchOptions& options);  // validates the options
  // A context for encoding the next batch: the search's settings (inference_context) on the
  // searcher's own arena, reset. A memory encoded with it may be passed to search(), which does
  // not reset the arena before the model's start() has projected the memory; so the encoder's
  // activations and the steps share one arena, as when the search encoded the batch itself.
  nn::Context encode_context();
  // memory [B, Tm, d] (the encoder's output, padded), memory_lengths i32 [B] -> per input, its
  // n-best hypotheses, best first. The memory may live anywhere (encode_context() or a tensor
  // of the caller's) and is read only until the search's first step. Sampling draws input b's
  // step t from (seed, a counter reserved per call), so an input's sample does not depend on
  // when the others finish.
  std::vector<std::vector<Hypothesis>> search(const Tensor& memory, const Tensor& memory_lengths);
  const SearchOptions& options() const { return options_; }

 private:
  struct Prepared {
    int64_t batch = 0, capacity = 0;
    std::vector<int64_t> limit;  // most target tokens (EOS included) per input
  };
  Prepared prepare(const Tensor& memory, const Tensor& memory_lengths);
  std::vector<std::vector<Hypothesis>> one_row(const Prepared& p);
  std::vector<std::vector<Hypothesis>> beam(const Prepared& p);

  StepModel& model_;
  SearchOptions options_;
  Arena arena_;
  nn::Decoder::State state_;
  ops::Rng rng_;
};

}  // namespace vitk::decode
