// The training loop of `vitk mt-train`: data and tokenizer, model and optimizer (or a resumed
// run's), steps, validation, checkpoints.
#include "common/seq2seq/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include "common/error.h"
#include "common/metrics_csv.h"
#include "common/ops/profile.h"
#include "common/optim/optim.h"
#include "common/progress.h"
#include "common/seq2seq/bleu.h"
#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/translator.h"
#include "common/timer.h"
#include "datasets/parallel.h"

namespace vitk::seq2seq {
namespace {

namespace fs = std::filesystem;

void need(bool ok, const std::string& option, const std::string& what, double got) {
  if (!ok) throw UsageError("--" + option + " must be " + what + ", got " + format_general(got, 6));
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

// A parallel corpus as raw text (for BLEU) and as ids (for the loss and the batches).
struct Corpus {
  std::string name;  // "data.tsv" or "src + tgt"
  datasets::ParallelCorpus text;
  std::vector<std::vector<int>> src, tgt;  // the pairs that fit the model
  int64_t read = 0, empty = 0, too_long = 0;
};

class Run {
 public:
  Run(const TrainOptions& o, std::ostream& log, bool tty, const std::atomic<int>* stop)
      : o_(o), log_(log), tty_(tty), stop_(stop) {}
  TrainResult go();

 private:
  Corpus read_corpus(const std::string& path, const std::string& target, const char* what) const;
  void encode(Corpus& c) const;
  void setup_model_and_tokenizer();
  void build();
  void open_output();
  void log_setup() const;
  bool stopping() const { return stop_ && stop_->load() != 0; }
  int64_t steps() const { return opt_->steps(); }
  Tensor sampled_inputs(const datasets::TokenBatch& b);
  void train_step(const datasets::TokenBatch& b);
  void print_profile();  // --profile: the steps since the last print
  // Validation loss and BLEU, metrics row, best.h5 (and step-N.h5); true when early stopping
  // says to stop.
  bool validate();
  void save_last();
  void keep_step_checkpoint();

  const TrainOptions& o_;
  std::ostream& log_;
  bool tty_;
  const std::atomic<int>* stop_;

  Corpus train_, valid_;
  datasets::Tokenizer tokenizer_;
  std::string tokenizer_note_;
  seq2seq::TransformerConfig cfg_;
  std::optional<seq2seq::TranslationMeta> resumed_;
  seq2seq::TrainState state_;
  std::string output_, last_path_;

  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<seq2seq::Transformer> model_;
  std::unique_ptr<optim::AdamW> opt_;
  std::unique_ptr<optim::InverseSqrt> schedule_;
  std::unique_ptr<datasets::TokenBatcher> batcher_;
  std::vector<datasets::TokenBatch> valid_batches_;
  std::unique_ptr<MetricsCsv> csv_;
  ops::Rng rng_;  // dropout
  Arena arena_;

  float lr_ = 0;
  double train_seconds_ = 0;  // since the last validation, this process
  int64_t train_tokens_ = 0;
  double run_seconds_ = 0;
  int64_t run_tokens_ = 0;
  TrainResult result_;
  std::optional<ops::profile::StepProfile> profile_;
};

Corpus Run::read_corpus(const std::string& path, const std::string& target,
                        const char* what) const {
  Corpus c;
  c.name = target.empty() ? path : path + " + " + target;
  datasets::ParallelReport report;
  c.text = datasets::read_parallel(path, target, 0, &report);
  c.read = report.read;
  c.empty = report.empty;
  if (c.text.source.empty())
    throw Error(c.name + ": no " + what + " sentence pairs (" + std::to_string(report.read) +
                " lines read, " + std::to_string(report.empty) + " with an empty side)");
  return c;
}

// Pairs whose source (with EOS) or target (with BOS or EOS) exceeds the model's max_length are
// skipped from the batches, and counted.
void Run::encode(Corpus& c) const {
  const auto n = c.text.source.size();
  for (size_t i = 0; i < n; ++i) {
    int64_t pieces = 0;
    std::vector<int> s = source_ids(tokenizer_, c.text.source[i], cfg_.max_length, &pieces);
    std::vector<int> t = tokenizer_.encode(c.text.target[i]);
    if (pieces + 1 > cfg_.max_length || static_cast<int64_t>(t.size()) + 1 > cfg_.max_length) {
      ++c.too_long;
      continue;
    }
    c.src.push_back(std::move(s));
    c.tgt.push_back(std::move(t));
  }
}

void Run::setup_model_and_tokenizer() {
  if (!o_.resume.empty()) {
    resumed_ = seq2seq::read_translation_meta(o_.resume);
    if (!resumed_->state)
      seq2seq::TrainState::from_words(resumed_->meta.rng_state, o_.resume);  // throws
    state_ = *resumed_->state;
    cfg_ = resumed_->config;
    const auto now = seq2seq::to_config_map(o_.model), then = seq2seq::to_config_map(cfg_);
    for (const std::string& key : o_.model_keys_given) {
      auto a = now.find(key), b = then.find(key);
      if (key != "vocab_size" && a != now.end() && b != then.end() && a->second != b->second)
        throw UsageError("--model." + key + " " + a->second + " differs from the checkpoint's " +
                         b->second + " (" + o_.resume + "); a resumed run keeps its model");
    }
    tokenizer_ = datasets::Tokenizer::from_bytes(resumed_->tokenizer);
    tokenizer_note_ = "the checkpoint's (" + std::to_string(tokenizer_.vocab_size()) + " pieces)";
    return;
  }
  cfg_ = o_.model;
  if (!o_.spm.empty()) {
    tokenizer_ = datasets::Tokenizer::load(o_.spm);
    tokenizer_note_ = o_.spm + " (" + std::to_string(tokenizer_.vocab_size()) + " pieces)";
  } else {
    datasets::TokenizerOptions to;
    to.model_type = o_.spm_type;
    to.vocab_size = o_.vocab_size;
    to.threads = ops::num_threads();
    std::vector<std::string> text = train_.text.source;
    text.insert(text.end(), train_.text.target.begin(), train_.text.target.end());
    Timer timer;
    try {
      tokenizer_ = datasets::Tokenizer::train(text, to);
    } catch (const Error& e) {
      throw Error("cannot train the SentencePiece model on " + train_.name + " (--vocab-size " +
                  std::to_string(o_.vocab_size) + "): " + e.what());
    }
    tokenizer_note_ = "SentencePiece " + o_.spm_type + " of " +
                      std::to_string(tokenizer_.vocab_size()) + " pieces trained on " +
                      train_.name + " in " + format_fixed(timer.seconds(), 1) + " s";
  }
  cfg_.vocab_size = tokenizer_.vocab_size();
  state_.seed = o_.seed;
  state_.rng_seed = ops::Rng::hash(o_.seed, 0xd50b);
  state_.max_tokens = o_.max_tokens;
}

void Run::build() {
  cfg_.validate();
  encode(train_);
  encode(valid_);
  if (train_.src.empty())
    throw Error(train_.name + ": every pair is longer than the model's max_length " +
                std::to_string(cfg_.max_length));
  if (resumed_ && state_.batch > 0 && state_.max_tokens != o_.max_tokens)
    throw UsageError("--max-tokens " + std::to_string(o_.max_tokens) + " differs from the " +
                     std::to_string(state_.max_tokens) + " of " + o_.resume +
                     ", which stopped in the middle of an epoch");
  const int64_t max_tokens = resumed_ ? state_.max_tokens : o_.max_tokens;
  batcher_ =
      std::make_unique<datasets::TokenBatcher>(train_.src, train_.tgt, max_tokens, state_.seed);
  valid_batches_ = datasets::TokenBatcher(valid_.src, valid_.tgt, max_tokens, 0).epoch(0);
  if (resumed_ && state_.batch > 0) {
    const int64_t n = static_cast<int64_t>(batcher_->epoch(state_.epoch).size());
    if (n != state_.batches_in_epoch)
      throw Error(o_.resume + ": stopped at batch " + std::to_string(state_.batch) + " of " +
                  std::to_string(state_.batches_in_epoch) + " in epoch " +
                  std::to_string(state_.epoch + 1) + ", but the training data " + train_.name +
                  " now makes " + std::to_string(n) + " batches");
  }

  params_ = std::make_unique<ParamStore>();
  model_ = std::make_unique<seq2seq::Transformer>(*params_, cfg_);
  params_->finalize();
  optim::AdamWOptions adam;  // Adam of the paper: no weight decay
  adam.beta1 = 0.9;
  adam.beta2 = 0.98;
  adam.eps = 1e-9;
  adam.weight_decay = 0;
  opt_ = std::make_unique<optim::AdamW>(*params_, adam);
  if (resumed_) {
    io::load_checkpoint(o_.resume, *params_, opt_.get());
    rng_.set_state(state_.rng_seed, state_.rng_counter);
  } else {
    ops::Rng init(ops::Rng::hash(state_.seed, 0x1417));
    model_->init(init);
    rng_.set_state(state_.rng_seed, 0);
  }
  // The paper's rate, d^-0.5 · min(n^-0.5, n · warmup^-1.5), times a factor; --lr sets the peak.
  const double peak_per_factor =
      1.0 / std::sqrt(static_cast<double>(cfg_.d_model) * static_cast<double>(o_.warmup_steps));
  const float factor = o_.lr > 0 ? static_cast<float>(o_.lr / peak_per_factor) : o_.lr_factor;
  schedule_ = std::make_unique<optim::InverseSqrt>(cfg_.d_model, o_.warmup_steps, factor);
}

void Run::open_output() {
  const std::string last = (fs::path(output_) / "last.h5").string();
  std::error_code ec;
  fs::create_directories(output_, ec);
  if (ec || !fs::is_directory(output_))
    throw Error(output_ + ": cannot create the output directory" +
                (ec ? " (" + ec.message() + ")" : std::string()));
  const int64_t keep = resumed_ && same_file(o_.resume, last) ? steps() : -1;
  csv_ = std::make_unique<MetricsCsv>(
      (fs::path(output_) / "metrics.csv").string(),
      "step,epoch,lr,train_loss,target_tokens_per_s,valid_loss,valid_bleu", keep);
  last_path_ = last;
}

void Run::log_setup() const {
  auto corpus_line = [](const Corpus& c, const char* what) {
    std::ostringstream s;
    s << what << ": " << c.src.size() << " pairs of " << c.read << " lines in " << c.name;
    if (c.empty || c.too_long)
      s << " (skipped: " << c.empty << " with an empty side, " << c.too_long
        << " longer than max_length)";
    return s.str();
  };
  auto& L = log_;
  L << corpus_line(train_, "train") << "\n" << corpus_line(valid_, "valid") << "\n";
  L << "tokenizer: " << tokenizer_note_ << "\n";
  const auto& c = cfg_;
  L << "model: transformer " << c.encoder_layers << "+" << c.decoder_layers << " layers, d_model "
    << c.d_model << ", " << c.heads << " heads, d_ff " << c.d_ff << ", "
    << (c.pre_norm ? "pre-norm" : "post-norm") << ", vocabulary " << c.vocab_size
    << (c.tie_embeddings ? " (tied embeddings)" : "") << ", dropout " << format_general(c.dropout)
    << ", max_length " << c.max_length << "; " << params_->numel() << " parameters\n";
  L << "optimizer: Adam (0.9, 0.98, eps 1e-9), inverse-sqrt schedule, warmup " << o_.warmup_steps
    << " steps, peak lr " << format_general(schedule_->lr(o_.warmup_steps - 1))
    << ", label smoothing " << format_general(o_.label_smoothing) << ", clip-grad "
    << (o_.clip_grad > 0 ? format_general(o_.clip_grad) : std::string("off"))
    << ", scheduled sampling " << format_general(o_.scheduled_sampling) << "\n";
  L << "run: " << o_.epochs << " epochs, about " << o_.max_tokens << " tokens per batch, seed "
    << state_.seed << ", validation every " << o_.valid_freq << " steps ("
    << (o_.beam_size > 1 ? "beam " + std::to_string(o_.beam_size) : std::string("greedy"))
    << " BLEU)";
  if (o_.max_steps > 0) L << ", --max-steps " << o_.max_steps;
  if (o_.early_stopping > 0) L << ", early stopping after " << o_.early_stopping;
  L << "; threads " << ops::num_threads() << ", precision " << ops::precision_name(o_.precision)
    << "\noutput: " << output_ << " (last.h5, best.h5, metrics.csv)\n";
  if (resumed_)
    L << "resumed from " << o_.resume << ": epoch " << state_.epoch + 1 << ", batch "
      << state_.batch << "/" << state_.batches_in_epoch << ", step " << steps() << "\n";
  L << std::flush;
}

TrainResult Run::go() {
  o_.validate();
  // An existing run is refused before any work (training the tokenizer takes a while).
  output_ = o_.output;
  const std::string last = (fs::path(output_) / "last.h5").string();
  if (fs::exists(last) && !(!o_.resume.empty() && same_file(o_.resume, last)))
    throw UsageError("--output " + output_ + " already holds a run (" + last +
                     "): resume it with --resume " + last + ", or choose another --output");
  train_ = read_corpus(o_.train, o_.train_target, "training");
  valid_ = read_corpus(o_.valid, o_.valid_target, "validation");
  setup_model_and_tokenizer();
  build();
  open_output();
  log_setup();

  if (o_.profile) profile_.emplace("step", o_.profile_every);
  auto end = [&](TrainEnd e) { result_.end = e; };
  bool done = o_.max_steps > 0 && steps() >= o_.max_steps;
  if (done) end(TrainEnd::max_steps);
  for (int64_t epoch = state_.epoch; epoch < o_.epochs && !done; ++epoch) {
    const std::vector<datasets::TokenBatch> batches = batcher_->epoch(epoch);
    const int64_t n = static_cast<int64_t>(batches.size());
    const int64_t first = epoch == state_.epoch ? state_.batch : 0;
    state_.epoch = epoch;
    state_.batches_in_epoch = n;
    ProgressOptions po;
    po.tty = tty_;
    po.line_every = o_.log_interval;
    po.unit = "batch";
    po.rate_unit = "tok/s";
    Progress progress(log_, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(o_.epochs),
                      n, po, first);
    int64_t tokens = 0;
    for (int64_t b = first; b < n && !done; ++b) {
      Timer t;
      if (profile_) profile_->begin();
      train_step(batches[static_cast<size_t>(b)]);
      const bool print_profile_now = profile_ && profile_->end();
      const double dt = t.seconds();
      const int64_t tt = batches[static_cast<size_t>(b)].target_tokens;
      train_seconds_ += dt, train_tokens_ += tt, run_seconds_ += dt, run_tokens_ += tt;
      tokens += tt;
      state_.batch = b + 1;
      char metrics[96];
      std::snprintf(metrics, sizeof metrics, "loss %.4f  lr %.3g  step %lld",
                    state_.loss_sum / static_cast<double>(std::max<int64_t>(state_.loss_tokens, 1)),
                    lr_, static_cast<long long>(steps()));
      progress.update(b + 1, tokens, metrics);
      if (print_profile_now) {
        progress.finish();
        print_profile();
      }
      const bool max_steps = o_.max_steps > 0 && steps() >= o_.max_steps;
      if (stopping()) {
        progress.finish();
        save_last();
        end(TrainEnd::interrupted);
        done = true;
      } else if (steps() % o_.valid_freq == 0 || max_steps) {
        progress.finish();
        if (validate()) end(TrainEnd::early_stopped), done = true;
        if (max_steps && !done) end(TrainEnd::max_steps), done = true;
        save_last();
      }
    }
    progress.finish();
    if (!done) state_.epoch = epoch + 1, state_.batch = 0;
  }
  if (!done) {  // every epoch ran
    if (state_.last_validation != steps()) validate();
    save_last();
  }

  if (profile_) print_profile();
  result_.steps = steps();
  result_.best_bleu = state_.best_bleu;
  result_.checkpoint = last_path_;
  result_.target_tokens_per_second =
      run_seconds_ > 0 ? static_cast<double>(run_tokens_) / run_seconds_ : 0;
  const std::string rate = format_fixed(result_.target_tokens_per_second, 0) + " target tokens/s";
  const std::string best = state_.best_bleu >= 0
                               ? "; best valid BLEU " + format_fixed(state_.best_bleu, 2) +
                                     " at step " + std::to_string(state_.best_step)
                               : "";
  switch (result_.end) {
    case TrainEnd::finished:
      log_ << "finished " << o_.epochs << " epochs, step " << steps() << best << "; " << rate
           << "\n";
      break;
    case TrainEnd::early_stopped:
      log_ << "early stopping at step " << steps() << ": " << state_.bad_validations
           << " validations without a better BLEU" << best << "; " << rate << "\n";
      break;
    case TrainEnd::max_steps:
      log_ << "stopped at step " << steps() << " (--max-steps " << o_.max_steps << ")" << best
           << "; checkpoint " << last_path_ << " (continue with --resume " << last_path_ << ")\n";
      break;
    case TrainEnd::interrupted:
      log_ << "interrupted at step " << steps() << "; checkpoint " << last_path_
           << " (continue with --resume " << last_path_ << ")\n";
      break;
  }
  log_ << std::flush;
  return result_;
}

// Scheduled sampling: a first teacher-forced pass without dropout predicts every position; with
// probability p, a decoder input token is replaced by the prediction for it. The draws come from
// (seed, step), so a resumed run makes the same ones.
Tensor Run::sampled_inputs(const datasets::TokenBatch& b) {
  arena_.reset();
  nn::Context ctx;
  ctx.arena = &arena_;
  ctx.precision = o_.precision;
  const Tensor logits =
      model_->forward(ctx, b.source, b.source_lengths, b.target_in, b.target_lengths);
  const int64_t B = logits.shape()[0], T = logits.shape()[1], V = logits.shape()[2];
  Tensor mixed = b.target_in.clone();  // i32 [B, T]
  ops::Rng draw(ops::Rng::hash(state_.seed ^ 0x5353u, static_cast<uint64_t>(steps())));
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 1; t < b.target_lengths.i32()[r]; ++t) {
      if (draw.uniform() >= o_.scheduled_sampling) continue;
      const float* row = logits.f32() + (r * T + t - 1) * V;  // predicts the token at input t
      mixed.i32()[r * T + t] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  return mixed;
}

void Run::train_step(const datasets::TokenBatch& b) {
  const Tensor target_in = o_.scheduled_sampling > 0 ? sampled_inputs(b) : b.target_in;
  arena_.reset();
  nn::Context ctx;
  ctx.training = true;
  ctx.arena = &arena_;
  ctx.rng = &rng_;
  ctx.precision = o_.precision;
  Tensor logits, dlogits;
  {
    ops::profile::Scope scope("model forward (rest)");
    logits = model_->forward(ctx, b.source, b.source_lengths, target_in, b.target_lengths);
  }
  ops::CrossEntropyStats s;
  {
    ops::profile::Scope scope("cross-entropy");
    s = seq2seq::sequence_loss(ctx, logits, b.target_out, o_.label_smoothing, &dlogits, 1.f,
                               /*overwrite_logits=*/true);
  }
  const int64_t step = steps();
  if (!std::isfinite(s.loss))
    throw Error("the training loss is " + format_general(s.loss) + " at step " +
                std::to_string(step + 1) +
                "; lower --lr-factor or clip gradients with --clip-grad" +
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
  opt_->step(lr_);
  state_.loss_sum += s.loss * static_cast<double>(s.count);
  state_.loss_tokens += s.count;
}

void Run::print_profile() {
  const int64_t last = steps(), first = last - profile_->counted() + 1;
  profile_->print(log_, "--profile, steps " + std::to_string(first) + "-" + std::to_string(last));
}

bool Run::validate() {
  Timer timer;
  double loss_sum = 0;
  int64_t tokens = 0;
  for (const auto& b : valid_batches_) {
    arena_.reset();
    nn::Context ctx;
    ctx.arena = &arena_;
    ctx.precision = o_.precision;
    const Tensor logits =
        model_->forward(ctx, b.source, b.source_lengths, b.target_in, b.target_lengths);
    const auto s = seq2seq::sequence_loss(ctx, logits, b.target_out, 0.f);
    loss_sum += s.loss * static_cast<double>(s.count);
    tokens += s.count;
  }
  const double valid_loss = tokens ? loss_sum / static_cast<double>(tokens) : 0;

  seq2seq::SearchOptions so;
  so.precision = o_.precision;
  so.method = o_.beam_size > 1 ? seq2seq::SearchMethod::beam : seq2seq::SearchMethod::greedy;
  so.beam_size = std::max(1, o_.beam_size);
  so.length_penalty = o_.length_penalty;
  Translator translator(*model_, tokenizer_, so, o_.valid_batch_size);
  ProgressOptions po;
  po.tty = tty_;
  po.unit = "sentence";
  po.rate_unit = "sent/s";
  po.line_every = 0;
  Progress progress(log_, "validate", static_cast<int64_t>(valid_.text.source.size()), po);
  const auto translations = translator.translate(valid_.text.source, &progress);
  progress.finish();
  std::vector<std::string> hyps;
  int64_t exact = 0;
  for (size_t i = 0; i < translations.size(); ++i) {
    hyps.push_back(translations[i].texts.empty() ? std::string() : translations[i].texts[0]);
    exact += hyps.back() == valid_.text.target[i];
  }
  const double bleu = seq2seq::corpus_bleu(hyps, {valid_.text.target}).score;
  const double exact_percent =
      100.0 * static_cast<double>(exact) / static_cast<double>(hyps.size());

  const double train_loss =
      state_.loss_sum / static_cast<double>(std::max<int64_t>(state_.loss_tokens, 1));
  const double tps = train_seconds_ > 0 ? static_cast<double>(train_tokens_) / train_seconds_ : 0;
  const double epoch = static_cast<double>(state_.epoch) +
                       static_cast<double>(state_.batch) /
                           static_cast<double>(std::max<int64_t>(state_.batches_in_epoch, 1));
  const float last_lr = steps() > 0 ? schedule_->lr(steps() - 1) : 0.f;
  csv_->row({std::to_string(steps()), format_fixed(epoch, 3), format_general(last_lr, 6),
             format_fixed(train_loss, 6), format_fixed(tps, 1), format_fixed(valid_loss, 6),
             format_fixed(bleu, 4)});

  const bool best = bleu > state_.best_bleu;
  if (best) {
    state_.best_bleu = bleu;
    state_.best_step = steps();
    state_.bad_validations = 0;
    seq2seq::save_translation((fs::path(output_) / "best.h5").string(), *params_, cfg_,
                              tokenizer_.bytes(), steps());
  } else {
    ++state_.bad_validations;
  }
  if (o_.keep_last > 0) keep_step_checkpoint();
  state_.last_validation = steps();
  state_.loss_sum = 0, state_.loss_tokens = 0;
  train_seconds_ = 0, train_tokens_ = 0;
  result_.last_bleu = bleu;
  result_.last_exact = exact_percent;

  log_ << "step " << steps() << " (epoch " << format_fixed(epoch, 2) << "): train loss "
       << format_fixed(train_loss, 4) << " | valid loss " << format_fixed(valid_loss, 4)
       << ", BLEU " << format_fixed(bleu, 2) << ", exact " << format_fixed(exact_percent, 1)
       << "% | " << format_fixed(tps, 0) << " target tok/s | validation "
       << format_duration(timer.seconds()) << (best ? " | best, saved best.h5" : "") << "\n"
       << std::flush;
  return o_.early_stopping > 0 && state_.bad_validations >= o_.early_stopping;
}

// step-N.h5 for this validation; only the newest --keep-last of them stay.
void Run::keep_step_checkpoint() {
  seq2seq::save_translation(
      (fs::path(output_) / ("step-" + std::to_string(steps()) + ".h5")).string(), *params_, cfg_,
      tokenizer_.bytes(), steps());
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(output_)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || entry.path().extension() != ".h5") continue;
    const std::string digits = name.substr(5, name.size() - 8);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    found.emplace_back(std::stoll(digits), entry.path());
  }
  std::sort(found.begin(), found.end());
  for (size_t i = 0; i + static_cast<size_t>(o_.keep_last) < found.size(); ++i)
    fs::remove(found[i].second);
}

void Run::save_last() {
  seq2seq::TrainState s = state_;
  if (s.batch >= s.batches_in_epoch && s.batches_in_epoch > 0)
    ++s.epoch, s.batch = 0;  // the epoch is done: a resume starts the next one
  s.rng_seed = rng_.seed();
  s.rng_counter = rng_.counter();
  seq2seq::save_translation(last_path_, *params_, cfg_, tokenizer_.bytes(), steps(), &s,
                            opt_.get());
}

}  // namespace

void TrainOptions::validate() const {
  if (train.empty()) throw UsageError("--train is required: the training pairs");
  if (valid.empty()) throw UsageError("--valid is required: the validation pairs");
  if (output.empty()) throw UsageError("--output is required: the run directory");
  need(vocab_size >= 5, "vocab-size", "at least 5", vocab_size);
  if (spm_type != "bpe" && spm_type != "unigram")
    throw UsageError("--spm-type must be 'bpe' or 'unigram', got '" + spm_type + "'");
  need(max_tokens >= 1, "max-tokens", "at least 1", static_cast<double>(max_tokens));
  need(lr_factor > 0 && std::isfinite(lr_factor), "lr-factor", "positive", lr_factor);
  need(lr >= 0 && std::isfinite(lr), "lr", "positive (0: from --lr-factor)", lr);
  need(warmup_steps >= 1, "warmup-steps", "at least 1", static_cast<double>(warmup_steps));
  need(label_smoothing >= 0 && label_smoothing < 1, "label-smoothing", "in [0, 1)",
       label_smoothing);
  need(clip_grad >= 0 && std::isfinite(clip_grad), "clip-grad", ">= 0 (0: off)", clip_grad);
  need(epochs >= 1, "epochs", "at least 1", epochs);
  need(max_steps >= 0, "max-steps", ">= 0 (0: no limit)", static_cast<double>(max_steps));
  need(valid_freq >= 1, "valid-freq", "at least 1", static_cast<double>(valid_freq));
  need(beam_size >= 1, "beam-size", "at least 1", beam_size);
  need(length_penalty >= 0 && std::isfinite(length_penalty), "length-penalty", ">= 0",
       length_penalty);
  need(valid_batch_size >= 1, "valid-batch-size", "at least 1",
       static_cast<double>(valid_batch_size));
  need(early_stopping >= 0, "early-stopping", ">= 0 (0: off)", early_stopping);
  need(scheduled_sampling >= 0 && scheduled_sampling <= 1, "scheduled-sampling",
       "a probability in [0, 1]", scheduled_sampling);
  need(keep_last >= 0, "keep-last", ">= 0", keep_last);
  need(log_interval >= 1, "log-interval", "at least 1", static_cast<double>(log_interval));
  need(profile_every >= 0, "profile-every", ">= 0 (0: only at the end)",
       static_cast<double>(profile_every));
}

TrainResult train(const TrainOptions& options, std::ostream& log, bool tty,
                  const std::atomic<int>* stop) {
  Run run(options, log, tty, stop);
  return run.go();
}

}  // namespace vitk::seq2seq
