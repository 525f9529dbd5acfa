// The training loop of `vitk train` and `vitk finetune`: setup and checks, steps, validation,
// checkpoints, resume.
#include "vit/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/metrics_csv.h"
#include "common/ops/profile.h"
#include "common/optim/ema.h"
#include "common/optim/optim.h"
#include "common/progress.h"
#include "common/timer.h"
#include "datasets/loader.h"
#include "vit/checkpoint.h"
#include "vit/finetune.h"
#include "vit/import.h"

namespace vitk::vit {
namespace {

namespace fs = std::filesystem;

// "vitktrn1": marks the words of RunState in a checkpoint's rng_state attribute.
constexpr uint64_t kStateMagic = 0x316e72746b746976ull;
constexpr int64_t kWarmupStepsUntimed = 3;  // primitive creation and arena growth

std::string grouped(int64_t x) {
  std::string digits = std::to_string(x), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

double from_bits(uint64_t u) {
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// What a checkpoint needs beyond weights, optimizer state and step to continue exactly, stored in
// its rng_state attribute (opaque words; meta.epoch is the epoch in progress).
struct RunState {
  uint64_t seed = 0;                       // --seed: data order and augmentation
  uint64_t rng_seed = 0, rng_counter = 0;  // dropout and drop-path
  int64_t batch = 0;                       // batches of the epoch already trained
  int64_t batches_per_epoch = 0, batch_size = 0;
  double loss_sum = 0;  // Σ per-image loss over the epoch's batches so far
  int64_t correct = 0, seen = 0;
  double seconds = 0;  // wall time spent on the epoch so far
  double best_top1 = -1;
  int64_t best_epoch = 0;
  bool has_ema = false;

  std::vector<uint64_t> words() const {
    return {kStateMagic,
            seed,
            rng_seed,
            rng_counter,
            static_cast<uint64_t>(batch),
            static_cast<uint64_t>(batches_per_epoch),
            static_cast<uint64_t>(batch_size),
            bits(loss_sum),
            static_cast<uint64_t>(correct),
            static_cast<uint64_t>(seen),
            bits(seconds),
            bits(best_top1),
            static_cast<uint64_t>(best_epoch),
            has_ema ? 1u : 0u};
  }

  static RunState from(const std::vector<uint64_t>& w, const std::string& path) {
    if (w.size() != 14 || w[0] != kStateMagic)
      throw Error(path +
                  ": not a checkpoint of a `vitk train` or `vitk finetune` run (it has no training "
                  "state to resume from)");
    RunState s;
    s.seed = w[1];
    s.rng_seed = w[2];
    s.rng_counter = w[3];
    s.batch = static_cast<int64_t>(w[4]);
    s.batches_per_epoch = static_cast<int64_t>(w[5]);
    s.batch_size = static_cast<int64_t>(w[6]);
    s.loss_sum = from_bits(w[7]);
    s.correct = static_cast<int64_t>(w[8]);
    s.seen = static_cast<int64_t>(w[9]);
    s.seconds = from_bits(w[10]);
    s.best_top1 = from_bits(w[11]);
    s.best_epoch = static_cast<int64_t>(w[12]);
    s.has_ema = w[13] != 0;
    return s;
  }
};

void need(bool ok, const std::string& option, const std::string& what, double got) {
  if (!ok) throw UsageError("--" + option + " must be " + what + ", got " + format_general(got, 6));
}

std::string default_output(const char* kind) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "-%Y%m%d-%H%M%S", &tm);
  return std::string("runs/") + kind + buf;
}

std::string size_text(int64_t height, int64_t width) {
  return std::to_string(height) + "x" + std::to_string(width);
}

// Model settings a fine-tuning run may change: they do not touch the weights' shapes or meaning.
bool changeable_when_finetuning(const std::string& key) {
  return key == "dropout" || key == "attention_dropout" || key == "drop_path" ||
         key == "patch_drop" || key == "resize" || key == "crop_fraction" || key == "interpolation";
}

// "class_0", "class_1", ...: the names `vitk import` makes up when it is given none.
bool placeholder_names(const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] != "class_" + std::to_string(i)) return false;
  return true;
}

// The first difference between two lists of class names, for messages.
std::string first_difference(const std::vector<std::string>& a, const std::string& a_name,
                             const std::vector<std::string>& b, const std::string& b_name) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i])
      return "class " + std::to_string(i) + " is '" + a[i] + "' in " + a_name + ", '" + b[i] +
             "' in " + b_name;
  return std::to_string(a.size()) + " classes in " + a_name + ", " + std::to_string(b.size()) +
         " in " + b_name;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

// Training images per second, leaving out the first steps of a run (primitive creation, arena
// growth) when there are later ones; validation is not counted.
struct Throughput {
  double seconds = 0, timed_seconds = 0;
  int64_t images = 0, timed_images = 0, steps = 0, timed_steps = 0;
  void add(double dt, int64_t n, bool timed) {
    seconds += dt, images += n, ++steps;
    if (timed) timed_seconds += dt, timed_images += n, ++timed_steps;
  }
  double images_per_second() const {
    if (timed_seconds > 0) return static_cast<double>(timed_images) / timed_seconds;
    return seconds > 0 ? static_cast<double>(images) / seconds : 0.0;
  }
};

class Run {
 public:
  Run(const TrainOptions& o, std::ostream& log, bool tty, const std::atomic<int>* stop)
      : o_(o), log_(log), tty_(tty), stop_(stop) {}

  TrainResult go();

