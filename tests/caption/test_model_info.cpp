// A captioner's sizes (caption::model_size) against the parameters the model registers.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/nn/model_info.h"
#include "common/params.h"
#include "util/model_spec.h"
#include "vit/caption/model.h"

using namespace vitk;
using vitk::test::block;

// A captioning model (vit/caption/model.h): the count equals the parameters the model registers,
// tied or not; the decoder's multiply-adds grow with the memory by the cross-attention's keys and
// values (2·d² per memory token and layer) and its attention (2·d per target and memory token).
TEST(ModelInfo, CaptionCountsWhatTheModelRegisters) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    caption::CaptionConfig c;
    c.encoder.image_height = c.encoder.image_width = 32;
    c.encoder.patch_size = 8;
    c.encoder.channels = 1;
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
    c.validate();
    ParamStore store;
    caption::CaptionModel model(store, c);
    const nn::ModelSize size = caption::model_size(c);
    EXPECT_EQ(size.total_params, store.numel());
    EXPECT_EQ(block(size, "decoder layer").positions, 12);
    EXPECT_EQ(block(size, "output projection").macs, 64 * 50);

    c.memory_class_token = false;  // one memory token fewer: 17 -> 16
    const nn::ModelSize patches = caption::model_size(c);
    EXPECT_EQ(patches.total_params, size.total_params);
    EXPECT_DOUBLE_EQ(size.macs_per_sequence - patches.macs_per_sequence,
                     3.0 * (2 * 64 * 64 + 12 * 2 * 64));
  }
  const nn::ModelKind kind = caption::model_kind();
  EXPECT_THROW(kind.size({{"d_model", "64"}, {"heads", "2"}, {"decoder_heads", "3"}}),
               UsageError);  // 3 does not divide 64
}
