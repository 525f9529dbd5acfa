// The captioning model as a train::Task: caption sets and the tokenizer, the model (new, with an
// encoder from a ViT checkpoint, or resumed), the step's loss, validation, the run header.
#include "vit/caption/task.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <ostream>
#include <utility>

#include "common/dist/world.h"
#include "common/error.h"
#include "common/io/checkpoint_config.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"
#include "common/progress.h"
#include "vit/caption/captioner.h"
#include "vit/checkpoint.h"
#include "vit/evaluate.h"

namespace vitk::caption {
namespace fs = std::filesystem;

CaptionDataPaths caption_data_paths(const std::string& data, const CaptionDataPaths& given) {
  CaptionDataPaths p;
  if (!data.empty()) {
    const fs::path root(data);
    std::error_code ec;
    if (!fs::is_directory(root, ec)) throw Error("--data " + data + ": not a directory");
    if (fs::exists(root / "captions_train.json", ec)) {  // vitk make-scenes
      p = {(root / "captions_train.json").string(), (root / "images" / "train").string(),
           (root / "captions_val.json").string(), (root / "images" / "val").string()};
    } else if (fs::exists(root / "annotations" / "captions_train2017.json", ec)) {  // COCO 2017
      p = {(root / "annotations" / "captions_train2017.json").string(),
           (root / "train2017").string(), (root / "annotations" / "captions_val2017.json").string(),
           (root / "val2017").string()};
    } else {
      throw Error("--data " + data +
                  ": neither captions_train.json (vitk make-scenes) nor "
                  "annotations/captions_train2017.json (COCO 2017) is there");
    }
  }
  auto take = [](std::string& field, const std::string& value) {
    if (!value.empty()) field = value;
  };
  take(p.train_captions, given.train_captions);
  take(p.train_images, given.train_images);
  take(p.val_captions, given.val_captions);
  take(p.val_images, given.val_images);
  if (p.train_captions.empty() || p.val_captions.empty())
    throw UsageError("give --data DIR, or --train-captions and --val-captions");
  auto folder_of = [](const std::string& file) { return fs::path(file).parent_path().string(); };
  if (p.train_images.empty()) p.train_images = folder_of(p.train_captions);
  if (p.val_images.empty()) p.val_images = folder_of(p.val_captions);
  return p;
}

std::string word_swaps_text(const WordSwaps& swaps) {
  std::string text;
  for (const auto& [a, b] : swaps) text += (text.empty() ? "" : ",") + a + ":" + b;
  return text;
}

CaptionTrainOptions::CaptionTrainOptions() {
  loop.epochs = 10;
  loop.clip_grad = 1.f;
  loop.model_ema_decay = 0.999;
  loop.valid_unit = train::Every::epochs;
}

void CaptionTrainOptions::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError(what);
  };
  loop.validate();
  need(batch_size >= 1 && batch_size <= (1 << 20), "--batch-size must be in [1, 1048576]");
  need(std::isfinite(lr) && lr > 0.f, "--lr must be positive");
  need(std::isfinite(min_lr) && min_lr >= 0.f && min_lr <= lr, "--min-lr must be in [0, --lr]");
  need(std::isfinite(warmup_epochs) && warmup_epochs >= 0.f, "--warmup-epochs must be >= 0");
  need(std::isfinite(weight_decay) && weight_decay >= 0.f, "--weight-decay must be >= 0");
  need(smoothing >= 0.f && smoothing < 1.f, "--label-smoothing must be in [0, 1)");
  need(std::isfinite(encoder_lr_scale) && encoder_lr_scale >= 0.f,
       "--encoder-lr-scale must be >= 0 (0 freezes the encoder)");
  need(std::isfinite(attention_penalty) && attention_penalty >= 0.f,
       "--attention-penalty must be >= 0");
  need(vocab_size >= 8 && vocab_size <= 1000000, "--vocab-size must be in [8, 1000000]");
  need(references == "random" || references == "likeliest",
       "--references must be random or likeliest, got '" + references + "'");
  need(phrases.empty() || spm.empty(),
       "--phrases shapes the SentencePiece model a run trains; --spm gives a trained one");
  need(hflip >= 0.f && hflip <= 1.f, "--hflip must be in [0, 1]");
  for (const auto& [a, b] : hflip_swap)
    need(!a.empty() && !b.empty() && a != b && a.find(' ') == std::string::npos &&
             b.find(' ') == std::string::npos && datasets::normalize_caption(a) == a &&
             datasets::normalize_caption(b) == b,
         "--hflip-swap takes pairs of two different lower-case words, WORD:WORD, got '" + a + ":" +
             b + "'");
  need(loop.model_ema_decay > 0, "--model-ema-decay must be in (0, 1)");
  need(loop.valid_every >= 0, "--val-interval must be >= 0");
  need(val_images >= 0, "--val-images-max must be >= 0");
  need(prefetch >= 1 && prefetch <= 64, "--prefetch must be in [1, 64]");
}