 private:
  void open_data();
  void build_model();
  void start_from_checkpoint();  // fine-tuning: cfg_ from --from and the changes asked for
  void check_resumed_finetune() const;
  void open_output();
  void log_setup();
  bool stopping() const { return stop_ && stop_->load() != 0; }
  bool train_epoch(int64_t epoch, int64_t first_batch);
  void train_step(const datasets::Batch& batch);
  void print_profile();  // --profile: the steps since the last print
  // Validation, metrics row, best.h5, last.h5 after `epoch`; false when interrupted.
  bool finish_epoch(int64_t epoch);
  void save_last(int64_t epoch, int64_t batch);
  void save_weights(const std::string& path, int64_t epoch) const;
  io::CheckpointMeta meta(int64_t epoch) const;
  optim::Optimizer& optimizer() { return with_ema_ ? *with_ema_ : *base_; }
  std::string epoch_label(int64_t epoch) const {
    return "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(o_.epochs);
  }

  const TrainOptions& o_;
  std::ostream& log_;
  bool tty_;
  const std::atomic<int>* stop_;

  std::unique_ptr<datasets::Dataset> train_set_, val_set_;
  std::vector<std::string> class_names_;
  VitConfig cfg_;
  std::string output_;
  std::optional<io::CheckpointMeta> resumed_;
  // Fine-tuning from a checkpoint (not resumed): its model, and what changes.
  std::optional<VitConfig> initial_;
  bool new_head_ = false, align_corners_ = false;
  RunState state_;
  int64_t start_epoch_ = 0;

  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<VisionTransformer> model_;
  std::unique_ptr<optim::Optimizer> base_;  // AdamW or SGD
  std::unique_ptr<optim::ModelEma> ema_;
  std::unique_ptr<optim::WithEma> with_ema_;
  std::unique_ptr<optim::WarmupCosine> schedule_;
  std::unique_ptr<datasets::Loader> train_loader_, val_loader_;
  std::unique_ptr<MetricsCsv> csv_;
  ops::Rng rng_;  // dropout, drop-path
  Arena arena_;

  int64_t bpe_ = 0, warmup_steps_ = 0, total_steps_ = 0;
  float lr_ = 0;
  int64_t steps_this_run_ = 0;
  Throughput run_rate_, epoch_rate_;
  Timer epoch_timer_;
  bool max_steps_reached_ = false;
  std::string last_path_;
  std::optional<ops::profile::StepProfile> profile_;
};

void Run::open_data() {
  train_set_ = datasets::open_dataset(o_.data, datasets::Split::train);
  const std::string val_path = o_.val_data.empty() ? o_.data : o_.val_data;
  val_set_ = datasets::open_dataset(val_path, datasets::Split::val);
  class_names_ = train_set_->class_names();
  if (val_set_->class_names() != class_names_)
    throw Error(val_path + ": the validation classes (" +
                std::to_string(val_set_->class_names().size()) +
                ") are not the training classes (" + std::to_string(class_names_.size()) + " in " +
                train_set_->source() + ")");
  if (!o_.finetune.labels.empty()) {
    // The names to store for the data's classes, in its order (e.g. words for WordNet folders).
    std::vector<std::string> labels = read_labels(o_.finetune.labels);
    if (labels.size() != class_names_.size())
      throw UsageError("--labels " + o_.finetune.labels + " has " + std::to_string(labels.size()) +
                       " class names, the data " + train_set_->source() + " " +
                       std::to_string(class_names_.size()) + " classes");
    class_names_ = std::move(labels);
  }
  bpe_ = train_set_->size() / o_.batch_size;  // the last partial batch is dropped
  if (bpe_ < 1)
    throw UsageError("--batch-size " + std::to_string(o_.batch_size) + " is larger than the " +
                     std::to_string(train_set_->size()) + " training images of " +
                     train_set_->source());
}

