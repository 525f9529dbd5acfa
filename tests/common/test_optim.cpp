// Optimizers and schedules against values worked out by hand (closed forms written in double),
// plus the invariants the rest of the toolkit relies on: the gradient arena is read-only, padding
// stays zero, results do not depend on the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/optim/optim.h"
#include "common/params.h"

using namespace vitk;
using namespace vitk::optim;

namespace {

void set_values(Parameter& p, std::initializer_list<float> v) {
  ASSERT_EQ(static_cast<int64_t>(v.size()), p.numel());
  std::copy(v.begin(), v.end(), p.value.f32());
}

void set_grads(Parameter& p, std::initializer_list<float> g) {
  ASSERT_EQ(static_cast<int64_t>(g.size()), p.numel());
  std::copy(g.begin(), g.end(), p.grad.f32());
}

// Runs f, expects a vitk::Error whose message contains `word` (the option at fault).
void expect_error_naming(const std::function<void()>& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no vitk::Error thrown; expected one naming '" << word << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos)
        << "message '" << e.what() << "' does not name '" << word << "'";
  }
}

AdamWOptions adamw_options(double weight_decay) {
  AdamWOptions o;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  o.weight_decay = weight_decay;
  return o;
}

SgdOptions sgd_options(float momentum, float weight_decay, bool nesterov) {
  SgdOptions o;
  o.momentum = momentum;
  o.weight_decay = weight_decay;
  o.nesterov = nesterov;
  return o;
}

constexpr double kTol = 2e-6;

}  // namespace

// After one step m̂ = g and v̂ = g², so every weight moves by lr·g/(|g| + eps) ≈ lr·sign(g), after
// the decoupled decay p·(1 − lr·wd) for parameters that take decay.
TEST(AdamW, FirstStepMovesBySignOfGradientPlusDecay) {
  ParamStore store;
  Parameter& w = store.add("w", {3}, /*decay=*/true);
  Parameter& b = store.add("b", {2}, /*decay=*/false);
  store.finalize();
  set_values(w, {1.f, -2.f, 0.5f});
  set_grads(w, {0.3f, -4.f, 1e-6f});
  set_values(b, {0.25f, -0.75f});
  set_grads(b, {-2.f, 0.5f});

  AdamW opt(store, adamw_options(0.01f));
  opt.step(0.1f);

  const double keep = 1 - 0.1 * 0.01;  // 0.999
  EXPECT_NEAR(w.value.f32()[0], 1.0 * keep - 0.1, kTol);
  EXPECT_NEAR(w.value.f32()[1], -2.0 * keep + 0.1, kTol);
  // A gradient only 100 times eps shows eps: the step is 0.1 · 1e-6 / (1e-6 + 1e-8), 1% short.
  EXPECT_NEAR(w.value.f32()[2], 0.5 * keep - 0.1 * 1e-6 / (1e-6 + 1e-8), kTol);
  // decay = false: no shrinkage, only the sign step.
  EXPECT_NEAR(b.value.f32()[0], 0.25 + 0.1, kTol);
  EXPECT_NEAR(b.value.f32()[1], -0.75 - 0.1, kTol);
  EXPECT_EQ(opt.steps(), 1);
}

