// `vitk train` and `vitk eval`: options (named as timm's train.py and validate.py name them) onto
// vit::TrainOptions and vit::EvalOptions, and SIGINT/SIGTERM onto a stop flag. Wiring only; the
// loop is vit/trainer.cpp.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/progress.h"
#include "tools/cli.h"
#include "tools/vit_options.h"
#include "vit/trainer.h"

namespace vitk::tools {
namespace {

std::atomic<int> g_stop_signal{0};

extern "C" void on_stop_signal(int sig) {
  g_stop_signal.store(sig);
  // Only async-signal-safe calls here. SA_RESETHAND made the next signal fatal again.
  const char msg[] =
      "\nvitk: stopping after the current step and saving a checkpoint (press Ctrl-C again to "
      "quit at once)\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// "0.5 1", "0.5,1" (one config-file value) or two command-line words -> two numbers.
std::array<float, 2> two_floats(const po::variables_map& vm, const std::string& option) {
  std::string text;
  for (const std::string& word : vm[option].as<std::vector<std::string>>()) text += word + " ";
  for (char& c : text)
    if (c == ',') c = ' ';
  std::istringstream in(text);
  std::vector<float> values;
  for (std::string word; in >> word;) {
    char* end = nullptr;
    float v = std::strtof(word.c_str(), &end);
    if (*end) throw UsageError("--" + option + ": '" + word + "' is not a number");
    values.push_back(v);
  }
  if (values.size() != 2)
    throw UsageError("--" + option + " takes two numbers (MIN MAX), got " +
                     std::to_string(values.size()));
  return {values[0], values[1]};
}

void add_train_options(po::options_description& o) {
  auto words = [](const char* a, const char* b) {
    return po::value<std::vector<std::string>>()
        ->multitoken()
        ->value_name("MIN MAX")
        ->default_value({a, b}, std::string(a) + " " + b);
  };
  po::options_description data("Data and output");
  data.add_options()  //
      ("data", po::value<std::string>()->value_name("PATH"),
       "training images: an IDX directory (Fashion-MNIST), an image-folder root (with train/ and "
       "val/, or class folders) or a CSV of path,label")  //
      ("val-data", po::value<std::string>()->value_name("PATH"),
       "validation images (default: the validation split of --data)")  //
      ("output", po::value<std::string>()->value_name("DIR"),
       "run directory for last.h5, best.h5, metrics.csv (default: runs/train-DATE-TIME)")  //
      ("resume", po::value<std::string>()->value_name("CKPT"),
       "continue a run exactly from its checkpoint (OUTPUT/last.h5)");
  po::options_description opt("Optimization");
  opt.add_options()                                                                             //
      ("epochs", po::value<int>()->default_value(30), "epochs to train")                        //
      ("batch-size,b", po::value<int64_t>()->default_value(128), "images per step")             //
      ("lr", po::value<float>()->default_value(5e-4f, "0.0005"), "peak learning rate (AdamW)")  //
      ("min-lr", po::value<float>()->default_value(1e-5f, "1e-05"),
       "learning rate at the end of the cosine")  //
      ("warmup-epochs", po::value<float>()->default_value(5.f, "5"),
       "linear warmup from 0, per step (fractions allowed)")  //
      ("weight-decay", po::value<float>()->default_value(0.05f, "0.05"),
       "AdamW decoupled weight decay (not on biases, norms, class token, positions)")  //
      ("clip-grad", po::value<float>()->default_value(0.f, "0"),
       "clip the global gradient L2 norm to this (0: off)")                             //
      ("smoothing", po::value<float>()->default_value(0.1f, "0.1"), "label smoothing")  //
      ("model-ema", po::bool_switch(),
       "keep an exponential moving average of the weights and "
       "validate it too (timm ModelEmaV2)")  //
      ("model-ema-decay", po::value<double>()->default_value(0.9998, "0.9998"),
       "EMA decay per step")  //
      ("seed", po::value<uint64_t>()->default_value(42),
       "seed of initialisation, data order, "
       "augmentation and dropout")  //
      ("max-steps", po::value<int64_t>()->default_value(0),
       "stop after this many optimizer steps in all and save a checkpoint (0: no limit; for "
       "benchmarks and tests; the schedule still spans --epochs)")  //
      ("log-interval", po::value<int64_t>()->default_value(50),
       "steps between progress lines when the output is not a terminal")  //
      ("prefetch", po::value<int>()->default_value(3), "batches the loader prepares ahead");
  po::options_description aug("Augmentation (training only)");
  aug.add_options()                                                                            //
      ("scale", words("0.08", "1"), "random resized crop: range of the area fraction")         //
      ("ratio", words("0.75", "1.3333333"), "random resized crop: range of the aspect ratio")  //
      ("no-aug", po::bool_switch(),
       "no random crop, flip or erasing: the eval transform (Mixup/CutMix still apply)")        //
      ("hflip", po::value<float>()->default_value(0.5f, "0.5"), "horizontal flip probability")  //
      ("reprob", po::value<float>()->default_value(0.f, "0"), "random erasing probability")     //
      ("mixup", po::value<float>()->default_value(0.f, "0"), "Mixup alpha (0: off)")            //
      ("cutmix", po::value<float>()->default_value(0.f, "0"), "CutMix alpha (0: off)")          //
      ("mixup-prob", po::value<float>()->default_value(1.f, "1"),
       "probability of mixing a batch when Mixup or CutMix is on")  //
      ("mixup-switch-prob", po::value<float>()->default_value(0.5f, "0.5"),
       "probability of CutMix instead of Mixup when both are on");
  po::options_description model("Model (the [model] section of a config file)");
  add_vit_options(model);
  o.add(data).add(opt).add(aug).add(model);
}

vit::TrainOptions train_options(const po::variables_map& vm) {
  vit::TrainOptions t;
  auto str = [&](const char* name) {
    return vm.count(name) ? vm[name].as<std::string>() : std::string();
  };
  t.data = str("data");
  t.val_data = str("val-data");
  t.output = str("output");
  t.resume = str("resume");
  t.model = vit_config_from(vm, vit::VitConfig{});
  t.model_keys_given = given_vit_options(vm);
  if (!vm.count("model.num_classes")) t.model.num_classes = 0;  // from the data
  t.epochs = vm["epochs"].as<int>();
  t.batch_size = vm["batch-size"].as<int64_t>();
  t.lr = vm["lr"].as<float>();
  t.min_lr = vm["min-lr"].as<float>();
  t.warmup_epochs = vm["warmup-epochs"].as<float>();
  t.weight_decay = vm["weight-decay"].as<float>();
  t.clip_grad = vm["clip-grad"].as<float>();
  t.smoothing = vm["smoothing"].as<float>();
  t.model_ema = vm["model-ema"].as<bool>();
  t.model_ema_decay = vm["model-ema-decay"].as<double>();
  t.seed = vm["seed"].as<uint64_t>();
  t.max_steps = vm["max-steps"].as<int64_t>();
  t.log_interval = vm["log-interval"].as<int64_t>();
  t.prefetch = vm["prefetch"].as<int>();
  auto& a = t.augment;
  a.scale = two_floats(vm, "scale");
  a.ratio = two_floats(vm, "ratio");
  a.hflip = vm["hflip"].as<float>();
  a.reprob = vm["reprob"].as<float>();
  if (vm["no-aug"].as<bool>()) a.random_resized_crop = false, a.hflip = 0.f, a.reprob = 0.f;
  a.mixup = vm["mixup"].as<float>();
  a.cutmix = vm["cutmix"].as<float>();
  a.mixup_prob = vm["mixup-prob"].as<float>();
  a.mixup_switch_prob = vm["mixup-switch-prob"].as<float>();
  a.smoothing = t.smoothing;
  return t;
}

int run_train(const po::variables_map& vm) {
  vit::TrainOptions options = train_options(vm);
  install_stop_signals();
  const bool tty = is_terminal(STDOUT_FILENO);
  std::cout << version_line() << "\n";
  vit::TrainResult r = vit::train(options, std::cout, tty, &g_stop_signal);
  if (r.end == vit::TrainEnd::interrupted) return 128 + g_stop_signal.load();
  return kExitOk;
}

void add_eval_options(po::options_description& o) {
  o.add_options()  //
      ("model", po::value<std::string>()->value_name("CKPT"),
       "checkpoint to evaluate (a run's best.h5, ema.h5 or last.h5)")  //
      ("data", po::value<std::string>()->value_name("PATH"),
       "images: an IDX directory, an image-folder root or a CSV of path,label")              //
      ("split", po::value<std::string>()->default_value("val"), "val or train")              //
      ("batch-size,b", po::value<int64_t>()->default_value(128), "images per forward pass")  //
      ("prefetch", po::value<int>()->default_value(3), "batches the loader prepares ahead");
}

int run_eval(const po::variables_map& vm) {
  vit::EvalOptions e;
  if (vm.count("model")) e.model = vm["model"].as<std::string>();
  if (vm.count("data")) e.data = vm["data"].as<std::string>();
  const std::string split = vm["split"].as<std::string>();
  if (split == "val")
    e.split = datasets::Split::val;
  else if (split == "train")
    e.split = datasets::Split::train;
  else
    throw UsageError("--split must be 'val' or 'train', got '" + split + "'");
  e.batch_size = vm["batch-size"].as<int64_t>();
  e.prefetch = vm["prefetch"].as<int>();
  if (e.prefetch < 1) throw UsageError("--prefetch must be at least 1");
  vit::run_eval(e, std::cout, is_terminal(STDOUT_FILENO));
  return kExitOk;
}

}  // namespace

void register_train_commands(Registry& registry) {
  Subcommand train;
  train.name = "train";
  train.summary = "train a Vision Transformer (AdamW, warmup + cosine, Mixup/CutMix, EMA, resume)";
  train.example =
      "vitk train --config configs/vit-fmnist.ini --output runs/fm\n"
      "vitk train --config configs/vit-fmnist.ini --output runs/fm --resume runs/fm/last.h5\n"
      "vitk train --config configs/vit-fmnist.ini --output /tmp/bench --max-steps 100\n"
      "vitk train --data imgs/ --model.image_size 64 --model.patch_size 8 --model.d_model 192 "
      "--model.heads 3 --model.d_ff 768 --model.layers 6 --epochs 50 --mixup 0.8 --cutmix 1\n"
      "# Ctrl-C (SIGINT) or SIGTERM: finish the step, save OUTPUT/last.h5, exit 130 (143 for "
      "SIGTERM)";
  train.add_options = add_train_options;
  train.run = run_train;
  registry.add(std::move(train));

  Subcommand eval;
  eval.name = "eval";
  eval.summary = "top-1/top-5 accuracy, per-class accuracy and confusion matrix of a checkpoint";
  eval.example =
      "vitk eval --model runs/fm/best.h5 --data /usr/share/datasets/fashion-mnist\n"
      "vitk eval --config configs/vit-fmnist.ini --model runs/fm/ema.h5 --split train -b 256";
  eval.add_options = add_eval_options;
  eval.run = run_eval;
  registry.add(std::move(eval));
}

}  // namespace vitk::tools
