// Image -> model input: channel conversion, resize and centre crop, normalisation, each step as
// timm's eval transform (PIL + torchvision) computes it.
#include "datasets/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <opencv2/imgproc.hpp>

#include "common/error.h"

namespace vitk::datasets {
namespace {

// The double a Python user meant by this float: crop_pct = 0.9 is the double 0.9 in timm, not
// the float 0.9f widened (0.89999997...), and floor(size / crop_pct) can differ between the two.
double as_written(float x) {
  char buf[32];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return std::strtod(buf, nullptr);
}

// Python's round(): halves to even (the default rounding mode of std::nearbyint).
int64_t round_half_even(double x) {
  return static_cast<int64_t>(std::nearbyint(x));
}

}  // namespace

int parse_interpolation(const std::string& name) {
  if (name == "bicubic") return cv::INTER_CUBIC;
  if (name == "bilinear") return cv::INTER_LINEAR;
  if (name == "nearest") return cv::INTER_NEAREST;
  if (name == "area") return cv::INTER_AREA;
  throw UsageError("interpolation '" + name + "': expected bicubic, bilinear, nearest or area");
}

const settings::Schema<Preprocess>& preprocess_schema() {
  using Self = Preprocess;
  static const auto* schema = new settings::Schema<Preprocess>(settings::Schema<Preprocess>(
      "preprocess", "preprocessing") VITK_PREPROCESS_SETTINGS(VITK_SETTING_FIELD));
  return *schema;
}

void Preprocess::validate(int channels) const {
  if (resize != "shorter" && resize != "squash")
    throw UsageError("resize '" + resize + "': expected 'shorter' or 'squash'");
  if (!(crop_fraction > 0.f && crop_fraction <= 1.f))
    throw UsageError("crop_fraction must be in (0, 1], got " + std::to_string(crop_fraction));
  parse_interpolation(interpolation);
  if (static_cast<int>(mean.size()) != channels || static_cast<int>(std.size()) != channels)
    throw UsageError("mean and std need one value per channel (" + std::to_string(channels) +
                     "), got " + std::to_string(mean.size()) + " and " +
                     std::to_string(std.size()));
  for (float s : std)
    if (!(s > 0.f) || !std::isfinite(s)) throw UsageError("std values must be positive");
  for (float m : mean)
    if (!std::isfinite(m)) throw UsageError("mean values must be finite");
}

cv::Mat to_channels(const cv::Mat& decoded, int channels) {
  if (decoded.empty()) throw Error("to_channels: empty image");
  if (channels != 1 && channels != 3)
    throw Error("to_channels: a model has 1 or 3 channels, not " + std::to_string(channels));
  if (decoded.channels() > 4) throw Error("to_channels: more than 4 channels");
  cv::Mat img;
  if (decoded.depth() == CV_8U)
    img = decoded;
  else if (decoded.depth() == CV_16U)
    decoded.convertTo(img, CV_8U, 1.0 / 257.0);
  else if (decoded.depth() == CV_32F || decoded.depth() == CV_64F)
    decoded.convertTo(img, CV_8U, 255.0);  // [0, 1] floats; saturates outside
  else
    decoded.convertTo(img, CV_8U);

  const int c = img.channels();
  const bool alpha = c == 2 || c == 4;
  const int colour = alpha ? c - 1 : c;
  cv::Mat out(img.rows, img.cols, CV_8UC(channels));
  for (int y = 0; y < img.rows; ++y) {
    const uint8_t* in = img.ptr<uint8_t>(y);
    uint8_t* o = out.ptr<uint8_t>(y);
    for (int x = 0; x < img.cols; ++x, in += c, o += channels) {
      // OpenCV's order is B, G, R.
      int r = in[colour == 3 ? 2 : 0], g = in[colour == 3 ? 1 : 0], b = in[0];
      if (alpha) {
        // On white: v·a + 255·(1 − a), rounded.
        const int a = in[c - 1];
        r = (r * a + 255 * (255 - a) + 127) / 255;
        g = (g * a + 255 * (255 - a) + 127) / 255;
        b = (b * a + 255 * (255 - a) + 127) / 255;
      }
      if (channels == 3) {
        o[0] = static_cast<uint8_t>(r), o[1] = static_cast<uint8_t>(g),
        o[2] = static_cast<uint8_t>(b);
      } else if (colour == 1) {
        o[0] = static_cast<uint8_t>(r);
      } else {
        // Pillow's convert("L"): L = (R·19595 + G·38470 + B·7471 + 2^15) >> 16.
        o[0] = static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
      }
    }
  }
  return out;
}

void normalize_to_chw(const cv::Mat& image, const Preprocess& p, float* dst) {
  const int c = image.channels();
  const int h = image.rows, w = image.cols;
  if (image.depth() != CV_8U || static_cast<int>(p.mean.size()) != c ||
      static_cast<int>(p.std.size()) != c)
    throw Error("normalize_to_chw: expected an 8-bit image with " + std::to_string(p.mean.size()) +
                " channels");
  for (int ch = 0; ch < c; ++ch) {
    // torchvision: ToTensor divides by 255, Normalize subtracts and divides, all in float.
    float table[256];
    for (int v = 0; v < 256; ++v)
      table[v] = (static_cast<float>(v) / 255.f - p.mean[ch]) / p.std[ch];
    float* out = dst + static_cast<int64_t>(ch) * h * w;
    for (int y = 0; y < h; ++y) {
      const uint8_t* row = image.ptr<uint8_t>(y);
      for (int x = 0; x < w; ++x) out[static_cast<int64_t>(y) * w + x] = table[row[x * c + ch]];
    }
  }
}

std::pair<int64_t, int64_t> eval_resize_size(int64_t image_height, int64_t image_width,
                                             const Preprocess& p, int64_t height, int64_t width) {
  if (p.resize == "squash") return {height, width};
  // timm: scale_size = floor(size / crop_pct) per side.
  const double crop = as_written(p.crop_fraction);
  const int64_t th = static_cast<int64_t>(std::floor(static_cast<double>(height) / crop));
  const int64_t tw = static_cast<int64_t>(std::floor(static_cast<double>(width) / crop));
  int64_t nh, nw;
  if (th == tw) {
    // torchvision Resize(int): the shorter side (the width on a tie) becomes th, the longer
    // int(th·long/short).
    if (image_width <= image_height) {
      nw = th;
      nh = static_cast<int64_t>(static_cast<double>(th * image_height) /
                                static_cast<double>(image_width));
    } else {
      nh = th;
      nw = static_cast<int64_t>(static_cast<double>(th * image_width) /
                                static_cast<double>(image_height));
    }
  } else {
    // timm's ResizeKeepRatio (longest = 0): scale by the smaller of the two ratios.
    const double ratio = std::min(static_cast<double>(image_height) / static_cast<double>(th),
                                  static_cast<double>(image_width) / static_cast<double>(tw));
    nh = round_half_even(static_cast<double>(image_height) / ratio);
    nw = round_half_even(static_cast<double>(image_width) / ratio);
  }
  // Never smaller than the crop (torchvision would pad; with crop_fraction <= 1 it cannot happen
  // but for floating-point ties).
  nh = std::max(nh, height);
  nw = std::max(nw, width);
  return {nh, nw};
}

cv::Rect center_crop_rect(int64_t resized_height, int64_t resized_width, int64_t height,
                          int64_t width) {
  const int64_t top = round_half_even(static_cast<double>(resized_height - height) / 2.0);
  const int64_t left = round_half_even(static_cast<double>(resized_width - width) / 2.0);
  return cv::Rect(static_cast<int>(left), static_cast<int>(top), static_cast<int>(width),
                  static_cast<int>(height));
}

void preprocess_image(const cv::Mat& image, const Preprocess& p, int64_t height, int64_t width,
                      float* dst) {
  if (image.empty()) throw Error("preprocess_image: empty image");
  const auto [rh, rw] = eval_resize_size(image.rows, image.cols, p, height, width);
  const cv::Rect crop = center_crop_rect(rh, rw, height, width);
  normalize_to_chw(resize_like_pil(image, rh, rw, p.interpolation, crop), p, dst);
}

}  // namespace vitk::datasets
