#include "common/train/task.h"

#include "common/error.h"

namespace vitk::train {

StepStats& StepStats::operator+=(const StepStats& o) {
  loss_sum += o.loss_sum;
  items += o.items;
  correct += o.correct;
  units += o.units;
  return *this;
}

double Metrics::get(const std::string& name) const {
  for (const auto& list : {&values, &extra})
    for (const auto& [key, value] : *list)
      if (key == name) return value;
  throw Error("no validation figure '" + name + "'");
}

}  // namespace vitk::train
