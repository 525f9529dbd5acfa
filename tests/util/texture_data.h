#pragma once
// A tiny image-folder dataset for the end-to-end training tests: 16×16 grey PNGs of four textures
// (bright noise, dark noise, horizontal and vertical stripes) that a 2-layer ViT tells apart in a
// few steps, written as ROOT/SPLIT/CLASS/N.png.
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

namespace vitk::testing {

// The four classes in sorted order, as the dataset numbers them.
inline const std::vector<std::string> kTextureClasses{"bright", "dark", "hstripes", "vstripes"};
constexpr int kTextureSide = 16;

inline void write_textures(const std::filesystem::path& root, const std::string& split,
                           const std::vector<std::string>& classes, int per_class, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> noise(0, 70), bright(170, 255);
  for (const std::string& name : classes) {
    const std::filesystem::path dir = root / split / name;
    std::filesystem::create_directories(dir);
    for (int i = 0; i < per_class; ++i) {
      cv::Mat img(kTextureSide, kTextureSide, CV_8UC1);
      for (int y = 0; y < kTextureSide; ++y)
        for (int x = 0; x < kTextureSide; ++x) {
          const bool on = name == "bright" || (name == "vstripes" && x % 4 < 2) ||
                          (name == "hstripes" && y % 4 < 2);
          img.at<uint8_t>(y, x) = static_cast<uint8_t>(on ? bright(gen) : noise(gen));
        }
      cv::imwrite((dir / (std::to_string(i) + ".png")).string(), img);
    }
  }
}

inline void write_textures(const std::filesystem::path& root, const std::string& split,
                           int per_class, uint32_t seed) {
  write_textures(root, split, kTextureClasses, per_class, seed);
}

// A 2-layer ViT for the textures at 16×16, as a config file would hold it.
inline const char* const kTextureVitConfig =
    "[model]\n"
    "image_size = 16\n"
    "patch_size = 4\n"
    "channels = 1\n"
    "d_model = 32\n"
    "heads = 2\n"
    "d_ff = 64\n"
    "layers = 2\n"
    "resize = squash\n"
    "crop_fraction = 1\n"
    "mean = 0.3\n"
    "std = 0.35\n"
    "[train]\n"
    "batch-size = 32\n"
    "lr = 0.003\n"
    "min-lr = 0.0001\n"
    "warmup-epochs = 1\n"
    "weight-decay = 0.05\n"
    "threads = 2\n"
    "[augment]\n"
    "scale = 0.6 1\n";

}  // namespace vitk::testing
