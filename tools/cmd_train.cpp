// `vitk train` and `vitk eval`: options (named as timm's train.py and validate.py name them) onto
// vit::TrainOptions (tools/train_options.h, shared with `vitk finetune`) and vit::EvalOptions.
// Wiring only; the loop is vit/trainer.cpp.
#include <unistd.h>

#include <iostream>
#include <string>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/progress.h"
#include "tools/cli.h"
#include "tools/train_options.h"
#include "tools/vit_options.h"
#include "vit/evaluate.h"

namespace vitk::tools {
namespace {

int run_train(const po::variables_map& vm) {
  return run_training(train_options(vm, TrainCommand::train));
}

void add_eval_options(po::options_description& o) {
  o.add_options()  //
      ("model", po::value<std::string>()->value_name("CKPT"),
       "checkpoint to evaluate (a run's best.h5, ema.h5 or last.h5)")  //
      ("data", po::value<std::string>()->value_name("PATH"),
       "images: an IDX directory, an image-folder root or a CSV of path,label")  //
      ("split", po::value<std::string>()->default_value("val"), "val or train")  //
      ("batch-size,b", value_in<int64_t>(1, kMaxBatchSize)->default_value(128),
       "images per forward pass")  //
      ("prefetch", value_in(1, kMaxPrefetch)->default_value(3),
       "batches the loader prepares ahead")  //
      ("compare-precision", po::value<std::string>()->value_name("f32|bf16|int8"),
       "also run every batch at this precision and report how the predictions agree (top-1 "
       "agreement, logit differences)");
  add_precision_option(o);
  add_resolution_options(o,
                         "evaluate at this input size, N or HxW, the position embeddings "
                         "resampled to the new patch grid without fine-tuning (default: the "
                         "checkpoint's size)");
}

int run_eval(const po::variables_map& vm) {
  vit::EvalOptions e;
  e.precision = precision_from(vm);
  if (vm.count("compare-precision")) {
    e.compare_precision = ops::parse_precision(vm["compare-precision"].as<std::string>());
    ops::require_precision(*e.compare_precision, "--compare-precision");
  }
  if (vm.count("model")) e.model = vm["model"].as<std::string>();
  if (!e.model.empty()) {
    e.precision = precision_from(vm, e.model);
    if (e.precision == ops::Precision::int8 && e.compare_precision &&
        *e.compare_precision != ops::Precision::int8 &&
        !io::read_checkpoint_meta(e.model).quantization.empty())
      throw UsageError("--compare-precision " +
                       std::string(ops::precision_name(*e.compare_precision)) + ": " + e.model +
                       " is quantised to int8 and has no f32 weights to compare with; compare "
                       "the f32 checkpoint it was made from at --precision int8");
  }
  if (vm.count("data")) e.data = vm["data"].as<std::string>();
  const std::string split = vm["split"].as<std::string>();
  if (split == "val")
    e.split = datasets::Split::val;
  else if (split == "train")
    e.split = datasets::Split::train;
  else
    throw UsageError("--split must be 'val' or 'train', got '" + split + "'");
  e.batch_size = vm["batch-size"].as<int64_t>();
  const Resolution res = resolution_from(vm);
  e.image_height = res.height;
  e.image_width = res.width;
  e.align_corners = res.align_corners;
  e.pos_interpolation = res.pos_interpolation;
  e.prefetch = vm["prefetch"].as<int>();
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
  train.add_options = [](po::options_description& o) { add_train_options(o, TrainCommand::train); };
  train.run = run_train;
  registry.add(std::move(train));

  Subcommand eval;
  eval.name = "eval";
  eval.summary = "top-1/top-5 accuracy, per-class accuracy and confusion matrix of a checkpoint";
  eval.example =
      "vitk eval --model runs/fm/best.h5 --data /usr/share/datasets/fashion-mnist\n"
      "vitk eval --config configs/vit-fmnist.ini --model runs/fm/ema.h5 --split train -b 256\n"
      "vitk eval --model runs/fm/best.h5 --data /usr/share/datasets/fashion-mnist --image-size 56\n"
      "vitk eval --model vit/models/fmnist-vit.h5 --data /usr/share/datasets/fashion-mnist "
      "--precision bf16 --compare-precision f32";
  eval.add_options = add_eval_options;
  eval.run = run_eval;
  registry.add(std::move(eval));
}

}  // namespace vitk::tools
