// `vitk finetune`: a checkpoint trained further, usually at a higher resolution and often with a
// new head, with the ViT paper's or DeiT's recipe (vit/finetune.h). The options are `vitk
// train`'s (tools/train_options.h) plus --from, --image-size, --align-corners, --num-classes,
// --labels and --recipe. Wiring only; the loop is vit/trainer.cpp.
#include "tools/cli.h"
#include "tools/train_options.h"

namespace vitk::tools {

void register_finetune_commands(Registry& registry) {
  Subcommand c;
  c.name = "finetune";
  c.summary =
      "fine-tune a checkpoint, e.g. at a higher resolution (resampled positions) or with a new "
      "head (ViT or DeiT recipe, layer-wise lr decay)";
  c.example =
      "vitk finetune --from runs/fm/best.h5 --data /usr/share/datasets/fashion-mnist "
      "--image-size 56 --output runs/fm56 --epochs 2\n"
      "vitk finetune --from vit_b16.h5 --data imagenet/ --image-size 384 --recipe deit -b 32 "
      "--output runs/b16-384\n"
      "vitk finetune --from vit_b16.h5 --data flowers/ --num-classes 102 --recipe vit "
      "--layer-decay 0.75 --output runs/flowers\n"
      "vitk finetune --data imagenet/ --image-size 384 --recipe deit -b 32 --output runs/b16-384 "
      "--resume runs/b16-384/last.h5";
  c.add_options = [](po::options_description& o) { add_train_options(o, TrainCommand::finetune); };
  c.run = [](const po::variables_map& vm) {
    return run_training(train_options(vm, TrainCommand::finetune));
  };
  registry.add(std::move(c));
}

}  // namespace vitk::tools
