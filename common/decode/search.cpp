// Greedy search, sampling and beam search over a StepModel's incremental steps.
//
// Rows. Greedy search and sampling decode one row per input; beam search K rows per input (plus
// the greedy row, see search.h), in blocks. After each step the decoding state is gathered to the
// rows that continue: within a block only the self-attention caches move (every row of a block
// has the same memory); when an input is done its block is dropped, memory too, so that finished
// inputs cost nothing more.
#include "common/decode/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/error.h"
#include "common/finite.h"
#include "common/memory.h"
#include "common/ops/vmath.h"

namespace vitk::decode {

SearchMethod parse_search_method(const std::string& name) {
  if (name == "greedy") return SearchMethod::greedy;
  if (name == "beam") return SearchMethod::beam;
  if (name == "sample") return SearchMethod::sample;
  throw UsageError("unknown search method '" + name + "' (expected greedy, beam or sample)");
}

const char* search_method_name(SearchMethod method) {
  switch (method) {
    case SearchMethod::greedy:
      return "greedy";
    case SearchMethod::beam:
      return "beam";
    case SearchMethod::sample:
      return "sample";
  }
  return "?";
}

int64_t target_limit(int64_t memory_length, const SearchOptions& o, int64_t model_max_length) {
  int64_t limit = memory_length + o.max_length_offset;
  if (o.max_length > 0) limit = std::min(limit, o.max_length);
  return std::max<int64_t>(1, std::min(limit, model_max_length));
}

uint64_t search_bytes(const SearchSizes& z, const SearchOptions& o, int64_t inputs) {
  const bool beam = o.method == SearchMethod::beam;
  const int64_t K = o.beam_size, rows_per_input = beam ? K + (o.keep_greedy ? 1 : 0) : 1;
  const int64_t L = z.decoder_layers, d = z.d_model;
  // Floats per row: logits and log-probabilities; self-attention keys and values and the spare
  // buffers reorder() gathers them into; cross-attention keys and values; a step's activations
  // (q, k, v, context, residuals and norms, the feed-forward's hidden layer) in every layer.
  uint64_t per_row = sat_product({2, z.vocab_size});
  per_row = sat_add(per_row, sat_product({4, L, z.target_length, d}));
  per_row = sat_add(per_row, sat_product({2, L, z.memory_length, d}));
  per_row = sat_add(
      per_row, sat_mul(sat_product({L}), sat_add(sat_product({8, d}), sat_product({2, z.d_ff}))));
  uint64_t bytes = sat_mul(4, sat_mul(sat_product({inputs, rows_per_input}), per_row));
  if (beam) {
    // Each input's K prefixes and their next copies (i32 tokens), and the candidates of one
    // input's step: (score, origin, token), 16 bytes each.
    bytes = sat_add(bytes, sat_mul(8, sat_product({inputs, K, z.target_length})));
    bytes = sat_add(bytes, sat_mul(16, sat_product({K, std::min<int64_t>(2 * K, z.vocab_size)})));
  }
  return bytes;
}

int fitting_beam_size(const SearchSizes& sizes, const SearchOptions& options, int64_t inputs) {
  SearchOptions o = options;
  for (o.beam_size = options.beam_size / 2; o.beam_size >= 1; o.beam_size /= 2) {
    o.nbest = std::min(o.nbest, o.beam_size);
    if (memory_shortfall(search_bytes(sizes, o, inputs)).empty()) return o.beam_size;
  }
  return 0;
}

void SearchOptions::validate(int64_t vocab_size) const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError(what);
  };
  need(beam_size >= 1, "beam size must be at least 1, got " + std::to_string(beam_size));
  need(nbest >= 1, "n-best must be at least 1, got " + std::to_string(nbest));
  if (method == SearchMethod::beam)
    need(nbest <= beam_size, "n-best " + std::to_string(nbest) + " is more than the beam size " +
                                 std::to_string(beam_size));
  else
    need(nbest == 1,
         std::string("n-best lists need beam search, not ") + search_method_name(method));
  need(length_penalty >= 0 && std::isfinite(length_penalty),
       "length penalty must be finite and >= 0");
  need(max_length_offset >= 0, "max length offset must be >= 0");
  need(max_length >= 0, "max length must be >= 0");
  need(temperature >= 0 && std::isfinite(temperature), "temperature must be finite and >= 0");
  need(top_k >= 0, "top-k must be >= 0");
  need(bos >= 0 && bos < vocab_size && eos >= 0 && eos < vocab_size,
       "BOS and EOS ids must be inside the vocabulary of " + std::to_string(vocab_size));
}

