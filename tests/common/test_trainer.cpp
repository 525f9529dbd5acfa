// The one training loop (common/train/trainer.h) on a task small enough to reason about: one
// parameter w pulled towards a target by a squared loss, batches of known items, a validation
// figure computed from w. What every model gets from the loop: reports and metrics.csv, best.h5,
// early stopping, --max-steps, exact resume from any point (also from an interruption during a
// validation), refusals before anything is written.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/train/state.h"
#include "common/train/step.h"
#include "common/train/trainer.h"
#include "util/test_util.h"

namespace {

namespace fs = std::filesystem;
using vitk::test::contains;
using vitk::test::lines_of;
using vitk::test::TempDir;

// loss = mean over the batch's items of (w − x_i)², x_i = the item's index in the epoch's order;
// the validation figure "score" is −|w − 3| (higher is better: w near 3) or a scripted sequence.
class FakeTask : public vitk::train::Task {
 public:
  int64_t batches = 4, items_per_batch = 2;
  std::vector<double> scripted;  // validation scores in order; empty: −|w − 3|
  int validations = 0;
  std::atomic<int>* stop_during_validation = nullptr;  // set to 1 during the next validation
  std::atomic<int>* stop = nullptr;                    // set to 1 during step stop_after
  int64_t stop_after = -1;
  std::vector<std::pair<int64_t, int64_t>> seen;  // (epoch, batch) of every step taken

  vitk::train::TaskInfo info() const override {
    vitk::train::TaskInfo i;
    i.unit = "items";
    i.best_metric = "score";
    i.metric_names = {"loss", "score"};
    return i;
  }
  void setup(const vitk::io::CheckpointMeta*, uint64_t seed,
             const vitk::train::Partition&) override {
    seed_ = seed;
    params_.add("w", {1});
    params_.finalize();
  }
  vitk::ParamStore& params() override { return params_; }
  std::unique_ptr<vitk::optim::Optimizer> make_optimizer() override {
    vitk::optim::SgdOptions o;
    o.momentum = 0.5;
    return std::make_unique<vitk::optim::Sgd>(params_, o);
  }
  std::unique_ptr<vitk::optim::Schedule> make_schedule() override {
    return std::make_unique<vitk::train::ConstantRate>(0.05f);
  }
  int64_t batches_in_epoch(int64_t) override { return batches; }
  void start_epoch(int64_t epoch, int64_t first) override { epoch_ = epoch, next_ = first; }
  bool next_batch() override {
    if (next_ >= batches) return false;
    batch_ = next_++;
    return true;
  }
  std::pair<std::string, int64_t> batching() const override {
    return {"batch-size", items_per_batch};
  }
  vitk::train::StepStats forward_loss(vitk::nn::Context& ctx, int64_t, int) override {
    seen.emplace_back(epoch_, batch_);
    if (stop && seen.size() == static_cast<size_t>(stop_after)) stop->store(1);
    const float w = params_.get("w").value.f32()[0];
    vitk::train::StepStats s;
    grad_ = 0;
    for (int64_t i = 0; i < items_per_batch; ++i) {
      // Items differ by epoch (the seed and the epoch pick the order) and by the dropout draw.
      const double x = static_cast<double>((batch_ * items_per_batch + i + epoch_ + seed_) % 5) +
                       0.01 * ctx.rng->uniform();
      s.loss_sum += (w - x) * (w - x);
      grad_ += 2 * (w - x) / static_cast<double>(items_per_batch);
    }
    s.items = items_per_batch;
    s.units = items_per_batch;
    s.loss = s.loss_sum / static_cast<double>(items_per_batch);
    return s;
  }
  void backward(vitk::nn::Context&) override {
    params_.get("w").grad.f32()[0] += static_cast<float>(grad_);
  }
  vitk::train::Metrics validate(const vitk::train::ValidateContext& v) override {
    vitk::train::Metrics m;
    if (stop_during_validation) {
      stop_during_validation->store(1);
      stop_during_validation = nullptr;
      (void)v;
      m.complete = false;
      return m;
    }
    const double w = params_.get("w").value.f32()[0];
    const double score = scripted.empty() ? -std::fabs(w - 3) : scripted.at(validations);
    ++validations;
    m.values = {{"loss", (w - 2) * (w - 2)}, {"score", score}};
    return m;
  }
  std::string describe(const vitk::train::Metrics& m) const override {
    return "score " + std::to_string(m.get("score"));
  }
  std::string describe_best(double value) const override {
    return "score " + std::to_string(value);
  }
  vitk::io::CheckpointMeta checkpoint_meta() const override {
    vitk::io::CheckpointMeta m;
    m.config["model"] = "fake";
    return m;
  }
  void log_setup(std::ostream& log) const override { log << "fake task\n"; }

