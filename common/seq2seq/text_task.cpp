// The text classifier as a train::Task: sentences and labels, vocabulary, the model (new, resumed
// or from a translation model's encoder), batches of similar length, the step's loss, validation
// and the run header's lines.
#include "common/seq2seq/text_task.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <ostream>

#include "common/error.h"
#include "common/ops/profile.h"
#include "common/progress.h"
#include "common/seq2seq/translator.h"
#include "common/timer.h"

namespace vitk::seq2seq {
namespace {

void need(bool ok, const std::string& option, const std::string& what, double got) {
  if (!ok) throw UsageError("--" + option + " must be " + what + ", got " + format_general(got, 6));
}

// Sentences per pool sorted by length before it is cut into batches: batches of similar lengths
// (little padding) whose order and make-up still change from epoch to epoch.
constexpr int64_t kPoolBatches = 50;

}  // namespace

TextTrainOptions::TextTrainOptions() {
  loop.epochs = 10;
  loop.clip_grad = 1.f;
  loop.valid_unit = train::Every::epochs;
  loop.valid_every = 1;
}

void TextTrainOptions::validate() const {
  if (train.empty()) throw UsageError("--train is required: the labelled training sentences");
  if (valid.empty()) throw UsageError("--valid is required: the labelled validation sentences");
  if (loop.output.empty()) throw UsageError("--output is required: the run directory");
  loop.validate();
  need(vocab_size >= 5, "vocab-size", "at least 5", vocab_size);
  if (spm_type != "bpe" && spm_type != "unigram")
    throw UsageError("--spm-type must be 'bpe' or 'unigram', got '" + spm_type + "'");
  if (!spm.empty() && !encoder_from.empty())
    throw UsageError("--spm and --encoder-from exclude each other: the encoder brings its own");
  need(batch_size >= 1, "batch-size", "at least 1", static_cast<double>(batch_size));
  need(lr > 0 && std::isfinite(lr), "lr", "positive", lr);
  need(min_lr >= 0 && min_lr <= lr, "min-lr", "in [0, --lr]", min_lr);
  need(warmup_epochs >= 0 && std::isfinite(warmup_epochs), "warmup-epochs", ">= 0", warmup_epochs);
  need(weight_decay >= 0 && std::isfinite(weight_decay), "weight-decay", ">= 0", weight_decay);
  need(smoothing >= 0 && smoothing < 1, "label-smoothing", "in [0, 1)", smoothing);
  need(std::isfinite(encoder_lr_scale) && encoder_lr_scale >= 0, "encoder-lr-scale",
       ">= 0 (0 freezes the encoder)", encoder_lr_scale);
}

double ClassScores::macro_f1_percent() const {
  const int64_t C = classes();
  double sum = 0;
  int64_t n = 0;
  for (int64_t c = 0; c < C; ++c) {
    int64_t tp = confusion[static_cast<size_t>(c * C + c)], truth = 0, predicted = 0;
    for (int64_t k = 0; k < C; ++k) {
      truth += confusion[static_cast<size_t>(c * C + k)];
      predicted += confusion[static_cast<size_t>(k * C + c)];
    }
    if (truth + predicted == 0) continue;
    sum += 2.0 * static_cast<double>(tp) / static_cast<double>(truth + predicted);
    ++n;
  }
  return n ? 100.0 * sum / static_cast<double>(n) : 0.0;
}

int64_t ClassScores::classes() const {
  return static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(confusion.size()))));
}

ClassScores score_classes(const std::vector<int32_t>& truth, const std::vector<int32_t>& predicted,
                          int64_t classes) {
  if (truth.size() != predicted.size())
    throw Error("score_classes: " + std::to_string(truth.size()) + " labels but " +
                std::to_string(predicted.size()) + " predictions");
  ClassScores s;
  s.confusion.assign(static_cast<size_t>(classes * classes), 0);
  for (size_t i = 0; i < truth.size(); ++i) {
    if (truth[i] < 0 || truth[i] >= classes || predicted[i] < 0 || predicted[i] >= classes)
      throw Error("score_classes: a label outside [0, " + std::to_string(classes) + ")");
    ++s.confusion[static_cast<size_t>(truth[i] * classes + predicted[i])];
    s.correct += truth[i] == predicted[i];
  }
  s.count = static_cast<int64_t>(truth.size());
  return s;
}

TextTask::TextTask(const TextTrainOptions& options, TextData& data) : o_(options), data_(&data) {}
TextTask::~TextTask() = default;

