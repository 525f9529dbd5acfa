#pragma once
// Reading image files without ever crashing or hanging on bad ones: every failure is a one-line
// reason the caller prints next to the path.
#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

namespace vitk::datasets {

struct DecodeOptions {
  // Images with more pixels than this are refused before decoding (from the header's size).
  int64_t max_pixels = 178'956'970;  // Pillow's default decompression-bomb limit
};

// Decodes one file as OpenCV's IMREAD_UNCHANGED would (8- or 16-bit, 1-4 channels, BGR order;
// palette images expanded, CMYK JPEGs converted, EXIF orientation applied). Returns false and sets
// error ("file not found", "is a directory", "empty file", "not an image (unrecognised format)",
// "truncated or corrupt PNG", "image of 30000x30000 pixels exceeds --max-pixels 178956970", ...)
// on failure; never throws for bad data.
bool decode_image_file(const std::string& path, cv::Mat& image, std::string& error,
                       const DecodeOptions& options = {});

}  // namespace vitk::datasets