CaptionTask::CaptionTask(const CaptionTrainOptions& options, std::vector<TaskExtension*> extensions)
    : o_(options), extensions_(std::move(extensions)) {}
CaptionTask::~CaptionTask() = default;

train::TaskInfo CaptionTask::info() const {
  train::TaskInfo i;
  i.unit = "images";
  i.progress_unit = "step";
  i.rate_unit = "img/s";
  i.train_accuracy = true;  // of the next token
  i.best_metric = "bleu";
  i.higher_is_better = true;
  i.metric_names = {"loss", "bleu", "exact"};
  return i;
}

void CaptionTask::setup(const io::CheckpointMeta* resumed, uint64_t seed,
                        const train::Partition& partition) {
  o_.validate();
  part_ = partition;
  seed_ = seed;
  if (o_.batch_size % part_.parts() != 0)
    throw UsageError("--batch-size " + std::to_string(o_.batch_size) + " is not a multiple of " +
                     std::to_string(part_.parts()) + " parts of a batch (ranks x --accum-steps)");
  open_data();
  check_warmup();
  if (resumed) {
    // A checkpoint of another model is named as such, not by the tokenizer or --phrases it lacks.
    io::require_model_type(o_.loop.resume, resumed->config, "caption", "captioning",
                           "vitk caption-train writes them", /*required=*/true);
    const auto spm = resumed->files.find(kCaptionTokenizerFile);
    if (spm == resumed->files.end())
      throw Error(o_.loop.resume + ": the checkpoint has no tokenizer (files/" +
                  std::string(kCaptionTokenizerFile) + ")");
    tokenizer_ = datasets::Tokenizer::from_bytes(spm->second);
    // A resumed run keeps its tokenizer: --phrases (say, from the preset) must describe it.
    for (const std::string& phrase : o_.phrases)
      if (tokenizer_.encode(phrase).size() != 1)
        throw UsageError("--phrases: '" + phrase + "' is not one piece of the tokenizer of " +
                         o_.loop.resume + "; a resumed run keeps its tokenizer");
  } else if (!o_.spm.empty()) {
    tokenizer_ = datasets::Tokenizer::load(o_.spm);
  } else {
    std::vector<std::string> text;
    for (const auto& image : train_set_.images)
      for (const auto& c : image.captions) text.push_back(datasets::normalize_caption(c));
    datasets::TokenizerOptions to;
    to.vocab_size = o_.vocab_size;
    to.phrases = o_.phrases;
    to.threads = ops::num_threads();
    try {
      tokenizer_ = datasets::Tokenizer::train(text, to);
    } catch (const Error& e) {
      throw Error("cannot train the SentencePiece model on the captions of " +
                  paths_.train_captions + " (--vocab-size " + std::to_string(o_.vocab_size) +
                  "): " + e.what());
    }
  }
  build_model(resumed, seed);
  encode_captions();
  for (TaskExtension* x : extensions_) x->setup(*this);
  datasets::LoaderOptions lo = vit::eval_loader_options(cfg_.encoder, o_.batch_size, o_.prefetch);
  lo.training = true;  // shuffled, the last partial batch dropped
  lo.seed = seed;
  lo.augment.random_resized_crop = false;
  lo.augment.hflip = o_.hflip;  // with the captions' words swapped (references_of)
  lo.augment.reprob = 0.f;
  lo.num_classes = train_images_->size();
  lo.shard = {part_.rank, part_.ranks};
  loader_ = std::make_unique<datasets::Loader>(*train_images_, lo);
  bpe_ = loader_->batches_per_epoch();
}

