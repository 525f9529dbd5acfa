// `vitk info`: parameter counts and multiply-adds of a model configuration. Wiring only; the
// counting lives in common/nn/model_info.
#include <cstdio>
#include <iostream>

#include "common/error.h"
#include "common/nn/model_info.h"
#include "tools/cli.h"
#include "vit/caption/model.h"
#include "vit/vit.h"

namespace vitk::tools {
namespace {

std::string grouped(double x) {
  // 86567656 -> "86,567,656"
  std::string digits = std::to_string(static_cast<long long>(x + 0.5));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

nn::ModelSpec spec_from(const po::variables_map& vm) {
  nn::ModelSpec s;
  s.type = vm["model.type"].as<std::string>();
  s.layer.d_model = vm["model.d_model"].as<int64_t>();
  s.layer.heads = vm["model.heads"].as<int64_t>();
  s.layer.d_ff = vm["model.d_ff"].as<int64_t>();
  s.layer.activation = ops::parse_activation(vm["model.activation"].as<std::string>());
  s.layer.pre_norm = vm["model.pre_norm"].as<bool>();
  s.layer.score = nn::parse_score(vm["model.score"].as<std::string>());
  s.encoder_layers = vm["model.layers"].as<int>();
  s.decoder_layers = vm["model.decoder_layers"].as<int>();
  s.sequence_length = vm["model.sequence_length"].as<int64_t>();
  s.vocab_size = vm["model.vocab_size"].as<int64_t>();
  s.tied_embeddings = vm["model.tied_embeddings"].as<bool>();
  if (s.type == "caption") {
    // A captioning config names its own keys (vit/caption/model.h) and keeps the vocabulary, which
    // caption-train's SentencePiece model gets, in [data].
    s.layer.pre_norm = true;
    s.layer.activation = ops::Activation::gelu;
    s.sequence_length = vm["model.max_length"].as<int64_t>();
    // model.decoder_layers defaults to the encoder-decoder's 6; a captioner's default is its own.
    s.decoder_layers = vm["model.decoder_layers"].defaulted()
                           ? caption::CaptionConfig().decoder_layers
                           : vm["model.decoder_layers"].as<int>();
    s.decoder_heads = vm["model.decoder_heads"].as<int64_t>();
    s.decoder_d_ff = vm["model.decoder_d_ff"].as<int64_t>();
    s.tied_embeddings = vm["model.tie_embeddings"].as<bool>();
    s.memory_class_token = vm["model.memory_class_token"].as<bool>();
    if (vm["model.vocab_size"].defaulted()) s.vocab_size = vm["vocab-size"].as<int64_t>();
  }
  s.image_size = vm["model.image_size"].as<int64_t>();
  s.patch_size = vm["model.patch_size"].as<int64_t>();
  s.channels = vm["model.channels"].as<int64_t>();
  s.num_classes = vm["model.num_classes"].as<int64_t>();
  try {
    s.stem_channels = vit::parse_stem_channels(vm["model.stem_channels"].as<std::string>());
    s.stem_strides = vit::parse_stem_strides(vm["model.stem_strides"].as<std::string>());
    s.pos_convs = static_cast<int>(
        vit::parse_pos_conv_blocks(vm["model.pos_conv_blocks"].as<std::string>()).size());
    s.ffn_convs = static_cast<int>(
        vit::parse_ffn_conv_blocks(vm["model.ffn_conv_blocks"].as<std::string>()).size());
  } catch (const UsageError& e) {
    throw UsageError(std::string("--model.") + e.what());
  }
  return s;
}

int run_info(const po::variables_map& vm) {
  const nn::ModelSpec spec = spec_from(vm);
  const nn::ModelSize size = nn::model_size(spec);
  const auto& l = spec.layer;
  std::cout << "model: " << spec.type << ", d_model " << l.d_model << ", " << l.heads
            << " heads, d_ff " << l.d_ff << ", " << spec.encoder_layers << " encoder layers";
  const bool caption = spec.type == "caption";
  if (spec.type == "transformer" || caption)
    std::cout << ", " << spec.decoder_layers << " decoder layers";
  std::cout << (l.pre_norm || spec.type == "vit" ? ", pre-norm" : ", post-norm") << "\n";
  std::cout << "sequence: " << size.tokens << " tokens"
            << (spec.type == "vit" || caption ? " (patches + class token)" : "");
  if (caption)
    std::cout << "; caption: " << spec.sequence_length << " target positions, vocabulary "
              << spec.vocab_size;
  std::cout << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %5s %14s %16s %14s  %s\n", "block", "count",
                "params/block", "MACs/token", "attn MACs/tok", "linear MACs counted as");
  std::cout << line;
  for (const auto& b : size.blocks) {
    std::snprintf(line, sizeof line, "%-24s %5d %14s %16s %14s  %s\n", b.name.c_str(), b.count,
                  grouped(static_cast<double>(b.params)).c_str(),
                  grouped(static_cast<double>(b.macs)).c_str(),
                  b.attention_macs ? grouped(static_cast<double>(b.attention_macs)).c_str() : "",
                  b.note.c_str());
    std::cout << line;
  }
  std::cout << "\ntotal parameters: " << grouped(static_cast<double>(size.total_params)) << " ("
            << size.total_params / 1e6 << " M)\n";
  std::snprintf(line, sizeof line,
                "multiply-adds per %s: %.3f G, of which attention (q·kᵀ and p·v, 2·T·d per token "
                "and layer) %.3f G\n",
                spec.type == "vit" ? "image"
                : caption          ? "image + caption"
                                   : "source + target sequence",
                size.macs_per_sequence * 1e-9, size.attention_macs_per_sequence * 1e-9);
  std::cout << line;
  return kExitOk;
}

}  // namespace

void register_info_commands(Registry& registry) {
  Subcommand c;
  c.name = "info";
  c.summary = "parameter counts and multiply-adds of a model configuration";
  c.example =
      "vitk info --config configs/vit-b16.ini\n"
      "vitk info --config configs/transformer-base.ini --model.sequence_length 50\n"
      "vitk info --config configs/caption-scenes.ini";
  c.add_options = [](po::options_description& o) {
    const caption::CaptionConfig caption;  // the defaults of the caption-only keys
    o.add_options()("model.type", po::value<std::string>()->default_value("transformer"),
                    "vit, transformer (encoder-decoder), encoder or caption")(
        "model.d_model", po::value<int64_t>()->default_value(512), "model width d")(
        "model.heads", po::value<int64_t>()->default_value(8), "attention heads")(
        "model.d_ff", po::value<int64_t>()->default_value(2048), "feed-forward inner width")(
        "model.layers", po::value<int>()->default_value(6), "encoder layers")(
        "model.decoder_layers", po::value<int>()->default_value(6), "decoder layers")(
        "model.activation", po::value<std::string>()->default_value("relu"), "relu or gelu")(
        "model.pre_norm", switch_value(false), "pre-norm (true) or post-norm")(
        "model.score", po::value<std::string>()->default_value("scaled_dot"),
        "attention score: scaled_dot, dot, general, additive")(
        "model.sequence_length", po::value<int64_t>()->default_value(128),
        "tokens per sequence (not vit)")("model.vocab_size", po::value<int64_t>()->default_value(0),
                                         "vocabulary size (0: no embeddings)")(
        "model.tied_embeddings", switch_value(true),
        "one matrix for source, target and output embeddings")(
        "model.image_size", po::value<int64_t>()->default_value(224), "vit: image side")(
        "model.patch_size", po::value<int64_t>()->default_value(16), "vit: patch side")(
        "model.channels", po::value<int64_t>()->default_value(3), "vit: image channels")(
        "model.stem_channels", po::value<std::string>()->default_value("none"),
        "vit: convolutional stem, channels of its 3x3 stages (e.g. 48,96)")(
        "model.stem_strides", po::value<std::string>()->default_value("none"),
        "vit: the stem stages' strides, 1 or 2 each (none: 2 for every stage)")(
        "model.pos_conv_blocks", po::value<std::string>()->default_value("none"),
        "vit: blocks followed by a positional 3x3 depthwise convolution (e.g. 0,1,2)")(
        "model.ffn_conv_blocks", po::value<std::string>()->default_value("none"),
        "vit: blocks whose MLP convolves its hidden tokens (3x3 depthwise, e.g. 0,1,2)")(
        "model.num_classes", po::value<int64_t>()->default_value(1000), "vit: classes")(
        "model.max_length", po::value<int64_t>()->default_value(caption.max_length),
        "caption: target positions")("model.decoder_heads",
                                     po::value<int64_t>()->default_value(caption.decoder_heads),
                                     "caption: decoder heads")(
        "model.decoder_d_ff", po::value<int64_t>()->default_value(caption.decoder_d_ff),
        "caption: decoder feed-forward width (0: the encoder's)")(
        "model.tie_embeddings", switch_value(caption.tie_embeddings),
        "caption: the output layer is the token embedding")(
        "model.memory_class_token", switch_value(caption.memory_class_token),
        "caption: the class token is one of the memory tokens")(
        "vocab-size", po::value<int64_t>()->default_value(0),
        "caption: the vocabulary, when model.vocab_size is not given");
  };
  c.run = run_info;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
