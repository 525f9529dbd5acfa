// Fuzzes the IDX reader of (Fashion-)MNIST files (datasets/idx.cpp: open_idx, plain or gzip), and
// every sample it then serves. Input: [L: 1 byte] [labels file: L bytes] [images file: the rest].
#include <exception>
#include <string>

#include "datasets/dataset.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vitk::fuzz::ScratchFile images("idx", "-images-idx3-ubyte");
  static vitk::fuzz::ScratchFile labels("idx", "-labels-idx1-ubyte");
  if (size < 1) return 0;
  const size_t n = std::min<size_t>(data[0], size - 1);
  labels.write(data + 1, n);
  images.write(data + 1 + n, size - 1 - n);
  try {
    // The class names open_dataset gives an IDX directory that is not Fashion-MNIST.
    const auto ds = vitk::datasets::open_idx(images.path(), labels.path(),
                                             {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
    const int64_t classes = static_cast<int64_t>(ds->class_names().size());
    for (int64_t i = 0; i < std::min<int64_t>(ds->size(), 64); ++i) {
      const int label = ds->label(i);
      if (label < 0 || label >= classes) __builtin_trap();  // the documented range
      cv::Mat image;
      std::string error;
      if (ds->load(i, image, error) && image.empty()) __builtin_trap();
      (void)ds->describe(i);
    }
  } catch (const std::exception&) {
  }
  return 0;
}