void CaptionTask::open_data() {
  paths_ = caption_data_paths(o_.data, o_.paths);
  train_set_ = datasets::read_captions(paths_.train_captions, paths_.train_images);
  val_set_ = datasets::read_captions(paths_.val_captions, paths_.val_images);
  if (o_.val_images > 0 && static_cast<int64_t>(val_set_.images.size()) > o_.val_images)
    val_set_.images.resize(static_cast<size_t>(o_.val_images));
  for (TaskExtension* x : extensions_) x->check_data(*this);
  if (static_cast<int64_t>(train_set_.images.size()) < o_.batch_size)
    throw UsageError("--batch-size " + std::to_string(o_.batch_size) + " is larger than the " +
                     std::to_string(train_set_.images.size()) + " captioned training images of " +
                     paths_.train_captions);
  if (val_set_.images.empty())
    throw Error(paths_.val_captions + ": no captioned image to validate on");
  train_images_ = datasets::caption_images(train_set_);
}

void CaptionTask::check_warmup() const {
  if (!o_.warmup_epochs_given) return;
  // The loader's epoch: the last partial batch dropped.
  const int64_t bpe = static_cast<int64_t>(train_set_.images.size()) / o_.batch_size;
  const int64_t total = o_.loop.steps > 0 ? o_.loop.steps : o_.loop.epochs * bpe;
  if (o_.warmup_epochs * static_cast<double>(bpe) < static_cast<double>(total)) return;
  if (o_.loop.steps == 0)
    throw UsageError("--warmup-epochs must be in [0, --epochs), got " +
                     format_general(o_.warmup_epochs, 6));
  throw UsageError("--warmup-epochs must be in [0, " +
                   format_general(static_cast<double>(total) / static_cast<double>(bpe), 6) +
                   ") with --steps " + std::to_string(o_.loop.steps) + " (an epoch is " +
                   std::to_string(bpe) + " steps), got " + format_general(o_.warmup_epochs, 6));
}

namespace {

// --encoder-from: a ViT of f32 weights (those of `vitk quantize` are not kept as f32), loaded at
// this model's image size; a file of another model or a damaged one named with the option.
vit::LoadedVit load_encoder_from(const std::string& path, int64_t height, int64_t width) {
  try {
    io::require_f32_checkpoint(io::read_checkpoint_meta(path), path, "--encoder-from",
                               "the encoder to start from");
    return vit::load_vit(path, height, width);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw Error(std::string("--encoder-from ") + e.what());
  }
}

}  // namespace

void CaptionTask::build_model(const io::CheckpointMeta* resumed, uint64_t seed) {
  if (resumed) {
    cfg_ = caption_stored_config(o_.loop.resume, *resumed);
    const auto now = to_config_map(o_.model), then = to_config_map(cfg_);
    for (const std::string& key : o_.model_keys_given) {
      auto a = now.find(key), b = then.find(key);
      if (a != now.end() && b != then.end() && a->second != b->second)
        throw UsageError("--model." + key + " " + a->second + " differs from the checkpoint's " +
                         b->second + " (" + o_.loop.resume + "); a resumed run keeps its model");
    }
  } else {
    cfg_ = o_.model;
    cfg_.vocab_size = tokenizer_.size();
  }
  std::unique_ptr<vit::LoadedVit> from;
  if (!resumed && !o_.encoder_from.empty()) {
    // The checkpoint's encoder, at this model's image size (positions resampled as finetune
    // does); the caption model's other settings stay.
    from = std::make_unique<vit::LoadedVit>(
        load_encoder_from(o_.encoder_from, cfg_.encoder.image_height, cfg_.encoder.image_width));
    vit::VitConfig e = from->config;
    e.num_classes = 0;
    e.pool = "token";
    cfg_.encoder = e;
  }
  if (tokenizer_.size() != cfg_.vocab_size)
    throw Error("the tokenizer has " + std::to_string(tokenizer_.size()) +
                " pieces, the model's vocab_size is " + std::to_string(cfg_.vocab_size));
  cfg_.validate();
  params_ = std::make_unique<ParamStore>();
  model_ = std::make_unique<CaptionModel>(*params_, cfg_);
  params_->finalize();
  if (!resumed) {
    ops::Rng init_rng(ops::Rng::hash(seed, 0x1417));
    model_->init(init_rng);
  }
  const auto [first, end] = model_->encoder_params();
  encoder_tensors_ = static_cast<int64_t>(end - first);
  if (from) {
    // Every encoder tensor by name; the classifier's final norm (norm, or fc_norm of an
    // average-pooling model) becomes the norm over every token.
    for (size_t i = first; i < end; ++i) {
      Parameter& p = params_->params()[i];
      const Parameter* src = from->params->find(p.name);
      if (!src && p.name.rfind("norm.", 0) == 0) src = from->params->find("fc_" + p.name);
      if (!src || src->shape != p.shape)
        throw Error(o_.encoder_from + ": no tensor " + p.name + " of shape " + shape_str(p.shape) +
                    " for the encoder");
      p.value.copy_from(src->value);
    }
    params_->mark_changed();
  }
  for (size_t i = first; i < end; ++i) params_->params()[i].lr_scale = o_.encoder_lr_scale;
  model_->train_encoder = o_.encoder_lr_scale > 0.f;
  model_->keep_attention_weights =
      o_.attention_penalty > 0.f ||
      std::any_of(extensions_.begin(), extensions_.end(),
                  [](const TaskExtension* x) { return x->keeps_attention(); });
}