// Three steps with changing gradients and learning rates, the moments written out as sums:
// m_t = Σ_k (1−β1)·β1^(t−k)·g_k, v_t = Σ_k (1−β2)·β2^(t−k)·g_k², update = lr·m̂/(sqrt(v̂) + eps).
TEST(AdamW, ThreeStepsMatchHandWorkedRecurrence) {
  ParamStore store;
  Parameter& a = store.add("a", {1}, /*decay=*/true);
  Parameter& c = store.add("c", {1}, /*decay=*/false);
  store.finalize();
  const double wd = 0.1;
  AdamW opt(store, adamw_options(static_cast<float>(wd)));

  const double lr[3] = {0.01, 0.02, 0.005};
  const double ga[3] = {0.5, -0.2, 0.1};
  const double gc[3] = {-3.0, -1.0, 2.0};
  set_values(a, {1.0f});
  set_values(c, {-0.5f});
  for (int s = 0; s < 3; ++s) {
    set_grads(a, {static_cast<float>(ga[s])});
    set_grads(c, {static_cast<float>(gc[s])});
    opt.step(static_cast<float>(lr[s]));
  }

  auto moments = [](const double* g, double m[3], double v[3]) {
    m[0] = 0.1 * g[0];
    m[1] = 0.9 * 0.1 * g[0] + 0.1 * g[1];
    m[2] = 0.81 * 0.1 * g[0] + 0.9 * 0.1 * g[1] + 0.1 * g[2];
    v[0] = 0.001 * g[0] * g[0];
    v[1] = 0.999 * 0.001 * g[0] * g[0] + 0.001 * g[1] * g[1];
    v[2] = 0.998001 * 0.001 * g[0] * g[0] + 0.999 * 0.001 * g[1] * g[1] + 0.001 * g[2] * g[2];
  };
  auto update = [](double lr_t, double m, double v, int t) {
    return lr_t * (m / (1 - std::pow(0.9, t))) / (std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8);
  };
  double m[3], v[3];
  moments(ga, m, v);
  double pa = 1.0;
  for (int t = 1; t <= 3; ++t)
    pa = pa * (1 - lr[t - 1] * wd) - update(lr[t - 1], m[t - 1], v[t - 1], t);
  moments(gc, m, v);
  double pc = -0.5;
  for (int t = 1; t <= 3; ++t) pc -= update(lr[t - 1], m[t - 1], v[t - 1], t);

  EXPECT_NEAR(a.value.f32()[0], pa, kTol);
  EXPECT_NEAR(c.value.f32()[0], pc, kTol);
  // The state buffers hold the raw (uncorrected) moments, as PyTorch's exp_avg / exp_avg_sq.
  auto state = opt.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "exp_avg");
  EXPECT_EQ(state[1].first, "exp_avg_sq");
  EXPECT_NEAR(state[0].second->f32()[c.offset], m[2], 1e-7);
  // 1 − β2 is formed in double before rounding, as PyTorch does, so only f32 rounding remains.
  EXPECT_NEAR(state[1].second->f32()[c.offset], v[2], 2e-6 * v[2]);
  EXPECT_EQ(opt.steps(), 3);
}

TEST(AdamW, LrScaleScalesStepAndDecay) {
  ParamStore store;
  Parameter& w = store.add("w", {2});
  store.finalize();
  w.lr_scale = 0.5f;
  set_values(w, {2.f, -1.f});
  set_grads(w, {1.f, -1.f});
  AdamW opt(store, adamw_options(0.1f));
  opt.step(0.2f);
  // Effective lr 0.1: decay factor 1 − 0.1·0.1, step 0.1·sign(g).
  EXPECT_NEAR(w.value.f32()[0], 2.0 * 0.99 - 0.1, kTol);
  EXPECT_NEAR(w.value.f32()[1], -1.0 * 0.99 + 0.1, kTol);
}

// Resuming from the state buffers and set_steps() continues exactly where the run left off,
// which is what a checkpoint relies on (bias correction depends on the step count).
TEST(AdamW, ResumeFromStateAndStepsIsExact) {
  auto make = [](ParamStore& s) {
    s.add("w", {5});
    s.finalize();
    for (int i = 0; i < 5; ++i) s.values().f32()[i] = 0.1f * static_cast<float>(i);
  };
  auto grads = [](ParamStore& s, int step) {
    for (int i = 0; i < 5; ++i) s.grads().f32()[i] = std::sin(1.0f + static_cast<float>(i + step));
  };
  ParamStore full, first, resumed;
  make(full);
  make(first);
  make(resumed);
  AdamW a(full, adamw_options(0.01f)), b(first, adamw_options(0.01f));
  for (int s = 0; s < 3; ++s) {
    grads(full, s);
    a.step(0.01f);
  }
  for (int s = 0; s < 2; ++s) {
    grads(first, s);
    b.step(0.01f);
  }
  AdamW c(resumed, adamw_options(0.01f));
  resumed.values().copy_from(first.values());
  for (size_t i = 0; i < 2; ++i) c.state()[i].second->copy_from(*b.state()[i].second);
  c.set_steps(b.steps());
  grads(resumed, 2);
  c.step(0.01f);
  EXPECT_EQ(c.steps(), 3);
  EXPECT_EQ(std::memcmp(resumed.values().data(), full.values().data(), full.values().nbytes()), 0);
}