void Run::build_model() {
  const int64_t classes = static_cast<int64_t>(class_names_.size());
  if (!o_.resume.empty()) {
    io::CheckpointMeta meta = io::read_checkpoint_meta(o_.resume);
    state_ = RunState::from(meta.rng_state, o_.resume);
    cfg_ = from_config_map(meta.config, o_.resume);
    // The model is the checkpoint's; a setting given now must agree with it. When fine-tuning,
    // the size and the classes of the [model] settings are those of the model fine-tuned from
    // (--image-size and --num-classes are checked below).
    // Both sides as text of a parsed configuration, so that keys an older checkpoint lacks
    // compare as their defaults.
    const auto now = to_config_map(o_.model), then = to_config_map(cfg_);
    for (const std::string& key : o_.model_keys_given) {
      if (o_.finetune.enabled && (key == "image_size" || key == "num_classes")) continue;
      auto a = now.find(key), b = then.find(key);
      if (a != now.end() && b != then.end() && a->second != b->second)
        throw UsageError("--model." + key + " " + a->second + " differs from the checkpoint's " +
                         b->second + " (" + o_.resume + "); a resumed run keeps its model");
    }
    check_resumed_finetune();
    if (!meta.class_names.empty() && meta.class_names != class_names_)
      throw Error(o_.resume + ": the checkpoint's classes are not those of " +
                  train_set_->source());
    if (state_.batch > 0 && state_.batch < state_.batches_per_epoch &&
        state_.batch_size != o_.batch_size)
      throw UsageError("--batch-size " + std::to_string(o_.batch_size) + " differs from the " +
                       std::to_string(state_.batch_size) + " of " + o_.resume +
                       ", which stopped in the middle of an epoch");
    if (state_.batches_per_epoch != bpe_ && state_.batch > 0 &&
        state_.batch < state_.batches_per_epoch)
      throw Error(o_.resume + ": stopped at batch " + std::to_string(state_.batch) + " of " +
                  std::to_string(state_.batches_per_epoch) + " per epoch, but the data now has " +
                  std::to_string(bpe_) + " batches per epoch");
    resumed_ = std::move(meta);
  } else {
    if (o_.finetune.enabled) {
      start_from_checkpoint();
    } else {
      cfg_ = o_.model;
      if (cfg_.num_classes == 0) cfg_.num_classes = classes;
    }
    state_.seed = o_.seed;
    state_.rng_seed = ops::Rng::hash(o_.seed, 0xd50b);
  }
  if (cfg_.num_classes != classes)
    throw UsageError("--model.num_classes " + std::to_string(cfg_.num_classes) + ": the data " +
                     train_set_->source() + " has " + std::to_string(classes) + " classes");
  cfg_.validate();

  params_ = std::make_unique<ParamStore>();
  model_ = std::make_unique<VisionTransformer>(*params_, cfg_);
  params_->finalize();
  if (initial_) {
    load_vit_weights(o_.finetune.from, cfg_, *params_, align_corners_, new_head_);
  } else {
    ops::Rng init_rng(ops::Rng::hash(state_.seed, 0x1417));
    model_->init(init_rng);
  }
  if (o_.layer_decay != 1.f) apply_layer_decay(*params_, cfg_.layers, o_.layer_decay);
  if (o_.opt == "sgd") {
    optim::SgdOptions so;
    so.momentum = o_.momentum;
    so.weight_decay = o_.weight_decay;
    base_ = std::make_unique<optim::Sgd>(*params_, so);
  } else {
    optim::AdamWOptions ao;
    ao.weight_decay = o_.weight_decay;
    base_ = std::make_unique<optim::AdamW>(*params_, ao);
  }
  if (o_.model_ema) {
    ema_ = std::make_unique<optim::ModelEma>(*params_, o_.model_ema_decay);
    with_ema_ = std::make_unique<optim::WithEma>(*base_, *ema_, *params_);
  }
  if (resumed_) {
    if (!resumed_->optimizer.empty() && resumed_->optimizer != base_->kind())
      throw UsageError("--opt " + o_.opt + ": " + o_.resume + " holds " + resumed_->optimizer +
                       " state; a resumed run keeps its optimizer (give the run's --opt" +
                       (o_.finetune.enabled ? " or --recipe" : "") + ")");
    if (state_.has_ema && !ema_) {
      // The file holds an average this run does not keep: load it into a scratch one.
      optim::ModelEma scratch(*params_, 0.0);
      optim::WithEma loader(*base_, scratch, *params_);
      io::load_checkpoint(o_.resume, *params_, &loader);
      loader.sync_steps();
    } else if (!state_.has_ema && ema_) {
      io::load_checkpoint(o_.resume, *params_, base_.get());
      ema_->reset(*params_);
      with_ema_ = std::make_unique<optim::WithEma>(*base_, *ema_, *params_);
    } else {
      io::load_checkpoint(o_.resume, *params_, &optimizer());
      if (with_ema_) with_ema_->sync_steps();
    }
    rng_.set_state(state_.rng_seed, state_.rng_counter);
    start_epoch_ = resumed_->epoch;
  } else {
    rng_.set_state(state_.rng_seed, 0);
  }
  total_steps_ = static_cast<int64_t>(o_.epochs) * bpe_;
  warmup_steps_ = std::min<int64_t>(std::llround(o_.warmup_epochs * static_cast<double>(bpe_)),
                                    total_steps_ - 1);
  schedule_ = std::make_unique<optim::WarmupCosine>(o_.lr, warmup_steps_, total_steps_, o_.min_lr);

  datasets::LoaderOptions lo;
  lo.batch_size = o_.batch_size;
  lo.height = cfg_.image_height;
  lo.width = cfg_.image_width;
  lo.channels = static_cast<int>(cfg_.channels);
  lo.num_classes = cfg_.num_classes;
  lo.preprocess = cfg_.preprocess;
  lo.prefetch = o_.prefetch;
  datasets::LoaderOptions val = lo;
  lo.training = true;
  lo.seed = state_.seed;
  lo.augment = o_.augment;
  lo.augment.smoothing = o_.smoothing;
  train_loader_ = std::make_unique<datasets::Loader>(*train_set_, lo);
  val_loader_ = std::make_unique<datasets::Loader>(*val_set_, val);
  if (train_loader_->batches_per_epoch() != bpe_)
    throw Error("the loader makes " + std::to_string(train_loader_->batches_per_epoch()) +
                " batches per epoch, expected " + std::to_string(bpe_));
}

