#include "common/config_text.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace vitk {

std::string float_text(float x) {
  char buf[32];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return buf;
}

std::string floats_text(const std::vector<float>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + float_text(v[i]);
  return out;
}

std::string SettingReader::where(const std::string& key) const {
  return source + ": model setting '" + key + "'";
}

int64_t SettingReader::integer(const std::string& key, const std::string& text) const {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end || errno)
    throw Error(where(key) + ": expected an integer, got '" + text + "'");
  return v;
}

float SettingReader::real(const std::string& key, const std::string& text) const {
  errno = 0;
  char* end = nullptr;
  const float v = std::strtof(text.c_str(), &end);
  if (text.empty() || *end || errno || !std::isfinite(v))
    throw Error(where(key) + ": expected a number, got '" + text + "'");
  return v;
}

bool SettingReader::boolean(const std::string& key, const std::string& text) const {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  throw Error(where(key) + ": expected true or false, got '" + text + "'");
}

std::vector<float> SettingReader::reals(const std::string& key, const std::string& text) const {
  std::vector<float> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    out.push_back(real(key, a == std::string::npos ? "" : item.substr(a, b - a + 1)));
  }
  if (out.empty())
    throw Error(where(key) + ": expected comma-separated numbers, got '" + text + "'");
  return out;
}

}  // namespace vitk
