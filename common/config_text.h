#pragma once
// Model settings as text (checkpoint attributes, the [model] section of a config file): floats
// written so that they read back exactly, and a reader whose errors name the source and the key.
// Shared by the ViT's and the translation model's configurations.
#include <cstdint>
#include <string>
#include <vector>

namespace vitk {

// Shortest text that reads back to the same float.
std::string float_text(float x);
// Comma-separated float_text of each value.
std::string floats_text(const std::vector<float>& v);

// Parses one setting's text; errors are vitk::Error "SOURCE: model setting 'KEY': ...".
struct SettingReader {
  const std::string& source;
  std::string where(const std::string& key) const;
  int64_t integer(const std::string& key, const std::string& text) const;
  float real(const std::string& key, const std::string& text) const;    // finite only
  bool boolean(const std::string& key, const std::string& text) const;  // true|false|1|0
  std::vector<float> reals(const std::string& key, const std::string& text) const;  // "a,b,c"
};

}  // namespace vitk
