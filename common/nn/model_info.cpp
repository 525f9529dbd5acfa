#include "common/nn/model_info.h"

#include <stdexcept>

#include "common/error.h"

namespace vitk::nn {

void ModelSize::add(std::string name, int count, int64_t params, int64_t macs, int64_t positions,
                    int64_t attention_macs, std::string note) {
  blocks.push_back(
      {std::move(name), count, params, macs, attention_macs, std::move(note), positions});
}

void ModelSize::finish(double extra_macs) {
  total_params = 0;
  double macs = 0, attention = 0;
  for (const auto& b : blocks) {
    total_params += b.count * b.params;
    macs += b.count * static_cast<double>(b.macs) * static_cast<double>(b.positions);
    attention += b.count * static_cast<double>(b.attention_macs) * static_cast<double>(b.positions);
  }
  macs_per_sequence = macs + extra_macs + attention;
  attention_macs_per_sequence = attention;
}

int64_t count_params(const ParamStore& store, const std::string& prefix) {
  int64_t n = 0;
  for (const auto& p : store.params())
    if (p.name.compare(0, prefix.size(), prefix) == 0) n += p.numel();
  return n;
}

int64_t count_linear_macs(const ParamStore& store, const std::string& prefix) {
  int64_t n = 0;
  for (const auto& p : store.params())
    if (p.name.compare(0, prefix.size(), prefix) == 0 && p.shape.size() == 2 && p.name.size() > 7 &&
        p.name.compare(p.name.size() - 7, 7, ".weight") == 0)
      n += p.shape[0] * p.shape[1];
  return n;
}

void ModelRegistry::add(ModelKind kind) {
  if (kind.type.empty() || find(kind.type))
    throw std::logic_error("model kind '" + kind.type + "' is empty or registered twice");
  kinds_.push_back(std::move(kind));
}

const ModelKind* ModelRegistry::find(const std::string& type) const {
  for (const ModelKind& k : kinds_)
    if (k.type == type) return &k;
  return nullptr;
}

}  // namespace vitk::nn