train::TaskInfo TextTask::info() const {
  train::TaskInfo i;
  i.unit = "sentences";
  i.progress_unit = "batch";
  i.rate_unit = "sent/s";
  i.train_accuracy = true;
  i.best_metric = "top1";
  i.higher_is_better = true;
  i.metric_names = {"loss", "top1", "macro_f1"};
  return i;
}

void TextTask::setup(const io::CheckpointMeta* resumed, uint64_t seed,
                     const train::Partition& partition) {
  seed_ = seed;
  part_ = partition;
  train_text_ = data_->read(o_.train);
  valid_text_ = data_->read(o_.valid);
  if (train_text_.text.empty()) throw Error(o_.train + ": no labelled sentences");
  if (valid_text_.text.empty()) throw Error(o_.valid + ": no labelled sentences");
  // What a resumed run or --encoder-from brings, read once for the labels, vocabulary and model.
  std::unique_ptr<TextMeta> resumed_meta;
  std::unique_ptr<EncoderStart> start;
  if (resumed)
    resumed_meta = std::make_unique<TextMeta>(read_text_meta(o_.loop.resume));
  else if (!o_.encoder_from.empty())
    start = std::make_unique<EncoderStart>(read_encoder_start(o_.encoder_from, o_.model));
  make_labels(resumed);
  make_vocabulary(resumed_meta.get(), start.get());
  build_model(resumed_meta.get(), start.get(), seed);
  train_ = encode(train_text_);
  valid_ = encode(valid_text_);
}

// The labels in order of first appearance in the training file (a resumed run: the
// checkpoint's); a validation label the training file lacks is an error naming its line.
void TextTask::make_labels(const io::CheckpointMeta* resumed) {
  if (resumed) {
    labels_ = resumed->class_names;
  } else {
    std::map<std::string, int> seen;
    for (const std::string& l : train_text_.labels)
      if (seen.emplace(l, 0).second) labels_.push_back(l);
  }
  if (labels_.size() < 2)
    throw Error(o_.train + ": one label only ('" + (labels_.empty() ? "" : labels_[0]) +
                "'); a classifier needs at least two");
  label_index_.clear();
  for (size_t i = 0; i < labels_.size(); ++i) label_index_[labels_[i]] = static_cast<int32_t>(i);
  auto check = [&](const LabelledText& t) {
    for (size_t i = 0; i < t.labels.size(); ++i)
      if (!label_index_.count(t.labels[i]))
        throw Error(t.name + ":" + std::to_string(t.lines[i]) + ": label '" + t.labels[i] +
                    "' is not among the " + std::to_string(labels_.size()) +
                    " labels of the training data");
  };
  check(train_text_);
  check(valid_text_);
}

void TextTask::make_vocabulary(const TextMeta* resumed, const EncoderStart* start) {
  if (resumed) {
    vocabulary_ = data_->vocabulary_from_bytes(resumed->tokenizer);
    vocabulary_note_ = "the checkpoint's (" + std::to_string(vocabulary_->size()) + " pieces)";
  } else if (start) {
    vocabulary_ = data_->vocabulary_from_bytes(start->tokenizer);
    vocabulary_note_ = "the translation model's (" + std::to_string(vocabulary_->size()) +
                       " pieces, " + o_.encoder_from + ")";
  } else if (!o_.spm.empty()) {
    vocabulary_ = data_->load_vocabulary(o_.spm);
    vocabulary_note_ = o_.spm + " (" + std::to_string(vocabulary_->size()) + " pieces)";
  } else {
    Timer timer;
    if (part_.ranks > 1) {  // trained once, so that every rank has the same pieces
      std::string bytes;
      if (part_.rank == 0)
        bytes = data_->train_vocabulary(train_text_.text, o_.vocab_size, o_.spm_type)->bytes();
      part_.world->broadcast(bytes, 0);
      vocabulary_ = data_->vocabulary_from_bytes(bytes);
    } else {
      vocabulary_ = data_->train_vocabulary(train_text_.text, o_.vocab_size, o_.spm_type);
    }
    vocabulary_note_ = "SentencePiece " + o_.spm_type + " of " +
                       std::to_string(vocabulary_->size()) + " pieces trained on " + o_.train +
                       " in " + format_fixed(timer.seconds(), 1) + " s";
  }
}