void CaptionTask::encode_captions() {
  cut_captions_ = 0;
  const int64_t most = cfg_.max_length - 1;  // BOS + tokens, or tokens + EOS
  auto encode = [&](const std::string& text, bool count) {
    const std::vector<int> ids = tokenizer_.encode(text);
    if (count && static_cast<int64_t>(ids.size()) > most) ++cut_captions_;
    return std::vector<int32_t>(
        ids.begin(), ids.begin() + std::min<int64_t>(most, static_cast<int64_t>(ids.size())));
  };
  const size_t n = train_set_.images.size();
  train_ids_.assign(n, {});
  mirrored_ids_.assign(o_.hflip > 0.f ? n : 0, {});
  for (size_t i = 0; i < n; ++i) {
    for (const std::string& c : train_set_.images[i].captions) {
      const std::string text = datasets::normalize_caption(c);
      train_ids_[i].push_back(encode(text, true));
      if (o_.hflip > 0.f)
        mirrored_ids_[i].push_back(encode(datasets::swap_words(text, o_.hflip_swap), false));
    }
  }
}

std::unique_ptr<optim::Optimizer> CaptionTask::make_optimizer() {
  optim::AdamWOptions ao;
  ao.weight_decay = o_.weight_decay;
  return std::make_unique<optim::AdamW>(*params_, ao);
}

int64_t CaptionTask::total_steps() const {
  return o_.loop.steps > 0 ? o_.loop.steps : static_cast<int64_t>(o_.loop.epochs) * bpe_;
}

std::unique_ptr<optim::Schedule> CaptionTask::make_schedule() {
  const int64_t warmup = std::min<int64_t>(
      std::llround(o_.warmup_epochs * static_cast<double>(bpe_)), total_steps() - 1);
  return std::make_unique<optim::WarmupCosine>(o_.lr, warmup, total_steps(), o_.min_lr);
}

int64_t CaptionTask::batches_in_epoch(int64_t) {
  return bpe_;
}

void CaptionTask::start_epoch(int64_t epoch, int64_t first) {
  epoch_ = epoch;
  loader_->start_epoch(epoch, first);
}

bool CaptionTask::next_batch() {
  if (!loader_->next(batch_)) return false;
  for (TaskExtension* x : extensions_) x->augment(*this, batch_);
  if (o_.references == "likeliest") choose_likeliest();
  // The loss is the mean over the global batch's target tokens (words and EOS), so each part
  // weighs its own tokens' mean by their share of them: the count of every rank's rows.
  int64_t tokens = 0;
  for (int64_t r = 0; r < batch_.labels.numel(); ++r)
    tokens += static_cast<int64_t>(target_of(r).size()) + 1;
  if (part_.ranks > 1) part_.world->allreduce_sum(&tokens, 1);
  global_tokens_ = tokens;
  for (TaskExtension* x : extensions_) x->start_batch(*this);
  return true;
}

std::pair<std::string, int64_t> CaptionTask::batching() const {
  return {"batch-size", o_.batch_size};
}