double length_penalty(int64_t length, float alpha) {
  if (alpha == 0.f) return 1.0;
  return std::pow((5.0 + static_cast<double>(length)) / 6.0, static_cast<double>(alpha));
}

const Tensor& finite_logits(const Tensor& logits) {
  const int64_t bad = first_non_finite(logits.f32(), logits.numel());
  if (bad >= 0)
    throw Error("the model's logits are not finite (" + std::to_string(logits.f32()[bad]) +
                "): its weights overflow on this input, so there is no result to give");
  return logits;
}

nn::Context inference_context(Arena& arena, ops::Precision precision) {
  nn::Context ctx{false, &arena, nullptr};
  nn::set_inference_precision(ctx, precision);
  // int8 comes only from commands that run nothing else with the model (training refuses it).
  ctx.one_copy_of_weights = precision == ops::Precision::int8;
  ctx.packed_weights = true;
  return ctx;
}

RowStats row_stats(const float* row, int64_t V) {
  RowStats s;
  s.max = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < V; ++v)
    if (row[v] > s.max) s.max = row[v], s.argmax = static_cast<int32_t>(v);
  const float mx = s.max;
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t v = 0; v < V; ++v) sum += ops::detail::fast_exp(row[v] - mx);
  s.lse = static_cast<double>(mx) + std::log(static_cast<double>(sum));
  return s;
}

