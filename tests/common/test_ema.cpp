// The EMA of the weights (timm ModelEmaV2) against values computed by hand, and its round trip
// through a checkpoint as an optimizer buffer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/optim/ema.h"
#include "common/optim/optim.h"
#include "common/params.h"

using namespace vitk;

namespace {

void set(Parameter& p, std::initializer_list<float> values) {
  std::copy(values.begin(), values.end(), p.value.f32());
}

struct TwoParams {
  ParamStore store;
  Parameter* w;
  Parameter* b;
  TwoParams() {
    w = &store.add("w", {2});
    b = &store.add("b", {1}, false);
    store.finalize();
    set(*w, {1.f, 2.f});
    set(*b, {-4.f});
  }
};

}  // namespace

TEST(ModelEma, StartsAsACopyAndFollowsTheFormula) {
  TwoParams p;
  optim::ModelEma ema(p.store, 0.9);
  const float* e = ema.values().f32();
  EXPECT_EQ(e[p.w->offset], 1.f);
  EXPECT_EQ(e[p.w->offset + 1], 2.f);
  EXPECT_EQ(e[p.b->offset], -4.f);

  set(*p.w, {3.f, -1.f});
  set(*p.b, {6.f});
  ema.update(p.store);
  // ema = 0.9·ema + 0.1·w
  EXPECT_FLOAT_EQ(e[p.w->offset], 0.9f * 1.f + 0.1f * 3.f);      // 1.2
  EXPECT_FLOAT_EQ(e[p.w->offset + 1], 0.9f * 2.f - 0.1f * 1.f);  // 1.7
  EXPECT_FLOAT_EQ(e[p.b->offset], 0.9f * -4.f + 0.1f * 6.f);     // -3.0

  set(*p.w, {0.f, 0.f});
  ema.update(p.store);
  EXPECT_FLOAT_EQ(e[p.w->offset], 1.08f);
  EXPECT_FLOAT_EQ(e[p.w->offset + 1], 1.53f);
  EXPECT_FLOAT_EQ(e[p.b->offset], 0.9f * -3.f + 0.1f * 6.f);  // -2.1
  // The weights themselves are untouched.
  EXPECT_EQ(p.w->value.f32()[0], 0.f);
}

TEST(ModelEma, DecayZeroCopiesAndOneFreezes) {
  TwoParams p;
  optim::ModelEma copy(p.store, 0.0), frozen(p.store, 1.0);
  set(*p.w, {7.f, 8.f});
  copy.update(p.store);
  frozen.update(p.store);
  EXPECT_EQ(copy.values().f32()[p.w->offset + 1], 8.f);
  EXPECT_EQ(frozen.values().f32()[p.w->offset + 1], 2.f);
}

TEST(ModelEma, SwapTwiceRestoresBitForBit) {
  TwoParams p;
  optim::ModelEma ema(p.store, 0.999);
  set(*p.w, {0.1f, 0.3f});
  ema.update(p.store);
  const Tensor weights = p.store.values().clone(), average = ema.values().clone();
  ema.swap_with(p.store);
  EXPECT_EQ(0, std::memcmp(p.store.values().data(), average.data(), average.nbytes()));
  EXPECT_EQ(0, std::memcmp(ema.values().data(), weights.data(), weights.nbytes()));
  ema.swap_with(p.store);
  EXPECT_EQ(0, std::memcmp(p.store.values().data(), weights.data(), weights.nbytes()));
  EXPECT_EQ(0, std::memcmp(ema.values().data(), average.data(), average.nbytes()));
}

TEST(ModelEma, RejectsBadDecayAndUnfinalizedStore) {
  TwoParams p;
  EXPECT_THROW(optim::ModelEma(p.store, 1.5), Error);
  EXPECT_THROW(optim::ModelEma(p.store, -0.1), Error);
  ParamStore open;
  open.add("x", {3});
  EXPECT_THROW(optim::ModelEma(open, 0.9), Error);
}

TEST(WithEma, StepsTheOptimizerThenTheAverage) {
  TwoParams p;
  optim::Sgd sgd(p.store, {0.0, 0.0, false});
  optim::ModelEma ema(p.store, 0.5);
  optim::WithEma opt(sgd, ema, p.store);
  EXPECT_EQ(opt.kind(), "sgd");
  p.w->grad.f32()[0] = 1.f;
  opt.step(0.5f);  // w0: 1 -> 0.5; ema0 = 0.5·1 + 0.5·0.5
  EXPECT_FLOAT_EQ(p.w->value.f32()[0], 0.5f);
  EXPECT_FLOAT_EQ(ema.values().f32()[p.w->offset], 0.75f);
  EXPECT_EQ(opt.steps(), 1);
  EXPECT_EQ(sgd.steps(), 1);
  auto state = opt.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "momentum_buffer");
  EXPECT_EQ(state[1].first, "ema");
  EXPECT_EQ(state[1].second, &ema.values());
}

TEST(WithEma, CheckpointRoundTripKeepsTheAverageAndTheSteps) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("vitk_ema_" + std::to_string(getpid()) + ".h5"))
          .string();
  TwoParams a;
  optim::AdamW adam_a(a.store, {});
  optim::ModelEma ema_a(a.store, 0.9);
  optim::WithEma opt_a(adam_a, ema_a, a.store);
  for (int i = 0; i < 3; ++i) {
    a.w->grad.f32()[0] = 0.3f * static_cast<float>(i + 1), a.b->grad.f32()[0] = -0.2f;
    opt_a.step(0.1f);
  }
  io::save_checkpoint(path, a.store, {}, &opt_a);

  TwoParams b;
  optim::AdamW adam_b(b.store, {});
  optim::ModelEma ema_b(b.store, 0.9);
  optim::WithEma opt_b(adam_b, ema_b, b.store);
  io::load_checkpoint(path, b.store, &opt_b);
  opt_b.sync_steps();
  EXPECT_EQ(adam_b.steps(), 3);
  EXPECT_EQ(opt_b.steps(), 3);
  EXPECT_EQ(0, std::memcmp(ema_b.values().data(), ema_a.values().data(), ema_a.values().nbytes()));
  EXPECT_EQ(
      0, std::memcmp(b.store.values().data(), a.store.values().data(), a.store.values().nbytes()));
  // Without the average the file still loads into a plain AdamW (the buffer is just extra).
  TwoParams c;
  optim::AdamW adam_c(c.store, {});
  EXPECT_NO_THROW(io::load_checkpoint(path, c.store, &adam_c));
  std::remove(path.c_str());
}