namespace {

// Teacher forcing's tensors for captions of token ids: in = BOS + tokens, out = tokens + EOS,
// both [rows, T] padded with 0 (pad), lengths [rows].
void teacher_forcing(const std::vector<const std::vector<int32_t>*>& ids, Tensor& in, Tensor& out,
                     Tensor& lengths) {
  const int64_t rows = static_cast<int64_t>(ids.size());
  int64_t T = 1;
  for (const auto* x : ids) T = std::max<int64_t>(T, static_cast<int64_t>(x->size()) + 1);
  in = Tensor({rows, T}, DType::i32);
  out = Tensor({rows, T}, DType::i32);
  lengths = Tensor({rows}, DType::i32);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<int32_t>& x = *ids[static_cast<size_t>(r)];
    const int64_t n = static_cast<int64_t>(x.size());
    in.i32()[r * T] = Vocabulary::kBos;
    std::copy(x.begin(), x.end(), in.i32() + r * T + 1);
    std::copy(x.begin(), x.end(), out.i32() + r * T);
    out.i32()[r * T + n] = Vocabulary::kEos;
    lengths.i32()[r] = static_cast<int32_t>(n + 1);
  }
}

}  // namespace

bool CaptionTask::mirrored_row(int64_t row) const {
  return !batch_.mirrored.empty() && batch_.mirrored.at(static_cast<size_t>(row));
}

const std::vector<std::vector<int32_t>>& CaptionTask::caption_ids(size_t image,
                                                                  bool mirrored) const {
  return mirrored ? mirrored_ids_.at(image) : train_ids_.at(image);
}

const std::vector<std::vector<int32_t>>& CaptionTask::references_of(int64_t row) const {
  return caption_ids(static_cast<size_t>(batch_.labels.i32()[row]), mirrored_row(row));
}

const std::vector<int32_t>& CaptionTask::caption_of(int64_t row) const {
  const auto& captions = references_of(row);
  const int64_t image = batch_.labels.i32()[row];
  // One caption per image and epoch, keyed by (seed, epoch, image): the same on any rank.
  const uint64_t draw =
      ops::Rng::hash(ops::Rng::hash(seed_ ^ 0xCA9710, static_cast<uint64_t>(epoch_)),
                     static_cast<uint64_t>(image));
  return captions[draw % captions.size()];
}

const std::vector<int32_t>& CaptionTask::target_of(int64_t row) const {
  if (o_.references == "likeliest") return *chosen_.at(static_cast<size_t>(row));
  return caption_of(row);
}

size_t CaptionTask::target_index(int64_t row) const {
  return static_cast<size_t>(&target_of(row) - references_of(row).data());  // one of them
}

void CaptionTask::choose_likeliest() {
  const int64_t B = batch_.labels.numel();
  chosen_.assign(static_cast<size_t>(B), nullptr);
  // Every (row, reference) pair of the batch, each scored by its mean token log-probability.
  std::vector<int64_t> row_of;
  std::vector<const std::vector<int32_t>*> refs;
  for (int64_t b = 0; b < B; ++b)
    for (const auto& ids : references_of(b)) {
      row_of.push_back(b);
      refs.push_back(&ids);
    }
  const int64_t R = static_cast<int64_t>(refs.size());
  if (R == B) {  // one reference each: nothing to choose
    for (int64_t r = 0; r < R; ++r) chosen_[static_cast<size_t>(r)] = refs[static_cast<size_t>(r)];
    return;
  }
  ops::profile::Scope scope("choose the likeliest references");
  choice_arena_.reset();
  nn::Context ctx{false, &choice_arena_, nullptr};
  ctx.precision = o_.loop.precision;
  const std::vector<double> log_prob = caption_log_probs(*model_, ctx, batch_.images, refs, row_of);
  std::vector<double> best(static_cast<size_t>(B), -INFINITY);
  for (int64_t r = 0; r < R; ++r) {
    const size_t b = static_cast<size_t>(row_of[static_cast<size_t>(r)]);
    const double mean = log_prob[static_cast<size_t>(r)] /
                        static_cast<double>(refs[static_cast<size_t>(r)]->size() + 1);
    if (mean > best[b]) {  // ties: the first reference
      best[b] = mean;
      chosen_[b] = refs[static_cast<size_t>(r)];
    }
  }
}

