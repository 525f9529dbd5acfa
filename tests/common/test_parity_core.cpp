// Parity of the Transformer core (common/nn) with PyTorch: MultiHeadAttention, EncoderLayer,
// DecoderLayer and Encoder + Decoder against nn.MultiheadAttention, nn.TransformerEncoderLayer,
// nn.TransformerDecoderLayer and nn.Transformer (llm.c's test_gpt2.c pattern: PyTorch's run saved).
//
// The fixtures are written by tests/parity/make_core_fixtures.py (see tests/parity/README.md):
// parameters under vitk's names, inputs, the output y and the gradients of L = sum(y * w).
// Each case builds the vitk module, checks that its parameter names are exactly the fixture's,
// copies the values in, runs forward and backward in training mode and compares y on valid rows
// (PyTorch's values on padded query rows are not part of the contract) and every gradient on all
// rows (with w zero on padded query rows, the exact gradient there is zero).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/nn/nn.h"
#include "common/params.h"
#include "common/tensor.h"
#include "util/fixture_io.h"
#include "util/parity.h"

using namespace vitk;

namespace {

using test::compare;
using test::Errors;

std::string fixture_path(const std::string& name) {
  return std::string(VITK_SOURCE_DIR) + "/tests/fixtures/core/" + name + ".h5";
}

// One vitk module (or the encoder-decoder pair) behind a common forward/backward.
struct Model {
  std::function<Tensor(nn::Context&, const Tensor& x, const Tensor& memory)> forward;
  std::function<Tensor(nn::Context&, const Tensor& dy, Tensor* dmemory)> backward;
};

nn::LayerConfig layer_config(const test::FixtureFile& f) {
  nn::LayerConfig c;
  c.d_model = f.attr_int("d_model");
  c.heads = f.attr_int("heads");
  c.d_ff = f.attr_int("d_ff");
  c.activation = ops::parse_activation(f.attr_string("activation"));
  c.pre_norm = f.attr_int("norm_first") != 0;
  c.norm_eps = static_cast<float>(f.attr_float("eps"));
  c.dropout = 0.f;
  c.attention_dropout = 0.f;
  return c;
}

// Registers the case's module in `store` (not yet finalized) and returns it.
Model build(const test::FixtureFile& f, ParamStore& store, const Tensor& x_lengths,
            const Tensor& memory_lengths) {
  const std::string kind = f.attr_string("kind");
  const std::string prefix = f.attr_string("prefix");
  const bool causal = f.attr_int("causal") != 0;
  Model m;
  if (kind == "mha_self" || kind == "mha_cross") {
    nn::AttentionConfig c;
    c.d_model = f.attr_int("d_model");
    c.heads = f.attr_int("heads");
    c.cross = kind == "mha_cross";
    auto mha = std::make_shared<nn::MultiHeadAttention>(store, prefix, c);
    const nn::AttentionMask mask =
        c.cross ? nn::AttentionMask{memory_lengths, false} : nn::AttentionMask{x_lengths, causal};
    const bool cross = c.cross;
    m.forward = [=](nn::Context& ctx, const Tensor& x, const Tensor& memory) {
      return mha->forward(ctx, x, cross ? memory : Tensor(), mask);
    };
    m.backward = [=](nn::Context& ctx, const Tensor& dy, Tensor* dmemory) {
      return mha->backward(ctx, dy, cross ? dmemory : nullptr);
    };
  } else if (kind == "encoder_layer") {
    auto layer = std::make_shared<nn::EncoderLayer>(store, prefix, layer_config(f));
    const nn::AttentionMask mask{x_lengths, causal};
    m.forward = [=](nn::Context& ctx, const Tensor& x, const Tensor&) {
      return layer->forward(ctx, x, mask);
    };
    m.backward = [=](nn::Context& ctx, const Tensor& dy, Tensor*) {
      return layer->backward(ctx, dy);
    };
  } else if (kind == "decoder_layer") {
    auto layer = std::make_shared<nn::DecoderLayer>(store, prefix, layer_config(f));
    const nn::AttentionMask self_mask{x_lengths, causal}, memory_mask{memory_lengths, false};
    m.forward = [=](nn::Context& ctx, const Tensor& x, const Tensor& memory) {
      return layer->forward(ctx, x, memory, self_mask, memory_mask);
    };
    m.backward = [=](nn::Context& ctx, const Tensor& dy, Tensor* dmemory) {
      return layer->backward(ctx, dy, dmemory);
    };
  } else if (kind == "transformer") {
    // nn.Transformer: x is the embedded target, memory the embedded source.
    const nn::LayerConfig c = layer_config(f);
    const bool final_norm = f.attr_int("final_norm") != 0;
    auto encoder = std::make_shared<nn::Encoder>(
        store, prefix + "encoder", c, static_cast<int>(f.attr_int("encoder_layers")), final_norm);
    auto decoder = std::make_shared<nn::Decoder>(
        store, prefix + "decoder", c, static_cast<int>(f.attr_int("decoder_layers")), final_norm);
    const nn::AttentionMask source_mask{memory_lengths, false}, target_mask{x_lengths, causal};
    m.forward = [=](nn::Context& ctx, const Tensor& x, const Tensor& source) {
      const Tensor memory = encoder->forward(ctx, source, source_mask);
      return decoder->forward(ctx, x, memory, target_mask, source_mask);
    };
    m.backward = [=](nn::Context& ctx, const Tensor& dy, Tensor* dsource) {
      Tensor dmemory;
      Tensor dx = decoder->backward(ctx, dy, &dmemory);
      *dsource = encoder->backward(ctx, dmemory);
      return dx;
    };
  } else {
    throw Error(f.path() + ": unknown kind '" + kind + "'");
  }
  return m;
}

class ParityCore : public ::testing::TestWithParam<const char*> {};

TEST_P(ParityCore, MatchesPyTorch) {
  const std::string name = GetParam();
  test::FixtureFile f(fixture_path(name));
  const bool with_memory = f.has("input/memory");
  const Tensor x = f.read_f32("input/x");  // [B, T, d]
  const Tensor x_lengths = f.read_i32("input/x_lengths");
  const Tensor memory = with_memory ? f.read_f32("input/memory") : Tensor();  // [B, S, d]
  const Tensor memory_lengths = with_memory ? f.read_i32("input/memory_lengths") : Tensor();

  ParamStore store;
  Model model = build(f, store, x_lengths, memory_lengths);
  store.finalize();

  // The names prove the mapping: vitk registers exactly the parameters the fixture renamed.
  ASSERT_NO_FATAL_FAILURE(test::load_fixture_params(f, store));
  store.zero_grad();

  Arena arena(1 << 20);
  nn::Context ctx;
  ctx.training = true;
  ctx.arena = &arena;

  const Tensor y = model.forward(ctx, x, memory);
  const Errors ey = compare("y", y, f.read_f32("output/y"), &x_lengths);

  const Tensor dy = f.read_f32("input/loss_weight");  // dL/dy, zero on padded query rows
  Tensor dmemory;
  const Tensor dx = model.backward(ctx, dy, with_memory ? &dmemory : nullptr);
  const Errors edx = compare("grad/x", dx, f.read_f32("grad/x"));
  Errors edm;
  if (with_memory) edm = compare("grad/memory", dmemory, f.read_f32("grad/memory"));
  Errors ep;
  for (const auto& p : store.params())
    ep.merge(compare("grad/param/" + p.name, p.grad, f.read_f32("grad/param/" + p.name)));

  Errors all = ey;
  all.merge(edx);
  all.merge(edm);
  all.merge(ep);
  RecordProperty("max_abs_error", std::to_string(all.max_abs));
  RecordProperty("tolerance_ratio", std::to_string(all.ratio));
  RecordProperty("worst_element", all.where);
  // vitk's errors next to those of PyTorch's own float32 run against the same reference.
  std::printf("[ parity ] %s (vitk | PyTorch float32)\n", name.c_str());
  auto line = [&](const char* group, const Errors& e) {
    const std::string g = group;
    std::printf("[ parity ]   %-8s %s | %.2e, %.3f\n", group, e.str().c_str(),
                f.attr_float("torch_float32_max_abs_" + g),
                f.attr_float("torch_float32_error_" + g));
  };
  line("y", ey);
  line("dx", edx);
  if (with_memory) line("dmemory", edm);
  line("dparams", ep);
}

INSTANTIATE_TEST_SUITE_P(Core, ParityCore,
                         ::testing::Values("01_mha_self_padding", "02_mha_self_causal",
                                           "03_mha_cross", "04_encoder_post_relu",
                                           "05_encoder_post_gelu", "06_encoder_pre_relu",
                                           "07_encoder_pre_gelu", "08_decoder_post_relu",
                                           "09_decoder_pre_gelu", "10_transformer"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           return std::string("case") + param.param;
                         });

}  // namespace
