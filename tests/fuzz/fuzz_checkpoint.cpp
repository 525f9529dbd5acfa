// Fuzzes the HDF5 checkpoint loader with files mutated from small valid ones, through the checks
// `vitk inspect` and the loaders make: io::read_checkpoint_meta and io::list_checkpoint (inspect),
// then by the model type the attributes name vit::stored_config and vit::load_vit (classify,
// eval, finetune), seq2seq::stored_config, seq2seq::load_translation and the stored tokenizer
// (translate, average), or caption::caption_stored_config and caption::load_captioner with its
// tokenizer (caption, caption-eval, quantize), and the training state of a run's last.h5
// (--resume). The model is only built when the configuration checks pass and it is small (the
// checks refuse what the machine cannot hold; a fuzzer must not spend its memory on a valid large
// model).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "common/io/checkpoint.h"
#include "common/seq2seq/checkpoint.h"
#include "common/train/state.h"
#include "datasets/tokenizer.h"
#include "fuzz_util.h"
#include "vit/caption/captioner.h"
#include "vit/checkpoint.h"

namespace {

constexpr uint64_t kMaxModelBytes = 64ull << 20;

void load(const std::string& path) {
  using namespace vitk;
  // vitk inspect
  const io::CheckpointMeta meta = io::read_checkpoint_meta(path);
  const auto tensors = io::list_checkpoint(path);
  int64_t total = 0;
  for (const auto& [name, shape] : tensors) total += shape_numel(shape);
  (void)total;
  if (train::has_train_state(meta)) {
    try {
      (void)train::read_train_state(meta, path);
    } catch (const std::exception&) {
    }
  }
  auto type = meta.config.find("type");
  if (type != meta.config.end() && type->second == "transformer") {
    const seq2seq::TransformerConfig c = seq2seq::stored_config(path, meta);
    try {
      (void)datasets::Tokenizer::from_bytes(seq2seq::tokenizer_bytes(meta, path));
    } catch (const std::exception&) {
    }
    if (seq2seq::memory_bytes(c) > kMaxModelBytes) return;
    const seq2seq::LoadedTranslation t = seq2seq::load_translation(path);
    (void)t;
  } else if (type != meta.config.end() && type->second == "caption") {
    const caption::CaptionConfig c = caption::caption_stored_config(path, meta);
    if (caption::caption_memory_bytes(c) > kMaxModelBytes) return;
    const caption::LoadedCaptioner m = caption::load_captioner(path);
    (void)m;
  } else {
    const vit::VitConfig c = vit::stored_config(path, meta);
    if (vit::memory_bytes(c, 1) > kMaxModelBytes) return;
    const vit::LoadedVit v = vit::load_vit(path);
    (void)v;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vitk::fuzz::ScratchFile file("checkpoint", ".h5");
  // VITK_FUZZ_VERBOSE=1: say why an input was refused (to check that the seeds load).
  static const bool verbose = std::getenv("VITK_FUZZ_VERBOSE") != nullptr;
  try {
    load(file.write(data, size));
    if (verbose) std::fprintf(stderr, "loaded\n");
  } catch (const std::exception& e) {
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}
