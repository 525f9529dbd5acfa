#pragma once
// The training curves of a metrics.csv (`vitk plot metrics`): against the optimizer step, one
// panel per kind of column that the file has, in this order:
//   loss       every column whose name ends in "loss" (train_loss, val_loss, valid_loss, ...)
//   accuracy   "acc", "top1", "top5" columns, in percent (vitk train)
//   BLEU       "bleu" columns (vitk mt-train)
//   learning rate   "lr"
// Other columns (epoch, throughput, seconds) are left out.
#include <string>

#include "common/metrics_csv.h"
#include "common/plot/plot.h"

namespace vitk::plot {

// vitk::Error naming `source` when there is no "step" column or nothing to draw.
Chart metrics_chart(const MetricsTable& table, const std::string& source);

}  // namespace vitk::plot
