#pragma once
// Pictures of a ViT, drawn with common/plot from the values of vit/maps.h: where an image's
// classification looks (attention rollout over the input, and the last block's heads), and how
// similar the learned position embeddings of the patches are (the ViT paper's figure 7).
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "vit/maps.h"

namespace vitk::vit {

// The image as the model saw it: input [C, H, W], normalised with config.preprocess's mean and
// std, back to 8-bit BGR and upscaled by a whole factor (nearest: pixels stay sharp) to at least
// min_side pixels.
cv::Mat input_image(const float* input, const VitConfig& config, int min_side = 224);

// The input, the rollout laid over it with a colour bar, and a grid of the last block's heads,
// under the title lines (e.g. the file and the predicted class). fusion names how heads were
// fused in the rollout.
cv::Mat attention_picture(const ImageAttention& attention, const float* input,
                          const VitConfig& config, HeadFusion fusion,
                          const std::vector<std::string>& title);

// similarity [N, N] from position_similarity: one small map per patch, in the patch grid, on a
// scale of -1 to 1.
cv::Mat position_similarity_picture(const Tensor& similarity, const VitConfig& config,
                                    const std::vector<std::string>& title);

// Show, Attend and Tell's figure: the input, then one panel per generated piece (words, and
// "<eos>" for the end) with that position's cross-attention over the patch grid laid over the
// image, on one colour scale. attention [pieces.size(), Tm] (Tm: the patches, after the class
// token when class_token); the class token's share of each row is left out of the map.
cv::Mat caption_attention_picture(const float* input, const VitConfig& config,
                                  const Tensor& attention, bool class_token,
                                  const std::vector<std::string>& pieces,
                                  const std::vector<std::string>& title);

}  // namespace vitk::vit
