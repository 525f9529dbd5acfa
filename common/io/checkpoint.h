#pragma once
// HDF5 checkpoints: one f32 dataset per parameter at the root, named as in the PyTorch state dict
// ("encoder.layers.3.attn.qkv.weight"); the model configuration and class names as attributes;
// optionally the optimizer state under /optimizer/<buffer>/<parameter name>, the step and the RNG
// state; named byte strings (a tokenizer model) as u8 datasets under /files. Written to a temporary
// file beside the target and renamed, so a crash never leaves a broken checkpoint. Readable with
// h5dump or h5py.
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "common/params.h"

namespace vitk::optim {
class Optimizer;
}

namespace vitk::io {

// A named scalar of a training run's state (common/train/state.h).
using StateValue = std::variant<int64_t, uint64_t, double, std::string>;

struct CheckpointMeta {
  std::map<std::string, std::string> config;  // model configuration, key -> value (as text)
  // How the run that wrote the file trained (its augmentation and optimizer options, by their
  // command-line names: "scale" -> "0.08 1"), root attributes recipe.KEY. A fine-tuning or resumed
  // run takes the augmentation from it (vit/finetune.h); empty in files from elsewhere.
  std::map<std::string, std::string> recipe;
  std::vector<std::string> class_names;
  int64_t step = 0;  // optimizer steps taken
  int64_t epoch = 0;
  // The training state of a run's last.h5: attributes of the group /train_state, a '/' in a name
  // making subgroups ("rng/dropout/counter" is the attribute `counter` of
  // /train_state/rng/dropout). Empty: none.
  std::map<std::string, StateValue> train_state;
  // Read only: the numbered words in which checkpoints before /train_state kept it.
  std::vector<uint64_t> rng_state;
  // Named byte strings kept beside the tensors, each a 1-D u8 dataset /files/<name> (h5py:
  // bytes(f["files/sentencepiece.model"][()])); e.g. the tokenizer a translation model needs.
  std::map<std::string, std::string> files;
  // Read only: the kind of the optimizer state in the file ("adamw", "sgd"), empty when it has
  // none. save_checkpoint writes the optimizer's own kind and ignores this.
  std::string optimizer;
  // "int8" when the file holds int8 tensors (`vitk quantize`), "" otherwise. save_checkpoint
  // writes it from the parameters and ignores this.
  std::string quantization;
};

// Writes params (and the optimizer's state, if given) atomically to path. A parameter whose f32
// value was released after quantisation (Parameter::value_released) and whose int8 form is still
// plain is written as int8: q, an i8 dataset of its shape, and q's per-row scales as the f32
// dataset NAME_scale (the naming CTranslate2 uses); such a file has the root attribute
// quantization = "int8" and no optimizer state.
void save_checkpoint(const std::string& path, const ParamStore& params, const CheckpointMeta& meta,
                     optim::Optimizer* optimizer = nullptr);

// Reads only the attributes, so a caller can build the model from its configuration first.
CheckpointMeta read_checkpoint_meta(const std::string& path);

// Loads every parameter of the (finalized) store. Checks that the file has exactly the store's
// names, with the same shapes and dtype f32, and throws vitk::Error naming the file and the first
// parameter that is missing, unexpected, of another shape or dtype. If optimizer is given, its
// state must be in the file too (same checks). Returns the metadata.
// int8 tensors (save_checkpoint) are loaded only with `int8` (a model loaded to run at int8
// inference): each into its parameter's Parameter::quantized, value_released set and the f32
// value's memory never touched; without `int8` the file is refused, naming `vitk quantize`.
// A failed load leaves the store and the optimizer as they were, except a load with `int8` and no
// optimizer (for inference), which reads the values in place to keep one copy of the model in
// memory: after a failure the caller discards that store.
CheckpointMeta load_checkpoint(const std::string& path, ParamStore& params,
                               optim::Optimizer* optimizer = nullptr, bool int8 = false);

// Names and shapes of all parameter datasets in a checkpoint (for `vitk` tools and messages).
std::vector<std::pair<std::string, Shape>> list_checkpoint(const std::string& path);

}  // namespace vitk::io
