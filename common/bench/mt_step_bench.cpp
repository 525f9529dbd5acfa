#include "common/bench/mt_step_bench.h"

#include <string>

#include "common/ops/profile.h"
#include "common/optim/optim.h"
#include "common/seq2seq/model.h"

namespace vitk::bench {

seq2seq::TransformerConfig MtStepOptions::small_model() {
  seq2seq::TransformerConfig c;
  c.vocab_size = 8000;
  c.d_model = 256;
  c.heads = 4;
  c.d_ff = 1024;
  c.encoder_layers = 3;
  c.decoder_layers = 3;
  c.dropout = 0.1f;
  c.attention_dropout = 0.f;
  return c;
}

StepResult run_mt_step_bench(const MtStepOptions& o, std::ostream* log) {
  o.model.validate();
  ParamStore params;
  seq2seq::Transformer model(params, o.model);
  params.finalize();
  ops::Rng rng(1);
  model.init(rng);
  optim::AdamWOptions adam;  // the paper's Adam, as `vitk mt-train`
  adam.beta1 = 0.9;
  adam.beta2 = 0.98;
  adam.eps = 1e-9;
  adam.weight_decay = 0;
  optim::AdamW opt(params, adam);

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
  const Tensor source = ids(B, Ts), target_in = ids(B, Tt), target_out = ids(B, Tt);
  const Tensor source_lengths = lengths(Ts), target_lengths = lengths(Tt);

  Arena arena;
  auto step = [&] {
    arena.reset();
    nn::Context ctx;
    ctx.training = true;
    ctx.arena = &arena;
    ctx.rng = &rng;
    ctx.precision = o.precision;
    Tensor logits, dlogits;
    {
      ops::profile::Scope s("model forward (rest)");
      logits = model.forward(ctx, source, source_lengths, target_in, target_lengths);
    }
    {
      ops::profile::Scope s("cross-entropy");
      seq2seq::sequence_loss(ctx, logits, target_out, 0.1f, &dlogits, 1.f, true);
    }
    {
      ops::profile::Scope s("zero_grad");
      params.zero_grad();
    }
    {
      ops::profile::Scope s("model backward (rest)");
      model.backward(ctx, dlogits);
    }
    {
      ops::profile::Scope s("adam");
      opt.step(1e-3f);
    }
  };
  return time_steps(step, o.timing, log);
}

void print_mt_step(std::ostream& out, const MtStepOptions& o, const StepResult& r) {
  const auto& m = o.model;
  const std::string what =
      "d " + std::to_string(m.d_model) + ", " + std::to_string(m.encoder_layers) + "+" +
      std::to_string(m.decoder_layers) + " layers, " + std::to_string(m.heads) + " heads, d_ff " +
      std::to_string(m.d_ff) + ", vocabulary " + std::to_string(m.vocab_size) + ", batch " +
      std::to_string(o.batch) + "x" + std::to_string(o.source_length) + "->" +
      std::to_string(o.target_length) + ", " + ops::precision_name(o.precision);
  print_step_result(out, "mt-step", what, static_cast<double>(o.batch * o.target_length),
                    "target tokens", r);
}

}  // namespace vitk::bench