void TextTask::build_model(const TextMeta* resumed, const EncoderStart* start, uint64_t seed) {
  if (resumed) {
    cfg_ = resumed->config;
    const auto now = to_config_map(o_.model), then = to_config_map(cfg_);
    for (const std::string& key : o_.model_keys_given) {
      auto a = now.find(key), b = then.find(key);
      if (a != now.end() && b != then.end() && a->second != b->second)
        throw UsageError("--model." + key + " " + a->second + " differs from the checkpoint's " +
                         b->second + " (" + o_.loop.resume + "); a resumed run keeps its model");
    }
  } else if (start) {
    cfg_ = start->config;
    // The encoder's own settings are the checkpoint's: a different one given is refused.
    const auto now = to_config_map(o_.model), then = to_config_map(cfg_);
    for (const std::string& key : o_.model_keys_given)
      if (key != "max_length" && now.count(key) && then.count(key) && now.at(key) != then.at(key))
        throw UsageError("--model." + key + " " + now.at(key) + " differs from the encoder's " +
                         then.at(key) + " (--encoder-from " + o_.encoder_from + ")");
  } else {
    cfg_ = o_.model;
  }
  cfg_.vocab_size = vocabulary_->size();
  cfg_.num_classes = static_cast<int64_t>(labels_.size());
  cfg_.validate();
  params_ = std::make_unique<ParamStore>();
  model_ = std::make_unique<TextClassifier>(*params_, cfg_);
  params_->finalize();
  if (!resumed) {
    ops::Rng init(ops::Rng::hash(seed, 0x1417));
    model_->init(init);
  }
  if (start) {
    const int64_t n = load_encoder_from(*start, *params_, *model_);
    encoder_note_ = std::to_string(n) + " tensors from " + o_.encoder_from;
  }
  const auto [first, end] = model_->encoder_params();
  for (size_t i = first; i < end; ++i) params_->params()[i].lr_scale = o_.encoder_lr_scale;
  model_->train_encoder = o_.encoder_lr_scale > 0.f;
}

TextTask::Encoded TextTask::encode(const LabelledText& t) const {
  Encoded e;
  const int64_t most = cfg_.max_length - model_->first_token();
  for (size_t i = 0; i < t.text.size(); ++i) {
    int64_t pieces = 0;
    e.ids.push_back(source_ids(*vocabulary_, t.text[i], most, &pieces));
    e.cut += pieces + 1 > most;
    e.labels.push_back(label_index_.at(t.labels[i]));
  }
  return e;
}

std::unique_ptr<optim::Optimizer> TextTask::make_optimizer() {
  optim::AdamWOptions ao;
  ao.weight_decay = o_.weight_decay;
  return std::make_unique<optim::AdamW>(*params_, ao);
}

int64_t TextTask::batches_per_epoch() const {
  const auto n = static_cast<int64_t>(train_.ids.size());
  return (n + o_.batch_size - 1) / o_.batch_size;
}

int64_t TextTask::total_steps() const {
  return o_.loop.steps > 0 ? o_.loop.steps
                           : static_cast<int64_t>(o_.loop.epochs) * batches_per_epoch();
}

std::unique_ptr<optim::Schedule> TextTask::make_schedule() {
  const int64_t warmup = std::min<int64_t>(
      std::llround(o_.warmup_epochs * static_cast<double>(batches_per_epoch())), total_steps() - 1);
  return std::make_unique<optim::WarmupCosine>(o_.lr, warmup, total_steps(), o_.min_lr);
}

// An epoch's batches: the sentences in an order drawn from (seed, epoch), cut into pools of
// kPoolBatches batches, each pool sorted by length and cut into batches, the batches shuffled.
// Every pool but the last is whole, so an epoch always has ceil(n / batch) batches.
std::vector<TextTask::Batch> TextTask::epoch_batches(int64_t epoch) const {
  const auto n = static_cast<int64_t>(train_.ids.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  ops::Rng rng(ops::Rng::hash(seed_ ^ 0x7e47u, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)],
              order[static_cast<size_t>(rng.next_u64() % static_cast<uint64_t>(i + 1))]);
  const int64_t B = o_.batch_size, pool = kPoolBatches * B;
  std::vector<Batch> batches;
  for (int64_t p = 0; p < n; p += pool) {
    const auto begin = order.begin() + p, end = order.begin() + std::min(n, p + pool);
    std::stable_sort(begin, end, [&](int64_t a, int64_t b) {
      return train_.ids[static_cast<size_t>(a)].size() < train_.ids[static_cast<size_t>(b)].size();
    });
    for (auto it = begin; it < end; it += std::min<int64_t>(B, end - it))
      batches.push_back(Batch{std::vector<int64_t>(it, it + std::min<int64_t>(B, end - it))});
  }
  for (size_t i = batches.size(); i > 1; --i)
    std::swap(batches[i - 1], batches[static_cast<size_t>(rng.next_u64() % i)]);
  return batches;
}