 private:
  vitk::ParamStore params_;
  uint64_t seed_ = 0;
  int64_t epoch_ = 0, batch_ = 0, next_ = 0;
  double grad_ = 0;
};

struct Outcome {
  vitk::train::Result result;
  std::string log;
  float w = 0;
};

Outcome run(FakeTask& task, const vitk::train::Options& o, const std::atomic<int>* stop = nullptr) {
  std::ostringstream log;
  Outcome r;
  r.result = vitk::train::Trainer(task, o, log, false, stop).run();
  r.log = log.str();
  r.w = task.params().get("w").value.f32()[0];
  return r;
}

vitk::train::Options options(const fs::path& dir, vitk::train::Every unit, int64_t every) {
  vitk::train::Options o;
  o.output = dir.string();
  o.epochs = 3;
  o.seed = 7;
  o.valid_unit = unit;
  o.valid_every = every;
  o.log_interval = 1000;
  return o;
}

std::vector<std::string> csv_lines(const fs::path& dir) {
  return lines_of(vitk::test::read_file(dir / "metrics.csv"));
}

TEST(Trainer, EpochReportsWriteOneRowPerEpochAndKeepTheBest) {
  TempDir tmp;
  FakeTask task;
  task.scripted = {0.5, 0.9, 0.7};
  const Outcome r = run(task, options(tmp / "run", vitk::train::Every::epochs, 1));
  EXPECT_EQ(r.result.end, vitk::train::End::finished);
  EXPECT_EQ(r.result.steps, 12);
  ASSERT_TRUE(r.result.has_best);
  EXPECT_EQ(r.result.best, 0.9);
  const auto lines = csv_lines(tmp / "run");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "step,epoch,lr,train_loss,val_loss,val_score,items_per_s,seconds");
  EXPECT_EQ(lines[1].substr(0, 5), "4,1,0");
  EXPECT_EQ(lines[3].substr(0, 6), "12,3,0");
  EXPECT_TRUE(contains(r.log, "best val score 0.900000 at epoch 2")) << r.log;
  // best.h5 holds the weights of epoch 2 (step 8) without optimizer state; last.h5 all of it.
  const vitk::io::CheckpointMeta best =
      vitk::io::read_checkpoint_meta((tmp / "run/best.h5").string());
  EXPECT_EQ(best.step, 8);
  EXPECT_TRUE(best.optimizer.empty());
  EXPECT_FALSE(vitk::train::has_train_state(best));
  const vitk::io::CheckpointMeta last =
      vitk::io::read_checkpoint_meta((tmp / "run/last.h5").string());
  const vitk::train::TrainState s = vitk::train::read_train_state(last, "last.h5");
  EXPECT_EQ(s.step, 12);
  EXPECT_EQ(s.epoch, 3);
  EXPECT_EQ(s.batch, 0);
  EXPECT_EQ(s.last_report, 12);
  EXPECT_EQ(s.best_step, 8);
}