TEST(Sgd, MomentumTwoSteps) {
  ParamStore store;
  Parameter& w = store.add("w", {1});
  store.finalize();
  set_values(w, {2.f});
  Sgd opt(store, sgd_options(0.9f, 0.f, false));
  set_grads(w, {1.f});
  opt.step(0.1f);  // buf = 1, p = 2 − 0.1·1 = 1.9
  EXPECT_NEAR(w.value.f32()[0], 1.9, kTol);
  set_grads(w, {-0.5f});
  opt.step(0.1f);  // buf = 0.9·1 − 0.5 = 0.4, p = 1.9 − 0.1·0.4 = 1.86
  EXPECT_NEAR(w.value.f32()[0], 1.86, kTol);
  auto state = opt.state();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].first, "momentum_buffer");
  EXPECT_NEAR(state[0].second->f32()[w.offset], 0.4, kTol);
  EXPECT_EQ(opt.steps(), 2);
}

TEST(Sgd, Nesterov) {
  ParamStore store;
  Parameter& w = store.add("w", {1});
  store.finalize();
  set_values(w, {2.f});
  Sgd opt(store, sgd_options(0.9f, 0.f, true));
  set_grads(w, {1.f});
  opt.step(0.1f);  // buf = 1, d = 1 + 0.9·1 = 1.9, p = 2 − 0.19 = 1.81
  EXPECT_NEAR(w.value.f32()[0], 1.81, kTol);
  set_grads(w, {-0.5f});
  opt.step(0.1f);  // buf = 0.4, d = −0.5 + 0.9·0.4 = −0.14, p = 1.81 + 0.014 = 1.824
  EXPECT_NEAR(w.value.f32()[0], 1.824, kTol);
}

TEST(Sgd, WeightDecayOnlyWhereDecayIsSet) {
  ParamStore store;
  Parameter& w = store.add("w", {1}, /*decay=*/true);
  Parameter& b = store.add("b", {1}, /*decay=*/false);
  store.finalize();
  set_values(w, {2.f});
  set_values(b, {2.f});
  Sgd opt(store, sgd_options(0.9f, 0.1f, false));
  set_grads(w, {1.f});
  set_grads(b, {1.f});
  opt.step(0.1f);
  // w: d = 1 + 0.1·2 = 1.2, buf = 1.2, p = 2 − 0.12 = 1.88.
  EXPECT_NEAR(w.value.f32()[0], 1.88, kTol);
  EXPECT_NEAR(b.value.f32()[0], 1.9, kTol);
  set_grads(w, {-0.5f});
  set_grads(b, {-0.5f});
  opt.step(0.1f);
  // w: d = −0.5 + 0.1·1.88 = −0.312, buf = 0.9·1.2 − 0.312 = 0.768, p = 1.88 − 0.0768 = 1.8032.
  EXPECT_NEAR(w.value.f32()[0], 1.8032, kTol);
  EXPECT_NEAR(b.value.f32()[0], 1.86, kTol);
}

TEST(Sgd, PlainAndLrScale) {
  ParamStore store;
  Parameter& w = store.add("w", {2});
  store.finalize();
  w.lr_scale = 0.25f;
  set_values(w, {1.f, -1.f});
  set_grads(w, {2.f, 4.f});
  Sgd opt(store, sgd_options(0.f, 0.f, false));
  opt.step(0.4f);  // effective lr 0.1
  EXPECT_NEAR(w.value.f32()[0], 0.8, kTol);
  EXPECT_NEAR(w.value.f32()[1], -1.4, kTol);
  opt.step(0.4f);  // no momentum: the same step again
  EXPECT_NEAR(w.value.f32()[0], 0.6, kTol);
  EXPECT_NEAR(w.value.f32()[1], -1.8, kTol);
}

// Both optimizers read the gradient arena and never write it (SGD folds weight decay into a local),
// and touch no padding slot of any arena.
TEST(Optimizers, GradientsUnchangedAndPaddingStaysZero) {
  for (const std::string kind : {"adamw", "sgd"}) {
    SCOPED_TRACE(kind);
    ParamStore store;
    Parameter& w = store.add("w", {3});
    Parameter& b = store.add("b", {2, 3});
    store.finalize();
    ASSERT_GT(store.arena_floats(), static_cast<size_t>(store.numel()));
    set_values(w, {1.f, -2.f, 3.f});
    set_grads(w, {0.5f, 0.25f, -1.f});
    set_values(b, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});
    set_grads(b, {-1.f, 1.f, -2.f, 2.f, -3.f, 3.f});
    Tensor grads_before = store.grads().clone();

    std::unique_ptr<Optimizer> opt;
    if (kind == "adamw")
      opt = std::make_unique<AdamW>(store, adamw_options(0.1f));
    else
      opt = std::make_unique<Sgd>(store, sgd_options(0.9f, 0.1f, true));
    EXPECT_EQ(opt->kind(), kind);
    for (int s = 0; s < 3; ++s) {
      opt->step(0.1f);
      EXPECT_EQ(opt->steps(), s + 1);
    }
    EXPECT_EQ(std::memcmp(store.grads().data(), grads_before.data(), grads_before.nbytes()), 0);

    std::vector<const Tensor*> arenas = {&store.values(), &store.grads()};
    for (auto& named : opt->state()) {
      EXPECT_EQ(named.second->numel(), static_cast<int64_t>(store.arena_floats()));
      arenas.push_back(named.second);
    }
    std::vector<bool> used(store.arena_floats(), false);
    for (const Parameter& p : store.params())
      for (int64_t i = 0; i < p.numel(); ++i) used[p.offset + i] = true;
    for (const Tensor* t : arenas)
      for (size_t i = 0; i < used.size(); ++i) {
        if (!used[i]) {
          EXPECT_EQ(t->f32()[i], 0.f) << "padding slot " << i;
        }
      }
  }
}

