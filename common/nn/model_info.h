#pragma once
// Sizes of a model: parameters per block and in total, multiply-adds per token with the attention
// term (which grows with the sequence length) apart, for `vitk info` and `vitk inspect`. Each model
// sizes itself (vit/, vit/caption/, common/seq2seq/) from the real layers built into a scratch
// ParamStore (registration only, nothing is allocated), so the counts cannot drift from the code;
// embeddings, patch embedding and heads are counted from their shapes. The core knows no model by
// name: a model registers a ModelKind, how its settings read and how a model of them is sized.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/nn/nn.h"
#include "common/settings.h"

namespace vitk::nn {

struct BlockSize {
  std::string name;            // "encoder layer", "patch embedding", ...
  int count = 1;               // how many such blocks
  int64_t params = 0;          // per block
  int64_t macs = 0;            // multiply-adds per token (per patch, per output position) per block
  int64_t attention_macs = 0;  // the part that grows with the sequence length, per token
  std::string note;            // how macs is counted, e.g. "12·d² (d_ff = 4d)"
  int64_t positions = 0;       // how many times per sequence macs is spent (patches, 1, T)
};

struct ModelSize {
  std::string summary;   // "vit, d_model 192, 3 heads, d_ff 384, 6 encoder layers, pre-norm"
  std::string sequence;  // "50 tokens (patches + class token)"
  std::string unit;      // what one sequence is: "image", "source + target sequence", ...
  std::vector<BlockSize> blocks;
  int64_t tokens = 0;  // the encoder's sequence length T
  int64_t total_params = 0;
  double macs_per_sequence = 0;  // one unit
  double attention_macs_per_sequence = 0;

  void add(std::string name, int count, int64_t params, int64_t macs, int64_t positions,
           int64_t attention_macs, std::string note);
  // Sums the blocks into total_params and the per-sequence figures, plus `extra_macs` counted
  // outside the blocks (cross-attention keys and values, projected once per memory token).
  void finish(double extra_macs = 0);
};

// The parameters under `prefix` in a scratch store, and the multiply-adds per token of its 2-D
// ".weight" tensors (a Linear computes out·in per row).
int64_t count_params(const ParamStore& store, const std::string& prefix);
int64_t count_linear_macs(const ParamStore& store, const std::string& prefix);

// A model type as `vitk info` and `vitk inspect` know it: its settings (the [model] keys, with the
// type's defaults) and how a model of given settings is sized. Registered by the model's layer.
struct ModelKind {
  std::string type;     // the [model] section's "type"
  std::string summary;  // one line: what the model is
  std::vector<settings::FieldInfo> fields;
  // The sizes of a model of these settings (the given [model] keys as text; the others take the
  // type's defaults). vitk::UsageError naming the setting at fault.
  std::function<ModelSize(const std::map<std::string, std::string>& keys)> size;
};

// The model kinds a program knows, each registered once.
class ModelRegistry {
 public:
  // std::logic_error for an empty or repeated type: a programming mistake.
  void add(ModelKind kind);
  const ModelKind* find(const std::string& type) const;  // nullptr when none
  const std::vector<ModelKind>& all() const { return kinds_; }

 private:
  std::vector<ModelKind> kinds_;
};

// The text of `keys` read as settings of `schema` and validated, for a ModelKind's size function:
// vitk::UsageError "--model.KEY ..." naming the setting at fault. Keys of other kinds are ignored
// (one [model] section may serve `vitk info` for several).
template <typename C>
C settings_for_size(const settings::Schema<C>& schema,
                    const std::map<std::string, std::string>& keys) {
  C c;
  try {
    for (const auto& [key, value] : keys)
      if (const settings::Field<C>* f = schema.find(key))
        f->read(c, SettingReader{"--model." + key}, value);
    c.validate();
  } catch (const std::runtime_error& e) {  // vitk::Error from a reader, UsageError from a check
    throw settings::option_error(e);
  }
  return c;
}

}  // namespace vitk::nn
