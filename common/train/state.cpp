#include "common/train/state.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"

namespace vitk::train {
namespace {

// ---- The named format: attributes of /train_state ---------------------------------------------

class Reader {
 public:
  Reader(const std::map<std::string, io::StateValue>& values, const std::string& path)
      : values_(values), path_(path) {}

  const io::StateValue& at(const std::string& name) const {
    auto it = values_.find(name);
    if (it == values_.end()) fail(name, "is missing");
    return it->second;
  }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  int64_t integer(const std::string& name) const {
    const io::StateValue& v = at(name);
    if (const int64_t* i = std::get_if<int64_t>(&v)) return *i;
    fail(name, "is not an integer");
  }
  uint64_t word(const std::string& name) const {
    const io::StateValue& v = at(name);
    if (const uint64_t* u = std::get_if<uint64_t>(&v)) return *u;
    if (const int64_t* i = std::get_if<int64_t>(&v); i && *i >= 0) return static_cast<uint64_t>(*i);
    fail(name, "is not an unsigned integer");
  }
  double real(const std::string& name) const {
    const io::StateValue& v = at(name);
    if (const double* d = std::get_if<double>(&v)) return *d;
    if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    fail(name, "is not a number");
  }
  std::string text(const std::string& name) const {
    const io::StateValue& v = at(name);
    if (const std::string* s = std::get_if<std::string>(&v)) return *s;
    fail(name, "is not a string");
  }
  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    throw Error(path_ + ": the training state's 'train_state/" + name + "' " + what);
  }