// A slice large enough to run in parallel gives the same bits with one thread and with two.
TEST(Optimizers, ResultDoesNotDependOnThreadCount) {
  const int64_t n = 100003;
  auto run = [n](int threads, bool adamw) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    ParamStore store;
    Parameter& w = store.add("w", {n});
    store.finalize();
    for (int64_t i = 0; i < n; ++i) w.value.f32()[i] = std::cos(0.001f * static_cast<float>(i));
    std::unique_ptr<Optimizer> opt;
    if (adamw)
      opt = std::make_unique<AdamW>(store, adamw_options(0.05f));
    else
      opt = std::make_unique<Sgd>(store, sgd_options(0.9f, 0.05f, true));
    for (int s = 0; s < 3; ++s) {
      for (int64_t i = 0; i < n; ++i)
        w.grad.f32()[i] = std::sin(0.01f * static_cast<float>(i * (s + 1)));
      opt->step(0.01f);
    }
    omp_set_num_threads(saved);
    return w.value.clone();
  };
  for (bool adamw : {true, false}) {
    Tensor one = run(1, adamw), two = run(2, adamw);
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.nbytes()), 0) << (adamw ? "adamw" : "sgd");
  }
}

// Minimise Σ(p − c)², gradient 2(p − c).
TEST(Optimizers, ConvergeOnQuadratic) {
  const int n = 64;
  auto loss_after = [n](bool adamw) {
    ParamStore store;
    Parameter& w = store.add("w", {n}, /*decay=*/false);
    store.finalize();
    std::vector<float> c(n);
    for (int i = 0; i < n; ++i) c[i] = 2.f * std::sin(static_cast<float>(i));
    std::unique_ptr<Optimizer> opt;
    std::unique_ptr<Schedule> schedule;
    if (adamw) {
      opt = std::make_unique<AdamW>(store, adamw_options(0.01f));
      schedule = std::make_unique<WarmupCosine>(0.1f, 10, 400);
    } else {
      opt = std::make_unique<Sgd>(store, sgd_options(0.9f, 0.f, false));
      schedule = std::make_unique<WarmupCosine>(0.05f, 0, 400);
    }
    auto loss = [&] {
      double l = 0;
      for (int i = 0; i < n; ++i) l += std::pow(w.value.f32()[i] - c[i], 2);
      return l;
    };
    const double initial = loss();
    for (int s = 0; s < 400; ++s) {
      for (int i = 0; i < n; ++i) w.grad.f32()[i] = 2.f * (w.value.f32()[i] - c[i]);
      opt->step(schedule->lr(s));
    }
    return loss() / initial;
  };
  EXPECT_LT(loss_after(true), 1e-4);
  EXPECT_LT(loss_after(false), 1e-8);
}

TEST(Schedule, WarmupCosineKeyPoints) {
  WarmupCosine s(1.f, 10, 110, 0.1f);
  EXPECT_NEAR(s.lr(0), 0.1, 1e-7);                                 // 1·(0+1)/10
  EXPECT_NEAR(s.lr(4), 0.5, 1e-7);                                 // 1·5/10
  EXPECT_NEAR(s.lr(9), 1.0, 1e-7);                                 // last warmup step reaches base
  EXPECT_NEAR(s.lr(10), 1.0, 1e-7);                                // progress 0: cos 0 = 1
  EXPECT_NEAR(s.lr(35), 0.1 + 0.45 * (1 + std::sqrt(0.5)), 1e-6);  // progress 1/4
  EXPECT_NEAR(s.lr(60), 0.55, 1e-6);                               // progress 1/2: cos = 0
  EXPECT_NEAR(s.lr(110), 0.1, 1e-7);                               // end: min_lr
  EXPECT_NEAR(s.lr(1000), 0.1, 1e-7);                              // held after the end

  WarmupCosine no_warmup(2.f, 0, 4);
  EXPECT_NEAR(no_warmup.lr(0), 2.0, 1e-7);
  EXPECT_NEAR(no_warmup.lr(2), 1.0, 1e-6);
  EXPECT_NEAR(no_warmup.lr(4), 0.0, 1e-7);
  EXPECT_NEAR(no_warmup.lr(9), 0.0, 1e-7);
}