TEST(Trainer, StepReportsValidateEveryNStepsAndAtTheEnd) {
  TempDir tmp;
  FakeTask task;
  const Outcome r = run(task, options(tmp / "run", vitk::train::Every::steps, 5));
  EXPECT_EQ(r.result.end, vitk::train::End::finished);
  // Steps 5 and 10, then the final weights at step 12.
  const auto lines = csv_lines(tmp / "run");
  ASSERT_EQ(lines.size(), 4u) << r.log;
  EXPECT_EQ(lines[1].substr(0, 7), "5,1.25,");
  EXPECT_EQ(lines[2].substr(0, 7), "10,2.5,");
  EXPECT_EQ(lines[3].substr(0, 5), "12,3,");
  EXPECT_EQ(task.validations, 3);
  EXPECT_TRUE(contains(r.log, "step 10 (epoch 2.50): train loss")) << r.log;
}

TEST(Trainer, EarlyStoppingEndsAfterKValidationsWithoutABetterFigure) {
  TempDir tmp;
  FakeTask task;
  task.scripted = {0.5, 0.4, 0.6, 0.3, 0.2, 0.1};
  vitk::train::Options o = options(tmp / "run", vitk::train::Every::steps, 1);
  o.early_stopping = 2;
  const Outcome r = run(task, o);
  EXPECT_EQ(r.result.end, vitk::train::End::early_stopped);
  EXPECT_EQ(r.result.steps, 5);  // best at step 3, then two worse
  EXPECT_EQ(r.result.best, 0.6);
  EXPECT_TRUE(contains(r.log, "early stopping at step 5: 2 validations without a better score"))
      << r.log;
}

TEST(Trainer, MaxStepsInTheMiddleOfAnEpochSavesWithoutAReport) {
  TempDir tmp;
  FakeTask task;
  vitk::train::Options o = options(tmp / "run", vitk::train::Every::epochs, 1);
  o.max_steps = 6;
  const Outcome r = run(task, o);
  EXPECT_EQ(r.result.end, vitk::train::End::max_steps);
  EXPECT_EQ(csv_lines(tmp / "run").size(), 2u);  // the header and epoch 1
  const auto s = vitk::train::read_train_state(
      vitk::io::read_checkpoint_meta((tmp / "run/last.h5").string()), "last.h5");
  EXPECT_EQ(s.epoch, 1);
  EXPECT_EQ(s.batch, 2);
  EXPECT_EQ(s.loss_items, 4);  // the two batches of epoch 2 so far
  EXPECT_TRUE(contains(r.log, "stopped at step 6 (--max-steps 6)")) << r.log;
}

// A run stopped anywhere and resumed ends as the run that was never stopped: same weights, same
// optimizer state, same rows (but for the timing columns), same steps on the same batches.
void expect_same_run(const fs::path& a, const fs::path& b) {
  auto strip = [](std::vector<std::string> lines) {
    for (auto& l : lines) {
      for (int k = 0; k < 2; ++k) l = l.substr(0, l.rfind(','));
    }
    return lines;
  };
  EXPECT_EQ(strip(csv_lines(a)), strip(csv_lines(b)));
  vitk::ParamStore pa, pb;
  pa.add("w", {1}), pb.add("w", {1});
  pa.finalize(), pb.finalize();
  vitk::optim::Sgd sa(pa, {}), sb(pb, {});
  const auto ma = vitk::io::load_checkpoint((a / "last.h5").string(), pa, &sa);
  const auto mb = vitk::io::load_checkpoint((b / "last.h5").string(), pb, &sb);
  EXPECT_EQ(pa.values().f32()[0], pb.values().f32()[0]);
  EXPECT_EQ(sa.state()[0].second->f32()[0], sb.state()[0].second->f32()[0]);
  auto state = [](vitk::io::CheckpointMeta m) {
    auto s = vitk::train::read_train_state(m, "last.h5");
    s.seconds = 0;
    return s.values();
  };
  EXPECT_EQ(state(ma), state(mb));
}

