#pragma once
// How an image becomes model input, as timm's eval transform does it: convert to the model's
// channel count, resize (the shorter side to size / crop_fraction, then a centre crop of the
// model's size; or a plain resize to the model's size), scale to [0, 1], normalise by the
// per-channel mean and std, lay out as [C, H, W]. The settings travel in the checkpoint
// (VitConfig::preprocess), so a model classifies correctly with no flags.
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace vitk::vit {

struct Preprocess {
  std::string resize = "shorter";  // "shorter": shorter side to size/crop_fraction + centre crop;
                                   // "squash": resize straight to height × width (no crop)
  float crop_fraction = 0.875f;    // timm's crop_pct (1: the crop is the whole resized image)
  std::string interpolation = "bicubic";            // bicubic | bilinear | nearest | area
  std::vector<float> mean{0.485f, 0.456f, 0.406f};  // one per channel, of [0, 1] values
  std::vector<float> std{0.229f, 0.224f, 0.225f};
  void validate(int channels) const;  // vitk::UsageError naming the setting at fault
};

int parse_interpolation(const std::string& name);  // cv::INTER_*; UsageError on an unknown name

// Any decoded image (8- or 16-bit, 1, 2, 3 or 4 channels, as cv::imread(IMREAD_UNCHANGED) returns
// it, colour in OpenCV's BGR order) -> 8-bit with `channels` channels (1, or 3 in RGB order).
// Alpha is composited on white; colour -> grey uses ITU-R 601 luma (cv::COLOR_BGR2GRAY);
// 16-bit values are scaled by 1/257.
cv::Mat to_channels(const cv::Mat& decoded, int channels);

// The eval transform of an 8-bit image that already has the model's channel count (see
// to_channels): resize and crop per p to height × width, normalise, write [C, height, width]
// floats at dst.
void preprocess_image(const cv::Mat& image, const Preprocess& p, int64_t height, int64_t width,
                      float* dst);

// Only the last step: an 8-bit H × W image (1 or 3 channels, RGB) -> normalised [C, H, W] floats.
void normalize_to_chw(const cv::Mat& image, const Preprocess& p, float* dst);

}  // namespace vitk::vit