TEST(Schedule, InverseSqrtKeyPoints) {
  InverseSqrt s(512, 4000);
  const double peak = 1 / std::sqrt(512.0) / std::sqrt(4000.0);
  EXPECT_NEAR(s.lr(0), 1 / std::sqrt(512.0) / std::pow(4000.0, 1.5), 1e-12);  // n = 1
  EXPECT_NEAR(s.lr(1999), peak / 2, 1e-9);  // n = 2000: linear half way up
  EXPECT_NEAR(s.lr(3999), peak, 1e-9);      // n = warmup
  EXPECT_LT(s.lr(3998), s.lr(3999));
  EXPECT_LT(s.lr(4000), s.lr(3999));
  EXPECT_NEAR(s.lr(15999), peak / 2, 1e-9);  // n = 4·warmup: 1/sqrt(n) halves
  InverseSqrt doubled(512, 4000, 2.f);
  EXPECT_NEAR(doubled.lr(3999), 2 * peak, 1e-9);
}

TEST(Optimizers, InvalidOptionsThrowNamingTheOption) {
  ParamStore open;
  open.add("w", {2});
  expect_error_naming([&] { AdamW a(open, AdamWOptions{}); }, "finalize");
  expect_error_naming([&] { Sgd s(open, SgdOptions{}); }, "finalize");

  ParamStore store;
  store.add("w", {2});
  store.finalize();
  auto adamw = [&](float b1, float b2, float eps, float wd) {
    return [&store, b1, b2, eps, wd] {
      AdamWOptions o;
      o.beta1 = b1;
      o.beta2 = b2;
      o.eps = eps;
      o.weight_decay = wd;
      AdamW a(store, o);
    };
  };
  expect_error_naming(adamw(1.f, 0.999f, 1e-8f, 0.f), "beta1");
  expect_error_naming(adamw(-0.1f, 0.999f, 1e-8f, 0.f), "beta1");
  expect_error_naming(adamw(0.9f, 1.f, 1e-8f, 0.f), "beta2");
  expect_error_naming(adamw(0.9f, NAN, 1e-8f, 0.f), "beta2");
  expect_error_naming(adamw(0.9f, 0.999f, 0.f, 0.f), "eps");
  expect_error_naming(adamw(0.9f, 0.999f, 1e-8f, -0.1f), "weight_decay");
  EXPECT_NO_THROW(adamw(0.f, 0.f, 1e-8f, 0.f)());

  expect_error_naming([&] { Sgd s(store, sgd_options(-0.5f, 0.f, false)); }, "momentum");
  expect_error_naming([&] { Sgd s(store, sgd_options(0.9f, -1.f, false)); }, "weight_decay");
  expect_error_naming([&] { Sgd s(store, sgd_options(0.f, 0.f, true)); }, "nesterov");

  AdamW a(store, AdamWOptions{});
  expect_error_naming([&] { a.step(-1.f); }, "lr");
  EXPECT_EQ(a.steps(), 0);

  expect_error_naming([] { WarmupCosine s(1.f, 10, 10); }, "total_steps");
  expect_error_naming([] { WarmupCosine s(1.f, -1, 10); }, "warmup_steps");
  expect_error_naming([] { WarmupCosine s(-1.f, 0, 10); }, "base_lr");
  expect_error_naming([] { WarmupCosine s(1.f, 0, 10, 2.f); }, "min_lr");
  expect_error_naming([] { WarmupCosine(1.f, 0, 10).lr(-1); }, "step");
  expect_error_naming([] { InverseSqrt s(512, 0); }, "warmup_steps");
  expect_error_naming([] { InverseSqrt s(0, 10); }, "d_model");
  expect_error_naming([] { InverseSqrt s(512, 10, 0.f); }, "factor");
}
