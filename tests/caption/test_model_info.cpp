// The captioning model's size (common/nn/model_info.h) equals the parameters it registers, tied
// or not, and its decoder's multiply-adds grow with the memory. (Sizes against published figures:
// common/test_model_info.cpp.)
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/nn/model_info.h"
#include "common/params.h"
#include "util/model_spec.h"
#include "vit/caption/model.h"

using namespace vitk;
using vitk::test::block;
using vitk::test::vit_spec;

// A captioning model (vit/caption/model.h): the count equals the parameters the model registers,
// tied or not; the decoder's multiply-adds grow with the memory by the cross-attention's keys and
// values (2·d² per memory token and layer) and its attention (2·d per target and memory token).
TEST(ModelInfo, CaptionCountsWhatTheModelRegisters) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    nn::ModelSpec s = vit_spec(64, 2, 2);
    s.type = "caption";
    s.layer.d_ff = 96;
    s.image_size = 32;
    s.patch_size = 8;
    s.channels = 1;
    s.stem_channels = {8, 16};
    s.pos_convs = 1;
    s.decoder_layers = 3;
    s.decoder_heads = 4;
    s.decoder_d_ff = 80;
    s.sequence_length = 12;
    s.vocab_size = 50;
    s.tied_embeddings = tied;
    caption::CaptionConfig c;
    c.encoder.image_height = c.encoder.image_width = 32;
    c.encoder.patch_size = 8;
    c.encoder.channels = 1;
    c.encoder.num_classes = 0;
    c.encoder.d_model = 64;
    c.encoder.heads = 2;
    c.encoder.d_ff = 96;
    c.encoder.layers = 2;
    c.encoder.stem_channels = {8, 16};
    c.encoder.pos_conv_blocks = {0};
    c.encoder.preprocess.mean = {0.5f};
    c.encoder.preprocess.std = {0.5f};
    c.decoder_layers = 3;
    c.decoder_heads = 4;
    c.decoder_d_ff = 80;
    c.max_length = 12;
    c.vocab_size = 50;
    c.tie_embeddings = tied;
    ParamStore store;
    caption::CaptionModel model(store, c);
    const nn::ModelSize size = nn::model_size(s);
    EXPECT_EQ(size.total_params, store.numel());
    EXPECT_EQ(block(size, "decoder layer").positions, 12);
    EXPECT_EQ(block(size, "output projection").macs, 64 * 50);

    s.memory_class_token = false;  // one memory token fewer: 17 -> 16
    const nn::ModelSize patches = nn::model_size(s);
    EXPECT_EQ(patches.total_params, size.total_params);
    EXPECT_DOUBLE_EQ(size.macs_per_sequence - patches.macs_per_sequence,
                     3.0 * (2 * 64 * 64 + 12 * 2 * 64));
  }
  nn::ModelSpec s = vit_spec(64, 2, 2);
  s.type = "caption";
  s.decoder_heads = 3;  // does not divide 64
  EXPECT_THROW(nn::model_size(s), UsageError);
}