// Fine-tuning: the model of --from, with the [model] settings that may change taken from the
// options (the others must agree), at --image-size, with a new head for --num-classes.
void Run::start_from_checkpoint() {
  const FinetuneOptions& f = o_.finetune;
  const int64_t classes = static_cast<int64_t>(class_names_.size());
  const io::CheckpointMeta meta = io::read_checkpoint_meta(f.from);
  const VitConfig stored = from_config_map(meta.config, f.from);
  cfg_ = stored;
  const auto file = to_config_map(stored), given = to_config_map(o_.model);
  for (const std::string& key : o_.model_keys_given) {
    auto a = given.find(key), b = file.find(key);
    if (a == given.end() || b == file.end() || a->second == b->second) continue;
    if (!changeable_when_finetuning(key))
      throw UsageError("--model." + key + " " + a->second + " differs from the " + b->second +
                       " of " + f.from +
                       ": fine-tuning keeps the model's architecture and input statistics" +
                       (key == "image_size"    ? " (train at another size with --image-size)"
                        : key == "num_classes" ? " (a new head: --num-classes)"
                                               : ""));
  }
  for (const std::string& key : o_.model_keys_given) {
    if (key == "dropout") cfg_.dropout = o_.model.dropout;
    if (key == "attention_dropout") cfg_.attention_dropout = o_.model.attention_dropout;
    if (key == "drop_path") cfg_.drop_path = o_.model.drop_path;
    if (key == "patch_drop") cfg_.patch_drop = o_.model.patch_drop;
    if (key == "resize") cfg_.preprocess.resize = o_.model.preprocess.resize;
    if (key == "crop_fraction") cfg_.preprocess.crop_fraction = o_.model.preprocess.crop_fraction;
    if (key == "interpolation") cfg_.preprocess.interpolation = o_.model.preprocess.interpolation;
  }
  try {
    cfg_.validate();
  } catch (const UsageError& e) {
    const std::string what = e.what();
    throw UsageError(what.rfind("model.", 0) == 0 ? "--" + what : "model option " + what);
  }

  if (f.image_height > 0) {
    const int64_t p = cfg_.patch_size;
    if (f.image_height % p || f.image_width % p) {
      auto down = [p](int64_t x) { return std::max<int64_t>(p, x / p * p); };
      auto up = [p](int64_t x) { return (x + p - 1) / p * p; };
      throw UsageError("--image-size " + size_text(f.image_height, f.image_width) +
                       ": the patch size " + std::to_string(p) + " of " + f.from +
                       " does not divide it (" +
                       size_text(down(f.image_height), down(f.image_width)) + " or " +
                       size_text(up(f.image_height), up(f.image_width)) + " would do)");
    }
    cfg_ = at_size(cfg_, f.image_height, f.image_width, f.from);
  }
  align_corners_ = f.align_corners.value_or(stored.pos_embed_align_corners);
  cfg_.pos_embed_align_corners = align_corners_;  // the convention the positions now follow

  new_head_ = f.num_classes > 0;
  if (new_head_) {
    if (f.num_classes != classes)
      throw UsageError("--num-classes " + std::to_string(f.num_classes) + ": the data " +
                       train_set_->source() + " has " + std::to_string(classes) + " classes" +
                       (f.labels.empty() ? "" : " (and --labels " + f.labels + " as many names)"));
    cfg_.num_classes = f.num_classes;
  } else {
    if (stored.num_classes != classes)
      throw UsageError(f.from + " has a head of " + std::to_string(stored.num_classes) +
                       " classes, the data " + train_set_->source() + " " +
                       std::to_string(classes) + ": give --num-classes " + std::to_string(classes) +
                       " for a new head");
    const auto& names = meta.class_names;
    if (!names.empty() && names != class_names_ && !placeholder_names(names) && f.labels.empty())
      throw Error("the data's classes are not those of the head of " + f.from + " (" +
                  first_difference(class_names_, train_set_->source(), names, f.from) +
                  "): give --num-classes " + std::to_string(classes) +
                  " for a new head, or --labels FILE to keep the head with the names of FILE");
  }
  initial_ = stored;
}

// A resumed fine-tuning run keeps its model: the size and classes asked for must be its own.
void Run::check_resumed_finetune() const {
  const FinetuneOptions& f = o_.finetune;
  if (f.image_height > 0 &&
      (f.image_height != cfg_.image_height || f.image_width != cfg_.image_width))
    throw UsageError("--image-size " + size_text(f.image_height, f.image_width) +
                     " differs from the " + size_text(cfg_.image_height, cfg_.image_width) +
                     " of " + o_.resume + "; a resumed run keeps its model");
  if (f.num_classes > 0 && f.num_classes != cfg_.num_classes)
    throw UsageError("--num-classes " + std::to_string(f.num_classes) + " differs from the " +
                     std::to_string(cfg_.num_classes) + " classes of " + o_.resume +
                     "; a resumed run keeps its model");
}

void Run::open_output() {
  output_ =
      o_.output.empty() ? default_output(o_.finetune.enabled ? "finetune" : "train") : o_.output;
  const std::string last = (fs::path(output_) / "last.h5").string();
  if (fs::exists(last) && !(resumed_ && same_file(o_.resume, last)))
    throw UsageError("--output " + output_ + " already holds a run (" + last +
                     "): resume it with --resume " + last + ", or choose another --output");
  std::error_code ec;
  fs::create_directories(output_, ec);
  if (ec || !fs::is_directory(output_))
    throw Error(output_ + ": cannot create the output directory" +
                (ec ? " (" + ec.message() + ")" : std::string()));
  // Rows survive only for the epochs the checkpoint had finished, and only in its own directory.
  const int64_t keep = resumed_ && same_file(o_.resume, last) ? resumed_->epoch : 0;
  std::string header =
      "epoch,step,lr,train_loss,train_acc,val_loss,val_top1,val_top5,images_per_s,seconds";
  if (o_.model_ema) header += ",ema_val_loss,ema_val_top1,ema_val_top5";
  csv_ = std::make_unique<MetricsCsv>((fs::path(output_) / "metrics.csv").string(), header, keep);
  last_path_ = last;
}

