#pragma once
// IDX files (the MNIST format) as bytes, for tests that write a dataset: big-endian 32-bit
// header words, then one byte per pixel or label.
#include <cstdint>
#include <string>
#include <vector>

namespace vitk::testing {

inline void put_u32(std::string& s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xff);
}

// An IDX images file of n images of rows x cols whose pixel (i, y, x) is (i + y + x) % 256.
inline std::string idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::string s;
  put_u32(s, magic);
  put_u32(s, n);
  put_u32(s, rows);
  put_u32(s, cols);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t y = 0; y < rows; ++y)
      for (uint32_t x = 0; x < cols; ++x) s += static_cast<char>((i + y + x) % 256);
  return s;
}

inline std::string idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 0x801) {
  std::string s;
  put_u32(s, magic);
  put_u32(s, static_cast<uint32_t>(labels.size()));
  for (uint8_t l : labels) s += static_cast<char>(l);
  return s;
}

}  // namespace vitk::testing