namespace {

using Scored = std::pair<float, int32_t>;  // (logit, token)

// a ranks before b: higher value, then lower token id.
bool better(const Scored& a, const Scored& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The n highest entries of row [V], best first.
void top_n(const float* row, int64_t V, int64_t n, std::vector<Scored>& out) {
  out.clear();
  n = std::min(n, V);
  for (int64_t v = 0; v < V; ++v) {
    const Scored c{row[v], static_cast<int32_t>(v)};
    if (std::isnan(c.first)) continue;
    if (static_cast<int64_t>(out.size()) < n) {
      out.push_back(c);
      std::push_heap(out.begin(), out.end(), better);  // the worst kept entry on top
    } else if (better(c, out.front())) {
      std::pop_heap(out.begin(), out.end(), better);
      out.back() = c;
      std::push_heap(out.begin(), out.end(), better);
    }
  }
  std::sort(out.begin(), out.end(), better);
}

double unit_double(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

// Adds h unless the same hypothesis is there already (the greedy row and the beam can find the
// same one).
void add_finished(std::vector<Hypothesis>& list, Hypothesis h) {
  for (const Hypothesis& o : list)
    if (o.finished == h.finished && o.tokens == h.tokens) return;
  list.push_back(std::move(h));
}

std::vector<Hypothesis> best_first(std::vector<Hypothesis> list, int nbest) {
  std::stable_sort(list.begin(), list.end(),
                   [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  if (static_cast<int>(list.size()) > nbest) list.resize(static_cast<size_t>(nbest));
  return list;
}

}  // namespace

double log_sum_exp(const float* row, int64_t V) {
  return row_stats(row, V).lse;
}

Searcher::Searcher(StepModel& model, const SearchOptions& options)
    : model_(model), options_(options), rng_(options.seed) {
  options_.validate(model.vocab_size());
}

nn::Context Searcher::encode_context() {
  arena_.reset();
  return inference_context(arena_, options_.precision);
}

std::vector<std::vector<Hypothesis>> Searcher::search(const Tensor& memory,
                                                      const Tensor& memory_lengths) {
  const Prepared p = prepare(memory, memory_lengths);
  // Beam size 1 runs the beam code too: it then follows the arg-max, as greedy search does.
  if (options_.method == SearchMethod::beam) return beam(p);
  return one_row(p);
}

// Checks the memory and its lengths and starts the model for the longest allowed target. The
// arena is not reset here: the memory may live in it (encode_context()); the steps reset it.
Searcher::Prepared Searcher::prepare(const Tensor& memory, const Tensor& memory_lengths) {
  if (memory.dtype() != DType::f32 || memory.rank() != 3)
    throw Error("decode: memory " + shape_str(memory.shape()) + " should be f32 [B, Tm, d]");
  const int64_t B = memory.dim(0), Tm = memory.dim(1);
  if (memory_lengths.dtype() != DType::i32 || memory_lengths.rank() != 1 ||
      memory_lengths.dim(0) != B)
    throw Error("decode: memory_lengths " + shape_str(memory_lengths.shape()) + " should be i32 [" +
                std::to_string(B) + "]");
  for (int64_t b = 0; b < B; ++b)
    if (memory_lengths.i32()[b] < 0 || memory_lengths.i32()[b] > Tm)
      throw Error("decode: memory_lengths[" + std::to_string(b) +
                  "] = " + std::to_string(memory_lengths.i32()[b]) + " is outside [0, " +
                  std::to_string(Tm) + "]");
  const SearchOptions& o = options_;
  nn::Context ctx = inference_context(arena_, o.precision);
  Tensor lengths = memory_lengths.clone();  // the state keeps it beyond the caller's tensor
  Prepared p;
  p.batch = B;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t limit = target_limit(lengths.i32()[b], o, model_.max_length());
    p.limit.push_back(limit);
    p.capacity = std::max(p.capacity, limit);
  }
  model_.start(ctx, memory, lengths, p.capacity, state_);
  return p;
}

std::vector<std::vector<Hypothesis>> Searcher::one_row(const Prepared& p) {
  const SearchOptions& o = options_;
  const int64_t B = p.batch, V = model_.vocab_size();
  const bool sampling = o.method == SearchMethod::sample && o.temperature > 0.f;
  const uint64_t seed = rng_.seed();
  const uint64_t first = sampling ? rng_.reserve(static_cast<uint64_t>(B * p.capacity)) : 0;

  std::vector<Hypothesis> hyp(static_cast<size_t>(B));
  std::vector<int64_t> alive(static_cast<size_t>(B));  // input of each row
  for (int64_t b = 0; b < B; ++b) alive[static_cast<size_t>(b)] = b;
  std::vector<Scored> top;
  std::vector<double> weights;
  for (int64_t t = 0; !alive.empty(); ++t) {
    arena_.reset();
    nn::Context ctx = inference_context(arena_, o.precision);
    const int64_t n = static_cast<int64_t>(alive.size());
    Tensor tokens = arena_.alloc({n}, DType::i32);  // [n]
    for (int64_t i = 0; i < n; ++i) {
      const auto& toks = hyp[static_cast<size_t>(alive[static_cast<size_t>(i)])].tokens;
      tokens.i32()[i] = toks.empty() ? o.bos : toks.back();
    }
    const Tensor logits = finite_logits(model_.step(ctx, tokens, state_));  // [n, V]
    std::vector<int64_t> keep;                                              // rows that go on
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = alive[static_cast<size_t>(i)];
      Hypothesis& h = hyp[static_cast<size_t>(b)];
      const float* row = logits.f32() + i * V;
      const RowStats s = row_stats(row, V);
      int32_t token = s.argmax;
      if (sampling) {
        // p ∝ exp((logit − max) / T) over all tokens or the top k.
        top.clear();
        if (o.top_k > 0 && o.top_k < V) {
          top_n(row, V, o.top_k, top);
        } else {
          for (int64_t v = 0; v < V; ++v) top.push_back({row[v], static_cast<int32_t>(v)});
        }
        weights.resize(top.size());
        double total = 0;
        for (size_t j = 0; j < top.size(); ++j) {
          const double w = std::exp((static_cast<double>(top[j].first) - s.max) / o.temperature);
          weights[j] = std::isfinite(w) ? w : 0.0;
          total += weights[j];
        }
        const uint64_t counter = first + static_cast<uint64_t>(b * p.capacity + t);
        double u = unit_double(ops::Rng::hash(seed, counter)) * total;
        token = top.back().second;
        for (size_t j = 0; j < top.size(); ++j) {
          if (weights[j] > 0 && u < weights[j]) {
            token = top[j].second;
            break;
          }
          u -= weights[j];
        }
      }
      h.log_prob += static_cast<double>(row[token]) - s.lse;
      if (token == o.eos) {
        h.finished = true;
      } else {
        h.tokens.push_back(token);
        h.finished = false;
        if (static_cast<int64_t>(h.tokens.size()) < p.limit[static_cast<size_t>(b)]) {
          keep.push_back(i);
          continue;
        }
      }
      const int64_t length = static_cast<int64_t>(h.tokens.size()) + (h.finished ? 1 : 0);
      h.score = h.log_prob / length_penalty(length, o.length_penalty);
    }
    if (static_cast<int64_t>(keep.size()) < n && !keep.empty()) state_.reorder(keep);
    std::vector<int64_t> next;
    for (int64_t i : keep) next.push_back(alive[static_cast<size_t>(i)]);
    alive = std::move(next);
  }
  std::vector<std::vector<Hypothesis>> out;
  for (auto& h : hyp) out.push_back({std::move(h)});
  return out;
}

namespace {

// One input of a beam search.
struct BeamInput {
  std::vector<std::vector<int32_t>> beams;  // K prefixes (without BOS)
  std::vector<double> scores;               // their log-probabilities; −inf: an empty slot
  Hypothesis greedy;                        // the greedy row's hypothesis so far
  bool beam_done = false, greedy_done = false;
  int finished_by_beam = 0;
  std::vector<Hypothesis> finished;
};

struct Candidate {
  double score;
  int origin;  // beam row
  int32_t token;
};

// The rows of each input's block: K beams, then G greedy rows (0 or 1); R = K + G.
struct BeamRows {
  int K, G, R;
};

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// h with its score: log_prob over the length penalty of its length (its EOS counted).
Hypothesis scored(Hypothesis h, float alpha) {
  const int64_t length = static_cast<int64_t>(h.tokens.size()) + (h.finished ? 1 : 0);
  h.score = h.log_prob / length_penalty(length, alpha);
  return h;
}

// The B inputs before the first step, and `rows` of state_.reorder that gives each its block of
// R rows.
std::vector<BeamInput> start_inputs(int64_t B, const BeamRows& br, std::vector<int64_t>& rows) {
  std::vector<BeamInput> sent(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    BeamInput& s = sent[static_cast<size_t>(b)];
    s.beams.assign(static_cast<size_t>(br.K), {});
    s.scores.assign(static_cast<size_t>(br.K), kMinusInf);
    s.scores[0] = 0;  // one live prefix at first, so that the K beams do not start as copies
    s.greedy_done = br.G == 0;
    s.greedy.finished = false;
    for (int r = 0; r < br.R; ++r) rows.push_back(b);
  }
  return sent;
}

// tokens [n·R]: the last token of every row of the alive inputs' blocks (BOS before the first).
void step_tokens(const std::vector<BeamInput>& sent, const std::vector<int64_t>& alive,
                 const BeamRows& br, int32_t bos, Tensor& tokens) {
  const int K = br.K, R = br.R;
  const int64_t n = static_cast<int64_t>(alive.size());
  for (int64_t i = 0; i < n; ++i) {
    const BeamInput& s = sent[static_cast<size_t>(alive[static_cast<size_t>(i)])];
    for (int k = 0; k < K; ++k) {
      const auto& toks = s.beams[static_cast<size_t>(k)];
      // An empty slot or a finished beam still runs (its row is in the block); any id will do.
      tokens.i32()[i * R + k] = toks.empty() ? bos : toks.back();
    }
    if (br.G) tokens.i32()[i * R + K] = s.greedy.tokens.empty() ? bos : s.greedy.tokens.back();
  }
}

// What every input's part of step t shares: the options, the sizes and the buffers.
struct BeamStep {
  const SearchOptions& o;
  int64_t V;
  int K;
  int64_t t;
  std::vector<Scored>& top;
  std::vector<Candidate>& cands;
};

// step.cands: the 2K best continuations of input s's live beams (logits block [K, V]), best
// first. At most K of them end in EOS, so K others remain to fill the beam.
void best_continuations(const BeamInput& s, const float* block, const BeamStep& step) {
  const int64_t V = step.V;
  const int K = step.K;
  std::vector<Candidate>& cands = step.cands;
  cands.clear();
  for (int k = 0; k < K; ++k) {
    const double base = s.scores[static_cast<size_t>(k)];
    if (base == kMinusInf) continue;
    const float* row = block + k * V;
    const RowStats st = row_stats(row, V);
    top_n(row, V, 2 * K, step.top);
    for (const Scored& c : step.top)
      cands.push_back({base + static_cast<double>(c.first) - st.lse, k, c.second});
  }
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Candidate& a, const Candidate& c) { return a.score > c.score; });
}

// Moves input s's beam one step on from its beams' logits (block [K, V]), with at most `limit`
// tokens: the K best continuations, those that end in EOS among the finished; origin[k]
// becomes the row that beam k continues.
void extend_beam(BeamInput& s, const float* block, int64_t limit, std::vector<int>& origin,
                 const BeamStep& step) {
  const SearchOptions& o = step.o;
  const int K = step.K;
  best_continuations(s, block, step);
  const std::vector<Candidate>& cands = step.cands;
  std::vector<std::vector<int32_t>> beams;
  std::vector<double> scores;
  std::vector<int> from;
  for (size_t rank = 0; rank < cands.size() && static_cast<int>(beams.size()) < K; ++rank) {
    const Candidate& c = cands[rank];
    if (c.score == kMinusInf) break;
    const auto& prefix = s.beams[static_cast<size_t>(c.origin)];
    if (c.token == o.eos) {
      // As fairseq: an EOS counts only among the K best candidates of the step.
      if (static_cast<int>(rank) < K) {
        add_finished(s.finished, scored({prefix, c.score, 0, true}, o.length_penalty));
        ++s.finished_by_beam;
      }
      continue;
    }
    beams.push_back(prefix);
    beams.back().push_back(c.token);
    scores.push_back(c.score);
    from.push_back(c.origin);
  }
  while (static_cast<int>(beams.size()) < K) {  // fewer live continuations than K
    beams.emplace_back();
    scores.push_back(kMinusInf);
    from.push_back(0);
  }
  s.beams = std::move(beams);
  s.scores = std::move(scores);
  for (int k = 0; k < K; ++k) origin[static_cast<size_t>(k)] = from[static_cast<size_t>(k)];
  if (s.finished_by_beam >= K) {
    s.beam_done = true;
  } else if (step.t + 1 >= limit) {
    // The length limit: the live beams end here, without an EOS.
    for (int k = 0; k < K; ++k)
      if (s.scores[static_cast<size_t>(k)] != kMinusInf)
        add_finished(s.finished, scored({s.beams[static_cast<size_t>(k)],
                                         s.scores[static_cast<size_t>(k)], 0, false},
                                        o.length_penalty));
    s.beam_done = true;
  }
}

// Moves input s's greedy row one step on from its logits (row [V]): the arg-max, finished at
// EOS or at `limit` tokens.
void extend_greedy(BeamInput& s, const float* row, int64_t V, const SearchOptions& o,
                   int64_t limit) {
  const RowStats st = row_stats(row, V);
  s.greedy.log_prob += static_cast<double>(row[st.argmax]) - st.lse;
  if (st.argmax == o.eos) {
    s.greedy.finished = true;
    s.greedy_done = true;
  } else {
    s.greedy.tokens.push_back(st.argmax);
    s.greedy_done = static_cast<int64_t>(s.greedy.tokens.size()) >= limit;
  }
  if (s.greedy_done) add_finished(s.finished, scored(s.greedy, o.length_penalty));
}

}  // namespace

