// `vitk mt-train`: options (named as `vitk train` names the same things, Marian and fairseq the
// others) onto seq2seq::TrainOptions, the corpora and SentencePiece (datasets/) wired into the
// translation task, and the run with SIGINT/SIGTERM as a stop flag. Wiring only; the task is
// common/seq2seq/train_task.cpp, the loop common/train/trainer.cpp.
#include <unistd.h>

#include <iostream>
#include <map>

#include "common/error.h"
#include "common/progress.h"
#include "common/seq2seq/config.h"
#include "common/seq2seq/train_task.h"
#include "common/seq2seq/trainer.h"
#include "datasets/parallel.h"
#include "tools/cli.h"
#include "tools/sentencepiece_data.h"
#include "tools/settings_options.h"
#include "tools/train_options.h"

namespace vitk::tools {
namespace {

// The translation task's corpora and vocabulary, from datasets/.
class SentencePieceData : public seq2seq::TranslationData {
 public:
  seq2seq::ParallelText read(const std::string& path, const std::string& target) override {
    seq2seq::ParallelText t;
    t.name = target.empty() ? path : path + " + " + target;
    datasets::ParallelReport report;
    datasets::ParallelCorpus c = datasets::read_parallel(path, target, 0, &report);
    t.source = std::move(c.source);
    t.target = std::move(c.target);
    t.read = report.read;
    t.empty = report.empty;
    return t;
  }
  std::unique_ptr<Vocabulary> train_vocabulary(const std::vector<std::string>& text,
                                               const seq2seq::TrainOptions& o) override {
    return train_sentencepiece(text, o.vocab_size, o.spm_type,
                               o.train + (o.train_target.empty() ? "" : " + " + o.train_target));
  }
  std::unique_ptr<Vocabulary> load_vocabulary(const std::string& path) override {
    return load_sentencepiece(path);
  }
  std::unique_ptr<Vocabulary> vocabulary_from_bytes(const std::string& bytes) override {
    return sentencepiece_from_bytes(bytes);
  }
};

// The [model] keys of a translation model, as --model.KEY options (tools/settings_options.h).
void add_transformer_options(po::options_description& o) {
  add_settings_options(o, seq2seq::transformer_schema().infos(), "model type: transformer");
}

void add_options(po::options_description& o) {
  po::options_description data("Data and output");
  data.add_options()  //
      ("train", po::value<std::string>()->value_name("DATA"),
       "training pairs: a TSV of source<TAB>target, or the source side with --train-target")  //
      ("train-target", po::value<std::string>()->value_name("FILE"),
       "the target side of --train, line by line")  //
      ("valid", po::value<std::string>()->value_name("DATA"),
       "validation pairs (TSV, or the source side with --valid-target)")  //
      ("valid-target", po::value<std::string>()->value_name("FILE"),
       "the target side of --valid")  //
      ("output", po::value<std::string>()->value_name("DIR"),
       "run directory for last.h5, best.h5, metrics.csv")  //
      ("resume", po::value<std::string>()->value_name("CKPT"),
       "continue a run exactly from its checkpoint (OUTPUT/last.h5)")  //
      ("spm", po::value<std::string>()->value_name("MODEL"),
       "a SentencePiece .model to use (default: train one on the source and target training "
       "text); stored in every checkpoint")  //
      ("vocab-size", value_in(1, static_cast<int>(kMaxVocabulary))->value_name("N"),
       "vocabulary of the SentencePiece model trained (default: model.vocab_size, 8000)")  //
      ("spm-type", po::value<std::string>()->default_value("bpe"), "bpe or unigram");
  po::options_description opt("Optimization (Adam 0.9, 0.98, eps 1e-9; inverse-sqrt schedule)");
  opt.add_options()  //
      ("max-tokens", value_in<int64_t>(1, 1 << 24)->default_value(4096),
       "tokens per batch (padded source or target)")  //
      ("lr-factor", po::value<float>()->default_value(1.f, "1"),
       "lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)")  //
      ("lr", po::value<float>()->value_name("PEAK"),
       "the peak learning rate (at the end of warmup) instead of --lr-factor")                //
      ("warmup-steps", po::value<int64_t>()->default_value(4000), "steps of linear warmup")   //
      ("label-smoothing", po::value<float>()->default_value(0.1f, "0.1"), "label smoothing")  //
      ("clip-grad", po::value<float>()->default_value(0.f, "0"),
       "clip the global gradient L2 norm to this (0: off)")  //
      ("scheduled-sampling", po::value<float>()->default_value(0.f, "0"),
       "probability of feeding the model's own greedy prediction (from a first teacher-forced "
       "pass) instead of the reference token at each decoder position")  //
      ("epochs", value_in(1, static_cast<int>(kMaxEpochs))->default_value(10),
       "epochs to train")  //
      ("max-steps", po::value<int64_t>()->default_value(0),
       "stop after this many steps in all, validate and save (0: no limit)")  //
      ("seed", po::value<uint64_t>()->default_value(42),
       "seed of initialisation, data order, dropout and scheduled sampling")  //
      ("log-interval", po::value<int64_t>()->default_value(50),
       "steps between progress lines when the output is not a terminal");
  add_profile_options(opt);
  add_parallel_options(opt);
  add_checkpoint_every_option(opt);
  add_precision_option(opt, /*training=*/true);
  po::options_description val("Validation");
  val.add_options()  //
      ("valid-freq", po::value<int64_t>()->default_value(1000),
       "validate (loss and BLEU), save last.h5 and maybe best.h5 every this many steps")  //
      ("beam-size", po::value<int>()->default_value(1),
       "beam size of the validation translations (1: greedy, the fastest)")  //
      ("length-penalty", po::value<float>()->default_value(0.6f, "0.6"),
       "GNMT length penalty alpha of the validation beam search")  //
      ("valid-batch-size", value_in<int64_t>(1, kMaxBatchSize)->default_value(64),
       "sentences per validation search")  //
      ("early-stopping", po::value<int>()->default_value(0),
       "stop after this many validations without a better BLEU (0: off)")  //
      ("keep-last", value_in(0, 10000)->default_value(0),
       "also keep step-N.h5 of the last K validations, e.g. for vitk average (0: none)");
  po::options_description model("Model (the [model] section of a config file)");
  add_transformer_options(model);
  o.add(data).add(opt).add(val).add(model);
}

seq2seq::TrainOptions train_options(const po::variables_map& vm) {
  seq2seq::TrainOptions t;
  auto str = [&](const char* name) {
    return vm.count(name) ? vm[name].as<std::string>() : std::string();
  };
  t.train = str("train");
  t.train_target = str("train-target");
  t.valid = str("valid");
  t.valid_target = str("valid-target");
  read_loop_options(vm, t.loop);
  t.spm = str("spm");
  t.spm_type = str("spm-type");
  t.model = settings_from(vm, seq2seq::transformer_schema(), seq2seq::TransformerConfig{});
  t.model_keys_given = given_setting_keys(vm);
  t.vocab_size =
      vm.count("vocab-size") ? vm["vocab-size"].as<int>() : static_cast<int>(t.model.vocab_size);
  t.max_tokens = vm["max-tokens"].as<int64_t>();
  t.lr_factor = vm["lr-factor"].as<float>();
  if (vm.count("lr")) {
    if (!vm["lr-factor"].defaulted())
      throw UsageError("--lr and --lr-factor exclude each other: --lr sets the peak rate");
    t.lr = vm["lr"].as<float>();
    if (!(t.lr > 0)) throw UsageError("--lr must be positive, got " + std::to_string(t.lr));
  }
  t.warmup_steps = vm["warmup-steps"].as<int64_t>();
  t.label_smoothing = vm["label-smoothing"].as<float>();
  t.loop.clip_grad = vm["clip-grad"].as<float>();
  t.scheduled_sampling = vm["scheduled-sampling"].as<float>();
  t.loop.epochs = vm["epochs"].as<int>();
  t.loop.valid_every = vm["valid-freq"].as<int64_t>();
  t.beam_size = vm["beam-size"].as<int>();
  t.length_penalty = vm["length-penalty"].as<float>();
  t.valid_batch_size = vm["valid-batch-size"].as<int64_t>();
  t.loop.early_stopping = vm["early-stopping"].as<int>();
  t.loop.keep_last = vm["keep-last"].as<int>();
  return t;
}

int run_mt_train(const po::variables_map& vm) {
  check_input_files(vm, {"train", "train-target", "valid", "valid-target", "spm"});
  const seq2seq::TrainOptions options = train_options(vm);
  options.validate();  // before the signal handlers and the version line
  SentencePieceData data;
  return run_trainer([&](std::ostream& log, bool tty, const std::atomic<int>& stop) {
    return seq2seq::train(options, data, log, tty, &stop);
  });
}

}  // namespace

void register_mt_train_commands(Registry& registry) {
  Subcommand c;
  c.name = "mt-train";
  c.summary = "train a translation Transformer (Adam, inverse-sqrt warmup, BLEU, resume)";
  c.example =
      "vitk mt-train --config configs/transformer-small.ini --train data/bible/train.tsv "
      "--valid data/bible/valid.tsv --output runs/mt --warmup-steps 1000\n"
      "vitk mt-train --config configs/transformer-small.ini --train train.es --train-target "
      "train.en --valid valid.es --valid-target valid.en --output runs/mt --vocab-size 8000\n"
      "vitk mt-train --config configs/transformer-small.ini --train data/bible/train.tsv "
      "--valid data/bible/valid.tsv --output runs/mt --resume runs/mt/last.h5\n"
      "# Ctrl-C (SIGINT) or SIGTERM: finish the step, save OUTPUT/last.h5, exit 130 (143)";
  c.add_options = add_options;
  c.run = run_mt_train;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
