#pragma once
// <vitk/vitk.h> for images OpenCV has decoded: cv::Mat in, as cv::imread gives them (8-bit, grey,
// BGR or BGRA). Header only: include it where OpenCV is at hand; libvitk itself takes vitk::Image.
#include <opencv2/core.hpp>

#include "vitk/vitk.h"

namespace vitk {

// A view of an 8-bit cv::Mat of 1, 3 or 4 channels (colour in OpenCV's BGR order). Anything else
// (16-bit, float) is refused by the call it is given to, with the image's index.
inline Image image_of(const cv::Mat& mat) {
  Image image;
  image.data = mat.depth() == CV_8U ? mat.data : nullptr;
  image.height = mat.rows;
  image.width = mat.cols;
  image.channels = mat.channels();
  image.row_stride = static_cast<int64_t>(mat.step[0]);
  image.order = Image::Order::bgr;
  return image;
}

inline std::vector<Image> images_of(const std::vector<cv::Mat>& mats) {
  std::vector<Image> images;
  for (const cv::Mat& m : mats) images.push_back(image_of(m));
  return images;
}

inline std::vector<Classification> classify_images(const Classifier& classifier,
                                                   const std::vector<cv::Mat>& images,
                                                   int top_k = 0) {
  return classifier.classify(images_of(images), top_k);
}

inline std::vector<Caption> caption_images(const Captioner& captioner,
                                           const std::vector<cv::Mat>& images,
                                           const SearchOptions& search = {}) {
  return captioner.caption(images_of(images), search);
}

}  // namespace vitk
