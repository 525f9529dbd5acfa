// Translation checkpoints on top of io::save_checkpoint / io::load_checkpoint, and averaging.
#include "common/seq2seq/checkpoint.h"

#include <algorithm>

#include "common/error.h"

namespace vitk::seq2seq {
void save_translation(const std::string& path, const ParamStore& params,
                      const TransformerConfig& config, const std::string& tokenizer, int64_t step) {
  if (tokenizer.empty()) throw Error(path + ": cannot save a translation model without tokenizer");
  io::CheckpointMeta m;
  m.config = to_config_map(config);
  m.step = step;
  m.files[kTokenizerFile] = tokenizer;
  io::save_checkpoint(path, params, m);
}

const std::string& tokenizer_bytes(const io::CheckpointMeta& meta, const std::string& path) {
  auto tok = meta.files.find(kTokenizerFile);
  if (tok == meta.files.end() || tok->second.empty())
    throw Error(path + ": has no tokenizer ('files/" + kTokenizerFile +
                "'), so it cannot translate; translation checkpoints written by vitk mt-train "
                "have one");
  return tok->second;
}

TranslationMeta read_translation_meta(const std::string& path) {
  TranslationMeta t;
  t.meta = io::read_checkpoint_meta(path);
  t.config = from_config_map(t.meta.config, path);
  t.tokenizer = tokenizer_bytes(t.meta, path);
  t.meta.files.clear();  // kept once, in t.tokenizer
  if (train::has_train_state(t.meta)) t.state = train::read_train_state(t.meta, path);
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
