// open_dataset: tells an IDX directory, an image-folder root (with or without split folders) and a
// CSV list apart, and opens the requested split.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "datasets/dataset.h"

namespace vitk::datasets {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// dir/<prefix>-<kind>-ubyte, or with ".gz", or the "<prefix>-images.idx3-ubyte" spelling some
// MNIST copies use; empty when none exists.
std::string find_idx(const fs::path& dir, const std::string& prefix, const std::string& kind) {
  std::string dotted = kind;
  dotted[dotted.find('-')] = '.';
  for (const std::string& base : {prefix + "-" + kind + "-ubyte", prefix + "-" + dotted + "-ubyte"})
    for (const char* ext : {".gz", ""})
      if (is_file(dir / (base + ext))) return (dir / (base + ext)).string();
  return {};
}

std::vector<std::string> digit_classes() {
  std::vector<std::string> names;
  for (int i = 0; i < 10; ++i) names.push_back(std::to_string(i));
  return names;
}

}  // namespace

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names{"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                              "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                              "Bag",         "Ankle boot"};
  return names;
}

std::unique_ptr<Dataset> open_dataset(const std::string& path, Split split) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw Error(path + ": no such file or directory");
  if (fs::is_regular_file(st)) {
    if (lower(fs::path(path).extension().string()) == ".csv") return open_csv(path);
    throw Error(path + ": not a dataset: expected a directory (IDX files or image folders) or a " +
                ".csv list");
  }
  if (!fs::is_directory(st)) throw Error(path + ": not a regular file or a directory");

  const fs::path dir(path);
  // IDX: the split's images and labels side by side.
  const char* prefix = split == Split::train ? "train" : "t10k";
  const std::string images = find_idx(dir, prefix, "images-idx3");
  const std::string labels = find_idx(dir, prefix, "labels-idx1");
  const bool other_split_idx =
      !find_idx(dir, split == Split::train ? "t10k" : "train", "images-idx3").empty();
  if (!images.empty() && !labels.empty()) {
    const bool fashion =
        lower(fs::absolute(dir, ec).string() + " " + images).find("fashion") != std::string::npos;
    return open_idx(images, labels, fashion ? fashion_mnist_classes() : digit_classes());
  }
  if (!images.empty() || !labels.empty() || other_split_idx)
    throw Error(path + ": IDX directory without " +
                (images.empty() ? std::string(prefix) + "-images-idx3-ubyte[.gz]"
                                : std::string(prefix) + "-labels-idx1-ubyte[.gz]") +
                " (needed for the " + (split == Split::train ? "training" : "validation") +
                " split)");

  // Image folders split into train/ and val/ (validation/, test/). A train/ folder holding class
  // folders marks the split layout even without a validation folder; one holding images is a class
  // (of trains).
  if (is_dir(dir / "train")) {
    std::string val;
    for (const char* name : {"val", "validation", "test"})
      if (val.empty() && is_dir(dir / name)) val = name;
    bool train_has_folders = false;
    for (fs::directory_iterator it(dir / "train", ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec)) train_has_folders = true;
    if (!val.empty() || train_has_folders) {
      if (split == Split::train) return open_image_folder((dir / "train").string());
      if (val.empty())
        throw Error(path + ": has train/ but no val/, validation/ or test/ folder for the " +
                    "validation split");
      return open_image_folder((dir / val).string());
    }
  }
  return open_image_folder(path);
}

}  // namespace vitk::datasets