 private:
  const std::map<std::string, io::StateValue>& values_;
  const std::string& path_;
};

TrainState read_named(const io::CheckpointMeta& meta, const std::string& path) {
  const Reader r(meta.train_state, path);
  TrainState s;
  s.step = r.integer("step");
  s.epoch = r.integer("epoch");
  s.batch = r.integer("batch");
  s.batches_in_epoch = r.integer("batches_in_epoch");
  s.batching = r.text("batching");
  s.batch_size = r.integer("batch_size");
  s.seed = r.word("seed");
  s.loss_sum = r.real("loss_sum");
  s.loss_items = r.integer("loss_items");
  s.correct = r.integer("correct");
  s.seconds = r.real("seconds");
  s.last_report = r.integer("last_report_step");
  s.has_best = r.has("best");
  if (s.has_best) {
    s.best = r.real("best");
    s.best_step = r.integer("best_step");
    s.best_epoch = r.integer("best_epoch");
  }
  s.bad_validations = r.integer("bad_validations");
  s.has_ema = r.integer("ema") != 0;
  // Random streams: "rng/<name>/seed" and "rng/<name>/counter".
  const std::string prefix = "rng/", tail = "/seed";
  for (const auto& [key, value] : meta.train_state) {
    (void)value;
    if (key.rfind(prefix, 0) != 0 || key.size() <= prefix.size() + tail.size() ||
        key.compare(key.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string name = key.substr(prefix.size(), key.size() - prefix.size() - tail.size());
    s.rngs[name] = RngState{r.word(key), r.word(prefix + name + "/counter")};
  }
  return s;
}

// ---- The numbered words of checkpoints written before the named format -------------------------

constexpr uint64_t kVitMagic = 0x316e72746b746976ull;  // "vitktrn1": vitk train / finetune
constexpr uint64_t kMtMagic = 0x3130746d6b746976ull;   // "vitkmt01": vitk mt-train

double from_bits(uint64_t u) {
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

int64_t signed_word(uint64_t u) {
  return static_cast<int64_t>(u);
}

// seed, rng seed, rng counter, batch, batches per epoch, batch size, Σ loss, correct, seen,
// seconds, best top-1 (-1: none), best epoch, has EMA; the epoch in progress is the file's
// `epoch` attribute.
TrainState read_vit_words(const io::CheckpointMeta& meta) {
  const std::vector<uint64_t>& w = meta.rng_state;
  TrainState s;
  s.step = meta.step;
  s.epoch = meta.epoch;
  s.seed = w[1];
  s.rngs["dropout"] = RngState{w[2], w[3]};
  s.batch = signed_word(w[4]);
  s.batches_in_epoch = signed_word(w[5]);
  s.batching = "batch-size";
  s.batch_size = signed_word(w[6]);
  s.loss_sum = from_bits(w[7]);
  s.correct = signed_word(w[8]);
  s.loss_items = signed_word(w[9]);
  s.seconds = from_bits(w[10]);
  const double best = from_bits(w[11]);
  s.has_best = best >= 0;
  s.best = s.has_best ? best : 0;
  s.best_epoch = signed_word(w[12]);
  s.has_ema = w[13] != 0;
  // A run saved with its epoch's batches done has not written that epoch's row yet.
  s.last_report = s.batch == s.batches_in_epoch ? -1 : s.step;
  return s;
}

// epoch, batch, batches in epoch, max tokens, seed, rng seed, rng counter, best BLEU (-1: none),
// best step, bad validations, Σ loss, loss tokens, last validation step, (reserved).
TrainState read_mt_words(const io::CheckpointMeta& meta) {
  const std::vector<uint64_t>& w = meta.rng_state;
  TrainState s;
  s.step = meta.step;
  s.epoch = signed_word(w[1]);
  s.batch = signed_word(w[2]);
  s.batches_in_epoch = signed_word(w[3]);
  s.batching = "max-tokens";
  s.batch_size = signed_word(w[4]);
  s.seed = w[5];
  s.rngs["dropout"] = RngState{w[6], w[7]};
  const double best = from_bits(w[8]);
  s.has_best = best >= 0;
  s.best = s.has_best ? best : 0;
  s.best_step = signed_word(w[9]);
  s.bad_validations = signed_word(w[10]);
  s.loss_sum = from_bits(w[11]);
  s.loss_items = signed_word(w[12]);
  s.last_report = w[13] == 0 ? -1 : signed_word(w[13]);
  return s;
}

bool legacy_vit(const std::vector<uint64_t>& w) {
  return w.size() == 14 && w[0] == kVitMagic;
}
bool legacy_mt(const std::vector<uint64_t>& w) {
  return w.size() == 15 && w[0] == kMtMagic;
}

void check(const TrainState& s, const std::string& path) {
  if (s.step < 0 || s.epoch < 0 || s.batch < 0 || s.batches_in_epoch < 0 ||
      s.batch > s.batches_in_epoch || s.batch_size < 1 || s.loss_items < 0 || s.correct < 0 ||
      s.correct > s.loss_items || !std::isfinite(s.loss_sum) || !(s.seconds >= 0) ||
      s.bad_validations < 0)
    throw Error(path + ": the training state is damaged (step " + std::to_string(s.step) +
                ", epoch " + std::to_string(s.epoch) + ", batch " + std::to_string(s.batch) +
                " of " + std::to_string(s.batches_in_epoch) + ", " + s.batching + " " +
                std::to_string(s.batch_size) + ")");
}

}  // namespace

std::map<std::string, io::StateValue> TrainState::values() const {
  std::map<std::string, io::StateValue> v;
  v["step"] = step;
  v["epoch"] = epoch;
  v["batch"] = batch;
  v["batches_in_epoch"] = batches_in_epoch;
  v["batching"] = batching;
  v["batch_size"] = batch_size;
  v["seed"] = seed;
  for (const auto& [name, rng] : rngs) {
    v["rng/" + name + "/seed"] = rng.seed;
    v["rng/" + name + "/counter"] = rng.counter;
  }
  v["loss_sum"] = loss_sum;
  v["loss_items"] = loss_items;
  v["correct"] = correct;
  v["seconds"] = seconds;
  v["last_report_step"] = last_report;
  if (has_best) {
    v["best"] = best;
    v["best_step"] = best_step;
    v["best_epoch"] = best_epoch;
  }
  v["bad_validations"] = bad_validations;
  v["ema"] = int64_t{has_ema ? 1 : 0};
  return v;
}

bool has_train_state(const io::CheckpointMeta& meta) {
  return !meta.train_state.empty() || legacy_vit(meta.rng_state) || legacy_mt(meta.rng_state);
}

TrainState read_train_state(const io::CheckpointMeta& meta, const std::string& path) {
  TrainState s;
  if (!meta.train_state.empty())
    s = read_named(meta, path);
  else if (legacy_vit(meta.rng_state))
    s = read_vit_words(meta);
  else if (legacy_mt(meta.rng_state))
    s = read_mt_words(meta);
  else
    throw Error(path +
                ": has no training state to resume from (a run's last.h5 has one; best.h5, "
                "ema.h5, step-N.h5 and averaged or imported checkpoints do not)");
  if (s.step != meta.step)
    throw Error(path + ": the training state is at step " + std::to_string(s.step) +
                ", the checkpoint at step " + std::to_string(meta.step));
  check(s, path);
  return s;
}

}  // namespace vitk::train