int64_t TextTask::batches_in_epoch(int64_t epoch) {
  if (listed_epoch_ != epoch) {
    batches_ = epoch_batches(epoch);
    listed_epoch_ = epoch;
  }
  return static_cast<int64_t>(batches_.size());
}

void TextTask::start_epoch(int64_t epoch, int64_t first) {
  batches_in_epoch(epoch);
  next_ = static_cast<size_t>(first);
}

bool TextTask::next_batch() {
  if (next_ >= batches_.size()) return false;
  batch_ = &batches_[next_++];
  return true;
}

std::pair<std::string, int64_t> TextTask::batching() const {
  return {"batch-size", o_.batch_size};
}

// ids i32 [B, T] (pad 0), lengths i32 [B], labels i32 [B] of the given rows.
void TextTask::tensors(const Encoded& e, const std::vector<int64_t>& rows, Tensor& ids,
                       Tensor& lengths, Tensor& labels) const {
  const auto B = static_cast<int64_t>(rows.size());
  int64_t T = 1;
  for (int64_t r : rows) T = std::max<int64_t>(T, e.ids[static_cast<size_t>(r)].size());
  ids = Tensor({B, T}, DType::i32);
  lengths = Tensor({B}, DType::i32);
  labels = Tensor({B}, DType::i32);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int>& s = e.ids[static_cast<size_t>(rows[static_cast<size_t>(b)])];
    std::copy(s.begin(), s.end(), ids.i32() + b * T);
    lengths.i32()[b] = static_cast<int32_t>(s.size());
    labels.i32()[b] = e.labels[static_cast<size_t>(rows[static_cast<size_t>(b)])];
  }
}

// This rank's micro-th part: consecutive rows of the global batch, as even as they divide.
train::StepStats TextTask::forward_loss(nn::Context& ctx, int64_t, int micro) {
  const auto B = static_cast<int64_t>(batch_->rows.size());
  const int64_t parts = part_.parts(), p = part_.part(micro);
  const int64_t begin = B * p / parts, end = B * (p + 1) / parts;
  empty_part_ = begin == end;
  if (empty_part_) return {};
  const std::vector<int64_t> rows(batch_->rows.begin() + begin, batch_->rows.begin() + end);
  tensors(train_, rows, ids_, lengths_, targets_);
  Tensor logits;
  {
    ops::profile::Scope scope("model forward (rest)");
    logits = model_->forward(ctx, ids_, lengths_);
  }
  const float scale = static_cast<float>(end - begin) / static_cast<float>(B);
  const ops::CrossEntropyStats s = text_loss(ctx, logits, targets_, o_.smoothing, &dlogits_, scale);
  train::StepStats stats;
  stats.loss = s.loss;
  stats.loss_sum = s.loss * static_cast<double>(s.count);
  stats.items = s.count;
  stats.correct = s.correct;
  stats.units = s.count;
  return stats;
}

void TextTask::backward(nn::Context& ctx) {
  if (!empty_part_) model_->backward(ctx, dlogits_);
}

