// The one training loop: set-up and resume, epochs of steps, reports (validation, metrics row,
// best.h5), checkpoints, the end of a run.
#include "common/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <ostream>
#include <sstream>

#include "common/error.h"
#include "common/ops/profile.h"
#include "common/optim/ema.h"
#include "common/progress.h"
#include "common/timer.h"
#include "common/train/run_dir.h"
#include "common/train/state.h"
#include "common/train/step.h"

namespace vitk::train {
namespace {

// The first steps of a process create primitives and grow the activation arena: the throughput
// leaves them out when there are later ones.
constexpr int64_t kUntimedSteps = 3;

struct Throughput {
  double seconds = 0, timed_seconds = 0;
  int64_t units = 0, timed_units = 0, steps = 0, timed_steps = 0;
  void add(double dt, int64_t n, bool timed) {
    seconds += dt, units += n, ++steps;
    if (timed) timed_seconds += dt, timed_units += n, ++timed_steps;
  }
  double per_second() const {
    if (timed_seconds > 0) return static_cast<double>(timed_units) / timed_seconds;
    return seconds > 0 ? static_cast<double>(units) / seconds : 0.0;
  }
};

// Epochs done as the CSV shows them: "2", "1.375".
std::string format_epochs(double epochs) {
  std::string s = format_fixed(epochs, 3);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// "target tokens" -> "target_tokens_per_s"
std::string rate_column(std::string unit) {
  std::replace(unit.begin(), unit.end(), ' ', '_');
  return unit + "_per_s";
}

std::string metric_text(const std::string& name, double value) {
  const bool loss = name.size() >= 4 && name.compare(name.size() - 4, 4, "loss") == 0;
  return format_fixed(value, loss ? 6 : 4);
}

enum class Reported { done, early_stop, interrupted };

}  // namespace

struct Trainer::Impl {
  Impl(Task& t, Options opts, std::ostream& l, bool tt, const std::atomic<int>* s)
      : task(t),
        o(std::move(opts)),
        world(o.world ? *o.world : dist::world()),
        log(world.root() ? l : silent),
        tty(tt && world.root()),
        stop(s) {}

  Task& task;
  Options o;  // epochs: counted from steps when those are given
  dist::World& world;
  std::ostream silent{nullptr};  // the log of ranks other than 0
  std::ostream& log;
  bool tty;
  const std::atomic<int>* stop;

  TaskInfo info;
  std::optional<RunDir> dir;
  std::optional<io::CheckpointMeta> resumed;
  TrainState state;
  std::unique_ptr<optim::Optimizer> base;  // the task's (AdamW, SGD)
  std::unique_ptr<optim::ModelEma> ema;
  std::unique_ptr<optim::WithEma> with_ema;
  std::unique_ptr<optim::Schedule> schedule;
  std::unique_ptr<Step> step;
  ops::Rng dropout;

  int64_t steps_this_run = 0;
  Throughput run_rate, report_rate;
  Timer report_timer;  // since the last report (state.seconds holds the time before a resume)
  Metrics last_val;
  End end = End::finished;
  std::optional<ops::profile::StepProfile> profile;

  optim::Optimizer& optimizer() { return with_ema ? *with_ema : *base; }
  int64_t steps() { return optimizer().steps(); }
  bool stopping() const { return stop && stop->load() != 0; }
  bool root() const { return world.root(); }
  bool by_epoch() const { return o.valid_unit == Every::epochs; }
  bool max_reached() { return o.max_steps > 0 && steps() >= o.max_steps; }
  void count_epochs();  // o.epochs from o.steps
  int64_t epoch_batches(int64_t epoch);
  int64_t last_epoch_batches = 0;  // with o.steps: the last epoch's, cut short ...
  int64_t last_epoch_full = 0;     // ... of this many (for the epochs done, a fraction)