void Run::log_setup() {
  const auto& c = cfg_;
  const auto& a = o_.augment;
  auto& L = log_;
  L << "data: " << train_set_->size() << " training images in " << class_names_.size()
    << " classes from " << train_set_->source() << "; " << val_set_->size()
    << " validation images from " << val_set_->source() << "\n";
  if (train_set_->source() == val_set_->source() && train_set_->size() == val_set_->size())
    L << "warning: the validation images are the training images (give --val-data, or a data "
         "root with train/ and val/ folders)\n";
  L << "model: vit " << c.image_height << "x" << c.image_width << "x" << c.channels << ", patch "
    << c.patch_size << " (" << c.patches() << " patches + class token)"
    << (c.stem_channels.empty()
            ? ""
            : ", conv stem " + stem_channels_text(c.stem_channels) + " (3x3, strides " +
                  stem_strides_text(c) + ", LayerNorm, GELU)")
    << (c.pos_conv_blocks.empty() ? ""
                                  : ", positional 3x3 depthwise convolution after block(s) " +
                                        pos_conv_blocks_text(c.pos_conv_blocks))
    << (c.ffn_conv_blocks.empty() ? ""
                                  : ", MLP 3x3 depthwise convolution in block(s) " +
                                        pos_conv_blocks_text(c.ffn_conv_blocks))
    << (c.diag_mask ? ", diagonal attention mask" : "") << ", d_model " << c.d_model << ", "
    << c.layers << " layers, " << c.heads << " heads, d_ff " << c.d_ff << ", pool " << c.pool
    << ", dropout " << format_general(c.dropout) << ", drop_path " << format_general(c.drop_path)
    << ", patch_drop " << format_general(c.patch_drop)
    << (c.patch_drop > 0 ? " (training keeps " + std::to_string(c.kept_patches()) + " of " +
                               std::to_string(c.patches()) + " patches)"
                         : "")
    << "\n";
  L << "parameters: " << grouped(params_->numel()) << "\n";
  L << "input: " << c.preprocess.resize << " resize, crop fraction "
    << format_general(c.preprocess.crop_fraction) << ", " << c.preprocess.interpolation << ", mean";
  for (float m : c.preprocess.mean) L << " " << format_general(m);
  L << ", std";
  for (float s : c.preprocess.std) L << " " << format_general(s);
  L << "\n";
  if (initial_) {
    const VitConfig& from = *initial_;
    L << "fine-tuning from " << o_.finetune.from << ": vit " << from.image_height << "x"
      << from.image_width;
    if (from.image_height != c.image_height || from.image_width != c.image_width)
      L << " -> " << c.image_height << "x" << c.image_width << ", positions resampled from "
        << from.grid_height() << "x" << from.grid_width() << " to " << c.grid_height() << "x"
        << c.grid_width() << " (bicubic, align_corners " << (align_corners_ ? "true" : "false")
        << ")";
    else
      L << ", positions as they are";
    if (new_head_)
      L << "; new zero head of " << c.num_classes << " classes (was " << from.num_classes << ")";
    else
      L << "; head kept (" << c.num_classes << " classes)";
    L << "\n";
  }
  const bool sgd = o_.opt == "sgd";
  L << "optimizer: "
    << (sgd ? "SGD, momentum " + format_general(o_.momentum) + (o_.momentum > 0 ? "" : " (off)")
            : std::string("AdamW"))
    << ", lr " << format_general(o_.lr) << " (warmup " << format_general(o_.warmup_epochs)
    << " epochs = " << warmup_steps_ << " steps, cosine to " << format_general(o_.min_lr)
    << " at step " << total_steps_ << "), weight decay " << format_general(o_.weight_decay)
    << (sgd ? " (L2, " : " (") << "not on biases, norms, class token, positions), clip-grad "
    << (o_.clip_grad > 0 ? format_general(o_.clip_grad) : std::string("off")) << "\n";
  if (o_.layer_decay != 1.f) {
    L << "layer decay " << format_general(o_.layer_decay) << ": lr x "
      << format_general(o_.layer_decay) << "^(" << c.layers + 1 << " - layer), from "
      << format_general(layer_decay_scale("pos_embed", c.layers, o_.layer_decay))
      << " for the patch embedding, class token and positions (layer 0) to 1 for the head and "
         "final norm (layer "
      << c.layers + 1 << ")\n";
  }
  L << "loss: cross-entropy, label smoothing " << format_general(o_.smoothing);
  if (a.mixing())
    L << "; mixup " << format_general(a.mixup) << ", cutmix " << format_general(a.cutmix)
      << ", mixup-prob " << format_general(a.mixup_prob) << ", switch-prob "
      << format_general(a.mixup_switch_prob) << " (soft targets)";
  L << "\n";
  L << "augment: ";
  if (a.random_resized_crop)
    L << "random resized crop scale " << format_general(a.scale[0]) << "-"
      << format_general(a.scale[1]) << " ratio " << format_general(a.ratio[0]) << "-"
      << format_general(a.ratio[1]);
  else
    L << "eval transform (no random crop)";
  L << ", hflip " << format_general(a.hflip);
  if (a.crop_padding > 0) L << ", crop-padding " << a.crop_padding;
  L << ", reprob " << format_general(a.reprob) << "\n";
  L << "EMA of weights: "
    << (o_.model_ema ? "decay " + format_general(o_.model_ema_decay, 6) : std::string("off"))
    << "\n";
  L << "run: " << o_.epochs << " epochs of " << bpe_ << " steps, batch " << o_.batch_size
    << ", seed " << state_.seed;
  if (o_.max_steps > 0) L << ", --max-steps " << o_.max_steps;
  if (o_.val_interval != 1)
    L << ", validation "
      << (o_.val_interval == 0
              ? std::string("after the last epoch only")
              : "every " + std::to_string(o_.val_interval) + " epochs and after the last");
  L << "; threads " << ops::num_threads() << " (" << ops::cpu_isa() << "); precision "
    << ops::precision_name(o_.precision) << "\n";
  L << "output: " << output_ << " (last.h5, best.h5" << (o_.model_ema ? ", ema.h5" : "")
    << ", metrics.csv)\n";
  if (resumed_) {
    L << "resumed from " << o_.resume << ": " << epoch_label(resumed_->epoch) << ", batch "
      << state_.batch << "/" << bpe_ << ", step " << optimizer().steps() << "\n";
    if (o_.seed != state_.seed)
      L << "note: --seed " << o_.seed << " is ignored: a resumed run keeps its seed " << state_.seed
        << "\n";
  }
  L << std::flush;
}

