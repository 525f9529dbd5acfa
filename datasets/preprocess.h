#pragma once
// How an image becomes model input, as timm's eval transform does it on a PIL image: convert to
// the model's channel count, resize (the shorter side to floor(size / crop_fraction), then a
// centre crop of the model's size; or a plain resize to the model's size), scale to [0, 1],
// normalise by the per-channel mean and std, lay out as [C, H, W]. Resizing reproduces Pillow's
// Image.resize bit for bit (antialiased when shrinking), so vitk feeds a model the same numbers
// timm would. The settings travel in the checkpoint (VitConfig::preprocess), so a model
// classifies correctly with no flags.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

#include "common/settings.h"

namespace vitk::datasets {

// The eval transform's settings, one line each: type, name (the [model] key), default, values
// allowed, help (common/settings.h). "shorter" resizes the shorter side to
// floor(size / crop_fraction), then crops the centre (timm's crop_mode "center"); "squash"
// resizes straight to height x width, no crop, crop_fraction unused (timm's "squash" with crop_pct
// 1). mean and std: one value per channel, of [0, 1] pixels.
#define VITK_PREPROCESS_SETTINGS(X)                                                          \
  X(std::string, resize, "shorter", one_of("shorter", "squash"),                             \
    "eval resize: shorter (shorter side, then centre crop) or squash")                       \
  X(float, crop_fraction, 0.875f, share(), "eval centre crop fraction (timm crop_pct)")      \
  X(std::string, interpolation, "bicubic", one_of("bicubic", "bilinear", "nearest", "area"), \
    "bicubic, bilinear, nearest or area")                                                    \
  X(std::vector<float>, mean, (std::vector<float>{0.485f, 0.456f, 0.406f}), any(),           \
    "per-channel mean of [0, 1] pixels, comma-separated")                                    \
  X(std::vector<float>, std, (::std::vector<float>{0.229f, 0.224f, 0.225f}), positive(),     \
    "per-channel standard deviation, comma-separated")

struct Preprocess {
  VITK_PREPROCESS_SETTINGS(VITK_SETTING_MEMBER)
  void validate(int channels) const;  // vitk::UsageError naming the setting at fault
};

// The table above as a schema, for the ViT's settings to include.
const settings::Schema<Preprocess>& preprocess_schema();

int parse_interpolation(const std::string& name);  // cv::INTER_*; UsageError on an unknown name

// Resizes an 8-bit image (1-4 channels) to height × width as Pillow's Image.resize does, which is
// what timm's and torchvision's transforms run on PIL images: bicubic (a = −0.5), bilinear and
// area (Pillow's BOX) as separable filters widened by the scale factor when shrinking
// (antialiasing), with 22-bit fixed-point weights, a horizontal pass rounded to 8 bits and then a
// vertical pass; nearest as Pillow picks pixels. OpenCV's cv::resize differs (no antialiasing,
// a = −0.75). A non-empty roi computes only that part of the output: the same pixels as cropping
// the full result, without computing the rest.
cv::Mat resize_like_pil(const cv::Mat& image, int64_t height, int64_t width,
                        const std::string& interpolation, cv::Rect roi = cv::Rect());

// The size the eval transform resizes an image of image_height × image_width to before its
// centre crop of height × width (timm: Resize(int) for a square target, ResizeKeepRatio for a
// rectangular one; Python's float arithmetic and round-half-even reproduced).
// Returns {height, width}; 64-bit because a 1x10000 image resized on its shorter side is long.
std::pair<int64_t, int64_t> eval_resize_size(int64_t image_height, int64_t image_width,
                                             const Preprocess& p, int64_t height, int64_t width);
// torchvision's CenterCrop of height × width from a resized_height × resized_width image: the
// offsets are round((resized − crop) / 2), halves to even.
cv::Rect center_crop_rect(int64_t resized_height, int64_t resized_width, int64_t height,
                          int64_t width);

// Any decoded image (8- or 16-bit, 1, 2, 3 or 4 channels, as cv::imread(IMREAD_UNCHANGED) returns
// it, colour in OpenCV's BGR order) -> 8-bit with `channels` channels (1, or 3 in RGB order).
// Alpha is composited on white (timm's PIL convert("RGB") would drop it and show whatever colour
// the transparent pixels hold, often black); colour -> grey is Pillow's convert("L"), ITU-R 601
// luma in 16-bit fixed point; 16-bit values are scaled by 1/257, floating-point ones by 255.
cv::Mat to_channels(const cv::Mat& decoded, int channels);

// The eval transform of an 8-bit image that already has the model's channel count (see
// to_channels): resize and crop per p to height × width, normalise, write [C, height, width]
// floats at dst.
void preprocess_image(const cv::Mat& image, const Preprocess& p, int64_t height, int64_t width,
                      float* dst);

// Only the last step: an 8-bit H × W image (1 or 3 channels, RGB) -> normalised [C, H, W] floats,
// computed as torchvision does, (v / 255 − mean) / std in float.
void normalize_to_chw(const cv::Mat& image, const Preprocess& p, float* dst);

}  // namespace vitk::datasets