// Each rank takes every ranks-th batch of sentences sorted by length; the predictions and loss
// sums are put together in a single process's order.
train::Metrics TextTask::validate(const train::ValidateContext& v) {
  dist::World& world = *v.world;
  const int rank = world.rank(), ranks = world.size();
  const auto n = static_cast<int64_t>(valid_.ids.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return valid_.ids[static_cast<size_t>(a)].size() < valid_.ids[static_cast<size_t>(b)].size();
  });
  const int64_t B = o_.batch_size, batches = (n + B - 1) / B;
  std::vector<double> loss_sums(static_cast<size_t>(batches), 0.0);
  std::vector<int32_t> predicted(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < batches; ++i) {
    if (i % ranks != rank) continue;
    const std::vector<int64_t> rows(order.begin() + i * B,
                                    order.begin() + std::min(n, (i + 1) * B));
    Tensor ids, lengths, labels;
    tensors(valid_, rows, ids, lengths, labels);
    v.arena->reset();
    nn::Context ctx;
    ctx.arena = v.arena;
    ctx.precision = v.precision;
    const Tensor logits = model_->forward(ctx, ids, lengths);
    const auto s = text_loss(ctx, logits, labels, 0.f);
    loss_sums[static_cast<size_t>(i)] = s.loss * static_cast<double>(s.count);
    const int64_t C = logits.dim(1);
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* row = logits.f32() + static_cast<int64_t>(r) * C;
      predicted[static_cast<size_t>(rows[r])] =
          static_cast<int32_t>(std::max_element(row, row + C) - row);
    }
  }
  world.allreduce_sum(loss_sums.data(), loss_sums.size());
  std::vector<int64_t> summed(predicted.begin(), predicted.end());
  world.allreduce_sum(summed.data(), summed.size());  // each row is set on one rank, 0 elsewhere
  for (size_t i = 0; i < predicted.size(); ++i) predicted[i] = static_cast<int32_t>(summed[i]);
  double loss_sum = 0;
  for (double x : loss_sums) loss_sum += x;
  const ClassScores s =
      score_classes(valid_.labels, predicted, static_cast<int64_t>(labels_.size()));
  train::Metrics m;
  m.values = {{"loss", n ? loss_sum / static_cast<double>(n) : 0.0},
              {"top1", s.top1_percent()},
              {"macro_f1", s.macro_f1_percent()}};
  return m;
}

std::string TextTask::describe(const train::Metrics& m) const {
  return "loss " + format_fixed(m.get("loss"), 4) + ", top-1 " + format_fixed(m.get("top1"), 2) +
         "%, macro-F1 " + format_fixed(m.get("macro_f1"), 2) + "%";
}

std::string TextTask::describe_best(double value) const {
  return "top-1 " + format_fixed(value, 2) + "%";
}

io::CheckpointMeta TextTask::checkpoint_meta() const {
  io::CheckpointMeta m;
  m.config = to_config_map(cfg_);
  m.class_names = labels_;
  if (vocabulary_) m.files[kTokenizerFile] = vocabulary_->bytes();
  m.recipe["encoder-lr-scale"] = format_general(o_.encoder_lr_scale);
  if (!o_.encoder_from.empty()) m.recipe["encoder-from"] = o_.encoder_from;
  return m;
}

void TextTask::log_setup(std::ostream& L) const {
  auto line = [](const LabelledText& t, const Encoded& e, const char* what) {
    return std::string(what) + ": " + std::to_string(t.text.size()) + " sentences in " + t.name +
           (e.cut ? " (" + std::to_string(e.cut) + " cut to max_length)" : std::string());
  };
  L << line(train_text_, train_, "train") << ", " << labels_.size() << " labels\n"
    << line(valid_text_, valid_, "valid") << "\n";
  L << "tokenizer: " << vocabulary_note_ << "\n";
  const auto& c = cfg_;
  L << "model: text_classifier " << c.layers << " layers, d_model " << c.d_model << ", " << c.heads
    << " heads, d_ff " << c.d_ff << ", " << (c.pre_norm ? "pre-norm" : "post-norm") << ", "
    << text_pool_name(c.pool) << " pooling, vocabulary " << c.vocab_size << ", dropout "
    << format_general(c.dropout) << ", max_length " << c.max_length << "; " << params_->numel()
    << " parameters\n";
  L << "encoder: " << (encoder_note_.empty() ? std::string("new") : encoder_note_)
    << (o_.encoder_lr_scale == 0.f   ? ", frozen"
        : o_.encoder_lr_scale == 1.f ? ""
                                     : ", lr x " + format_general(o_.encoder_lr_scale))
    << "\n";
  L << "optimizer: AdamW, lr " << format_general(o_.lr) << " (warmup "
    << format_general(o_.warmup_epochs) << " epochs, cosine to " << format_general(o_.min_lr)
    << " at step " << total_steps() << "), weight decay " << format_general(o_.weight_decay)
    << ", label smoothing " << format_general(o_.smoothing) << ", clip-grad "
    << (o_.loop.clip_grad > 0 ? format_general(o_.loop.clip_grad) : std::string("off")) << "\n"
    << std::flush;
}

train::Result train_text(const TextTrainOptions& options, TextData& data, std::ostream& log,
                         bool tty, const std::atomic<int>* stop) {
  options.validate();
  TextTask task(options, data);
  return train::Trainer(task, options.loop, log, tty, stop).run();
}

}  // namespace vitk::seq2seq
