// Image -> model input: channel conversion, resize and centre crop, normalisation.
#include "vit/preprocess.h"

#include <algorithm>
#include <cmath>

#include <opencv2/imgproc.hpp>

#include "common/error.h"

namespace vitk::vit {

int parse_interpolation(const std::string& name) {
  if (name == "bicubic") return cv::INTER_CUBIC;
  if (name == "bilinear") return cv::INTER_LINEAR;
  if (name == "nearest") return cv::INTER_NEAREST;
  if (name == "area") return cv::INTER_AREA;
  throw UsageError("interpolation '" + name + "': expected bicubic, bilinear, nearest or area");
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
    if (!(s > 0.f)) throw UsageError("std values must be positive");
}

cv::Mat to_channels(const cv::Mat& decoded, int channels) {
  if (decoded.empty()) throw Error("to_channels: empty image");
  cv::Mat img = decoded;
  if (img.depth() == CV_16U)
    img.convertTo(img, CV_8U, 1.0 / 257.0);
  else if (img.depth() != CV_8U)
    img.convertTo(img, CV_8U);  // float images are rare; clamp
  const int c = img.channels();
  cv::Mat gray_or_bgr;
  if (c == 2 || c == 4) {
    // Composite on white: out = a·colour + (1 − a)·255.
    std::vector<cv::Mat> planes;
    cv::split(img, planes);
    cv::Mat alpha;
    planes.back().convertTo(alpha, CV_32F, 1.0 / 255.0);
    planes.pop_back();
    for (cv::Mat& p : planes) {
      cv::Mat f;
      p.convertTo(f, CV_32F);
      f = f.mul(alpha) + (1.0 - alpha) * 255.0;
      f.convertTo(p, CV_8U);
    }
    cv::merge(planes, gray_or_bgr);
  } else {
    gray_or_bgr = img;
  }
  cv::Mat out;
  if (channels == 1) {
    if (gray_or_bgr.channels() == 1)
      out = gray_or_bgr;
    else
      cv::cvtColor(gray_or_bgr, out, cv::COLOR_BGR2GRAY);
  } else if (channels == 3) {
    if (gray_or_bgr.channels() == 1)
      cv::cvtColor(gray_or_bgr, out, cv::COLOR_GRAY2RGB);
    else
      cv::cvtColor(gray_or_bgr, out, cv::COLOR_BGR2RGB);
  } else {
    throw Error("to_channels: a model has 1 or 3 channels, not " + std::to_string(channels));
  }
  return out;
}

void normalize_to_chw(const cv::Mat& image, const Preprocess& p, float* dst) {
  const int c = image.channels();
  const int h = image.rows, w = image.cols;
  if (image.depth() != CV_8U || static_cast<int>(p.mean.size()) != c)
    throw Error("normalize_to_chw: expected an 8-bit image with " + std::to_string(p.mean.size()) +
                " channels");
  for (int ch = 0; ch < c; ++ch) {
    const float scale = 1.f / (255.f * p.std[ch]);
    const float shift = p.mean[ch] / p.std[ch];
    float* out = dst + static_cast<int64_t>(ch) * h * w;
    for (int y = 0; y < h; ++y) {
      const uint8_t* row = image.ptr<uint8_t>(y);
      for (int x = 0; x < w; ++x)
        out[static_cast<int64_t>(y) * w + x] = row[x * c + ch] * scale - shift;
    }
  }
}

void preprocess_image(const cv::Mat& image, const Preprocess& p, int64_t height, int64_t width,
                      float* dst) {
  const int interp = parse_interpolation(p.interpolation);
  cv::Mat resized;
  if (p.resize == "squash") {
    if (image.rows == height && image.cols == width)
      resized = image;
    else
      cv::resize(image, resized, cv::Size(static_cast<int>(width), static_cast<int>(height)), 0, 0,
                 interp);
  } else {
    // timm: scale_size = floor(size / crop_pct). A square model resizes the shorter side to it
    // (torchvision's Resize(int): the longer side becomes int(size·long/short)); a rectangular
    // one resizes to (floor(H/crop_pct), floor(W/crop_pct)), as Resize((h, w)).
    const int th = static_cast<int>(std::floor(static_cast<double>(height) / p.crop_fraction));
    const int tw = static_cast<int>(std::floor(static_cast<double>(width) / p.crop_fraction));
    int nh = th, nw = tw;
    if (height == width) {
      if (image.rows <= image.cols)
        nw = static_cast<int>(static_cast<int64_t>(th) * image.cols / image.rows);
      else
        nh = static_cast<int>(static_cast<int64_t>(tw) * image.rows / image.cols);
    }
    nh = std::max<int>(nh, static_cast<int>(height));
    nw = std::max<int>(nw, static_cast<int>(width));
    if (nh == image.rows && nw == image.cols)
      resized = image;
    else
      cv::resize(image, resized, cv::Size(nw, nh), 0, 0, interp);
    const int top = static_cast<int>(std::lround((nh - height) / 2.0));
    const int left = static_cast<int>(std::lround((nw - width) / 2.0));
    resized = resized(cv::Rect(left, top, static_cast<int>(width), static_cast<int>(height)));
  }
  normalize_to_chw(resized, p, dst);
}

}  // namespace vitk::vit
