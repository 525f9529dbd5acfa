// PNG files written whole or not at all: encoded in memory, then written by io::write_file_atomic.
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/plot/plot.h"

namespace vitk::plot {

void write_png(const std::string& path, const cv::Mat& image) {
  if (image.empty()) throw Error(path + ": nothing to draw (empty picture)");
  std::vector<unsigned char> bytes;
  try {
    if (!cv::imencode(".png", image, bytes, {cv::IMWRITE_PNG_COMPRESSION, 9}))
      throw Error(path + ": OpenCV could not encode the picture as PNG");
  } catch (const cv::Exception& e) {
    throw Error(path + ": cannot encode as PNG: " + e.err);
  }
  io::write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace vitk::plot
