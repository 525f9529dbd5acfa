// Fuzzes the image header checks (datasets/image_header.cpp: read_image_header, which walks PNG
// chunks and JPEG markers and reads BMP, TIFF, WebP and PNM sizes) and the decoding behind them
// (datasets/image_io.cpp: decode_image, OpenCV's codecs, then the EXIF orientation).
#include <string>
#include <vector>

#include "datasets/image_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vitk::datasets::ImageHeader header;
  std::string error;
  const bool known = vitk::datasets::read_image_header(data, size, header, error);
  if (known &&
      (header.width <= 0 || header.height <= 0 || header.orientation < 1 || header.orientation > 8))
    __builtin_trap();
  vitk::datasets::DecodeOptions options;
  options.max_pixels = 1 << 22;  // a 2048² image at most: no decompression bomb reaches the codec
  cv::Mat image;
  const std::vector<uint8_t> bytes(data, data + size);
  if (vitk::datasets::decode_image(bytes, image, error, options)) {
    if (!known || image.empty()) __builtin_trap();  // decoded only what the header check passed
    if (static_cast<int64_t>(image.total()) > options.max_pixels) __builtin_trap();
  }
  return 0;
}