void CaptionTask::make_targets(int64_t begin, int64_t end, Tensor& in, Tensor& out,
                               Tensor& lengths) const {
  std::vector<const std::vector<int32_t>*> chosen;
  for (int64_t r = begin; r < end; ++r) chosen.push_back(&target_of(r));
  teacher_forcing(chosen, in, out, lengths);
}

train::StepStats CaptionTask::forward_loss(nn::Context& ctx, int64_t, int micro) {
  const int64_t local = batch_.labels.numel(), rows = local / part_.accum;
  const int64_t begin = micro * rows, end = begin + rows;
  const Tensor images = part_.accum == 1 ? batch_.images : batch_.images.rows(begin, end);
  make_targets(begin, end, target_in_, target_out_, lengths_);
  Tensor logits;  // [rows, T, V]
  {
    ops::profile::Scope scope("model forward (rest)");
    logits = model_->forward(ctx, images, target_in_, lengths_);
  }
  // The mean over this part's tokens, weighted by their share of the global batch's: the
  // gradients summed over the parts are the global token mean's (exactly 1 in a single process).
  int64_t tokens = 0;
  for (int64_t r = 0; r < rows; ++r) tokens += lengths_.i32()[r];
  const float scale =
      part_.parts() > 1 ? static_cast<float>(tokens) / static_cast<float>(global_tokens_) : 1.f;
  dlogits_ = logits;  // overwritten in place by its gradient
  ops::CrossEntropyStats s;
  {
    ops::profile::Scope scope("cross-entropy");
    s = ops::cross_entropy_forward_backward(logits, target_out_, o_.smoothing, Vocabulary::kPad,
                                            scale, dlogits_);
  }
  double penalty = 0;
  if (o_.attention_penalty > 0.f)  // the mean over the global batch's images
    penalty = model_->attention_penalty(o_.attention_penalty,
                                        1.f / static_cast<float>(local * part_.ranks)) /
              static_cast<double>(rows);
  double extra = 0;  // the extensions' terms
  for (TaskExtension* x : extensions_)
    extra += x->add_loss(*this, model_->loss_hooks(), begin, end);
  train::StepStats stats;
  stats.loss = s.loss + penalty + extra;
  stats.loss_sum = (s.loss + penalty + extra) * static_cast<double>(s.count);
  stats.items = s.count;
  stats.correct = s.correct;
  stats.units = rows;
  return stats;
}

void CaptionTask::backward(nn::Context& ctx) {
  model_->backward(ctx, dlogits_);
}

