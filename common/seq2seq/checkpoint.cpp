// Translation checkpoints on top of io::save_checkpoint / io::load_checkpoint, and averaging.
#include "common/seq2seq/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/optim/optim.h"

namespace vitk::seq2seq {
namespace {

// "vitkmt01": marks the words of a TrainState in a checkpoint's rng_state attribute.
constexpr uint64_t kStateMagic = 0x3130746d6b746976ull;
constexpr size_t kStateWords = 15;

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

double from_bits(uint64_t u) {
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

uint64_t word(int64_t x) {
  return static_cast<uint64_t>(x);
}

}  // namespace

std::vector<uint64_t> TrainState::words() const {
  return {kStateMagic,
          word(epoch),
          word(batch),
          word(batches_in_epoch),
          word(max_tokens),
          seed,
          rng_seed,
          rng_counter,
          bits(best_bleu),
          word(best_step),
          word(bad_validations),
          bits(loss_sum),
          word(loss_tokens),
          word(last_validation),
          0};
}

TrainState TrainState::from_words(const std::vector<uint64_t>& w, const std::string& path) {
  if (w.size() != kStateWords || w[0] != kStateMagic)
    throw Error(path +
                ": has no training state of a `vitk mt-train` run to resume from (a run's "
                "last.h5 has it; best.h5 and averaged checkpoints do not)");
  TrainState s;
  s.epoch = static_cast<int64_t>(w[1]);
  s.batch = static_cast<int64_t>(w[2]);
  s.batches_in_epoch = static_cast<int64_t>(w[3]);
  s.max_tokens = static_cast<int64_t>(w[4]);
  s.seed = w[5];
  s.rng_seed = w[6];
  s.rng_counter = w[7];
  s.best_bleu = from_bits(w[8]);
  s.best_step = static_cast<int64_t>(w[9]);
  s.bad_validations = static_cast<int64_t>(w[10]);
  s.loss_sum = from_bits(w[11]);
  s.loss_tokens = static_cast<int64_t>(w[12]);
  s.last_validation = static_cast<int64_t>(w[13]);
  if (s.epoch < 0 || s.batch < 0 || s.batch > s.batches_in_epoch || s.loss_tokens < 0)
    throw Error(path + ": the training state is damaged (epoch " + std::to_string(s.epoch) +
                ", batch " + std::to_string(s.batch) + " of " + std::to_string(s.batches_in_epoch) +
                ")");
  return s;
}

void save_translation(const std::string& path, const ParamStore& params,
                      const TransformerConfig& config, const std::string& tokenizer, int64_t step,
                      const TrainState* state, optim::Optimizer* optimizer) {
  if (tokenizer.empty()) throw Error(path + ": cannot save a translation model without tokenizer");
  io::CheckpointMeta m;
  m.config = to_config_map(config);
  m.step = step;
  m.files[kTokenizerFile] = tokenizer;
  if (state) {
    m.epoch = state->epoch;
    m.rng_state = state->words();
  }
  io::save_checkpoint(path, params, m, optimizer);
}

TranslationMeta read_translation_meta(const std::string& path) {
  TranslationMeta t;
  t.meta = io::read_checkpoint_meta(path);
  t.config = from_config_map(t.meta.config, path);
  auto tok = t.meta.files.find(kTokenizerFile);
  if (tok == t.meta.files.end() || tok->second.empty())
    throw Error(path + ": has no tokenizer ('files/" + kTokenizerFile +
                "'), so it cannot translate; translation checkpoints written by vitk mt-train "
                "have one");
  t.tokenizer = tok->second;
  t.meta.files.clear();  // kept once, in t.tokenizer
  if (!t.meta.rng_state.empty()) t.state = TrainState::from_words(t.meta.rng_state, path);
  return t;
}

LoadedTranslation load_translation(const std::string& path) {
  LoadedTranslation out;
  out.meta = read_translation_meta(path);
  out.params = std::make_unique<ParamStore>();
  out.model = std::make_unique<Transformer>(*out.params, out.meta.config);
  out.params->finalize();
  io::load_checkpoint(path, *out.params);
  return out;
}

int64_t average_checkpoints(const std::vector<std::string>& inputs, const std::string& output) {
  if (inputs.empty()) throw UsageError("no checkpoints to average");
  const TranslationMeta first = read_translation_meta(inputs[0]);
  const auto first_config = to_config_map(first.config);
  ParamStore params;
  Transformer model(params, first.config);
  params.finalize();
  std::vector<double> sum(params.arena_floats(), 0.0);
  int64_t step = 0;
  for (const std::string& path : inputs) {
    const TranslationMeta t = path == inputs[0] ? first : read_translation_meta(path);
    const auto config = to_config_map(t.config);
    for (const auto& [key, value] : first_config) {
      auto it = config.find(key);
      if (it == config.end() || it->second != value)
        throw Error(path + ": model setting '" + key + "' is " +
                    (it == config.end() ? std::string("missing") : it->second) + ", but " + value +
                    " in " + inputs[0] + "; only checkpoints of one model can be averaged");
    }
    if (t.tokenizer != first.tokenizer)
      throw Error(path + ": its tokenizer differs from the one in " + inputs[0] +
                  "; only checkpoints of one model can be averaged");
    io::load_checkpoint(path, params);  // names the file and any tensor that does not fit
    const float* v = params.values().f32();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += static_cast<double>(v[i]);
    step = std::max(step, t.meta.step);
  }
  float* v = params.values().f32();
  const double n = static_cast<double>(inputs.size());
  for (size_t i = 0; i < sum.size(); ++i) v[i] = static_cast<float>(sum[i] / n);
  params.mark_changed();
  save_translation(output, params, first.config, first.tokenizer, step);
  return params.numel();
}

}  // namespace vitk::seq2seq
