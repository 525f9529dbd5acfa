// The translation Transformer as a train::Task: corpora and vocabulary, the model (new or
// resumed), batches by tokens, the step's loss (with scheduled sampling), validation by loss and
// BLEU, and the run header's lines.
#include "common/seq2seq/train_task.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <sstream>

#include "common/decode/bleu.h"
#include "common/error.h"
#include "common/ops/profile.h"
#include "common/progress.h"
#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/translator.h"
#include "common/timer.h"

namespace vitk::seq2seq {

TranslationTask::TranslationTask(const TrainOptions& options, TranslationData& data)
    : o_(options), data_(&data) {}

TranslationTask::TranslationTask(const TransformerConfig& config, const TrainOptions& options,
                                 TokenBatch batch)
    : o_(options), cfg_(config), fixed_(std::move(batch)) {}

TranslationTask::~TranslationTask() = default;

train::TaskInfo TranslationTask::info() const {
  train::TaskInfo i;
  i.unit = "target tokens";
  i.progress_unit = "batch";
  i.rate_unit = "tok/s";
  i.train_accuracy = false;
  i.best_metric = "bleu";
  i.higher_is_better = true;
  i.metric_names = {"loss", "bleu"};
  return i;
}

void TranslationTask::setup(const io::CheckpointMeta* resumed, uint64_t seed,
                            const train::Partition& partition) {
  seed_ = seed;
  part_ = partition;
  if (!fixed_) {
    auto read = [&](const std::string& path, const std::string& target, const char* what) {
      Corpus c;
      c.text = data_->read(path, target);
      if (c.text.source.empty())
        throw Error(c.text.name + ": no " + what + " sentence pairs (" +
                    std::to_string(c.text.read) + " lines read, " + std::to_string(c.text.empty) +
                    " with an empty side)");
      return c;
    };
    train_ = read(o_.train, o_.train_target, "training");
    valid_ = read(o_.valid, o_.valid_target, "validation");
    make_vocabulary(resumed);
  }
  cfg_.validate();
  if (!fixed_) {
    encode(train_);
    encode(valid_);
    if (train_.src.empty())
      throw Error(train_.text.name + ": every pair is longer than the model's max_length " +
                  std::to_string(cfg_.max_length));
    batcher_ = std::make_unique<TokenBatcher>(train_.src, train_.tgt, o_.max_tokens, seed);
    valid_batches_ = TokenBatcher(valid_.src, valid_.tgt, o_.max_tokens, 0).epoch(0);
  }
  params_ = std::make_unique<ParamStore>();
  model_ = std::make_unique<Transformer>(*params_, cfg_);
  params_->finalize();
  if (!resumed) {  // a resumed run's weights are the loop's to load
    ops::Rng init(ops::Rng::hash(seed, 0x1417));
    model_->init(init);
  }
}

// A resumed run's model and vocabulary are the checkpoint's; a new run's vocabulary is --spm or
// trained on the training text.
void TranslationTask::make_vocabulary(const io::CheckpointMeta* resumed) {
  if (resumed) {
    cfg_ = stored_config(o_.loop.resume, *resumed);
    const auto now = to_config_map(o_.model), then = to_config_map(cfg_);
    for (const std::string& key : o_.model_keys_given) {
      auto a = now.find(key), b = then.find(key);
      if (key != "vocab_size" && a != now.end() && b != then.end() && a->second != b->second)
        throw UsageError("--model." + key + " " + a->second + " differs from the checkpoint's " +
                         b->second + " (" + o_.loop.resume + "); a resumed run keeps its model");
    }
    vocabulary_ = data_->vocabulary_from_bytes(tokenizer_bytes(*resumed, o_.loop.resume));
    vocabulary_note_ = "the checkpoint's (" + std::to_string(vocabulary_->size()) + " pieces)";
    return;
  }
  cfg_ = o_.model;
  if (!o_.spm.empty()) {
    vocabulary_ = data_->load_vocabulary(o_.spm);
    vocabulary_note_ = o_.spm + " (" + std::to_string(vocabulary_->size()) + " pieces)";
  } else {
    std::vector<std::string> text = train_.text.source;
    text.insert(text.end(), train_.text.target.begin(), train_.text.target.end());
    Timer timer;
    if (part_.ranks > 1) {  // trained once, so that every rank has the same pieces
      std::string bytes;
      if (part_.rank == 0) bytes = data_->train_vocabulary(text, o_)->bytes();
      part_.world->broadcast(bytes, 0);
      vocabulary_ = data_->vocabulary_from_bytes(bytes);
    } else {
      vocabulary_ = data_->train_vocabulary(text, o_);
    }
    vocabulary_note_ = "SentencePiece " + o_.spm_type + " of " +
                       std::to_string(vocabulary_->size()) + " pieces trained on " +
                       train_.text.name + " in " + format_fixed(timer.seconds(), 1) + " s";
  }
  cfg_.vocab_size = vocabulary_->size();
}

// Pairs whose source (with EOS) or target (with BOS or EOS) exceeds the model's max_length are
// left out of the batches, and counted.
void TranslationTask::encode(Corpus& c) const {
  const auto n = c.text.source.size();
  for (size_t i = 0; i < n; ++i) {
    int64_t pieces = 0;
    std::vector<int> s = source_ids(*vocabulary_, c.text.source[i], cfg_.max_length, &pieces);
    std::vector<int> t = vocabulary_->encode(c.text.target[i]);
    if (pieces + 1 > cfg_.max_length || static_cast<int64_t>(t.size()) + 1 > cfg_.max_length) {
      ++c.too_long;
      continue;
    }
    c.src.push_back(std::move(s));
    c.tgt.push_back(std::move(t));
  }
}

std::unique_ptr<optim::Optimizer> TranslationTask::make_optimizer() {
  optim::AdamWOptions adam;  // Adam of the paper: no weight decay
  adam.beta1 = 0.9;
  adam.beta2 = 0.98;
  adam.eps = 1e-9;
  adam.weight_decay = 0;
  return std::make_unique<optim::AdamW>(*params_, adam);
}

optim::InverseSqrt TranslationTask::schedule() const {
  // The paper's rate, d^-0.5 · min(n^-0.5, n · warmup^-1.5), times a factor; --lr sets the peak.
  const double peak_per_factor =
      1.0 / std::sqrt(static_cast<double>(cfg_.d_model) * static_cast<double>(o_.warmup_steps));
  const float factor = o_.lr > 0 ? static_cast<float>(o_.lr / peak_per_factor) : o_.lr_factor;
  return optim::InverseSqrt(cfg_.d_model, o_.warmup_steps, factor);
}

std::unique_ptr<optim::Schedule> TranslationTask::make_schedule() {
  return std::make_unique<optim::InverseSqrt>(schedule());
}

void TranslationTask::list_epoch(int64_t epoch) {
  if (listed_epoch_ == epoch) return;
  epoch_batches_ = batcher_->epoch(epoch);
  listed_epoch_ = epoch;
}

int64_t TranslationTask::batches_in_epoch(int64_t epoch) {
  if (fixed_) return 1;
  list_epoch(epoch);
  return static_cast<int64_t>(epoch_batches_.size());
}

void TranslationTask::start_epoch(int64_t epoch, int64_t first) {
  if (fixed_) return;
  list_epoch(epoch);
  next_ = static_cast<size_t>(first);
}

bool TranslationTask::next_batch() {
  if (fixed_) {
    batch_ = &*fixed_;
  } else {
    if (next_ >= epoch_batches_.size()) return false;
    batch_ = &epoch_batches_[next_++];
  }
  // Every rank lists the global batches; the parts balance target tokens (batches.h).
  if (part_.parts() > 1) parts_ = split_batch(*batch_, part_.parts());
  return true;
}

std::pair<std::string, int64_t> TranslationTask::batching() const {
  return {"max-tokens", o_.max_tokens};
}

// Scheduled sampling: a first teacher-forced pass without dropout predicts every position of
// the part; with probability p, a decoder input token is replaced by the prediction for it. The
// draws come from (seed, step) and run over the rows of the global batch in order (a part takes
// those of its rows), so a resumed run, and a run on any number of ranks, makes the same ones.
Tensor TranslationTask::sampled_inputs(nn::Context& train_ctx, int64_t step,
                                       const TokenBatch& part) {
  const TokenBatch& b = *batch_;
  nn::Context ctx;
  ctx.arena = train_ctx.arena;
  ctx.precision = train_ctx.precision;
  const Tensor logits =
      model_->forward(ctx, part.source, part.source_lengths, part.target_in, part.target_lengths);
  const int64_t T = logits.shape()[1], V = logits.shape()[2];
  // The part's rows are consecutive rows of the global batch (split_batch), from `first` on.
  const int64_t rows = part.source.dim(0);
  const int64_t first =
      &part == &b ? 0
                  : std::find(b.index.begin(), b.index.end(), part.index.front()) - b.index.begin();
  Tensor mixed = part.target_in.clone();  // i32 [rows, T]
  ops::Rng draw(ops::Rng::hash(seed_ ^ 0x5353u, static_cast<uint64_t>(step)));
  const int64_t B = b.source.dim(0);
  for (int64_t g = 0; g < B; ++g)
    for (int64_t t = 1; t < b.target_lengths.i32()[g]; ++t) {
      const int64_t r = g - first;
      if (draw.uniform() >= o_.scheduled_sampling || r < 0 || r >= rows) continue;
      const float* row = logits.f32() + (r * T + t - 1) * V;  // predicts the token at input t
      mixed.i32()[r * T + t] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  train_ctx.arena->reset();  // the real forward starts afresh
  return mixed;
}

train::StepStats TranslationTask::forward_loss(nn::Context& ctx, int64_t step, int micro) {
  const TokenBatch& b =
      part_.parts() > 1 ? parts_.at(static_cast<size_t>(part_.part(micro))) : *batch_;
  empty_part_ = b.source.numel() == 0;
  if (empty_part_) return {};  // fewer sentences than parts: this one trains on none
  const Tensor target_in = o_.scheduled_sampling > 0 ? sampled_inputs(ctx, step, b) : b.target_in;
  Tensor logits;
  {
    ops::profile::Scope scope("model forward (rest)");
    logits = model_->forward(ctx, b.source, b.source_lengths, target_in, b.target_lengths);
  }
  // The mean over the part's tokens, weighted by their share of the global batch's: the
  // gradients summed over the parts are the global mean's (exactly 1 in a single process).
  const float scale = part_.parts() > 1 ? static_cast<float>(b.target_tokens) /
                                              static_cast<float>(batch_->target_tokens)
                                        : 1.f;
  ops::profile::Scope scope("cross-entropy");
  const ops::CrossEntropyStats s = sequence_loss(ctx, logits, b.target_out, o_.label_smoothing,
                                                 &dlogits_, scale, /*overwrite_logits=*/true);
  train::StepStats stats;
  stats.loss = s.loss;
  stats.loss_sum = s.loss * static_cast<double>(s.count);
  stats.items = s.count;
  stats.units = b.target_tokens;
  return stats;
}

void TranslationTask::backward(nn::Context& ctx) {
  if (!empty_part_) model_->backward(ctx, dlogits_);
}

// Each rank takes whole batches (of the loss, and of the translations), and the figures are put
// together in a single process's order, so they equal its own.
train::Metrics TranslationTask::validate(const train::ValidateContext& v) {
  dist::World& world = *v.world;
  const int rank = world.rank(), ranks = world.size();
  std::vector<double> sums(valid_batches_.size(), 0.0);
  int64_t tokens = 0;
  for (size_t i = 0; i < valid_batches_.size(); ++i) {
    if (static_cast<int>(i % static_cast<size_t>(ranks)) != rank) continue;
    const TokenBatch& b = valid_batches_[i];
    v.arena->reset();
    nn::Context ctx;
    ctx.arena = v.arena;
    ctx.precision = v.precision;
    const Tensor logits =
        model_->forward(ctx, b.source, b.source_lengths, b.target_in, b.target_lengths);
    const auto s = sequence_loss(ctx, logits, b.target_out, 0.f);
    sums[i] = s.loss * static_cast<double>(s.count);
    tokens += s.count;
  }
  world.allreduce_sum(sums.data(), sums.size());
  world.allreduce_sum(&tokens, 1);
  double loss_sum = 0;
  for (double x : sums) loss_sum += x;

  decode::SearchOptions so;
  so.precision = v.precision;
  so.method = o_.beam_size > 1 ? decode::SearchMethod::beam : decode::SearchMethod::greedy;
  so.beam_size = std::max(1, o_.beam_size);
  so.length_penalty = o_.length_penalty;
  Translator translator(*model_, *vocabulary_, so, o_.valid_batch_size);
  ProgressOptions po;
  po.tty = v.tty;
  po.unit = "sentence";
  po.rate_unit = "sent/s";
  po.line_every = 0;
  Progress progress(*v.log, v.label, static_cast<int64_t>(valid_.text.source.size()), po);
  const auto translations = translator.translate(valid_.text.source, &progress, rank, ranks);
  progress.finish();
  std::vector<std::string> hyps(translations.size());
  for (size_t i = 0; i < translations.size(); ++i)
    if (!translations[i].texts.empty()) hyps[i] = translations[i].texts[0];
  if (ranks > 1) hyps = world.gather_lines(hyps);
  int64_t exact = 0;
  for (size_t i = 0; i < hyps.size(); ++i) exact += hyps[i] == valid_.text.target[i];
  train::Metrics m;
  m.values = {{"loss", tokens ? loss_sum / static_cast<double>(tokens) : 0.0},
              {"bleu", decode::corpus_bleu(hyps, {valid_.text.target}).score}};
  m.extra = {{"exact", 100.0 * static_cast<double>(exact) / static_cast<double>(hyps.size())}};
  return m;
}

std::string TranslationTask::describe(const train::Metrics& m) const {
  return "loss " + format_fixed(m.get("loss"), 4) + ", BLEU " + format_fixed(m.get("bleu"), 2) +
         ", exact " + format_fixed(m.get("exact"), 1) + "%";
}

std::string TranslationTask::describe_best(double value) const {
  return "BLEU " + format_fixed(value, 2);
}

io::CheckpointMeta TranslationTask::checkpoint_meta() const {
  io::CheckpointMeta m;
  m.config = to_config_map(cfg_);
  if (vocabulary_) m.files[kTokenizerFile] = vocabulary_->bytes();
  return m;
}

void TranslationTask::log_setup(std::ostream& L) const {
  auto corpus_line = [](const Corpus& c, const char* what) {
    std::ostringstream s;
    s << what << ": " << c.src.size() << " pairs of " << c.text.read << " lines in " << c.text.name;
    if (c.text.empty || c.too_long)
      s << " (skipped: " << c.text.empty << " with an empty side, " << c.too_long
        << " longer than max_length)";
    return s.str();
  };
  L << corpus_line(train_, "train") << "\n" << corpus_line(valid_, "valid") << "\n";
  L << "tokenizer: " << vocabulary_note_ << "\n";
  const auto& c = cfg_;
  L << "model: transformer " << c.layers << "+" << c.decoder_layers << " layers, d_model "
    << c.d_model << ", " << c.heads << " heads, d_ff " << c.d_ff << ", "
    << (c.pre_norm ? "pre-norm" : "post-norm") << ", vocabulary " << c.vocab_size
    << (c.tied_embeddings ? " (tied embeddings)" : "") << ", dropout " << format_general(c.dropout)
    << ", max_length " << c.max_length << "; " << params_->numel() << " parameters\n";
  L << "optimizer: Adam (0.9, 0.98, eps 1e-9), inverse-sqrt schedule, warmup " << o_.warmup_steps
    << " steps, peak lr " << format_general(schedule().lr(o_.warmup_steps - 1))
    << ", label smoothing " << format_general(o_.label_smoothing) << ", clip-grad "
    << (o_.loop.clip_grad > 0 ? format_general(o_.loop.clip_grad) : std::string("off"))
    << ", scheduled sampling " << format_general(o_.scheduled_sampling) << "\n";
  L << std::flush;
}

}  // namespace vitk::seq2seq