train::Metrics CaptionTask::validate(const train::ValidateContext& v) {
  dist::World& world = *v.world;
  const int rank = world.rank(), ranks = world.size();
  // Each rank captions every ranks-th image (greedy), and the captions are put together on every
  // rank before they are scored, so the figures are a single process's.
  datasets::CaptionSet mine = val_set_;
  mine.images.clear();
  for (size_t i = static_cast<size_t>(rank); i < val_set_.images.size();
       i += static_cast<size_t>(ranks))
    mine.images.push_back(val_set_.images[i]);
  ProgressOptions po;
  po.tty = v.tty;
  po.unit = "image";
  po.line_every = 0;
  Progress progress(*v.log, v.label, static_cast<int64_t>(mine.images.size()), po);
  CaptionRunOptions ro;
  ro.search.method = decode::SearchMethod::greedy;
  ro.batch_size = std::min<int64_t>(o_.batch_size, 128);
  ro.precision = v.precision;
  std::vector<CaptionResult> results = caption_set(*model_, tokenizer_, mine, ro, &progress);
  progress.finish();
  if (ranks > 1) {
    // "+caption" where the image was read, "-" where not, on the rank that captioned it.
    std::vector<std::string> lines(val_set_.images.size());
    for (const CaptionResult& r : results)
      lines[static_cast<size_t>(r.image * ranks + rank)] =
          (r.read ? "+" : "-") + (r.texts.empty() ? std::string() : r.texts.front());
    lines = world.gather_lines(lines);
    results.assign(lines.size(), CaptionResult());
    for (size_t i = 0; i < lines.size(); ++i) {
      results[i].image = static_cast<int64_t>(i);
      results[i].read = !lines[i].empty() && lines[i][0] == '+';
      if (results[i].read) results[i].texts = {lines[i].substr(1)};
    }
  }
  const CaptionScores s = score_captions(cfg_, tokenizer_, val_set_, results);
  // The loss of each image's first caption, teacher-forced: each rank its share of the batches,
  // the sums added in batch order as one process adds them.
  std::vector<double> loss_sums;
  int64_t count = 0;
  {
    std::unique_ptr<datasets::Dataset> images = datasets::caption_images(val_set_);
    datasets::LoaderOptions lo = vit::eval_loader_options(cfg_.encoder, ro.batch_size, o_.prefetch);
    lo.num_classes = images->size();
    lo.shard = {rank, ranks};
    datasets::Loader loader(*images, lo);
    loader.start_epoch(0);
    const int64_t batches = (images->size() + ro.batch_size - 1) / ro.batch_size;
    loss_sums.assign(static_cast<size_t>(batches), 0.0);
    datasets::Batch batch;
    while (loader.next(batch)) {
      const int64_t B = batch.labels.numel();
      if (B == 0) continue;
      std::vector<std::vector<int32_t>> ids(static_cast<size_t>(B));
      std::vector<const std::vector<int32_t>*> rows;
      for (int64_t b = 0; b < B; ++b) {
        const auto& image = val_set_.images[static_cast<size_t>(batch.labels.i32()[b])];
        const std::vector<int> t =
            tokenizer_.encode(datasets::normalize_caption(image.captions[0]));
        ids[static_cast<size_t>(b)].assign(
            t.begin(),
            t.begin() + std::min<int64_t>(cfg_.max_length - 1, static_cast<int64_t>(t.size())));
        rows.push_back(&ids[static_cast<size_t>(b)]);
      }
      Tensor in, out, lengths;
      teacher_forcing(rows, in, out, lengths);
      v.arena->reset();
      nn::Context ctx{false, v.arena, nullptr};
      ctx.precision = v.precision;
      const Tensor logits = model_->forward(ctx, batch.images, in, lengths);
      const ops::CrossEntropyStats ce =
          ops::cross_entropy_forward(logits, out, 0.f, Vocabulary::kPad);
      loss_sums.at(static_cast<size_t>(batch.index)) = ce.loss * static_cast<double>(ce.count);
      count += ce.count;
    }
  }
  if (ranks > 1) {
    world.allreduce_sum(loss_sums.data(), loss_sums.size());
    world.allreduce_sum(&count, 1);
  }
  double loss_sum = 0;
  for (double x : loss_sums) loss_sum += x;
  train::Metrics m;
  m.values = {{"loss", loss_sum / static_cast<double>(std::max<int64_t>(count, 1))},
              {"bleu", s.bleu.score},
              {"exact", s.exact_percent()}};
  return m;
}

std::string CaptionTask::describe(const train::Metrics& m) const {
  std::string line =
      "loss " + format_fixed(m.get("loss"), 4) + " BLEU " + format_fixed(m.get("bleu"), 2);
  if (std::any_of(val_set_.images.begin(), val_set_.images.end(),
                  [](const auto& i) { return !i.objects.empty(); }))
    line += " exact " + format_fixed(m.get("exact"), 2) + "%";
  return line;
}

std::string CaptionTask::describe_best(double value) const {
  return "BLEU " + format_fixed(value, 2);
}

io::CheckpointMeta CaptionTask::checkpoint_meta() const {
  io::CheckpointMeta m;
  m.config = to_config_map(cfg_);
  m.files[kCaptionTokenizerFile] = tokenizer_.bytes();
  m.recipe["batch-size"] = std::to_string(o_.batch_size);
  m.recipe["lr"] = format_general(o_.lr);
  m.recipe[o_.loop.steps > 0 ? "steps" : "epochs"] =
      std::to_string(o_.loop.steps > 0 ? o_.loop.steps : static_cast<int64_t>(o_.loop.epochs));
  m.recipe["attention-penalty"] = format_general(o_.attention_penalty);
  m.recipe["encoder-lr-scale"] = format_general(o_.encoder_lr_scale);
  if (!o_.encoder_from.empty()) m.recipe["encoder-from"] = o_.encoder_from;
  m.recipe["references"] = o_.references;  // a resumed run's choice, as the last stage trained
  for (const TaskExtension* x : extensions_) x->recipe(m.recipe);
  if (o_.hflip > 0.f) {
    m.recipe["hflip"] = format_general(o_.hflip);
    m.recipe["hflip-swap"] = word_swaps_text(o_.hflip_swap);
  }
  return m;
}

