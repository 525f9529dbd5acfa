#pragma once
// The options `vitk train` and `vitk finetune` share (named as timm's train.py names them), their
// mapping onto vit::TrainOptions, and the run itself with SIGINT/SIGTERM as a stop flag. Wiring
// only; the loop is vit/trainer.cpp, the recipes vit/finetune.h.
#include <atomic>
#include <functional>
#include <initializer_list>
#include <iosfwd>

#include "common/train/trainer.h"
#include "tools/cli.h"
#include "vit/trainer.h"

namespace vitk::tools {

enum class TrainCommand { train, finetune };

// Data and output, optimization, augmentation and model options. For finetune, the settings a
// recipe decides (epochs, lr, min-lr, warmup-epochs, opt, weight-decay, clip-grad, smoothing) have
// no default of their own, and the model options none either (the model is the checkpoint's);
// the fine-tuning options (--from, --image-size, ...) come first.
void add_train_options(po::options_description& options, TrainCommand command);

// The parsed options as TrainOptions; for finetune, with the recipe's values for the settings not
// given (--recipe, else the one of --opt, else vit). vitk::UsageError naming a bad option.
vit::TrainOptions train_options(const po::variables_map& vm, TrainCommand command);

// Runs (or resumes) the run on stdout and returns the exit code: 0, or 128 + the signal when
// interrupted (the checkpoint is saved).
int run_training(const vit::TrainOptions& options);

// --profile and --profile-every N of the trainers (--profile-every implies --profile).
void add_profile_options(po::options_description& options);

// --accum-steps K and --bucket-mb MB of the trainers (data parallelism, common/train/trainer.h).
void add_parallel_options(po::options_description& options);

// The loop's options every trainer declares under these names (common/train/trainer.h): --output,
// --resume, --seed, --max-steps, --log-interval, --profile, --profile-every, --accum-steps,
// --bucket-mb (checked here: 0.001..4096), --checkpoint-every and --precision (training's). The
// trainer sets the others
// (--epochs, --steps, --clip-grad, --model-ema, validation), whose defaults and recipes differ.
void read_loop_options(const po::variables_map& vm, train::Options& loop);

// --checkpoint-every N of the trainers: last.h5 after every N-th step too (0: off).
void add_checkpoint_every_option(po::options_description& options);

// A trainer's run, its options already checked: installs the SIGINT/SIGTERM handlers (the first
// signal asks the run to save a checkpoint and stop, setting `stop` to the signal; a second one
// kills at once; SIGUSR1, which mpirun passes on to every rank, stops it as SIGTERM does),
// prints the version line, runs `train` on standard output (a progress bar when it is a
// terminal) and returns the exit code: 0, or 128 + the signal when interrupted. Every training
// subcommand runs this way.
int run_trainer(const std::function<train::Result(std::ostream& log, bool tty,
                                                  const std::atomic<int>& stop)>& train);
// check_input_file of each of these file options that is given.
void check_input_files(const po::variables_map& vm, std::initializer_list<const char*> options);

}  // namespace vitk::tools