TrainResult Run::go() {
  o_.validate();
  open_data();
  build_model();
  open_output();
  log_setup();

  TrainResult result;
  const int64_t resume_batch = resumed_ ? state_.batch : 0;
  if (o_.max_steps > 0 && optimizer().steps() >= o_.max_steps) {
    log_ << "--max-steps " << o_.max_steps << " already reached (step " << optimizer().steps()
         << "): nothing to do\n";
    result.end = TrainEnd::max_steps;
  } else if (start_epoch_ >= o_.epochs) {
    log_ << "all " << o_.epochs << " epochs are done; raise --epochs to train longer\n";
  } else {
    log_ << "training\n" << std::flush;
  }
  if (o_.profile) profile_.emplace("step", o_.profile_every);
  for (int64_t epoch = start_epoch_; epoch < o_.epochs && result.end == TrainEnd::finished;
       ++epoch) {
    const int64_t first = epoch == start_epoch_ ? resume_batch : 0;
    if (first == 0) state_.loss_sum = 0, state_.correct = 0, state_.seen = 0, state_.seconds = 0;
    epoch_timer_.reset();
    epoch_rate_ = Throughput{};
    if (!train_epoch(epoch, first)) {
      result.end = max_steps_reached_ ? TrainEnd::max_steps : TrainEnd::interrupted;
      break;
    }
    if (!finish_epoch(epoch)) {
      result.end = TrainEnd::interrupted;
      break;
    }
    result.epochs_done = epoch + 1;
    if (max_steps_reached_) result.end = TrainEnd::max_steps;
  }
  if (profile_) print_profile();
  result.steps = optimizer().steps();
  result.best_top1 = state_.best_top1;
  result.checkpoint = last_path_;
  result.images_per_second = run_rate_.images_per_second();
  const std::string rate =
      result.images_per_second > 0
          ? "; " + format_fixed(result.images_per_second, 1) + " images/s over " +
                (run_rate_.timed_steps > 0 ? "the last " + std::to_string(run_rate_.timed_steps)
                                           : std::to_string(run_rate_.steps)) +
                " steps of this run"
          : "";
  switch (result.end) {
    case TrainEnd::finished:
      log_ << "finished " << o_.epochs << " epochs, step " << result.steps;
      if (state_.best_top1 >= 0)
        log_ << "; best val top-1 " << format_fixed(state_.best_top1, 2) << "% at epoch "
             << state_.best_epoch << " (" << (fs::path(output_) / "best.h5").string() << ")";
      log_ << rate << "\n";
      break;
    case TrainEnd::max_steps:
      log_ << "stopped at step " << result.steps << " (--max-steps " << o_.max_steps << ")" << rate
           << "; checkpoint " << last_path_ << " (continue with --resume " << last_path_ << ")\n";
      break;
    case TrainEnd::interrupted:
      log_ << "interrupted at step " << result.steps << "; checkpoint " << last_path_
           << " (continue with --resume " << last_path_ << ")\n";
      break;
  }
  log_ << std::flush;
  return result;
}

bool Run::train_epoch(int64_t epoch, int64_t first) {
  if (first >= bpe_) return true;  // stopped during this epoch's validation: only that is left
  train_loader_->start_epoch(epoch, first);
  ProgressOptions po;
  po.tty = tty_;
  po.line_every = o_.log_interval;
  Progress progress(log_, epoch_label(epoch), bpe_, po, first);
  datasets::Batch batch;
  int64_t images = 0;
  Timer step_timer;
  while (train_loader_->next(batch)) {
    if (profile_) profile_->begin();
    train_step(batch);
    const bool print_profile_now = profile_ && profile_->end();
    ++steps_this_run_;
    const double dt = step_timer.seconds();
    step_timer.reset();
    const bool timed = steps_this_run_ > kWarmupStepsUntimed;
    run_rate_.add(dt, batch.labels.numel(), timed);
    epoch_rate_.add(dt, batch.labels.numel(), timed);
    images += batch.labels.numel();
    state_.batch = batch.index + 1;
    char metrics[128];
    std::snprintf(metrics, sizeof metrics, "loss %.4f  acc %.2f%%  lr %.3g",
                  state_.loss_sum / std::max<int64_t>(state_.seen, 1),
                  100.0 * state_.correct / std::max<int64_t>(state_.seen, 1), lr_);
    progress.update(state_.batch, images, metrics);
    if (print_profile_now) {
      progress.finish();
      print_profile();
    }
    const bool at_end = state_.batch >= bpe_;
    max_steps_reached_ = o_.max_steps > 0 && optimizer().steps() >= o_.max_steps;
    if ((stopping() || max_steps_reached_) && !at_end) {
      progress.finish();
      state_.seconds += epoch_timer_.seconds();
      save_last(epoch, state_.batch);
      return false;
    }
  }
  progress.finish();
  if (state_.batch != bpe_)
    throw Error("the loader ended epoch " + std::to_string(epoch + 1) + " after " +
                std::to_string(state_.batch) + " of " + std::to_string(bpe_) + " batches");
  return true;
}

