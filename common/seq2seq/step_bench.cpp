// `vitk bench mt-step`: the real training step (train::Step on a TranslationTask) timed on one
// batch.
#include "common/seq2seq/step_bench.h"

#include <string>

#include "common/seq2seq/train_task.h"

namespace vitk::seq2seq {

TransformerConfig StepBenchOptions::small_model() {
  TransformerConfig c;
  c.vocab_size = 8000;
  c.d_model = 256;
  c.heads = 4;
  c.d_ff = 1024;
  c.layers = 3;
  c.decoder_layers = 3;
  c.dropout = 0.1f;
  c.attention_dropout = 0.f;
  return c;
}

bench::StepResult run_step_bench(const StepBenchOptions& o, std::ostream* log) {
  o.model.validate();
  ops::Rng rng(1);
  // Full-length sentences of random non-special ids (4 .. V-1); the lengths still go through
  // the padding masks, as in training.
  const int64_t B = o.batch, Ts = o.source_length, Tt = o.target_length;
  const int64_t V = o.model.vocab_size;
  auto ids = [&](int64_t rows, int64_t cols) {
    Tensor t({rows, cols}, DType::i32);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.i32()[i] = static_cast<int32_t>(4 + rng.next_u64() % static_cast<uint64_t>(V - 4));
    return t;
  };
  auto lengths = [&](int64_t value) {
    Tensor t({B}, DType::i32);
    for (int64_t i = 0; i < B; ++i) t.i32()[i] = static_cast<int32_t>(value);
    return t;
  };
  TokenBatch batch;
  batch.source = ids(B, Ts);
  batch.target_in = ids(B, Tt);
  batch.target_out = ids(B, Tt);
  batch.source_lengths = lengths(Ts);
  batch.target_lengths = lengths(Tt);
  batch.target_tokens = B * Tt;

  TrainOptions options;  // the paper's Adam and label smoothing 0.1, as `vitk mt-train`
  options.loop.precision = o.precision;
  TranslationTask task(o.model, options, std::move(batch));
  bench::StepResult r = bench::time_training_steps(task, o.precision, o.timing, log);
  r.parameters = task.params().numel();
  return r;
}

void print_step_bench(std::ostream& out, const StepBenchOptions& o, const bench::StepResult& r) {
  const auto& m = o.model;
  const std::string model = "d " + std::to_string(m.d_model) + ", " + std::to_string(m.layers) +
                            "+" + std::to_string(m.decoder_layers) + " layers, " +
                            std::to_string(m.heads) + " heads, d_ff " + std::to_string(m.d_ff) +
                            ", vocabulary " + std::to_string(m.vocab_size);
  const std::string what =
      model + ", batch " + std::to_string(o.batch) + "x" + std::to_string(o.source_length) + "->" +
      std::to_string(o.target_length) + ", " + ops::precision_name(o.precision);
  bench::print_step_model(
      out, "mt-step", "Transformer, " + model + (m.tied_embeddings ? " (tied)" : " (untied)"), r);
  bench::print_step_result(out, "mt-step", what, static_cast<double>(o.batch * o.target_length),
                           "target tokens", r);
}

}  // namespace vitk::seq2seq