void CaptionTask::log_setup(std::ostream& L) const {
  const vit::VitConfig& e = cfg_.encoder;
  L << "data: " << train_set_.images.size() << " training images with " << train_set_.captions()
    << " captions (" << paths_.train_captions << "), " << val_set_.images.size()
    << " validation images (" << paths_.val_captions << ")";
  const int64_t skipped = train_set_.missing_images + val_set_.missing_images;
  if (skipped > 0) L << "; " << skipped << " images missing from their folders, skipped";
  const int64_t unknown = train_set_.unknown_image_captions + val_set_.unknown_image_captions;
  if (unknown > 0) L << "; " << unknown << " captions of unknown images, skipped";
  L << "\n";
  L << "tokenizer: SentencePiece, " << tokenizer_.size() << " pieces";
  if (!o_.phrases.empty()) L << " (" << o_.phrases.size() << " phrases, one piece each)";
  L << "\n";
  if (cut_captions_ > 0)
    L << "warning: " << cut_captions_ << " training captions have more than " << cfg_.max_length - 1
      << " pieces and were cut to the model's positions (model.max_length " << cfg_.max_length
      << "): give a larger max_length or --vocab-size\n";
  L << "model: caption; encoder vit " << e.image_height << "x" << e.image_width << "x" << e.channels
    << ", patch " << e.patch_size << " (" << e.patches() << " patches), d_model " << e.d_model
    << ", " << e.layers << " layers, " << e.heads << " heads, d_ff " << e.d_ff
    << (e.stem_channels.empty() ? "" : ", conv stem " + vit::stem_channels_text(e.stem_channels))
    << "; memory " << cfg_.memory_tokens() << " tokens ("
    << (cfg_.memory_class_token ? "class token and patches" : "patches")
    << (cfg_.memory_positions ? ", plus 2-D sine-cosine positions" : "") << "); decoder "
    << cfg_.decoder_layers << " layers, " << cfg_.decoder_heads << " heads, d_ff " << cfg_.d_ff()
    << ", " << cfg_.max_length << " positions, output "
    << (cfg_.tie_embeddings ? "tied to the embedding" : "untied") << "\n";
  L << "parameters: " << params_->numel() << " (" << encoder_tensors_ << " encoder tensors";
  if (!o_.encoder_from.empty()) L << " from " << o_.encoder_from;
  L << (o_.encoder_lr_scale == 0.f   ? ", frozen"
        : o_.encoder_lr_scale == 1.f ? ""
                                     : ", lr x " + format_general(o_.encoder_lr_scale))
    << ")\n";
  L << "optimizer: AdamW, lr " << format_general(o_.lr) << ", cosine to "
    << format_general(o_.min_lr) << " at step " << total_steps() << ", weight decay "
    << format_general(o_.weight_decay) << ", clip-grad "
    << (o_.loop.clip_grad > 0 ? format_general(o_.loop.clip_grad) : std::string("off")) << "\n";
  L << "loss: cross-entropy, label smoothing " << format_general(o_.smoothing)
    << ", attention penalty "
    << (o_.attention_penalty > 0 ? format_general(o_.attention_penalty) : std::string("off"));
  for (const TaskExtension* x : extensions_)
    for (const std::string& term : x->loss_terms()) L << ", " << term;
  L << "; references "
    << (o_.references == "likeliest" ? "the likeliest of each image's"
                                     : "one of each image's at random per epoch")
    << "\n";
  for (const TaskExtension* x : extensions_) x->log_setup(L);
  if (o_.hflip > 0.f)
    L << "augment: mirrored left-right with probability " << format_general(o_.hflip)
      << ", the captions' words swapped (" << word_swaps_text(o_.hflip_swap) << ")\n";
  L << std::flush;
}

train::Result train_captions(const CaptionTrainOptions& options,
                             const std::vector<TaskExtension*>& extensions, std::ostream& log,
                             bool tty, const std::atomic<int>* stop) {
  options.validate();
  CaptionTask task(options, extensions);
  return train::Trainer(task, options.loop, log, tty, stop).run();
}

train::Result train_captions(const CaptionTrainOptions& options, std::ostream& log, bool tty,
                             const std::atomic<int>* stop) {
  return train_captions(options, {}, log, tty, stop);
}

}  // namespace vitk::caption
