// The ViT as a train::Task: data and loaders, the model (new, fine-tuned from a checkpoint or
// resumed), the step's loss, validation, and the run header's lines.
#include "vit/train_task.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/ops/profile.h"
#include "common/progress.h"
#include "vit/checkpoint.h"
#include "vit/evaluate.h"
#include "vit/finetune.h"
#include "vit/import.h"

namespace vitk::vit {
namespace {

std::string grouped(int64_t x) {
  std::string digits = std::to_string(x), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

VitTask::VitTask(const TrainOptions& options) : o_(options) {}

VitTask::VitTask(const VitConfig& config, const TrainOptions& options, datasets::Batch batch)
    : o_(options), cfg_(config), fixed_(std::move(batch)) {
  cfg_.validate();
  bpe_ = 1;
}

VitTask::~VitTask() = default;

train::TaskInfo VitTask::info() const {
  train::TaskInfo i;
  i.unit = "images";
  i.progress_unit = "step";
  i.rate_unit = "img/s";
  i.train_accuracy = true;
  i.best_metric = "top1";
  i.higher_is_better = true;
  i.metric_names = {"loss", "top1", "top5"};
  return i;
}

void VitTask::setup(const io::CheckpointMeta* resumed, uint64_t seed,
                    const train::Partition& partition) {
  part_ = partition;
  const int64_t global = fixed_ ? fixed_->labels.numel() : o_.batch_size;
  if (global % part_.parts() != 0)
    throw UsageError("--batch-size " + std::to_string(global) + " is not a multiple of " +
                     std::to_string(part_.ranks) + " ranks x --accum-steps " +
                     std::to_string(part_.accum) + " = " + std::to_string(part_.parts()) +
                     " parts of a batch");
  if (!fixed_) open_data();
  if (!fixed_) check_run_length();
  build_model(resumed, seed);
  if (!fixed_) open_loaders(seed);
}

void VitTask::open_data() {
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

// The model: a resumed run's (its settings must agree with those given), the checkpoint's of a
// fine-tuning run, or a new one; the weights of the latter two are loaded or drawn here.
void VitTask::build_model(const io::CheckpointMeta* resumed, uint64_t seed) {
  const int64_t classes = static_cast<int64_t>(class_names_.size());
  augment_ = o_.augment;
  if (resumed) {
    cfg_ = stored_config(o_.loop.resume, *resumed);
    // Both sides as text of a parsed configuration, so that keys an older checkpoint lacks
    // compare as their defaults. When fine-tuning, the size and the classes of the [model]
    // settings are those of the model fine-tuned from (--image-size and --num-classes are checked
    // by check_resumed_finetune).
    const auto now = to_config_map(o_.model), then = to_config_map(cfg_);
    for (const std::string& key : o_.model_keys_given) {
      if (o_.finetune.enabled && (key == "image_size" || key == "num_classes")) continue;
      auto a = now.find(key), b = then.find(key);
      if (a != now.end() && b != then.end() && a->second != b->second)
        throw UsageError("--model." + key + " " + a->second + " differs from the checkpoint's " +
                         b->second + " (" + o_.loop.resume + "); a resumed run keeps its model");
    }
    check_resumed_finetune(o_.finetune, cfg_, o_.loop.resume);
    augment_taken_ =
        take_recorded_augment(resumed->recipe, o_.augment_given, augment_, o_.loop.resume);
    if (!resumed->class_names.empty() && resumed->class_names != class_names_)
      throw Error(o_.loop.resume + ": the checkpoint's classes are not those of " +
                  train_set_->source());
  } else if (o_.finetune.enabled) {
    FinetuneStart start = finetune_start(o_, class_names_, train_set_->source());
    cfg_ = start.config;
    initial_ = start.from;
    new_head_ = start.new_head;
    align_corners_ = start.align_corners;
    augment_taken_ =
        take_recorded_augment(start.recipe, o_.augment_given, augment_, o_.finetune.from);
  } else if (!fixed_) {
    cfg_ = o_.model;
    if (cfg_.num_classes == 0) cfg_.num_classes = classes;
  }
  if (!fixed_ && cfg_.num_classes != classes)
    throw UsageError("--model.num_classes " + std::to_string(cfg_.num_classes) + ": the data " +
                     train_set_->source() + " has " + std::to_string(classes) + " classes");
  cfg_.validate();

  params_ = std::make_unique<ParamStore>();
  model_ = std::make_unique<VisionTransformer>(*params_, cfg_);
  params_->finalize();
  if (initial_) {
    load_vit_weights(o_.finetune.from, cfg_, *params_, align_corners_, new_head_, false,
                     o_.finetune.pos_interpolation);
  } else if (!resumed) {  // a resumed run's weights are the loop's to load
    ops::Rng init_rng(ops::Rng::hash(seed, 0x1417));
    model_->init(init_rng);
  }
  if (o_.layer_decay != 1.f) apply_layer_decay(*params_, cfg_.layers, o_.layer_decay);
  patch_embed_.clear();
  for (Parameter& p : params_->params())
    if (p.name.rfind("patch_embed.", 0) == 0) patch_embed_.emplace_back(&p, p.lr_scale);
}

void VitTask::hold_patch_embed(bool hold) {
  if (hold == patch_embed_held_) return;
  for (auto& [p, scale] : patch_embed_) p->lr_scale = hold ? 0.f : scale;
  patch_embed_held_ = hold;
}

void VitTask::open_loaders(uint64_t seed) {
  datasets::LoaderOptions lo = eval_loader_options(cfg_, o_.batch_size, o_.prefetch);
  const datasets::LoaderOptions val = lo;
  lo.training = true;
  lo.seed = seed;
  lo.augment = augment_;
  lo.augment.smoothing = o_.smoothing;
  // This rank's rows of every batch, and its whole batches of the validation (datasets/loader.h).
  lo.shard = {part_.rank, part_.ranks};
  datasets::LoaderOptions val_shard = val;
  val_shard.shard = lo.shard;
  train_loader_ = std::make_unique<datasets::Loader>(*train_set_, lo);
  val_loader_ = std::make_unique<datasets::Loader>(*val_set_, val_shard);
  val_batches_ = (val_set_->size() + o_.batch_size - 1) / o_.batch_size;
  if (train_loader_->batches_per_epoch() != bpe_)
    throw Error("the loader makes " + std::to_string(train_loader_->batches_per_epoch()) +
                " batches per epoch, expected " + std::to_string(bpe_));
}

std::unique_ptr<optim::Optimizer> VitTask::make_optimizer() {
  if (o_.opt == "sgd") {
    optim::SgdOptions so;
    so.momentum = o_.momentum;
    so.weight_decay = o_.weight_decay;
    return std::make_unique<optim::Sgd>(*params_, so);
  }
  optim::AdamWOptions ao;
  ao.weight_decay = o_.weight_decay;
  return std::make_unique<optim::AdamW>(*params_, ao);
}

int64_t VitTask::total_steps() const {
  return o_.loop.steps > 0 ? o_.loop.steps : static_cast<int64_t>(o_.loop.epochs) * bpe_;
}

int64_t VitTask::warmup_steps() const {
  const double steps = o_.warmup_share > 0 ? o_.warmup_share * static_cast<double>(total_steps())
                                           : o_.warmup_epochs * static_cast<double>(bpe_);
  return std::min<int64_t>(std::llround(steps), total_steps() - 1);
}

void VitTask::check_run_length() const {
  const int64_t total = total_steps();
  const std::string run = o_.loop.steps > 0 ? "--steps " + std::to_string(o_.loop.steps)
                                            : "--epochs " + std::to_string(o_.loop.epochs) +
                                                  " of " + std::to_string(bpe_) + " steps";
  if (o_.freeze_patch_embed >= total)
    throw UsageError("--freeze-patch-embed must be less than the run's " + std::to_string(total) +
                     " steps (" + run + "), got " + std::to_string(o_.freeze_patch_embed) +
                     ": the patch embedding would never learn");
  // With --epochs, validate() refused a warmup as long as the run; in steps that needs the epoch.
  if (o_.loop.steps > 0 && o_.warmup_epochs_given &&
      o_.warmup_epochs * static_cast<double>(bpe_) >= static_cast<double>(total))
    throw UsageError("--warmup-epochs must be in [0, " +
                     format_general(static_cast<double>(total) / static_cast<double>(bpe_), 6) +
                     ") with " + run + " (an epoch is " + std::to_string(bpe_) + " steps), got " +
                     format_general(o_.warmup_epochs, 6));
}

std::unique_ptr<optim::Schedule> VitTask::make_schedule() {
  return std::make_unique<optim::WarmupCosine>(o_.lr, warmup_steps(), total_steps(), o_.min_lr);
}

int64_t VitTask::batches_in_epoch(int64_t) {
  return bpe_;
}

void VitTask::start_epoch(int64_t epoch, int64_t first) {
  if (!fixed_) train_loader_->start_epoch(epoch, first);
}

bool VitTask::next_batch() {
  if (fixed_) {
    batch_ = *fixed_;
    return true;
  }
  return train_loader_->next(batch_);
}

std::pair<std::string, int64_t> VitTask::batching() const {
  return {"batch-size", o_.batch_size};
}

// The micro-th of this rank's rows (the loader gave this rank's share of the global batch).
train::StepStats VitTask::forward_loss(nn::Context& ctx, int64_t step, int micro) {
  hold_patch_embed(step < o_.freeze_patch_embed);
  const int64_t local = batch_.labels.numel(), rows = local / part_.accum;
  const int64_t begin = micro * rows, end = begin + rows;
  const Tensor images = part_.accum == 1 ? batch_.images : batch_.images.rows(begin, end);
  const Tensor labels = part_.accum == 1 ? batch_.labels : batch_.labels.rows(begin, end);
  const Tensor targets =
      part_.accum == 1 || batch_.targets.empty() ? batch_.targets : batch_.targets.rows(begin, end);
  // The mean over these rows, weighted by their share of the global batch: the gradients summed
  // over all parts are those of the global batch's mean (exactly 1 in a single process).
  const float scale = static_cast<float>(rows) / static_cast<float>(local * part_.ranks);
  Tensor logits;  // [rows, classes]
  {
    ops::profile::Scope scope("model forward (rest)");
    logits = model_->forward(ctx, images);
  }
  dlogits_ = ctx.alloc(logits.shape());
  ops::CrossEntropyStats s;
  ops::profile::Scope scope("cross-entropy");
  if (!targets.empty()) {  // Mixup/CutMix: soft targets, smoothing folded in
    s = ops::soft_cross_entropy_forward(logits, targets);
    ops::soft_cross_entropy_backward(logits, targets, scale, dlogits_);
  } else {
    s = ops::cross_entropy_forward_backward(logits, labels, o_.smoothing, -100, scale, dlogits_);
  }
  train::StepStats stats;
  stats.loss = s.loss;
  stats.loss_sum = s.loss * static_cast<double>(s.count);
  stats.items = s.count;
  stats.correct = s.correct;
  stats.units = rows;
  return stats;
}

void VitTask::backward(nn::Context& ctx) {
  model_->backward(ctx, dlogits_);
}

train::Metrics VitTask::validate(const train::ValidateContext& v) {
  ProgressOptions po;
  po.tty = v.tty;
  po.unit = "batch";
  po.line_every = 0;  // in a log, the report line is enough
  Progress progress(*v.log, v.label, val_loader_->batches_per_epoch(), po);
  EvalSettings at;
  at.precision = v.precision;
  const EvalResult r = evaluate(*model_, *val_loader_, *v.arena, &progress, v.stop, at);
  // Each rank evaluated whole batches; the loss is summed batch by batch in the order of a single
  // process (adding the zeros of other ranks' batches is exact), so the figures equal its own.
  std::vector<double> sums(static_cast<size_t>(val_batches_), 0.0);
  for (const auto& [index, sum] : r.batch_loss_sums) sums.at(static_cast<size_t>(index)) = sum;
  int64_t counts[4] = {r.count, r.top1, r.top5, r.complete ? 0 : 1};
  v.world->allreduce_sum(sums.data(), sums.size());
  v.world->allreduce_sum(counts, 4);
  double loss_sum = 0;
  for (double x : sums) loss_sum += x;
  const double n = static_cast<double>(std::max<int64_t>(counts[0], 1));
  train::Metrics m;
  m.values = {{"loss", loss_sum / n},
              {"top1", 100.0 * static_cast<double>(counts[1]) / n},
              {"top5", 100.0 * static_cast<double>(counts[2]) / n}};
  m.complete = counts[3] == 0;
  return m;
}

std::string VitTask::describe(const train::Metrics& m) const {
  return "loss " + format_fixed(m.get("loss"), 4) + " top-1 " + format_fixed(m.get("top1"), 2) +
         "% top-5 " + format_fixed(m.get("top5"), 2) + "%";
}

std::string VitTask::describe_best(double value) const {
  return "top-1 " + format_fixed(value, 2) + "%";
}

io::CheckpointMeta VitTask::checkpoint_meta() const {
  io::CheckpointMeta m;
  m.config = to_config_map(cfg_);
  m.class_names = class_names_;
  m.recipe = recipe_record(o_, augment_);
  // A warmup given as a share of --steps is recorded in epochs, as it ran.
  if (o_.freeze_patch_embed > 0)
    m.recipe["freeze-patch-embed"] = std::to_string(o_.freeze_patch_embed);
  if (o_.warmup_share > 0)
    m.recipe["warmup-epochs"] =
        format_general(static_cast<double>(warmup_steps()) / static_cast<double>(bpe_), 6);
  return m;
}

void VitTask::log_setup(std::ostream& L) const {
  const auto& c = cfg_;
  const auto& a = augment_;
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
        << c.grid_width() << " (" << interpolation_name(o_.finetune.pos_interpolation)
        << ", align_corners " << (align_corners_ ? "true" : "false") << ")";
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
    << ", lr " << format_general(o_.lr) << " (warmup "
    << format_general(static_cast<double>(warmup_steps()) / static_cast<double>(bpe_), 3)
    << " epochs = " << warmup_steps() << " steps, cosine to " << format_general(o_.min_lr)
    << " at step " << total_steps() << "), weight decay " << format_general(o_.weight_decay)
    << (sgd ? " (L2, " : " (") << "not on biases, norms, class token, positions), clip-grad "
    << (o_.loop.clip_grad > 0 ? format_general(o_.loop.clip_grad) : std::string("off")) << "\n";
  if (o_.layer_decay != 1.f) {
    L << "layer decay " << format_general(o_.layer_decay) << ": lr x "
      << format_general(o_.layer_decay) << "^(" << c.layers + 1 << " - layer), from "
      << format_general(layer_decay_scale("pos_embed", c.layers, o_.layer_decay))
      << " for the patch embedding, class token and positions (layer 0) to 1 for the head and "
         "final norm (layer "
      << c.layers + 1 << ")\n";
  }
  if (o_.freeze_patch_embed > 0)
    L << "patch embedding (" << patch_embed_.size() << " tensors) held at lr 0 for steps 1-"
      << o_.freeze_patch_embed << "\n";
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
  L << ", reprob " << format_general(a.reprob);
  if (o_.finetune.enabled || !o_.loop.resume.empty()) {
    const std::string& from = o_.loop.resume.empty() ? o_.finetune.from : o_.loop.resume;
    if (augment_taken_.empty()) {
      L << " (as given or vitk's defaults: " << from << " does not record its augmentation)";
    } else {
      L << " (as " << from << " was trained:";
      for (size_t i = 0; i < augment_taken_.size(); ++i) L << (i ? ", " : " ") << augment_taken_[i];
      L << ")";
    }
  }
  L << "\n";
  L << std::flush;
}

}  // namespace vitk::vit