void Run::train_step(const datasets::Batch& batch) {
  arena_.reset();
  nn::Context ctx;
  ctx.training = true;
  ctx.arena = &arena_;
  ctx.rng = &rng_;
  ctx.precision = o_.precision;
  Tensor logits;  // [B, classes]
  {
    ops::profile::Scope scope("model forward (rest)");
    logits = model_->forward(ctx, batch.images);
  }
  Tensor dlogits = ctx.alloc(logits.shape());
  ops::CrossEntropyStats s;
  {
    ops::profile::Scope scope("cross-entropy");
    if (!batch.targets.empty()) {  // Mixup/CutMix: soft targets, smoothing folded in
      s = ops::soft_cross_entropy_forward(logits, batch.targets);
      ops::soft_cross_entropy_backward(logits, batch.targets, 1.f, dlogits);
    } else {
      s = ops::cross_entropy_forward_backward(logits, batch.labels, o_.smoothing, -100, 1.f,
                                              dlogits);
    }
  }
  const int64_t step = optimizer().steps();
  if (!std::isfinite(s.loss))
    throw Error("the training loss is " + format_general(s.loss) + " at step " +
                std::to_string(step + 1) + " (epoch " + std::to_string(batch.epoch + 1) +
                ", batch " + std::to_string(batch.index + 1) +
                "); lower --lr or clip gradients with --clip-grad" +
                (fs::exists(last_path_) ? "; the last checkpoint is " + last_path_ : ""));
  {
    ops::profile::Scope scope("zero_grad");
    params_->zero_grad();
  }
  {
    ops::profile::Scope scope("model backward (rest)");
    model_->backward(ctx, dlogits);
  }
  ops::profile::Scope scope("optimizer");
  if (o_.clip_grad > 0) ops::clip_grad_norm(params_->grads(), o_.clip_grad);
  lr_ = schedule_->lr(step);
  optimizer().step(lr_);
  state_.loss_sum += s.loss * static_cast<double>(s.count);
  state_.correct += s.correct;
  state_.seen += s.count;
}

void Run::print_profile() {
  const int64_t last = optimizer().steps(), first = last - profile_->counted() + 1;
  profile_->print(log_, "--profile, steps " + std::to_string(first) + "-" + std::to_string(last));
}

bool Run::finish_epoch(int64_t epoch) {
  if (stopping()) {  // stopped on the epoch's last step: a resume starts with the validation
    state_.seconds += epoch_timer_.seconds();
    save_last(epoch, bpe_);
    return false;
  }
  // Validation after every --val-interval-th epoch and after the run's last (also the last
  // one --max-steps allows).
  const int64_t done = epoch + 1;
  const bool validate = done == o_.epochs || max_steps_reached_ ||
                        (o_.val_interval > 0 && done % o_.val_interval == 0);
  EvalResult val, ema_val;
  if (validate) {
    ProgressOptions po;
    po.tty = tty_;
    po.unit = "batch";
    po.line_every = 0;  // in a log, the summary line below is enough
    Progress progress(log_, "validate", val_loader_->batches_per_epoch(), po);
    EvalSettings at;
    at.precision = o_.precision;
    val = evaluate(*model_, *val_loader_, arena_, &progress, stop_, at);
    if (val.complete && ema_) {
      Progress ema_progress(log_, "validate EMA", val_loader_->batches_per_epoch(), po);
      ema_->swap_with(*params_);
      ema_val = evaluate(*model_, *val_loader_, arena_, &ema_progress, stop_, at);
      ema_->swap_with(*params_);
    }
  }
  state_.seconds += epoch_timer_.seconds();
  epoch_timer_.reset();
  if (validate && (!val.complete || (ema_ && !ema_val.complete))) {
    save_last(epoch, bpe_);  // a resume validates this epoch and goes on
    return false;
  }

  const double train_loss = state_.loss_sum / std::max<int64_t>(state_.seen, 1);
  const double train_acc = 100.0 * state_.correct / std::max<int64_t>(state_.seen, 1);
  const double ips = epoch_rate_.images_per_second();
  const double epoch_seconds = state_.seconds;
  // The rate of the epoch's last step (also when a resumed run took no step of this epoch).
  const int64_t steps = optimizer().steps();
  const float last_lr = steps > 0 ? schedule_->lr(steps - 1) : 0.f;
  std::vector<std::string> row{std::to_string(epoch + 1),
                               std::to_string(optimizer().steps()),
                               format_general(last_lr, 6),
                               format_fixed(train_loss, 6),
                               format_fixed(train_acc, 4),
                               validate ? format_fixed(val.loss, 6) : "",
                               validate ? format_fixed(val.top1_percent(), 4) : "",
                               validate ? format_fixed(val.top5_percent(), 4) : "",
                               format_fixed(ips, 2),
                               format_fixed(state_.seconds, 2)};
  if (ema_) {
    row.push_back(validate ? format_fixed(ema_val.loss, 6) : "");
    row.push_back(validate ? format_fixed(ema_val.top1_percent(), 4) : "");
    row.push_back(validate ? format_fixed(ema_val.top5_percent(), 4) : "");
  }
  csv_->row(row);

  // best.h5: the better of the raw weights and their average, if it beats the best so far.
  const bool ema_better = validate && ema_ && ema_val.top1_percent() > val.top1_percent();
  const double top1 = ema_better ? ema_val.top1_percent() : val.top1_percent();
  const bool best = validate && top1 > state_.best_top1;
  if (best) {
    state_.best_top1 = top1;
    state_.best_epoch = epoch + 1;
    if (ema_better) ema_->swap_with(*params_);
    save_weights((fs::path(output_) / "best.h5").string(), epoch + 1);
    if (ema_better) ema_->swap_with(*params_);
  }
  if (ema_) {
    ema_->swap_with(*params_);
    save_weights((fs::path(output_) / "ema.h5").string(), epoch + 1);
    ema_->swap_with(*params_);
  }
  state_.loss_sum = 0, state_.correct = 0, state_.seen = 0, state_.seconds = 0;
  save_last(epoch + 1, 0);

  std::ostringstream line;
  line << epoch_label(epoch) << ": train loss " << format_fixed(train_loss, 4) << " acc "
       << format_fixed(train_acc, 2) << "%";
  if (validate)
    line << " | val loss " << format_fixed(val.loss, 4) << " top-1 "
         << format_fixed(val.top1_percent(), 2) << "% top-5 " << format_fixed(val.top5_percent(), 2)
         << "%";
  if (validate && ema_)
    line << " | EMA top-1 " << format_fixed(ema_val.top1_percent(), 2) << "% top-5 "
         << format_fixed(ema_val.top5_percent(), 2) << "%";
  line << " | " << format_fixed(ips, 1) << " img/s, " << format_duration(epoch_seconds)
       << (best ? " | best" + std::string(ema_better ? " (EMA)" : "") + ", saved best.h5" : "");
  const int64_t epochs_left = o_.epochs - (epoch + 1);
  if (epochs_left > 0 && !max_steps_reached_)
    line << " | ETA " << format_duration(epoch_seconds * static_cast<double>(epochs_left));
  log_ << line.str() << "\n" << std::flush;
  return true;
}