std::vector<std::vector<Hypothesis>> Searcher::beam(const Prepared& p) {
  const SearchOptions& o = options_;
  const int64_t B = p.batch, V = model_.vocab_size();
  // With K = 1 the beam is the greedy row already.
  const int K = o.beam_size, G = o.keep_greedy && K > 1 ? 1 : 0;
  const BeamRows br{K, G, K + G};
  const int R = br.R;

  std::vector<int64_t> rows;  // B inputs into blocks of R rows
  std::vector<BeamInput> sent = start_inputs(B, br, rows);
  state_.reorder(rows);
  std::vector<int64_t> alive(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) alive[static_cast<size_t>(b)] = b;

  std::vector<Scored> top;
  std::vector<Candidate> cands;
  for (int64_t t = 0; !alive.empty(); ++t) {
    arena_.reset();
    nn::Context ctx = inference_context(arena_, o.precision);
    const int64_t n = static_cast<int64_t>(alive.size());
    Tensor tokens = arena_.alloc({n * R}, DType::i32);  // [n·R]
    step_tokens(sent, alive, br, o.bos, tokens);
    const Tensor logits = finite_logits(model_.step(ctx, tokens, state_));  // [n·R, V]
    const BeamStep step{o, V, K, t, top, cands};

    std::vector<int64_t> keep_rows;  // rows of the next step, by origin
    std::vector<int64_t> next_alive;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = alive[static_cast<size_t>(i)];
      BeamInput& s = sent[static_cast<size_t>(b)];
      const int64_t limit = p.limit[static_cast<size_t>(b)];
      std::vector<int> origin(static_cast<size_t>(R));
      for (int r = 0; r < R; ++r) origin[static_cast<size_t>(r)] = r;
      if (!s.beam_done) extend_beam(s, logits.f32() + i * R * V, limit, origin, step);
      if (!s.greedy_done) extend_greedy(s, logits.f32() + (i * R + K) * V, V, o, limit);
      if (s.beam_done && s.greedy_done) continue;
      next_alive.push_back(b);
      for (int r = 0; r < R; ++r) keep_rows.push_back(i * R + origin[static_cast<size_t>(r)]);
    }
    if (next_alive.empty()) break;
    // Within blocks only the self-attention caches move; dropping a block moves the memory too.
    state_.reorder(keep_rows, /*memory=*/static_cast<int64_t>(next_alive.size()) < n);
    alive = std::move(next_alive);
  }

  std::vector<std::vector<Hypothesis>> out;
  for (auto& s : sent) out.push_back(best_first(std::move(s.finished), o.nbest));
  return out;
}

}  // namespace vitk::decode
