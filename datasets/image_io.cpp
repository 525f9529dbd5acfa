// Decoding image files: OpenCV's codecs behind checks that turn every failure into a reason.
#include "datasets/image_io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <opencv2/imgcodecs.hpp>

namespace vitk::datasets {

bool decode_image_file(const std::string& path, cv::Mat& image, std::string& error,
                       const DecodeOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    error = "file not found";
    return false;
  }
  if (fs::is_directory(st)) {
    error = "is a directory, not an image";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (bytes.empty()) {
    error = "empty file";
    return false;
  }
  (void)options;  // TODO(classify): header-size check against max_pixels before decoding
  try {
    image = cv::imdecode(bytes, cv::IMREAD_UNCHANGED);
  } catch (const cv::Exception& e) {
    error = std::string("cannot decode: ") + e.what();
    return false;
  }
  if (image.empty()) {
    error = "not a decodable image (unrecognised format, truncated or corrupt)";
    return false;
  }
  return true;
}

}  // namespace vitk::datasets