io::CheckpointMeta Run::meta(int64_t epoch) const {
  io::CheckpointMeta m;
  m.config = to_config_map(cfg_);
  m.class_names = class_names_;
  m.step = base_->steps();
  m.epoch = epoch;
  return m;
}

void Run::save_weights(const std::string& path, int64_t epoch) const {
  io::save_checkpoint(path, *params_, meta(epoch));
}

void Run::save_last(int64_t epoch, int64_t batch) {
  RunState s = state_;
  s.batch = batch;
  s.batches_per_epoch = bpe_;
  s.batch_size = o_.batch_size;
  s.rng_seed = rng_.seed();
  s.rng_counter = rng_.counter();
  s.has_ema = ema_ != nullptr;
  io::CheckpointMeta m = meta(epoch);
  m.rng_state = s.words();
  io::save_checkpoint(last_path_, *params_, m, &optimizer());
}

}  // namespace

void TrainOptions::validate() const {
  if (finetune.enabled && finetune.from.empty() && resume.empty())
    throw UsageError("--from is required: the checkpoint to fine-tune (or --resume a run)");
  if (data.empty()) throw UsageError("--data is required: the training images");
  need(epochs >= 1, "epochs", "at least 1", epochs);
  need(batch_size >= 1, "batch-size", "at least 1", static_cast<double>(batch_size));
  need(lr > 0 && std::isfinite(lr), "lr", "positive", lr);
  need(min_lr >= 0 && min_lr <= lr, "min-lr", "in [0, --lr]", min_lr);
  need(warmup_epochs >= 0 && warmup_epochs < epochs, "warmup-epochs", "in [0, --epochs)",
       warmup_epochs);
  need(weight_decay >= 0 && std::isfinite(weight_decay), "weight-decay", ">= 0", weight_decay);
  need(clip_grad >= 0 && std::isfinite(clip_grad), "clip-grad", ">= 0 (0: off)", clip_grad);
  if (opt != "adamw" && opt != "sgd")
    throw UsageError("--opt must be 'adamw' or 'sgd', got '" + opt + "'");
  need(momentum >= 0 && momentum < 1, "momentum", "in [0, 1)", momentum);
  need(layer_decay > 0 && layer_decay <= 1, "layer-decay", "in (0, 1] (1: off)", layer_decay);
  need(finetune.num_classes >= 0, "num-classes", "at least 1",
       static_cast<double>(finetune.num_classes));
  need(smoothing >= 0 && smoothing < 1, "smoothing", "in [0, 1)", smoothing);
  const auto& a = augment;
  if (!(a.scale[0] > 0 && a.scale[0] <= a.scale[1] && a.scale[1] <= 1))
    throw UsageError("--scale must be two numbers 0 < MIN <= MAX <= 1, got " +
                     format_general(a.scale[0]) + " " + format_general(a.scale[1]));
  if (!(a.ratio[0] > 0 && a.ratio[0] <= a.ratio[1] && std::isfinite(a.ratio[1])))
    throw UsageError("--ratio must be two numbers 0 < MIN <= MAX, got " +
                     format_general(a.ratio[0]) + " " + format_general(a.ratio[1]));
  need(a.hflip >= 0 && a.hflip <= 1, "hflip", "a probability in [0, 1]", a.hflip);
  need(a.reprob >= 0 && a.reprob <= 1, "reprob", "a probability in [0, 1]", a.reprob);
  if (a.crop_padding < 0)
    throw UsageError("--crop-padding must be >= 0 (0: off), got " + std::to_string(a.crop_padding));
  need(a.mixup >= 0 && std::isfinite(a.mixup), "mixup", ">= 0 (0: off)", a.mixup);
  need(a.cutmix >= 0 && std::isfinite(a.cutmix), "cutmix", ">= 0 (0: off)", a.cutmix);
  need(a.mixup_prob >= 0 && a.mixup_prob <= 1, "mixup-prob", "a probability in [0, 1]",
       a.mixup_prob);
  need(a.mixup_switch_prob >= 0 && a.mixup_switch_prob <= 1, "mixup-switch-prob",
       "a probability in [0, 1]", a.mixup_switch_prob);
  need(model_ema_decay >= 0 && model_ema_decay < 1, "model-ema-decay", "in [0, 1)",
       model_ema_decay);
  need(max_steps >= 0, "max-steps", ">= 0 (0: no limit)", static_cast<double>(max_steps));
  need(log_interval >= 1, "log-interval", "at least 1", static_cast<double>(log_interval));
  need(val_interval >= 0, "val-interval", ">= 0 (0: only after the last epoch)",
       static_cast<double>(val_interval));
  need(prefetch >= 1, "prefetch", "at least 1", prefetch);
  need(profile_every >= 0, "profile-every", ">= 0 (0: only at the end)",
       static_cast<double>(profile_every));
}

TrainResult train(const TrainOptions& options, std::ostream& log, bool tty,
                  const std::atomic<int>* stop) {
  Run run(options, log, tty, stop);
  return run.go();
}

}  // namespace vitk::vit
