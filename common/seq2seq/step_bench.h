#pragma once
// `vitk bench mt-step`: the training step of `vitk mt-train` (train::Step on a TranslationTask:
// forward, label-smoothed cross-entropy, backward, Adam) timed on the translation Transformer, by
// default the size of configs/transformer-small.ini (d 256, 3 + 3 post-norm layers, 4 heads, FFN
// 1024, tied 8k vocabulary, dropout 0.1), and one batch of random token ids held in memory (128
// sentences of 32 source and 32 target tokens), with an optional per-part breakdown.
#include <cstdint>
#include <iosfwd>

#include "common/bench/step_bench.h"
#include "common/ops/ops.h"
#include "common/seq2seq/config.h"

namespace vitk::seq2seq {

struct StepBenchOptions {
  TransformerConfig model = small_model();
  int64_t batch = 128;
  int64_t source_length = 32;
  int64_t target_length = 32;  // target positions predicted per sentence
  bench::StepTiming timing;
  ops::Precision precision = ops::Precision::f32;  // of the matrix products

  static TransformerConfig small_model();
};

bench::StepResult run_step_bench(const StepBenchOptions& options, std::ostream* log = nullptr);
void print_step_bench(std::ostream& out, const StepBenchOptions& options,
                      const bench::StepResult& r);

}  // namespace vitk::seq2seq
