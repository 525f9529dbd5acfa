// Translation checkpoints on top of io::save_checkpoint / io::load_checkpoint, and averaging.
#include "common/seq2seq/checkpoint.h"

#include <algorithm>

#include "common/error.h"
#include "common/io/checkpoint_config.h"
#include "common/memory.h"

namespace vitk::seq2seq {
namespace {

// The keys that set the model's size: a checkpoint without one would be built at a default.
const std::vector<std::string> kSizeKeys = {"vocab_size", "d_model",        "heads",
                                            "d_ff",       "layers",         "decoder_layers",
                                            "max_length", "tied_embeddings"};

}  // namespace

uint64_t memory_bytes(const TransformerConfig& c) {
  const int64_t d = c.d_model, f = c.d_ff;
  // The parameters (a lower bound: embeddings and the layers' products), each held three times
  // while a checkpoint loads (values, gradients, the read's copy), and the position table.
  uint64_t params = sat_product({c.vocab_size, d, c.tied_embeddings ? 1 : 3});
  params = sat_add(params, sat_product({c.layers, 4 * d + 2 * f, d}));
  params = sat_add(params, sat_product({c.decoder_layers, 8 * d + 2 * f, d}));
  return sat_mul(4, sat_add(sat_mul(3, params), sat_product({c.max_length, d})));
}

TransformerConfig stored_config(const std::string& path, const io::CheckpointMeta& meta) {
  io::require_model_type(path, meta.config, "transformer", "translation",
                         "vitk mt-train and average write them");
  io::require_config_keys(path, meta.config, kSizeKeys);
  const TransformerConfig c = from_config_map(meta.config, path);  // within validate()'s limits
  const io::StoredTensors stored = io::list_checkpoint(path);
  io::check_layer_count(path, meta.config, stored, "encoder.layers.", "layers", c.layers);
  io::check_layer_count(path, meta.config, stored, "decoder.layers.", "decoder_layers",
                        c.decoder_layers);
  const std::string embed =
      c.tied_embeddings ? "embed_tokens.weight" : "encoder.embed_tokens.weight";
  io::check_implied_sizes(path, meta.config, stored,
                          {{embed, 1, c.d_model, {"d_model"}},
                           {embed, 0, c.vocab_size, {"vocab_size"}},
                           {"encoder.layers.0.mlp.fc1.weight", 0, c.d_ff, {"d_ff"}}});
  const std::string shortfall = memory_shortfall(memory_bytes(c));
  if (!shortfall.empty())
    throw Error(path + ": the model of " + io::config_values_text(meta.config, kSizeKeys) + " " +
                shortfall);
  return c;
}

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
  t.config = stored_config(path, t.meta);
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
  out.params->finalize(/*gradients=*/false);
  io::load_checkpoint(path, *out.params, nullptr, /*int8=*/true);
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