TEST(Trainer, ResumeFromAnyStepEndsAsTheRunThatNeverStopped) {
  for (const auto unit : {vitk::train::Every::epochs, vitk::train::Every::steps}) {
    for (int64_t stop_at : {1, 3, 4, 5, 7, 12}) {
      SCOPED_TRACE((unit == vitk::train::Every::epochs ? "epochs, stop at " : "steps, stop at ") +
                   std::to_string(stop_at));
      TempDir tmp;
      FakeTask full_task;
      run(full_task, options(tmp / "full", unit, unit == vitk::train::Every::epochs ? 1 : 3));
      // Ctrl-C during step stop_at: the step ends, last.h5 is saved, the report is left to the
      // resumed run.
      std::atomic<int> stop{0};
      FakeTask first;
      first.stop = &stop;
      first.stop_after = stop_at;
      vitk::train::Options o =
          options(tmp / "part", unit, unit == vitk::train::Every::epochs ? 1 : 3);
      const Outcome a = run(first, o, &stop);
      EXPECT_EQ(a.result.end, vitk::train::End::interrupted);
      EXPECT_EQ(a.result.steps, stop_at);
      FakeTask rest;
      o.resume = (tmp / "part/last.h5").string();
      const Outcome b = run(rest, o);
      EXPECT_TRUE(contains(b.log, "resumed from")) << b.log;
      EXPECT_EQ(b.result.end, vitk::train::End::finished);
      EXPECT_EQ(rest.validations, full_task.validations - first.validations);
      expect_same_run(tmp / "full", tmp / "part");
      std::vector<std::pair<int64_t, int64_t>> steps = first.seen;
      steps.insert(steps.end(), rest.seen.begin(), rest.seen.end());
      EXPECT_EQ(steps, full_task.seen);
    }
  }
}

// --steps: the run's length in steps; its last epoch is cut short and ends as any last epoch does
// (validated, reported, saved), and a run stopped inside it resumes to the same end.
TEST(Trainer, StepsCutTheLastEpochAndEndTheRunAsAnEpochDoes) {
  TempDir tmp;
  FakeTask task;
  vitk::train::Options o = options(tmp / "run", vitk::train::Every::epochs, 1);
  o.steps = 6;  // 1.5 epochs of 4 batches; o.epochs (3) gives way
  const Outcome r = run(task, o);
  EXPECT_EQ(r.result.end, vitk::train::End::finished);
  EXPECT_EQ(r.result.steps, 6);
  EXPECT_EQ(task.validations, 2);
  const std::vector<std::pair<int64_t, int64_t>> seen{{0, 0}, {0, 1}, {0, 2},
                                                      {0, 3}, {1, 0}, {1, 1}};
  EXPECT_EQ(task.seen, seen);
  const auto lines = csv_lines(tmp / "run");
  ASSERT_EQ(lines.size(), 3u) << r.log;
  EXPECT_EQ(lines[1].substr(0, 4), "4,1,");
  EXPECT_EQ(lines[2].substr(0, 6), "6,1.5,");
  EXPECT_TRUE(contains(r.log, "run: 6 steps (--steps), 1.5 epochs of 4 ")) << r.log;
  EXPECT_TRUE(contains(r.log, "finished 6 steps (--steps); best val score")) << r.log;
  EXPECT_TRUE(contains(r.log, " at step ")) << r.log;

  // Stopped inside the cut epoch and resumed: the run that never stopped.
  std::atomic<int> stop{0};
  FakeTask first;
  first.stop = &stop;
  first.stop_after = 5;
  vitk::train::Options p = options(tmp / "part", vitk::train::Every::epochs, 1);
  p.steps = 6;
  EXPECT_EQ(run(first, p, &stop).result.end, vitk::train::End::interrupted);
  FakeTask rest;
  p.resume = (tmp / "part/last.h5").string();
  EXPECT_EQ(run(rest, p).result.end, vitk::train::End::finished);
  expect_same_run(tmp / "run", tmp / "part");

  // Resumed from its end: nothing left to do.
  FakeTask again;
  o.resume = (tmp / "run/last.h5").string();
  const Outcome done = run(again, o);
  EXPECT_TRUE(again.seen.empty());
  EXPECT_TRUE(contains(done.log, "all 6 steps are done; raise --steps")) << done.log;
}

