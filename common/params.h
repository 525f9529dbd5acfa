#pragma once
// Named parameters in one contiguous arena, their gradients in a second arena of the same layout.
// Layers add() their parameters while they are built; finalize() allocates both arenas once.
// The optimizer then works on flat arrays, and a checkpoint is a walk over the named views.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/ops/ops.h"
#include "common/tensor.h"

namespace vitk {

struct Parameter {
  std::string name;  // PyTorch-style, e.g. "encoder.layers.3.attn.qkv.weight"
  Shape shape;
  bool decay = true;     // takes weight decay (false for biases, norms, class token, positions)
  float lr_scale = 1.f;  // per-parameter learning-rate multiplier (layer-wise decay)
  size_t offset = 0;     // in floats, into both arenas; a multiple of 16 (64 bytes)
  Tensor value;          // view into the value arena (valid after finalize)
  Tensor grad;           // view into the gradient arena (valid after finalize)
  // Identifies the contents of value: bumped by ParamStore::mark_changed(), which everything that
  // writes parameter values calls (the optimizers' step, checkpoint loading, model init, EMA
  // swaps). Packed copies of the weight made at another version are rebuilt (ops::WeightCache).
  uint64_t version = 0;
  // The packed forms of value (bf16 and blocked layouts) that the linear products read, made on
  // first use (nn::weight_of).
  std::shared_ptr<ops::WeightCache> packed;
  // A Linear weight's int8 form at int8 inference (nn::Linear, Context::int8_weights): quantised
  // from value on first use, and again when version has moved past quantized_version.
  std::shared_ptr<ops::QuantizedWeight> quantized;
  uint64_t quantized_version = 0;
  // value's memory was given back to the system once the weight was quantised or packed
  // (release_value): nothing may read value any more; the products read those forms only.
  bool value_released = false;
  int64_t numel() const { return shape_numel(shape); }
};

// Gives the pages wholly inside p.value back to the system (madvise MADV_DONTNEED) and sets
// p.value_released: a model at inference keeps only the form its products read of each Linear
// weight, quantised or packed (nn::Context::one_copy_of_weights).
void release_value(Parameter& p);

class ParamStore {
 public:
  // Registers a parameter; the returned reference stays valid for the store's lifetime.
  // Throws vitk::Error on a duplicate name or after finalize().
  Parameter& add(const std::string& name, Shape shape, bool decay = true);
  // Allocates the value and gradient arenas (zero-filled) and points every parameter at its slot.
  // Without `gradients` (a model loaded to run, never to train) only the value arena: grads() and
  // every Parameter::grad stay empty, and the optimizers refuse the store.
  void finalize(bool gradients = true);
  bool finalized() const { return finalized_; }
  bool has_gradients() const { return !grads_.empty(); }

  std::deque<Parameter>& params() { return params_; }
  const std::deque<Parameter>& params() const { return params_; }
  Parameter* find(const std::string& name);
  const Parameter* find(const std::string& name) const;
  Parameter& get(const std::string& name);  // throws vitk::Error naming the missing parameter

  int64_t numel() const;  // sum of parameter sizes (without alignment padding)
  size_t arena_floats() const { return arena_floats_; }  // with padding
  // The whole arenas as flat f32 tensors [arena_floats]; padding slots are zero and stay zero.
  Tensor& values() { return values_; }
  Tensor& grads() { return grads_; }
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }
  void zero_grad();
  // Call after writing parameter values (all or some): bumps every parameter's version, so that
  // no product reads a weight packed before the write. Code that writes values directly (tests,
  // importers) must call it before the next forward.
  void mark_changed();
  // Drops every packed weight form (their memory), e.g. when a model will not run again soon.
  void drop_packed();
  // Memory held by the packed forms of all parameters.
  size_t packed_bytes() const;

 private:
  std::deque<Parameter> params_;
  Tensor values_, grads_;
  size_t arena_floats_ = 0;
  bool finalized_ = false;
};

}  // namespace vitk
