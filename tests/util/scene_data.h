#pragma once
// Tiny Fashion-MNIST IDX files for the tests that make scenes (datasets/test_scenes.cpp, the
// captioning tests): 60 training and 20 test articles of 28x28 whose pixels say which article and
// which file they come from, labels i % 10; and scene articles placed by hand for the grammar and
// its scores.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "datasets/captions.h"
#include "util/idx_data.h"
#include "util/test_util.h"

namespace vitk::testing {

inline constexpr uint32_t kTrainArticles = 60;  // the last 10 are the val scenes' articles
inline constexpr uint32_t kTestArticles = 20;

// Pixel (y, x) of article i: never 0, so that an article's pixels are told from the background;
// 1..127 in the training file and 128..254 in the t10k file, so that a test scene shows which
// file its articles came from; shifted by i, so that each article differs from the others.
inline uint8_t article_pixel(bool t10k, int64_t i, int64_t y, int64_t x) {
  return static_cast<uint8_t>((t10k ? 128 : 1) + (i * 31 + y * 28 + x) % 127);
}

inline std::string idx_articles(bool t10k, uint32_t n) {
  std::string s;
  put_u32(s, 0x803);
  for (uint32_t v : {n, 28u, 28u}) put_u32(s, v);
  for (uint32_t i = 0; i < n; ++i)
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x) s += static_cast<char>(article_pixel(t10k, i, y, x));
  return s;
}

// Labels i % 10: every class in every split's range.
inline std::vector<uint8_t> cyclic_labels(uint32_t n) {
  std::vector<uint8_t> labels;
  for (uint32_t i = 0; i < n; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  return labels;
}

inline std::string write_fashion_mnist(const vitk::test::TempDir& dir) {
  const std::filesystem::path root = dir / "fashion-mnist";
  std::filesystem::create_directories(root);
  auto put = [&](const std::string& name, const std::string& bytes) {
    dir.write("fashion-mnist/" + name, bytes);
  };
  put("train-images-idx3-ubyte", idx_articles(false, kTrainArticles));
  put("train-labels-idx1-ubyte", idx_labels(cyclic_labels(kTrainArticles)));
  put("t10k-images-idx3-ubyte", idx_articles(true, kTestArticles));
  put("t10k-labels-idx1-ubyte", idx_labels(cyclic_labels(kTestArticles)));
  return root.string();
}

// An article of a 2x2 scene (42-pixel cells), for the tests of the caption grammar and scores.
inline datasets::SceneObject scene_object(const std::string& name, int64_t row, int64_t col) {
  datasets::SceneObject o;
  o.name = name;
  o.row = row;
  o.col = col;
  o.cell = {col * 42, row * 42, 42, 42};
  o.box = {o.cell.x + 7, o.cell.y + 7, 28, 28};
  return o;
}

}  // namespace vitk::testing
