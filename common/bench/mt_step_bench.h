#pragma once
// `vitk bench mt-step`: one training step (forward, label-smoothed cross-entropy, backward, Adam)
// of the translation Transformer, by default the size of issue 7's PyTorch comparison and of
// configs/transformer-small.ini (d 256, 3 + 3 post-norm layers, 4 heads, FFN 1024, tied 8k
// vocabulary, dropout 0.1), on random token ids of a fixed batch shape (128 sentences of 32
// source and 32 target tokens), with an optional per-part breakdown.
#include <iosfwd>

#include "common/bench/step_bench.h"
#include "common/ops/ops.h"
#include "common/seq2seq/config.h"

namespace vitk::bench {

struct MtStepOptions {
  seq2seq::TransformerConfig model = small_model();
  int64_t batch = 128;
  int64_t source_length = 32;
  int64_t target_length = 32;  // target positions predicted per sentence
  StepTiming timing;
  ops::Precision precision = ops::Precision::f32;  // of the matrix products

  static seq2seq::TransformerConfig small_model();
};

StepResult run_mt_step_bench(const MtStepOptions& options, std::ostream* log = nullptr);
void print_mt_step(std::ostream& out, const MtStepOptions& options, const StepResult& r);

}  // namespace vitk::bench
