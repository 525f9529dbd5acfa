// Text classifier checkpoints on top of io::read_checkpoint_meta / io::load_checkpoint, and the
// translation encoder as a starting point.
#include "common/seq2seq/text_checkpoint.h"

#include "common/error.h"
#include "common/io/checkpoint_config.h"
#include "common/memory.h"
#include "common/seq2seq/checkpoint.h"

namespace vitk::seq2seq {
namespace {

const std::vector<std::string> kSizeKeys = {"vocab_size", "num_classes", "d_model",   "heads",
                                            "d_ff",       "layers",      "max_length"};

TextClassifierConfig text_stored_config(const std::string& path, const io::CheckpointMeta& meta) {
  io::require_model_type(path, meta.config, "text_classifier", "text classifier",
                         "vitk text-train writes them", /*required=*/true);
  io::require_config_keys(path, meta.config, kSizeKeys);
  const TextClassifierConfig c = text_config_from_map(meta.config, path);
  const io::StoredTensors stored = io::list_checkpoint(path);
  io::check_layer_count(path, meta.config, stored, "encoder.layers.", "layers", c.layers);
  io::check_implied_sizes(path, meta.config, stored,
                          {{"encoder.embed_tokens.weight", 1, c.d_model, {"d_model"}},
                           {"encoder.embed_tokens.weight", 0, c.vocab_size, {"vocab_size"}},
                           {"encoder.layers.0.mlp.fc1.weight", 0, c.d_ff, {"d_ff"}},
                           {"head.weight", 0, c.num_classes, {"num_classes"}}});
  const std::string shortfall = memory_shortfall(memory_bytes(c));
  if (!shortfall.empty())
    throw Error(path + ": the model of " + io::config_values_text(meta.config, kSizeKeys) + " " +
                shortfall);
  return c;
}

}  // namespace

uint64_t memory_bytes(const TextClassifierConfig& c) {
  const int64_t d = c.d_model, f = c.d_ff;
  uint64_t params = sat_product({c.vocab_size, d});
  params = sat_add(params, sat_product({c.layers, 4 * d + 2 * f, d}));
  params = sat_add(params, sat_product({c.num_classes, d}));
  return sat_mul(4, sat_add(sat_mul(3, params), sat_product({c.max_length, d})));
}

TextMeta read_text_meta(const std::string& path) {
  TextMeta t;
  t.meta = io::read_checkpoint_meta(path);
  t.config = text_stored_config(path, t.meta);
  auto tok = t.meta.files.find(kTokenizerFile);
  if (tok == t.meta.files.end() || tok->second.empty())
    throw Error(path + ": has no tokenizer ('files/" + std::string(kTokenizerFile) +
                "'); text classifiers written by vitk text-train have one");
  t.tokenizer = tok->second;
  t.meta.files.clear();
  t.labels = t.meta.class_names;
  if (static_cast<int64_t>(t.labels.size()) != t.config.num_classes)
    throw Error(path + ": has " + std::to_string(t.labels.size()) + " class names for " +
                std::to_string(t.config.num_classes) + " classes (config.num_classes)");
  return t;
}

LoadedText load_text_classifier(const std::string& path) {
  LoadedText out;
  out.meta = read_text_meta(path);
  out.params = std::make_unique<ParamStore>();
  out.model = std::make_unique<TextClassifier>(*out.params, out.meta.config);
  out.params->finalize(/*gradients=*/false);
  io::load_checkpoint(path, *out.params, nullptr, /*int8=*/true);
  return out;
}

EncoderStart read_encoder_start(const std::string& path, const TextClassifierConfig& config) {
  const io::CheckpointMeta meta = io::read_checkpoint_meta(path);
  io::require_f32_checkpoint(meta, path, "--encoder-from", "the encoder to start from");
  io::require_model_type(path, meta.config, "transformer", "translation",
                         "vitk mt-train and vitk average write them", /*required=*/true);
  const TransformerConfig t = stored_config(path, meta);
  EncoderStart s;
  s.path = path;
  s.tokenizer = tokenizer_bytes(meta, path);
  s.config = config;
  s.config.vocab_size = t.vocab_size;
  s.config.d_model = t.d_model;
  s.config.heads = t.heads;
  s.config.d_ff = t.d_ff;
  s.config.layers = t.layers;
  s.config.pre_norm = t.pre_norm;
  s.config.activation = t.activation;
  s.config.norm_eps = t.norm_eps;
  s.config.max_length = std::min(config.max_length, t.max_length);
  return s;
}

int64_t load_encoder_from(const EncoderStart& start, ParamStore& params, TextClassifier& model) {
  // The translation checkpoint's tensors, loaded into a model of its own configuration.
  LoadedTranslation from;
  from.meta = read_translation_meta(start.path);
  from.params = std::make_unique<ParamStore>();
  from.model = std::make_unique<Transformer>(*from.params, from.meta.config);
  from.params->finalize(/*gradients=*/false);
  io::load_checkpoint(start.path, *from.params);
  const auto [first, end] = model.encoder_params();
  int64_t copied = 0;
  for (size_t i = first; i < end; ++i) {
    Parameter& p = params.params()[i];
    if (p.name == "cls_token") continue;  // the translation model has none
    const Parameter* src = from.params->find(p.name);
    if (!src && p.name == "encoder.embed_tokens.weight")
      src = from.params->find("embed_tokens.weight");
    if (!src || src->shape != p.shape)
      throw Error("--encoder-from " + start.path + ": no tensor " + p.name + " of shape " +
                  shape_str(p.shape) + " for the encoder");
    p.value.copy_from(src->value);
    ++copied;
  }
  params.mark_changed();
  return copied;
}

}  // namespace vitk::seq2seq
