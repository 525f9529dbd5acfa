#pragma once
// Sizes of a model: parameters per block and in total, multiply-adds per token with the attention
// term (which grows with the sequence length) apart. Block sizes come from building the real layers
// into a scratch ParamStore (registration only, nothing is allocated), so they cannot drift from
// the code; embeddings, patch embedding and heads are counted from their shapes.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/nn/nn.h"

namespace vitk::nn {

// The architecture, as the [model] section of a config file and a checkpoint's attributes hold it.
struct ModelSpec {
  // "vit" | "transformer" (encoder-decoder) | "encoder" | "caption" (a ViT without its head
  // whose patch tokens are the memory of a decoder, vit/caption/model.h)
  std::string type = "transformer";
  LayerConfig layer;
  int encoder_layers = 6;
  int decoder_layers = 6;
  int64_t sequence_length = 128;  // tokens per sequence (source and target; caption: target)
  int64_t vocab_size = 0;         // transformer/encoder: shared vocabulary (0: no embeddings)
  bool tied_embeddings = true;    // source, target and output embeddings share one matrix
  int64_t image_size = 224, patch_size = 16, channels = 3, num_classes = 1000;  // vit
  std::vector<int64_t> stem_channels;           // vit: the convolutional stem's stages (vit/vit.h)
  std::vector<int64_t> stem_strides;            // vit: their strides, 1 or 2 (empty: all 2)
  int pos_convs = 0;                            // vit: positional convolutions (pos_conv_blocks)
  int ffn_convs = 0;                            // vit: blocks whose MLP convolves (ffn_conv_blocks)
  int64_t decoder_heads = 0, decoder_d_ff = 0;  // caption: the decoder's (0: the encoder's)
  bool memory_class_token = true;               // caption: the class token is a memory token
};

struct BlockSize {
  std::string name;            // "encoder layer", "patch embedding", ...
  int count = 1;               // how many such blocks
  int64_t params = 0;          // per block
  int64_t macs = 0;            // multiply-adds per token (per patch, per output position) per block
  int64_t attention_macs = 0;  // the part that grows with the sequence length, per token
  std::string note;            // how macs is counted, e.g. "12·d² (d_ff = 4d)"
  int64_t positions = 0;       // how many times per sequence macs is spent (patches, 1, T)
};

struct ModelSize {
  std::vector<BlockSize> blocks;
  int64_t tokens = 0;  // sequence length T (for a ViT and a captioner's encoder: patches + class
                       // token)
  int64_t total_params = 0;
  double macs_per_sequence = 0;  // one image, one source and one target sequence, or one image and
                                 // its caption (caption)
  double attention_macs_per_sequence = 0;
};

ModelSize model_size(const ModelSpec& spec);

}  // namespace vitk::nn
