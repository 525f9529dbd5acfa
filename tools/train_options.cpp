// Options of `vitk train` and `vitk finetune` onto vit::TrainOptions, and the stop signals.
#include "tools/train_options.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/progress.h"
#include "tools/vit_options.h"
#include "vit/finetune.h"

namespace vitk::tools {
namespace {

std::atomic<int> g_stop_signal{0};

extern "C" void on_stop_signal(int sig) {
  // SIGUSR1 is the stop request that Open MPI's mpirun passes on to every rank at once (it passes
  // SIGTERM on only as part of killing the job, which then exits 1): the same stop as SIGTERM.
  g_stop_signal.store(sig == SIGUSR1 ? SIGTERM : sig);
  // Only async-signal-safe calls here. SA_RESETHAND made the next signal fatal again.
  const char msg[] =
      "\nvitk: stopping after the current step and saving a checkpoint (press Ctrl-C again to "
      "quit at once)\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

void install_stop_signals() {
  // A run in a process that ran one before (vitk.main from Python) starts unstopped.
  g_stop_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
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

template <typename T>
T value_or(const po::variables_map& vm, const char* name, T fallback) {
  return vm.count(name) ? vm[name].as<T>() : fallback;
}

void add_finetune_options(po::options_description& o) {
  po::options_description f("Fine-tuning");
  f.add_options()  //
      ("from", po::value<std::string>()->value_name("CKPT"),
       "the checkpoint to fine-tune: a run's best.h5, or one written by vitk import")  //
      ("num-classes", value_in<int64_t>(1, kMaxClasses)->value_name("N"),
       "replace the head by a zero one of N classes, the data's (default: keep the head, whose "
       "classes must then be the data's)")  //
      ("labels", po::value<std::string>()->value_name("FILE"),
       "class names to store, one per line in the data's class order (default: the data's)")  //
      ("recipe", po::value<std::string>()->value_name("NAME"),
       "vit: SGD momentum 0.9, lr 0.03 per 512 images, no weight decay, clip-grad 1, no "
       "smoothing, 10 epochs (the ViT paper); deit: AdamW, lr 5e-6 per 512 images held "
       "constant, weight decay 1e-8, smoothing 0.1, 30 epochs (DeiT at 384). Default: the "
       "recipe of --opt, else vit");
  add_resolution_options(f,
                         "train at this input size, N or HxW (default: the checkpoint's); the "
                         "position embeddings are resampled to the new patch grid (bicubic)");
  o.add(f);
}

int64_t read_checkpoint_every(const po::variables_map& vm) {
  const int64_t n = vm["checkpoint-every"].as<int64_t>();
  if (n < 0)
    throw UsageError("--checkpoint-every must be 0 (off) or more, got " + std::to_string(n));
  return n;
}

void read_parallel_options(const po::variables_map& vm, int* accum_steps, double* bucket_mb) {
  *accum_steps = vm["accum-steps"].as<int>();
  *bucket_mb = vm["bucket-mb"].as<double>();
  if (!(*bucket_mb >= 0.001 && *bucket_mb <= 4096))
    throw UsageError("--bucket-mb must be in 0.001..4096, got " + format_general(*bucket_mb));
}

int64_t profile_every(const po::variables_map& vm, bool* profile) {
  const int64_t every = vm["profile-every"].as<int64_t>();
  *profile = vm["profile"].as<bool>() || every > 0;
  return every;
}

}  // namespace

void add_train_options(po::options_description& o, TrainCommand command) {
  const bool ft = command == TrainCommand::finetune;
  // The train default, or for finetune none (the recipe's, filled in by train_options).
  auto recipe_value = [ft](auto train_default, const std::string& text) {
    auto* v = po::value<decltype(train_default)>();
    return ft ? v : v->default_value(train_default, text);
  };
  auto words = [](const char* a, const char* b) {
    return po::value<std::vector<std::string>>()
        ->multitoken()
        ->value_name("MIN MAX")
        ->default_value({a, b}, std::string(a) + " " + b);
  };
  const std::string from_recipe = ft ? " (default: the recipe's)" : "";
  auto* epochs = value_in(1, static_cast<int>(kMaxEpochs));
  if (!ft) epochs->default_value(30);
  if (ft) add_finetune_options(o);
  po::options_description data("Data and output");
  data.add_options()  //
      ("data", po::value<std::string>()->value_name("PATH"),
       "training images: an IDX directory (Fashion-MNIST), an image-folder root (with train/ and "
       "val/, or class folders) or a CSV of path,label")  //
      ("val-data", po::value<std::string>()->value_name("PATH"),
       "validation images (default: the validation split of --data)")  //
      ("output", po::value<std::string>()->value_name("DIR"),
       ft ? "run directory for last.h5, best.h5, metrics.csv (default: runs/finetune-DATE-TIME)"
          : "run directory for last.h5, best.h5, metrics.csv (default: runs/train-DATE-TIME)")  //
      ("resume", po::value<std::string>()->value_name("CKPT"),
       "continue a run exactly from its checkpoint (OUTPUT/last.h5)");
  po::options_description opt("Optimization");
  opt.add_options()                                                  //
      ("epochs", epochs, ("epochs to train" + from_recipe).c_str())  //
      ("steps", value_in<int64_t>(1, 1'000'000'000)->value_name("N"),
       "train this many steps instead of whole epochs: the warmup and cosine span them and the "
       "run ends validated, as after its last epoch (vit_jax's total_steps)")  //
      ("batch-size,b", value_in<int64_t>(1, kMaxBatchSize)->default_value(128),
       "images per step")  //
      ("lr", recipe_value(5e-4f, "0.0005"),
       (ft ? "peak learning rate (default: the recipe's per 512 images x batch-size / 512)"
           : "peak learning rate"))  //
      ("min-lr", recipe_value(1e-5f, "1e-05"),
       ("learning rate at the end of the cosine" + from_recipe).c_str())  //
      ("warmup-epochs", recipe_value(5.f, "5"),
       (ft ? "linear warmup from 0, per step (default: the recipe's share of --epochs: vit 5%, "
             "deit 1/6)"
           : "linear warmup from 0, per step (fractions allowed)"))  //
      ("opt", recipe_value(std::string("adamw"), "adamw"),
       ("optimizer: adamw or sgd (with momentum)" + from_recipe).c_str())           //
      ("momentum", po::value<float>()->default_value(0.9f, "0.9"), "SGD momentum")  //
      ("weight-decay", recipe_value(0.05f, "0.05"),
       ("weight decay, not on biases, norms, class token, positions: decoupled with AdamW, L2 "
        "with SGD" +
        from_recipe)
           .c_str())  //
      ("layer-decay", po::value<float>()->default_value(1.f, "1"),
       "layer-wise lr decay (BEiT, timm): a parameter of layer l (0: patch embedding, class "
       "token, positions; i+1: block i; layers+1: final norm, head) learns at lr x "
       "decay^(layers+1-l); 1: off")  //
      ("freeze-patch-embed", po::value<int64_t>()->value_name("STEPS")->default_value(0),
       "hold the patch embedding (conv stem and projection) fixed for the run's first STEPS "
       "steps: its learning rate is 0 while the rest adapts to a new resolution (0: off)")  //
      ("clip-grad", recipe_value(0.f, "0"),
       ("clip the global gradient L2 norm to this (0: off)" + from_recipe).c_str())        //
      ("smoothing", recipe_value(0.1f, "0.1"), ("label smoothing" + from_recipe).c_str())  //
      ("model-ema", switch_value(),
       "keep an exponential moving average of the weights and "
       "validate it too (timm ModelEmaV2)")  //
      ("model-ema-decay", po::value<double>()->default_value(0.9998, "0.9998"),
       "EMA decay per step")  //
      ("seed", po::value<uint64_t>()->default_value(42),
       ft ? "seed of data order, augmentation and dropout"
          : "seed of initialisation, data order, augmentation and dropout")  //
      ("max-steps", po::value<int64_t>()->default_value(0),
       "stop after this many optimizer steps in all and save a checkpoint (0: no limit; for "
       "benchmarks and tests; the schedule still spans --epochs or --steps)")  //
      ("log-interval", po::value<int64_t>()->default_value(50),
       "steps between progress lines when the output is not a terminal")  //
      ("val-interval", po::value<int64_t>()->default_value(1),
       "validate after every N-th epoch and after the last (0: only after the last); best.h5 "
       "comes from a validated epoch")  //
      ("prefetch", value_in(1, kMaxPrefetch)->default_value(3),
       "batches the loader prepares ahead");
  add_profile_options(opt);
  add_parallel_options(opt);
  add_checkpoint_every_option(opt);
  add_precision_option(opt, /*training=*/true);
  po::options_description aug("Augmentation (training only)");
  aug.add_options()                                                                            //
      ("scale", words("0.08", "1"), "random resized crop: range of the area fraction")         //
      ("ratio", words("0.75", "1.3333333"), "random resized crop: range of the aspect ratio")  //
      ("no-aug", switch_value(),
       "no random crop, flip, shift or erasing: the eval transform (Mixup/CutMix still apply)")  //
      ("hflip", po::value<float>()->default_value(0.5f, "0.5"), "horizontal flip probability")   //
      ("crop-padding", po::value<int64_t>()->default_value(0)->value_name("N"),
       "random crop after padding N black pixels on each side (torchvision's RandomCrop "
       "padding): shifts the image by up to N pixels; 0: off")                               //
      ("reprob", po::value<float>()->default_value(0.f, "0"), "random erasing probability")  //
      ("mixup", po::value<float>()->default_value(0.f, "0"), "Mixup alpha (0: off)")         //
      ("cutmix", po::value<float>()->default_value(0.f, "0"), "CutMix alpha (0: off)")       //
      ("mixup-prob", po::value<float>()->default_value(1.f, "1"),
       "probability of mixing a batch when Mixup or CutMix is on")  //
      ("mixup-switch-prob", po::value<float>()->default_value(0.5f, "0.5"),
       "probability of CutMix instead of Mixup when both are on");
  po::options_description model(
      ft ? "Model (the checkpoint's; a [model] setting given must agree with it, except dropout, "
           "attention_dropout, drop_path, patch_drop and the eval transform: resize, "
           "crop_fraction, interpolation)"
         : "Model (the [model] section of a config file)");
  add_vit_options(model, vit::VitConfig{}, !ft);
  o.add(data).add(opt).add(aug).add(model);
}

vit::TrainOptions train_options(const po::variables_map& vm, TrainCommand command) {
  const bool ft = command == TrainCommand::finetune;
  vit::TrainOptions t;
  auto str = [&](const char* name) {
    return vm.count(name) ? vm[name].as<std::string>() : std::string();
  };
  t.data = str("data");
  t.val_data = str("val-data");
  t.model = vit_config_from(vm, vit::VitConfig{}, /*validate=*/!ft);
  t.model_keys_given = given_vit_options(vm);
  if (!vm.count("model.num_classes")) t.model.num_classes = 0;  // from the data
  t.batch_size = vm["batch-size"].as<int64_t>();

  // For train, every option below has its default; for finetune, the recipe's fill the gaps.
  vit::Recipe r;
  if (ft) {
    if (vm.count("recipe"))
      r = vit::recipe(vm["recipe"].as<std::string>());
    else if (vm.count("opt"))
      r = vit::recipe_for_optimizer(vm["opt"].as<std::string>());
    else
      r = vit::recipe("vit");
  }
  if (option_given(vm, "steps") && option_given(vm, "epochs"))
    throw UsageError("give --epochs or --steps, not both: --steps " +
                     std::to_string(vm["steps"].as<int64_t>()) + " is the run's whole length");
  read_loop_options(vm, t.loop);
  t.loop.epochs = value_or<int>(vm, "epochs", r.epochs);
  t.loop.steps = value_or<int64_t>(vm, "steps", 0);
  t.lr = value_or<float>(vm, "lr", r.lr(t.batch_size));
  t.min_lr = value_or<float>(vm, "min-lr", r.min_lr(t.lr));
  t.warmup_epochs = value_or<float>(vm, "warmup-epochs", r.warmup_epochs(t.loop.epochs));
  t.warmup_epochs_given = given_on_command_line(vm, "warmup-epochs");
  // A fine-tuning run in steps warms up for the recipe's share of them.
  if (ft && t.loop.steps > 0 && !option_given(vm, "warmup-epochs"))
    t.warmup_share = static_cast<float>(r.warmup_fraction);
  t.opt = value_or<std::string>(vm, "opt", r.optimizer);
  t.momentum = vm["momentum"].as<float>();
  t.weight_decay = value_or<float>(vm, "weight-decay", r.weight_decay);
  t.layer_decay = vm["layer-decay"].as<float>();
  t.freeze_patch_embed = vm["freeze-patch-embed"].as<int64_t>();
  t.loop.clip_grad = value_or<float>(vm, "clip-grad", r.clip_grad);
  t.smoothing = value_or<float>(vm, "smoothing", r.smoothing);
  t.loop.model_ema = vm["model-ema"].as<bool>();
  t.loop.model_ema_decay = vm["model-ema-decay"].as<double>();
  t.loop.valid_every = vm["val-interval"].as<int64_t>();
  t.prefetch = vm["prefetch"].as<int>();
  auto& a = t.augment;
  a.scale = two_floats(vm, "scale");
  a.ratio = two_floats(vm, "ratio");
  a.hflip = vm["hflip"].as<float>();
  a.reprob = vm["reprob"].as<float>();
  a.crop_padding = vm["crop-padding"].as<int64_t>();
  if (vm["no-aug"].as<bool>())
    a.random_resized_crop = false, a.hflip = 0.f, a.reprob = 0.f, a.crop_padding = 0;
  a.mixup = vm["mixup"].as<float>();
  a.cutmix = vm["cutmix"].as<float>();
  a.mixup_prob = vm["mixup-prob"].as<float>();
  a.mixup_switch_prob = vm["mixup-switch-prob"].as<float>();
  a.smoothing = t.smoothing;
  for (const char* name : {"scale", "ratio", "hflip", "crop-padding", "reprob", "mixup", "cutmix",
                           "mixup-prob", "mixup-switch-prob"})
    if (option_given(vm, name)) t.augment_given.insert(name);
  if (vm["no-aug"].as<bool>()) t.augment_given.insert("no-aug");

  if (ft) {
    auto& f = t.finetune;
    f.enabled = true;
    f.from = str("from");
    const Resolution res = resolution_from(vm);
    f.image_height = res.height;
    f.image_width = res.width;
    f.align_corners = res.align_corners;
    f.pos_interpolation = res.pos_interpolation;
    if (vm.count("num-classes")) f.num_classes = vm["num-classes"].as<int64_t>();
    f.labels = str("labels");
  }
  return t;
}

void add_profile_options(po::options_description& o) {
  o.add_options()  //
      ("profile", switch_value(),
       "print where the training steps spend their time at the end: exclusive wall time per op "
       "and shape, per step (the first step, which creates primitives, is left out)")  //
      ("profile-every", po::value<int64_t>()->default_value(0)->value_name("N"),
       "with --profile (which it implies): print the breakdown of every N steps as they run");
}

void add_parallel_options(po::options_description& o) {
  o.add_options()  //
      ("accum-steps", value_in(1, 4096)->default_value(1)->value_name("K"),
       "cut each rank's share of a batch into K micro-batches whose gradients add up before the "
       "step: the same global batch in less memory or on fewer ranks")  //
      ("bucket-mb", po::value<double>()->default_value(25)->value_name("MB"),
       "under mpirun: the gradients are summed over the ranks in buckets of about this size, "
       "started while backward still runs")  //
      ("collective-timeout", po::value<double>()->default_value(300)->value_name("SECONDS"),
       "under mpirun: a rank that has waited this long for the others in one all-reduce (a host "
       "or its link is gone) names the rank it has not heard from and ends with exit code 1; 0: "
       "wait for ever");
}

void add_checkpoint_every_option(po::options_description& o) {
  o.add_options()  //
      ("checkpoint-every",
       value_in<int64_t>(0, int64_t{1} << 40)->default_value(0)->value_name("N"),
       "also rewrite OUTPUT/last.h5 after every N-th step, so that a killed run loses at most N "
       "steps (0: only at each metrics row)");
}

void read_loop_options(const po::variables_map& vm, train::Options& loop) {
  auto text = [&](const char* name) {
    return vm.count(name) ? vm[name].as<std::string>() : std::string();
  };
  loop.output = text("output");
  loop.resume = text("resume");
  loop.seed = vm["seed"].as<uint64_t>();
  loop.max_steps = vm["max-steps"].as<int64_t>();
  loop.log_interval = vm["log-interval"].as<int64_t>();
  loop.profile_every = profile_every(vm, &loop.profile);
  double bucket_mb = 0;
  read_parallel_options(vm, &loop.accum_steps, &bucket_mb);
  loop.bucket_bytes = static_cast<size_t>(bucket_mb * 1048576.0);
  loop.collective_timeout = vm["collective-timeout"].as<double>();
  loop.checkpoint_every = read_checkpoint_every(vm);
  loop.precision = precision_from(vm, /*training=*/true);
}

int run_trainer(const std::function<train::Result(std::ostream& log, bool tty,
                                                  const std::atomic<int>& stop)>& train) {
  install_stop_signals();
  std::cout << version_line() << "\n";
  const train::Result r = train(std::cout, is_terminal(STDOUT_FILENO), g_stop_signal);
  if (r.end == train::End::interrupted) return 128 + g_stop_signal.load();
  return kExitOk;
}

void check_input_files(const po::variables_map& vm, std::initializer_list<const char*> options) {
  for (const char* option : options)
    if (vm.count(option))
      check_input_file(std::string("--") + option, vm[option].as<std::string>());
}

int run_training(const vit::TrainOptions& options) {
  return run_trainer([&](std::ostream& log, bool tty, const std::atomic<int>& stop) {
    return vit::train(options, log, tty, &stop);
  });
}

}  // namespace vitk::tools
