// Translation alignments (common/seq2seq/alignment.h): the cross-attention rows of a tiny
// translator against the weights its cached decoder kept step by step, and the layer and head they
// name. (The pictures drawn from them: tools/test_plot_cli.cpp.)
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/error.h"
#include "common/seq2seq/alignment.h"

namespace {

using namespace vitk;

double row_sum(const Tensor& m, int64_t i) {
  double s = 0;
  for (int64_t j = 0; j < m.dim(1); ++j) s += m.f32()[i * m.dim(1) + j];
  return s;
}

struct TinyTranslator {
  ParamStore params;
  std::unique_ptr<seq2seq::Transformer> model;
  TinyTranslator() {
    seq2seq::TransformerConfig c;
    c.vocab_size = 12;
    c.d_model = 16;
    c.heads = 2;
    c.d_ff = 32;
    c.layers = 1;
    c.decoder_layers = 2;
    c.dropout = 0;
    c.max_length = 32;
    model = std::make_unique<seq2seq::Transformer>(params, c);
    params.finalize();
    ops::Rng rng(8);
    model->init(rng);
  }
};

TEST(Alignment, RowsSumToOneAndMatchWhatIncrementalDecodingAttended) {
  TinyTranslator t;
  const std::vector<int> source = {5, 6, 7, 9, seq2seq::kEosId};
  const std::vector<int32_t> target = {4, 8, 10};
  const int64_t Ts = 5, rows = 4, H = 2;
  for (int head : {-1, 0, 1}) {
    SCOPED_TRACE(head);
    seq2seq::AlignmentOptions o;
    o.head = head;  // the last layer
    const Tensor a = seq2seq::cross_attention(*t.model, source, target, true, o);
    ASSERT_EQ(a.shape(), (Shape{rows, Ts}));
    for (int64_t i = 0; i < rows; ++i) EXPECT_NEAR(row_sum(a, i), 1.0, 1e-5);

    // Decode step by step on the cached decoder, as search does, and keep each step's weights.
    Tensor src({1, Ts}, DType::i32), len({1}, DType::i32);
    for (int64_t j = 0; j < Ts; ++j) src.i32()[j] = source[j];
    len.i32()[0] = static_cast<int32_t>(Ts);
    Arena arena;
    nn::Context ctx;
    ctx.arena = &arena;
    nn::Decoder::State state;
    const Tensor memory = t.model->encode(ctx, src, len);
    t.model->start(ctx, memory, len, rows, state);
    nn::MultiHeadAttention& cross = t.model->decoder().layers()[1].cross_attention();
    cross.keep_weights = true;
    const std::vector<int32_t> fed = {seq2seq::kBosId, 4, 8, 10};
    for (int64_t step = 0; step < rows; ++step) {
      Tensor token({1}, DType::i32);
      token.i32()[0] = fed[step];
      t.model->step(ctx, token, state);
      const Tensor& w = cross.weights();  // [1, H, 1, Ts]
      ASSERT_EQ(w.shape(), (Shape{1, H, 1, Ts}));
      for (int64_t j = 0; j < Ts; ++j) {
        const double want =
            head < 0 ? 0.5 * (w.f32()[j] + w.f32()[Ts + j]) : w.f32()[head * Ts + j];
        EXPECT_NEAR(a.f32()[step * Ts + j], want, 2e-5) << "row " << step << " col " << j;
      }
    }
    cross.keep_weights = false;
  }
  // The alignment leaves keep_weights as it found it.
  EXPECT_FALSE(t.model->decoder().layers()[1].cross_attention().keep_weights);
  // Without the EOS row (a hypothesis cut by the length limit).
  const Tensor cut = seq2seq::cross_attention(*t.model, source, target, false, {});
  EXPECT_EQ(cut.shape(), (Shape{3, Ts}));
}

TEST(Alignment, LayerAndHeadMustExist) {
  TinyTranslator t;
  seq2seq::AlignmentOptions o;
  o.layer = 2;
  EXPECT_THROW(seq2seq::cross_attention(*t.model, {5, 3}, {4}, true, o), UsageError);
  o.layer = 0;
  o.head = 2;
  EXPECT_THROW(seq2seq::describe(*t.model, o), UsageError);
  o.head = 1;
  EXPECT_EQ(seq2seq::describe(*t.model, o), "decoder layer 0 of 2, head 1 of 2");
  EXPECT_EQ(seq2seq::describe(*t.model, {}), "decoder layer 1 of 2 (the last), mean of 2 heads");
  const Tensor first = seq2seq::cross_attention(*t.model, {5, 6, 3}, {4}, true, o);
  EXPECT_EQ(first.shape(), (Shape{2, 3}));
}

}  // namespace