  void prepare();
  void build_optimizer();
  std::string header() const;
  void log_setup();
  Result loop();
  bool train_epoch();  // false when the run ends inside it (`end` says why)
  bool validation_due() const;
  bool report_pending() const;
  Reported report(bool validate);
  void save_weights(const std::string& path);
  void save_last();
  void dropout_stream(uint64_t seed);
  std::string world_text() const;
  io::CheckpointMeta meta() const;
  double epochs_done() const;
  std::string where() const;
  std::string best_text() const;
  void print_profile();
};

void Options::validate() const {
  auto need = [](bool ok, const char* option, const std::string& what, double got) {
    if (!ok)
      throw UsageError(std::string("--") + option + " must be " + what + ", got " +
                       format_general(got, 6));
  };
  need(epochs >= 1, "epochs", "at least 1", epochs);
  need(steps >= 0, "steps", ">= 0 (0: whole --epochs)", static_cast<double>(steps));
  need(max_steps >= 0, "max-steps", ">= 0 (0: no limit)", static_cast<double>(max_steps));
  need(clip_grad >= 0 && std::isfinite(clip_grad), "clip-grad", ">= 0 (0: off)", clip_grad);
  need(model_ema_decay >= 0 && model_ema_decay < 1, "model-ema-decay", "in [0, 1)",
       model_ema_decay);
  need(log_interval >= 1, "log-interval", "at least 1", static_cast<double>(log_interval));
  need(profile_every >= 0, "profile-every", ">= 0 (0: only at the end)",
       static_cast<double>(profile_every));
  need(accum_steps >= 1, "accum-steps", "at least 1", accum_steps);
  need(collective_timeout >= 0 && collective_timeout <= 1e6, "collective-timeout",
       "in [0, 1e6] seconds (0: wait for ever)", collective_timeout);
  need(checkpoint_every >= 0, "checkpoint-every", ">= 0 (0: off)",
       static_cast<double>(checkpoint_every));
  need(early_stopping >= 0, "early-stopping", ">= 0 (0: off)", early_stopping);
  need(keep_last >= 0, "keep-last", ">= 0", keep_last);
}

Trainer::Trainer(Task& task, Options options, std::ostream& log, bool tty,
                 const std::atomic<int>* stop)
    : impl_(std::make_unique<Impl>(task, std::move(options), log, tty, stop)) {}

Trainer::~Trainer() = default;

Result Trainer::run() {
  impl_->world.set_collective_timeout(impl_->o.collective_timeout);
  impl_->prepare();
  impl_->log_setup();
  Result r = impl_->loop();
  // No rank leaves before rank 0 has written its files: mpirun ends the job when one exits.
  impl_->world.barrier();
  return r;
}

// ---- Set-up -------------------------------------------------------------------------------------

void Trainer::Impl::prepare() {
  // Refuses a directory that another run holds or has written, before any work.
  dir.emplace(o.output, o.resume, root());
  if (!o.resume.empty()) {
    resumed = io::read_checkpoint_meta(o.resume);
    state = read_train_state(*resumed, o.resume);
  } else {
    state.seed = o.seed;
  }
  if (o.accum_steps < 1)
    throw UsageError("--accum-steps " + std::to_string(o.accum_steps) + " must be at least 1");
  Partition part;
  part.rank = world.rank();
  part.ranks = world.size();
  part.accum = o.accum_steps;
  part.world = &world;
  task.setup(resumed ? &*resumed : nullptr, state.seed, part);
  info = task.info();
  if (o.steps > 0) count_epochs();

  const auto [batching, batch_size] = task.batching();
  if (resumed && state.batch > 0 && state.batch < state.batches_in_epoch) {
    if (state.batching == batching && state.batch_size != batch_size)
      throw UsageError("--" + batching + " " + std::to_string(batch_size) + " differs from the " +
                       std::to_string(state.batch_size) + " of " + o.resume +
                       ", which stopped in the middle of an epoch");
    const int64_t n = epoch_batches(state.epoch);
    if (n != state.batches_in_epoch)
      throw Error(o.resume + ": stopped at batch " + std::to_string(state.batch) + " of " +
                  std::to_string(state.batches_in_epoch) + " in epoch " +
                  std::to_string(state.epoch + 1) + ", but the data now makes " +
                  std::to_string(n) + " batches in that epoch");
  }
  state.batching = batching;
  state.batch_size = batch_size;

  build_optimizer();
  schedule = task.make_schedule();
  StepOptions so;
  so.clip_grad = o.clip_grad;
  so.precision = o.precision;
  so.accum = o.accum_steps;
  so.world = &world;
  so.bucket_bytes = o.bucket_bytes;
  so.check_final_claims = o.check_final_claims;
  step = std::make_unique<Step>(task, optimizer(), *schedule, so);
  dropout_stream(state.seed);
  if (root()) dir->open(header(), state.step);
}

// Rank 0 draws its dropout masks from the run's stream ("dropout"), rank r from "dropout.rank<r>":
// a resumed rank continues its own stream, a rank the saved run did not have starts one of its
// own. Dropout is the one draw that depends on the number of ranks (the data's do not).
void Trainer::Impl::dropout_stream(uint64_t seed) {
  const std::string name =
      world.rank() == 0 ? std::string("dropout") : "dropout.rank" + std::to_string(world.rank());
  const uint64_t run_stream = ops::Rng::hash(seed, 0xd50b);
  auto it = state.rngs.find(name);
  if (it == state.rngs.end())
    it =
        state.rngs
            .emplace(name,
                     RngState{world.rank() == 0
                                  ? run_stream
                                  : ops::Rng::hash(run_stream, static_cast<uint64_t>(world.rank())),
                              0})
            .first;
  dropout.set_state(it->second.seed, it->second.counter);
}

void Trainer::Impl::build_optimizer() {
  ParamStore& params = task.params();
  base = task.make_optimizer();
  if (o.model_ema) {
    ema = std::make_unique<optim::ModelEma>(params, o.model_ema_decay);
    with_ema = std::make_unique<optim::WithEma>(*base, *ema, params);
  }
  if (!resumed) return;
  if (!resumed->optimizer.empty() && resumed->optimizer != base->kind())
    throw UsageError("--opt " + base->kind() + ": " + o.resume + " holds " + resumed->optimizer +
                     " state; a resumed run keeps its optimizer (give the run's --opt)");
  if (state.has_ema && !ema) {
    // The file holds an average this run does not keep: load it into a scratch one.
    optim::ModelEma scratch(params, 0.0);
    optim::WithEma loader(*base, scratch, params);
    io::load_checkpoint(o.resume, params, &loader);
    loader.sync_steps();
  } else if (!state.has_ema && ema) {  // a new average, from the loaded weights
    io::load_checkpoint(o.resume, params, base.get());
    ema->reset(params);
    with_ema = std::make_unique<optim::WithEma>(*base, *ema, params);
  } else {
    io::load_checkpoint(o.resume, params, &optimizer());
    if (with_ema) with_ema->sync_steps();
  }
}

std::string Trainer::Impl::header() const {
  std::string h = "step,epoch,lr,train_loss";
  if (info.train_accuracy) h += ",train_acc";
  for (const std::string& m : info.metric_names) h += ",val_" + m;
  if (ema)
    for (const std::string& m : info.metric_names) h += ",ema_val_" + m;
  return h + "," + rate_column(info.unit) + ",seconds";
}

void Trainer::Impl::log_setup() {
  task.log_setup(log);
  log << "EMA of weights: "
      << (o.model_ema ? "decay " + format_general(o.model_ema_decay, 6) : std::string("off"))
      << "\n";
  const int64_t bpe = task.batches_in_epoch(0);
  log << "run: ";
  if (o.steps > 0)
    log << o.steps << " " << info.progress_unit << "s (--steps), "
        << format_general(static_cast<double>(o.steps) / static_cast<double>(bpe), 3)
        << " epochs of " << bpe << " " << info.progress_unit << "s";
  else
    log << o.epochs << " epochs of " << bpe << " " << info.progress_unit << "s";
  log << " (--" << state.batching << " " << state.batch_size << "), seed " << state.seed;
  if (o.max_steps > 0) log << ", --max-steps " << o.max_steps;
  if (!by_epoch())
    log << ", validation every " << o.valid_every << " steps";
  else if (o.valid_every == 0)
    log << ", validation after the last epoch only";
  else if (o.valid_every != 1)
    log << ", validation every " << o.valid_every << " epochs and after the last";
  if (o.early_stopping > 0) log << ", early stopping after " << o.early_stopping;
  const std::string w = world_text();  // a collective: every rank gets here
  log << "; " << w << "; precision " << ops::precision_name(o.precision) << "\n";
  log << "output: " << dir->dir() << " (last.h5, best.h5" << (ema ? ", ema.h5" : "")
      << (o.keep_last > 0 ? ", step-N.h5" : "") << ", metrics.csv)"
      << (o.checkpoint_every > 0
              ? "; last.h5 also every " + std::to_string(o.checkpoint_every) + " steps"
              : std::string())
      << "\n";
  if (root() && !dir->stale_removed().empty()) {
    log << "removed " << dir->stale_removed().size()
        << " temporary file(s) that an interrupted save left:";
    for (const std::string& name : dir->stale_removed()) log << " " << name;
    log << "\n";
  }
  if (resumed) {
    log << "resumed from " << o.resume << ": epoch " << state.epoch + 1 << "/" << o.epochs
        << ", batch " << state.batch << "/" << state.batches_in_epoch << ", step " << steps()
        << "\n";
    if (o.seed != state.seed)
      log << "note: --seed " << o.seed << " is ignored: a resumed run keeps its seed " << state.seed
          << "\n";
  }
  log << std::flush;
}

// --steps: the epochs the steps need; the last one ends at step o.steps.
void Trainer::Impl::count_epochs() {
  constexpr int64_t kMaxEpochs = 1'000'000;
  int64_t before = 0, e = 0;
  for (; e < kMaxEpochs; ++e) {
    const int64_t n = task.batches_in_epoch(e);
    if (before + n >= o.steps) break;
    before += n;
  }
  if (e == kMaxEpochs)
    throw UsageError("--steps " + std::to_string(o.steps) + " needs more than " +
                     std::to_string(kMaxEpochs) + " epochs of " +
                     std::to_string(task.batches_in_epoch(0)) + " batches");
  o.epochs = static_cast<int>(e + 1);
  last_epoch_batches = o.steps - before;
  last_epoch_full = task.batches_in_epoch(e);
}

int64_t Trainer::Impl::epoch_batches(int64_t epoch) {
  if (o.steps > 0 && epoch == o.epochs - 1) return last_epoch_batches;
  return task.batches_in_epoch(epoch);
}

// ---- The loop -----------------------------------------------------------------------------------

Result Trainer::Impl::loop() {
  bool done = false;
  if (max_reached()) {
    log << "--max-steps " << o.max_steps << " already reached (step " << steps()
        << "): nothing to do\n";
    end = End::max_steps;
    done = true;
  } else if (state.epoch >= o.epochs) {
    if (o.steps > 0)
      log << "all " << o.steps << " steps are done; raise --steps to train longer\n";
    else
      log << "all " << o.epochs << " epochs are done; raise --epochs to train longer\n";
  } else {
    log << "training\n" << std::flush;
  }
  if (o.profile) profile.emplace("step", o.profile_every);
  report_timer.reset();
  // A validation counted in steps that an interruption left undone comes first.
  if (!done && !by_epoch() && report_pending()) {
    const Reported r = report(true);
    if (r != Reported::done)
      end = r == Reported::interrupted ? End::interrupted : End::early_stopped, done = true;
  }
  while (!done && state.epoch < o.epochs) {
    state.batches_in_epoch = epoch_batches(state.epoch);
    if (state.batch < state.batches_in_epoch && !train_epoch()) break;
    // The epoch's batches are done.
    if (by_epoch()) {
      const Reported r = report(validation_due());
      if (r != Reported::done) {
        end = r == Reported::interrupted ? End::interrupted : End::early_stopped;
        break;
      }
    }
    if (max_reached()) {
      end = End::max_steps;
      break;
    }
    ++state.epoch;
    state.batch = 0;
  }
  // Every epoch ran: the final weights are validated, unless they were at their last step.
  if (end == End::finished && state.last_report != steps()) {
    const Reported r = report(true);
    if (r == Reported::interrupted) end = End::interrupted;
  }
  if (profile) print_profile();

  Result result;
  result.end = end;
  result.steps = steps();
  result.epochs_done = state.epoch;
  result.has_best = state.has_best;
  result.best = state.best;
  result.last = last_val;
  result.checkpoint = dir->last();
  result.units_per_second = run_rate.per_second();
  const std::string rate =
      result.units_per_second > 0
          ? "; " + format_fixed(result.units_per_second, 1) + " " + info.unit + "/s over " +
                (run_rate.timed_steps > 0 ? "the last " + std::to_string(run_rate.timed_steps)
                                          : std::to_string(run_rate.steps)) +
                " steps of this run"
          : "";
  const std::string resume =
      "; checkpoint " + dir->last() + " (continue with --resume " + dir->last() + ")";
  switch (end) {
    case End::finished:
      if (o.steps > 0)
        log << "finished " << o.steps << " steps (--steps)";
      else
        log << "finished " << o.epochs << " epochs, step " << steps();
      log << best_text() << rate << "\n";
      break;
    case End::early_stopped:
      log << "early stopping at step " << steps() << ": " << state.bad_validations
          << " validations without a better " << info.best_metric << best_text() << rate << "\n";
      break;
    case End::max_steps:
      log << "stopped at step " << steps() << " (--max-steps " << o.max_steps << ")" << best_text()
          << rate << resume << "\n";
      break;
    case End::interrupted:
      log << "interrupted at step " << steps() << resume << "\n";
      break;
  }
  log << std::flush;
  return result;
}

bool Trainer::Impl::train_epoch() {
  const int64_t n = state.batches_in_epoch;
  task.start_epoch(state.epoch, state.batch);
  ProgressOptions po;
  po.tty = tty;
  po.line_every = o.log_interval;
  po.unit = info.progress_unit;
  po.rate_unit = info.rate_unit;
  Progress progress(log,
                    "epoch " + std::to_string(state.epoch + 1) + "/" + std::to_string(o.epochs), n,
                    po, state.batch);
  int64_t units = 0;
  Timer step_timer;
  // The epoch's n batches (a run in --steps cuts its last epoch short of the data's).
  while (state.batch < n && task.next_batch()) {
    if (profile) profile->begin();
    StepStats s;
    try {
      s = step->run(dropout, stopping());
    } catch (const NonFiniteLoss& e) {
      progress.finish();
      throw Error(
          std::string(e.what()) + " (epoch " + std::to_string(state.epoch + 1) + ", batch " +
          std::to_string(state.batch + 1) + "); lower " + o.lr_option +
          " or clip gradients with --clip-grad" +
          (std::filesystem::exists(dir->last()) ? "; the last checkpoint is " + dir->last() : ""));
    }
    const bool print_profile_now = profile && profile->end();
    ++steps_this_run;
    const double dt = step_timer.seconds();
    step_timer.reset();
    const bool timed = steps_this_run > kUntimedSteps;
    run_rate.add(dt, s.units, timed);
    report_rate.add(dt, s.units, timed);
    units += s.units;
    state.step = steps();
    ++state.batch;
    state.loss_sum += s.loss_sum;
    state.loss_items += s.items;
    state.correct += s.correct;

    const double items = static_cast<double>(std::max<int64_t>(state.loss_items, 1));
    char metrics[160];
    int at = std::snprintf(metrics, sizeof metrics, "loss %.4f", state.loss_sum / items);
    if (info.train_accuracy)
      at += std::snprintf(metrics + at, sizeof metrics - at, "  acc %.2f%%",
                          100.0 * static_cast<double>(state.correct) / items);
    at += std::snprintf(metrics + at, sizeof metrics - at, "  lr %.3g", step->lr());
    if (!by_epoch())
      std::snprintf(metrics + at, sizeof metrics - at, "  step %lld",
                    static_cast<long long>(steps()));
    progress.update(state.batch, units, metrics);
    if (print_profile_now) {
      progress.finish();
      print_profile();
    }

    // Every rank stops after the same step: the step summed the requests.
    if (world.size() > 1 ? step->stop_requested() : stopping()) {
      progress.finish();
      save_last();
      end = End::interrupted;
      return false;
    }
    if (!by_epoch() && (steps() % o.valid_every == 0 || max_reached())) {
      progress.finish();
      const Reported r = report(true);
      if (r != Reported::done) {
        end = r == Reported::interrupted ? End::interrupted : End::early_stopped;
        return false;
      }
    }
    // Stopped by --max-steps: at an epoch's end, its report comes first.
    if (max_reached() && (!by_epoch() || state.batch < n)) {
      progress.finish();
      if (by_epoch()) save_last();
      end = End::max_steps;
      return false;
    }
    // --checkpoint-every: a step that no report saved (an epoch's end is reported after this).
    if (o.checkpoint_every > 0 && steps() % o.checkpoint_every == 0 &&
        state.last_report != steps() && !(by_epoch() && state.batch == n))
      save_last();
  }
  progress.finish();
  if (state.batch != n)
    throw Error("the data ended epoch " + std::to_string(state.epoch + 1) + " after " +
                std::to_string(state.batch) + " of " + std::to_string(n) + " batches");
  return true;
}

// Epochs: after every valid_every-th epoch, the run's last and the last --max-steps allows.
bool Trainer::Impl::validation_due() const {
  const int64_t done = state.epoch + 1;
  return done == o.epochs || (o.max_steps > 0 && state.step >= o.max_steps) ||
         (o.valid_every > 0 && done % o.valid_every == 0);
}

// Whether the position reached is one with a report that has not been made (a run interrupted
// before or during it).
bool Trainer::Impl::report_pending() const {
  if (state.last_report == state.step) return false;
  if (by_epoch()) return state.batches_in_epoch > 0 && state.batch == state.batches_in_epoch;
  return state.step > 0 && state.step % o.valid_every == 0;
}

// ---- Reports and checkpoints --------------------------------------------------------------------

Reported Trainer::Impl::report(bool validate) {
  ParamStore& params = task.params();
  Metrics val, ema_val;
  if (validate) {
    ValidateContext v;
    v.arena = &step->arena();
    v.precision = o.precision;
    v.log = &log;
    v.tty = tty;
    v.stop = world.size() > 1 ? nullptr : stop;
    v.world = &world;
    val = task.validate(v);
    if (val.complete && ema) {
      v.label = "validate EMA";
      ema->swap_with(params);
      ema_val = task.validate(v);
      ema->swap_with(params);
    }
    if (!val.complete || (ema && !ema_val.complete)) {
      save_last();  // a resume validates here again
      return Reported::interrupted;
    }
    last_val = val;
  }
  state.seconds += report_timer.seconds();
  report_timer.reset();
  const double seconds = state.seconds;

  const double items = static_cast<double>(std::max<int64_t>(state.loss_items, 1));
  const double train_loss = state.loss_sum / items;
  const double train_acc = 100.0 * static_cast<double>(state.correct) / items;
  const double rate = report_rate.per_second();
  const float last_lr = steps() > 0 ? schedule->lr(steps() - 1) : 0.f;
  std::vector<std::string> row{std::to_string(steps()), format_epochs(epochs_done()),
                               format_general(last_lr, 6), format_fixed(train_loss, 6)};
  if (info.train_accuracy) row.push_back(format_fixed(train_acc, 4));
  for (const Metrics* m : {&val, ema ? &ema_val : nullptr}) {
    if (!m) continue;
    for (const std::string& name : info.metric_names)
      row.push_back(validate ? metric_text(name, m->get(name)) : "");
  }
  row.push_back(format_fixed(rate, 2));
  row.push_back(format_fixed(seconds, 2));
  if (root()) dir->row(row);

  // best.h5: the better of the raw weights and their average, if it beats the best so far.
  auto better = [&](double a, double b) { return info.higher_is_better ? a > b : a < b; };
  bool best = false, ema_better = false;
  if (validate) {
    double score = val.get(info.best_metric);
    if (ema && better(ema_val.get(info.best_metric), score)) {
      ema_better = true;
      score = ema_val.get(info.best_metric);
    }
    best = !state.has_best || better(score, state.best);
    if (best) {
      state.has_best = true;
      state.best = score;
      state.best_step = steps();
      state.best_epoch = static_cast<int64_t>(epochs_done());
      state.bad_validations = 0;
      if (ema_better) ema->swap_with(params);
      save_weights(dir->best());
      if (ema_better) ema->swap_with(params);
    } else {
      ++state.bad_validations;
    }
    if (o.keep_last > 0) {
      save_weights(dir->step_file(steps()));
      if (root()) dir->keep_newest_step_files(o.keep_last);
    }
  }
  if (ema) {
    ema->swap_with(params);
    save_weights(dir->path("ema.h5"));
    ema->swap_with(params);
  }

  std::ostringstream line;
  line << where() << ": train loss " << format_fixed(train_loss, 4);
  if (info.train_accuracy) line << " acc " << format_fixed(train_acc, 2) << "%";
  if (validate) line << " | val " << task.describe(val);
  if (validate && ema) line << " | EMA " << task.describe(ema_val);
  line << " | " << format_fixed(rate, 1) << " " << info.rate_unit << ", "
       << format_duration(seconds);
  if (best) line << " | best" << (ema_better ? " (EMA)" : "") << ", saved best.h5";
  const int64_t epochs_left = o.epochs - (state.epoch + 1);
  if (by_epoch() && epochs_left > 0 && !max_reached())
    line << " | ETA " << format_duration(seconds * static_cast<double>(epochs_left));
  log << line.str() << "\n" << std::flush;

  state.last_report = steps();
  state.loss_sum = 0, state.loss_items = 0, state.correct = 0, state.seconds = 0;
  report_rate = Throughput{};
  save_last();
  const bool early = validate && o.early_stopping > 0 && state.bad_validations >= o.early_stopping;
  return early ? Reported::early_stop : Reported::done;
}

io::CheckpointMeta Trainer::Impl::meta() const {
  io::CheckpointMeta m = task.checkpoint_meta();
  m.step = base->steps();
  m.epoch = static_cast<int64_t>(epochs_done());
  return m;
}

void Trainer::Impl::save_weights(const std::string& path) {
  if (root()) io::save_checkpoint(path, task.params(), meta());
}

void Trainer::Impl::save_last() {
  TrainState s = state;
  s.step = steps();
  s.seconds = state.seconds + report_timer.seconds();
  // Every rank's dropout stream, by name (a collective: every rank saves).
  const std::vector<std::string> streams =
      world.allgather(std::to_string(dropout.seed()) + " " + std::to_string(dropout.counter()));
  for (size_t r = 0; r < streams.size(); ++r) {
    RngState& rs = s.rngs[r == 0 ? std::string("dropout") : "dropout.rank" + std::to_string(r)];
    std::istringstream in(streams[r]);
    in >> rs.seed >> rs.counter;
  }
  s.has_ema = ema != nullptr;
  if (!root()) return;
  // An epoch whose batches and report are done is stored as the start of the next one.
  if (s.batches_in_epoch > 0 && s.batch >= s.batches_in_epoch && !report_pending())
    ++s.epoch, s.batch = 0;
  io::CheckpointMeta m = meta();
  m.epoch = s.epoch;
  m.train_state = s.values();
  io::save_checkpoint(dir->last(), task.params(), m, &optimizer());
}

double Trainer::Impl::epochs_done() const {
  const bool cut = o.steps > 0 && state.epoch == o.epochs - 1;
  const double n =
      static_cast<double>(std::max<int64_t>(cut ? last_epoch_full : state.batches_in_epoch, 1));
  return static_cast<double>(state.epoch) + static_cast<double>(state.batch) / n;
}

std::string Trainer::Impl::where() const {
  if (by_epoch())
    return "epoch " + std::to_string(state.epoch + 1) + "/" + std::to_string(o.epochs);
  return "step " + std::to_string(state.step) + " (epoch " + format_fixed(epochs_done(), 2) + ")";
}

// "threads 2 (avx512_core_bf16)"; with several ranks "2 ranks (mpirun, Open MPI 4.1.4), threads
// 1, 1 (avx2)". A collective: every rank calls it.
std::string Trainer::Impl::world_text() const {
  const std::vector<std::string> threads = world.allgather(std::to_string(ops::num_threads()));
  std::string t;
  for (const std::string& n : threads) t += (t.empty() ? "" : ", ") + n;
  const std::string isa = " (" + ops::cpu_isa() + ")";
  if (world.size() == 1) return "threads " + t + isa;
  return std::to_string(world.size()) + " ranks (" + world.launch() + "), threads " + t + isa;
}

std::string Trainer::Impl::best_text() const {
  if (!state.has_best) return "";
  return "; best val " + task.describe_best(state.best) +
         (by_epoch() && o.steps == 0 ? " at epoch " + std::to_string(state.best_epoch)
                                     : " at step " + std::to_string(state.best_step)) +
         " (" + dir->best() + ")";
}

void Trainer::Impl::print_profile() {
  const int64_t last = steps(), first = last - profile->counted() + 1;
  profile->print(log, "--profile, steps " + std::to_string(first) + "-" + std::to_string(last));
}

}  // namespace vitk::train
