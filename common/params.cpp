#include "common/params.h"

#include <sys/mman.h>

#include <cstdint>

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

void release_value(Parameter& p) {
  constexpr uintptr_t kPage = 4096;
  const auto begin = reinterpret_cast<uintptr_t>(p.value.data());
  const uintptr_t first = (begin + kPage - 1) / kPage * kPage;
  const uintptr_t last = (begin + p.value.nbytes()) / kPage * kPage;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  p.value_released = true;
}

void ParamStore::finalize(bool gradients) {
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
  if (gradients) grads_ = Tensor({static_cast<int64_t>(offset)});
#ifdef MADV_NOHUGEPAGE
  // A model that only runs: 4 KiB pages, so that the pages of weights never written (loaded as
  // int8) or given back (release_value) are not kept in by a 2 MiB page around a small neighbour.
  // The mapping starts on a page boundary when it is large (aligned_alloc_shared).
  if (!gradients && values_.nbytes() >= (size_t{4} << 20))
    madvise(values_.data(), values_.nbytes(), MADV_NOHUGEPAGE);
#endif
  for (auto& p : params_) {
    p.value = Tensor::view(values_.f32() + p.offset, p.shape);
    if (gradients) p.grad = Tensor::view(grads_.f32() + p.offset, p.shape);
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
