#pragma once
// What fine-tuning adds to training (vit/trainer.h runs it): the two published recipes and
// layer-wise learning-rate decay.
//
// Recipes (the optimizer side of each paper's fine-tuning; augmentation stays as given):
//   vit   Dosovitskiy et al. 2021, appendix B.1.1 (and big_vision/vit_jax's fine-tuning config):
//         SGD with momentum 0.9, no weight decay, gradients clipped at global norm 1, linear
//         warmup then cosine decay to 0, lr 0.03 at batch 512 (the paper searches
//         {0.001, 0.003, 0.01, 0.03}), no label smoothing; 10 epochs, the first 5% warmup
//         (vit_jax: 500 of 10,000 steps).
//   deit  Touvron et al. 2021, fine-tuning at 384: AdamW, lr 5e-6 at batch 512 held constant
//         after the warmup (--min-lr = --lr), weight decay 1e-8, label smoothing 0.1, 30 epochs
//         of which 5 warmup.
// Learning rates are per 512 images and scaled linearly to the batch (DeiT's rule:
// lr = base · batch / 512); an --lr given on the command line is taken as it is.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/params.h"
#include "vit/trainer.h"
#include "vit/vit.h"

namespace vitk::vit {

struct Recipe {
  std::string name;            // "vit" | "deit"
  std::string optimizer;       // "sgd" | "adamw"
  double lr_per_512 = 0;       // peak learning rate at batch 512
  double min_lr_fraction = 0;  // the end of the cosine as a fraction of the peak (1: constant)
  int epochs = 0;
  double warmup_fraction = 0;  // of the epochs: a run of other length keeps the proportion
  float weight_decay = 0;
  float clip_grad = 0;  // 0: off
  float smoothing = 0;
  float momentum = 0.9f;  // SGD only

  float lr(int64_t batch_size) const;     // lr_per_512 · batch / 512
  float min_lr(float lr) const;           // min_lr_fraction · lr
  float warmup_epochs(int epochs) const;  // warmup_fraction · epochs
};

// "vit" | "deit"; vitk::UsageError naming --recipe otherwise.
const Recipe& recipe(const std::string& name);
// The recipe whose optimizer is `optimizer` ("sgd" -> vit, "adamw" -> deit); vitk::UsageError
// naming --opt otherwise.
const Recipe& recipe_for_optimizer(const std::string& optimizer);

// ---- The model a fine-tuning run starts from ---------------------------------------------------

// A fine-tuning run that does not resume trains the model of --from with the [model] settings that
// may change taken from the options (those that do not touch the weights; the others must agree),
// at --image-size (positions resampled), with a new zero head for --num-classes. `classes` are
// the data's class names, `source` names the data in messages. vitk::UsageError naming the option
// at fault, vitk::Error for a head whose classes are not the data's.
struct FinetuneStart {
  VitConfig config;                           // the model to train
  VitConfig from;                             // the checkpoint's
  std::map<std::string, std::string> recipe;  // how the checkpoint was trained, if it says
  bool new_head = false;                      // head.weight and head.bias start at zero
  bool align_corners = false;                 // the resampling convention of the positions
};
FinetuneStart finetune_start(const TrainOptions& options, const std::vector<std::string>& classes,
                             const std::string& source);

// A resumed fine-tuning run keeps its model: --image-size and --num-classes, when given, must be
// those of `config`, the model of the checkpoint `resume`.
void check_resumed_finetune(const FinetuneOptions& f, const VitConfig& config,
                            const std::string& resume);

// ---- What a checkpoint records of its training (io::CheckpointMeta::recipe) -----------------
//
// A run records its augmentation and optimizer settings under their option names (scale, ratio,
// random-resized-crop, hflip, crop-padding, reprob, mixup, cutmix, mixup-prob, mixup-switch-prob;
// opt, lr, min-lr, warmup-epochs, weight-decay, layer-decay, smoothing, epochs, batch-size). A
// fine-tuning run, and a resumed one, take the augmentation it does not give from the checkpoint
// it starts from: a model fine-tuned as it was trained keeps what it learnt, where ImageNet's
// crops down to 8% of the image would not (a Fashion-MNIST model lost 19 points that way).

// The record of a run's options `o` with the augmentation `a` it uses.
std::map<std::string, std::string> recipe_record(const TrainOptions& o,
                                                 const datasets::AugmentOptions& a);
// Sets the augmentation options of `a` that `given` does not name from `record`; returns the
// names taken (none when the record has no augmentation). vitk::Error naming `path` and the
// attribute recipe.KEY for a value that does not parse or is out of range.
std::vector<std::string> take_recorded_augment(const std::map<std::string, std::string>& record,
                                               const std::set<std::string>& given,
                                               datasets::AugmentOptions& a,
                                               const std::string& path);

// ---- Layer-wise learning-rate decay (BEiT; timm's param_groups_layer_decay) -------------------
//
// Layers are numbered from the input: 0 for cls_token, pos_embed and patch_embed.*, i + 1 for
// blocks.<i>.* and pos_conv.<i>.* (the positional convolution after block i), num_layers + 1
// for everything after the blocks (norm, fc_norm, head). A parameter's learning rate is scaled
// by decay^(num_layers + 1 − layer): the head and the final norm train at the full rate, each
// block below at `decay` times the rate of the one above, so that the pretrained low layers move
// least.

// The layer of a ViT parameter name (above), for a model of num_layers blocks.
int layer_id(const std::string& name, int num_layers);
// decay^(num_layers + 1 − layer_id(name)), computed in double and rounded once.
float layer_decay_scale(const std::string& name, int num_layers, double decay);
// Sets every parameter's lr_scale (1 everywhere when decay is 1). vitk::Error for a decay
// outside (0, 1].
void apply_layer_decay(ParamStore& params, int num_layers, double decay);

}  // namespace vitk::vit
