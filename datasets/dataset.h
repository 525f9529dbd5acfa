#pragma once
// Labelled image collections behind one interface: the IDX files of (Fashion-)MNIST, image folders
// (root/<class>/<image>) and CSV lists (path,label).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace vitk::datasets {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int label(int64_t index) const = 0;  // in [0, class_names().size())
  virtual const std::vector<std::string>& class_names() const = 0;
  // Sample `index` as decoded (see decode_image_file; IDX: 8-bit, 1 channel). Returns false with a
  // reason when the sample cannot be read (a corrupt file in a folder). Safe to call from several
  // threads at once.
  virtual bool load(int64_t index, cv::Mat& image, std::string& error) const = 0;
  // Where the sample comes from, for messages: its path, or "file.gz[index]".
  virtual std::string describe(int64_t index) const = 0;
  virtual std::string source() const = 0;  // the directory or file the dataset was opened from
};

enum class Split { train, val };

// Opens `path` as whichever of these it is (vitk::Error naming the path when it is none, or when a
// root is missing, empty, or has an empty class folder):
// - an IDX directory: train-images-idx3-ubyte[.gz] + train-labels-idx1-ubyte[.gz] (Split::train)
//   or t10k-* (Split::val); class names are Fashion-MNIST's when the directory or file names say
//   "fashion", else "0".."9";
// - an image-folder root that has train/ and val/ (or validation/, test/) subfolders: that split;
// - an image-folder root of class folders: the whole folder, whatever the split;
// - a .csv file of "path,label" lines (paths relative to the CSV's folder; an optional header
//   line; labels either class names or integers 0..n−1).
std::unique_ptr<Dataset> open_dataset(const std::string& path, Split split);

// Directly: IDX image and label files (gzip-compressed or not, told apart by content).
std::unique_ptr<Dataset> open_idx(const std::string& images_path, const std::string& labels_path,
                                  std::vector<std::string> class_names);
// root/<class>/<image>: classes are the sorted subfolder names; files with an image extension
// OpenCV decodes (.png .jpg .jpeg .bmp .tif .tiff .webp .pgm .ppm, any case) are samples.
std::unique_ptr<Dataset> open_image_folder(const std::string& root);
std::unique_ptr<Dataset> open_csv(const std::string& csv_path);

const std::vector<std::string>& fashion_mnist_classes();  // "T-shirt/top", ..., "Ankle boot"

}  // namespace vitk::datasets
