// `vitk quantize CKPT --out CKPT8`: a checkpoint whose linear layers hold int8 weights, one scale
// per output row, as `--precision int8` runs them; classify, eval, translate, caption,
// caption-eval, text-classify and text-eval load it directly.
//
// Which weights become int8 is what the model's own int8 inference quantises and then needs in no
// other form (its Linear layers, and an untied output layer): one forward at int8, keeping one
// copy of the weights, releases exactly those; they are then quantised from the f32 values kept
// aside, so that the file holds the plain int8 matrices, not the layout packed for this CPU.
#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/nn/nn.h"
#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/text_checkpoint.h"
#include "tools/cli.h"
#include "vit/caption/captioner.h"
#include "vit/checkpoint.h"

namespace vitk::tools {
namespace {

namespace fs = std::filesystem;

// The released parameters of one int8 forward of the model on a dummy input (model.forward).
template <typename Forward>
void release_int8_weights(Forward forward) {
  Arena arena;
  nn::Context ctx;
  ctx.arena = &arena;
  nn::set_inference_precision(ctx, ops::Precision::int8);
  ctx.one_copy_of_weights = true;
  forward(ctx);
}

int run_quantize(const po::variables_map& vm) {
  const std::string path = vm["checkpoint"].as<std::string>();
  const std::string out = vm["out"].as<std::string>();
  if (out.empty()) throw UsageError("--out is empty: name the int8 file to write");
  refuse_output_over_input(out, {path}, "the checkpoint being quantised");
  io::CheckpointMeta meta = io::read_checkpoint_meta(path);
  if (!meta.quantization.empty())
    throw UsageError(path + ": is already quantised to " + meta.quantization);

  // The model, loaded to run, and its f32 values kept aside.
  std::unique_ptr<ParamStore> params;
  std::string kind;
  Tensor kept;
  const auto type = meta.config.find("type");
  if (type != meta.config.end() && type->second == "caption") {
    kind = "captioning model";
    caption::LoadedCaptioner m = caption::load_captioner(path);
    kept = m.params->values().clone();
    release_int8_weights([&](nn::Context& ctx) {
      const vit::VitConfig& e = m.config.encoder;
      Tensor ids({1, 1}, DType::i32), lengths({1}, DType::i32);
      ids.i32()[0] = 1, lengths.i32()[0] = 1;
      m.model->forward(ctx, Tensor({1, e.channels, e.image_height, e.image_width}), ids, lengths);
    });
    params = std::move(m.params);
  } else if (type != meta.config.end() && type->second == "text_classifier") {
    kind = "text classifier";
    seq2seq::LoadedText m = seq2seq::load_text_classifier(path);
    kept = m.params->values().clone();
    release_int8_weights([&](nn::Context& ctx) {
      Tensor ids({1, 1}, DType::i32), lengths({1}, DType::i32);
      ids.i32()[0] = seq2seq::kEosId, lengths.i32()[0] = 1;
      m.model->forward(ctx, ids, lengths);
    });
    params = std::move(m.params);
  } else if (meta.files.count(seq2seq::kTokenizerFile)) {
    kind = "translation model";
    seq2seq::LoadedTranslation m = seq2seq::load_translation(path);
    kept = m.params->values().clone();
    release_int8_weights([&](nn::Context& ctx) {
      Tensor ids({1, 1}, DType::i32), lengths({1}, DType::i32);
      ids.i32()[0] = 1, lengths.i32()[0] = 1;
      m.model->forward(ctx, ids, lengths, ids, lengths);
    });
    params = std::move(m.params);
  } else {
    kind = "ViT";
    vit::LoadedVit m = vit::load_vit(path);
    kept = m.params->values().clone();
    release_int8_weights([&](nn::Context& ctx) {
      m.model->forward(ctx,
                       Tensor({1, m.config.channels, m.config.image_height, m.config.image_width}));
    });
    params = std::move(m.params);
  }

  int64_t matrices = 0, int8_values = 0;
  for (Parameter& p : params->params()) {
    if (!p.value_released) continue;
    const Tensor value = Tensor::view(kept.f32() + p.offset, p.shape);
    p.quantized = std::make_shared<ops::QuantizedWeight>(ops::quantize_weight(value));
    ++matrices;
    int8_values += p.numel();
  }
  // A run's state and optimizer are of no use to a model that only runs.
  meta.train_state.clear();
  meta.rng_state.clear();
  meta.optimizer.clear();
  io::save_checkpoint(out, *params, meta);
  std::error_code ec;
  std::cout << "quantised " << matrices << " matrices of the " << kind << " (" << int8_values
            << " of " << params->numel()
            << " parameters) to int8, one scale per output row: " << out << ", "
            << fs::file_size(out, ec) / 1000000 << " MB (" << path << ": "
            << fs::file_size(path, ec) / 1000000 << " MB)\n";
  return kExitOk;
}

}  // namespace

void register_quantize_commands(Registry& registry) {
  Subcommand c;
  c.name = "quantize";
  c.summary = "write a checkpoint with int8 linear layers, for --precision int8 inference";
  c.usage = "CHECKPOINT --out FILE";
  c.example =
      "vitk quantize vit/models/fmnist-vit.h5 --out fmnist-int8.h5\n"
      "vitk eval --model fmnist-int8.h5 --data /usr/share/datasets/fashion-mnist --precision int8";
  c.add_options = [](po::options_description& o) {
    o.add_options()  //
        ("checkpoint", po::value<std::string>()->required()->value_name("FILE"),
         "a ViT, translation, captioning or text classifier checkpoint (f32)")  //
        ("out", po::value<std::string>()->required()->value_name("FILE"),
         "the quantised checkpoint: the linear layers' weights as int8 with one f32 scale per "
         "output row (NAME and NAME_scale), everything else f32, no training state (written "
         "atomically)");
  };
  c.add_positional = [](po::positional_options_description& p) { p.add("checkpoint", 1); };
  c.run = run_quantize;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