TEST(Trainer, AnInterruptedValidationIsDoneAgainOnResume) {
  for (const auto unit : {vitk::train::Every::epochs, vitk::train::Every::steps}) {
    SCOPED_TRACE(unit == vitk::train::Every::epochs ? "epochs" : "steps");
    TempDir tmp;
    const int64_t every = unit == vitk::train::Every::epochs ? 1 : 4;
    FakeTask full_task;
    run(full_task, options(tmp / "full", unit, every));
    std::atomic<int> stop{0};
    FakeTask first;
    first.stop_during_validation = &stop;
    vitk::train::Options o = options(tmp / "part", unit, every);
    const Outcome a = run(first, o, &stop);
    EXPECT_EQ(a.result.end, vitk::train::End::interrupted);
    EXPECT_EQ(a.result.steps, 4);  // the first validation, at the end of epoch 1 or at step 4
    EXPECT_EQ(csv_lines(tmp / "part").size(), 1u) << "no row for the interrupted report";
    FakeTask rest;
    o.resume = (tmp / "part/last.h5").string();
    const Outcome b = run(rest, o);
    EXPECT_EQ(b.result.end, vitk::train::End::finished);
    EXPECT_EQ(rest.validations, full_task.validations);
    expect_same_run(tmp / "full", tmp / "part");
  }
}

TEST(Trainer, RefusesAnotherRunsDirectoryAndAStepStateOfAnotherBatching) {
  TempDir tmp;
  FakeTask a;
  vitk::train::Options o = options(tmp / "run", vitk::train::Every::epochs, 1);
  o.max_steps = 2;
  run(a, o);
  FakeTask b;
  o.max_steps = 0;
  std::string e = vitk::test::error_of([&] { run(b, o); });
  EXPECT_TRUE(contains(e, "already holds a run") && contains(e, "--resume")) << e;
  // Resumed in the middle of an epoch, the batches must be cut as they were.
  FakeTask c;
  c.items_per_batch = 3;
  o.resume = (tmp / "run/last.h5").string();
  e = vitk::test::error_of([&] { run(c, o); });
  EXPECT_TRUE(contains(e, "--batch-size 3 differs from the 2 of")) << e;
  FakeTask d;
  d.batches = 5;
  e = vitk::test::error_of([&] { run(d, o); });
  EXPECT_TRUE(contains(e, "stopped at batch 2 of 4 in epoch 1, but the data now makes 5")) << e;
  // Nothing was written by the refused runs: the first run's rows and state are as they were.
  EXPECT_EQ(csv_lines(tmp / "run").size(), 1u);
  EXPECT_EQ(vitk::io::read_checkpoint_meta((tmp / "run/last.h5").string()).step, 2);
}

TEST(Trainer, RefusesInt8BeforeWritingAnything) {
  TempDir tmp;
  FakeTask a, b;
  vitk::train::Options o = options(tmp / "run", vitk::train::Every::epochs, 1);
  o.precision = vitk::ops::Precision::int8;
  EXPECT_THROW(run(a, o), vitk::UsageError);
  const std::string e = vitk::test::error_of([&] { run(b, o); });
  EXPECT_TRUE(contains(e, "--precision int8 is for inference")) << e;
  EXPECT_TRUE(a.seen.empty() && b.seen.empty()) << "took a step";
  EXPECT_FALSE(fs::exists(tmp / "run"));
}

TEST(Trainer, ANonFiniteLossStopsBeforeTheUpdateAndSaysWhatToDo) {
  struct Diverging : FakeTask {
    vitk::train::StepStats forward_loss(vitk::nn::Context& ctx, int64_t step, int m) override {
      vitk::train::StepStats s = FakeTask::forward_loss(ctx, step, m);
      if (step == 2) s.loss = std::nan("");
      return s;
    }
  } task;
  TempDir tmp;
  vitk::train::Options o = options(tmp / "run", vitk::train::Every::epochs, 1);
  o.lr_option = "--lr-factor";
  const std::string e = vitk::test::error_of([&] { run(task, o); });
  EXPECT_TRUE(contains(e, "the training loss is nan at step 3 (epoch 1, batch 3)")) << e;
  EXPECT_TRUE(contains(e, "lower --lr-factor or clip gradients")) << e;
}

}  // namespace
