// `vitk text-train`: options (named as `vitk caption-train` names the same things) onto
// seq2seq::TextTrainOptions, the labelled sentences and SentencePiece (datasets/) wired into the
// text task, and the run with SIGINT/SIGTERM as a stop flag. Wiring only; the task is
// common/seq2seq/text_task.cpp, the loop common/train/trainer.cpp.
#include <unistd.h>

#include <iostream>

#include "common/error.h"
#include "common/seq2seq/text_task.h"
#include "datasets/labelled_text.h"
#include "tools/cli.h"
#include "tools/sentencepiece_data.h"
#include "tools/settings_options.h"
#include "tools/train_options.h"

namespace vitk::tools {
namespace {

// The text task's sentences and vocabulary, from datasets/.
class LabelledData : public seq2seq::TextData {
 public:
  seq2seq::LabelledText read(const std::string& path) override {
    datasets::LabelledLines l = datasets::read_labelled(path);
    seq2seq::LabelledText t;
    t.name = path;
    t.text = std::move(l.text);
    t.labels = std::move(l.labels);
    t.lines = std::move(l.lines);
    return t;
  }
  std::unique_ptr<Vocabulary> train_vocabulary(const std::vector<std::string>& text, int vocab_size,
                                               const std::string& type) override {
    return train_sentencepiece(text, vocab_size, type, "the training sentences");
  }
  std::unique_ptr<Vocabulary> load_vocabulary(const std::string& path) override {
    return load_sentencepiece(path);
  }
  std::unique_ptr<Vocabulary> vocabulary_from_bytes(const std::string& bytes) override {
    return sentencepiece_from_bytes(bytes);
  }
};

std::string str(const po::variables_map& vm, const char* name) {
  return vm.count(name) ? vm[name].as<std::string>() : std::string();
}

// The [model] options: every setting but the vocabulary and the labels, which the tokenizer and
// the training file decide.
std::vector<settings::FieldInfo> text_model_fields() {
  std::vector<settings::FieldInfo> fields;
  for (settings::FieldInfo& f : seq2seq::text_classifier_schema().infos())
    if (f.key != "vocab_size" && f.key != "num_classes") fields.push_back(std::move(f));
  return fields;
}

void add_options(po::options_description& o) {
  po::options_description data("Data and output");
  data.add_options()  //
      ("train", po::value<std::string>()->value_name("FILE"),
       "training sentences: text<TAB>label lines, or fastText's __label__LABEL text")  //
      ("valid", po::value<std::string>()->value_name("FILE"),
       "validation sentences, in the same formats")  //
      ("output", po::value<std::string>()->value_name("DIR"),
       "run directory for last.h5, best.h5, metrics.csv")  //
      ("resume", po::value<std::string>()->value_name("CKPT"),
       "continue a run exactly from its checkpoint (OUTPUT/last.h5)")  //
      ("spm", po::value<std::string>()->value_name("MODEL"),
       "a SentencePiece .model (default: train one on the training sentences)")  //
      ("vocab-size", value_in(5, static_cast<int>(kMaxVocabulary))->default_value(8000),
       "vocabulary of the SentencePiece model trained")                               //
      ("spm-type", po::value<std::string>()->default_value("bpe"), "bpe or unigram")  //
      ("encoder-from", po::value<std::string>()->value_name("CKPT"),
       "start the embedding and the encoder from a translation checkpoint (vitk mt-train): its "
       "encoder's architecture, weights and SentencePiece model")  //
      ("encoder-lr-scale", po::value<float>()->default_value(1.f, "1")->value_name("S"),
       "the embedding's and encoder's learning rate as a share of --lr; 0 freezes them");
  po::options_description opt("Optimization (AdamW, linear warmup, cosine per step)");
  opt.add_options()                                                                       //
      ("epochs", value_in(1, static_cast<int>(kMaxEpochs))->default_value(10), "epochs")  //
      ("steps", value_in<int64_t>(0, int64_t{1} << 40)->default_value(0)->value_name("N"),
       "the run's length in optimizer steps instead of --epochs (0: off)")  //
      ("batch-size", value_in<int64_t>(1, kMaxBatchSize)->default_value(64),
       "sentences per step")                                                                    //
      ("lr", po::value<float>()->default_value(5e-4f, "5e-4"), "peak learning rate")            //
      ("min-lr", po::value<float>()->default_value(1e-6f, "1e-6"), "at the end of the cosine")  //
      ("warmup-epochs", po::value<float>()->default_value(1.f, "1"), "linear warmup")           //
      ("weight-decay", po::value<float>()->default_value(0.01f, "0.01"),
       "AdamW's, not on biases, norms, the class token")                                         //
      ("clip-grad", po::value<float>()->default_value(1.f, "1"), "max global L2 norm (0: off)")  //
      ("label-smoothing", po::value<float>()->default_value(0.1f, "0.1"), "label smoothing")     //
      ("model-ema", switch_value(), "keep an EMA of the weights (ema.h5)")                       //
      ("model-ema-decay", po::value<double>()->default_value(0.999, "0.999"), "its decay")       //
      ("seed", po::value<uint64_t>()->default_value(42), "initialisation, order, dropout")       //
      ("max-steps", po::value<int64_t>()->default_value(0),
       "stop after this many steps (0: off)")                                                 //
      ("val-interval", po::value<int64_t>()->default_value(1), "epochs between validations")  //
      ("early-stopping", po::value<int>()->default_value(0),
       "stop after this many validations without a better top-1 (0: off)")  //
      ("log-interval", po::value<int64_t>()->default_value(50),
       "steps between progress lines when the output is not a terminal");
  add_profile_options(opt);
  add_parallel_options(opt);
  add_checkpoint_every_option(opt);
  add_precision_option(opt, /*training=*/true);
  po::options_description model("Model (the [model] section of a config file)");
  add_settings_options(model, text_model_fields(), "model type: text_classifier");
  o.add(data).add(opt).add(model);
}

seq2seq::TextTrainOptions text_train_options(const po::variables_map& vm) {
  seq2seq::TextTrainOptions t;
  t.train = str(vm, "train");
  t.valid = str(vm, "valid");
  read_loop_options(vm, t.loop);
  t.spm = str(vm, "spm");
  t.vocab_size = vm["vocab-size"].as<int>();
  t.spm_type = str(vm, "spm-type");
  t.encoder_from = str(vm, "encoder-from");
  t.encoder_lr_scale = vm["encoder-lr-scale"].as<float>();
  t.model = settings_from(vm, seq2seq::text_classifier_schema(), seq2seq::TextClassifierConfig{});
  t.model_keys_given = given_setting_keys(vm);
  t.loop.epochs = vm["epochs"].as<int>();
  t.loop.steps = vm["steps"].as<int64_t>();
  if (option_given(vm, "steps") && option_given(vm, "epochs") && t.loop.steps > 0)
    throw UsageError("give --epochs or --steps, not both");
  t.batch_size = vm["batch-size"].as<int64_t>();
  t.lr = vm["lr"].as<float>();
  t.min_lr = vm["min-lr"].as<float>();
  t.warmup_epochs = vm["warmup-epochs"].as<float>();
  t.weight_decay = vm["weight-decay"].as<float>();
  t.loop.clip_grad = vm["clip-grad"].as<float>();
  t.smoothing = vm["label-smoothing"].as<float>();
  t.loop.model_ema = vm["model-ema"].as<bool>();
  t.loop.model_ema_decay = vm["model-ema-decay"].as<double>();
  t.loop.valid_every = vm["val-interval"].as<int64_t>();
  t.loop.early_stopping = vm["early-stopping"].as<int>();
  return t;
}

int run_text_train(const po::variables_map& vm) {
  check_input_files(vm, {"train", "valid", "spm", "encoder-from", "resume"});
  const seq2seq::TextTrainOptions options = text_train_options(vm);
  options.validate();  // before the signal handlers and the version line
  LabelledData data;
  return run_trainer([&](std::ostream& log, bool tty, const std::atomic<int>& stop) {
    return seq2seq::train_text(options, data, log, tty, &stop);
  });
}

}  // namespace

void register_text_train_commands(Registry& registry) {
  Subcommand c;
  c.name = "text-train";
  c.summary = "train a text classifier (a Transformer encoder, pooled, and a linear head)";
  c.example =
      "vitk text-train --config configs/text-books.ini --train data/bible/books/train.en.tsv "
      "--valid data/bible/books/valid.en.tsv --output runs/books-en\n"
      "vitk text-train --config configs/text-books.ini --train data/bible/books/train.es.tsv "
      "--valid data/bible/books/valid.es.tsv --output runs/books-es --encoder-from "
      "runs/mt-books/best.h5 --encoder-lr-scale 0.5\n"
      "vitk text-train --train train.ft --valid valid.ft --output runs/t   # __label__X text\n"
      "# Ctrl-C (SIGINT) or SIGTERM: finish the step, save OUTPUT/last.h5, exit 130 (143)";
  c.add_options = add_options;
  c.run = run_text_train;
  registry.add(std::move(c));
}

}  // namespace vitk::tools
