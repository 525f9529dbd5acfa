#include "common/params.h"

#include "common/error.h"

namespace vitk {

Parameter& ParamStore::add(const std::string& name, Shape shape, bool decay) {
  if (finalized_) throw Error("parameter '" + name + "' added after the store was finalized");
  if (name.empty()) throw Error("parameter with an empty name");
  if (find(name)) throw Error("duplicate parameter name '" + name + "'");
  for (int64_t d : shape)
    if (d <= 0) throw Error("parameter '" + name + "' has bad shape " + shape_str(shape));
  Parameter p;
  p.name = name;
  p.shape = std::move(shape);
  p.decay = decay;
  params_.push_back(std::move(p));
  return params_.back();
}

void ParamStore::finalize() {
  if (finalized_) return;
  constexpr size_t kFloatsPerLine = kAlignment / sizeof(float);
  size_t offset = 0;
  for (auto& p : params_) {
    p.offset = offset;
    offset +=
        (static_cast<size_t>(p.numel()) + kFloatsPerLine - 1) / kFloatsPerLine * kFloatsPerLine;
  }
  arena_floats_ = offset;
  values_ = Tensor({static_cast<int64_t>(offset)});
  grads_ = Tensor({static_cast<int64_t>(offset)});
  for (auto& p : params_) {
    p.value = Tensor::view(values_.f32() + p.offset, p.shape);
    p.grad = Tensor::view(grads_.f32() + p.offset, p.shape);
  }
  finalized_ = true;
  mark_changed();
}

Parameter* ParamStore::find(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const Parameter* ParamStore::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

Parameter& ParamStore::get(const std::string& name) {
  Parameter* p = find(name);
  if (!p) throw Error("no parameter named '" + name + "'");
  return *p;
}

int64_t ParamStore::numel() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel();
  return n;
}

void ParamStore::zero_grad() {
  if (finalized_) grads_.zero();
}

}  // namespace vitk

namespace vitk {

void ParamStore::mark_changed() {
  for (auto& p : params_) ++p.version;
}

void ParamStore::drop_packed() {
  for (auto& p : params_)
    if (p.packed) p.packed->clear();
}

size_t ParamStore::packed_bytes() const {
  size_t n = 0;
  for (const auto& p : params_)
    if (p.packed) n += p.packed->bytes();
  return n;
}

}  // namespace vitk
