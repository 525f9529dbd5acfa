#include "common/settings.h"

#include <cmath>
#include <sstream>

namespace vitk::settings {

bool Range::contains(double x) const {
  if (std::isnan(x)) return false;
  const bool above = lo_open ? x > lo : x >= lo;
  const bool below = hi_open ? x < hi : x <= hi;
  return above && below;
}

bool Range::allows(const std::string& s) const {
  if (choices.empty()) return true;
  for (const std::string& c : choices)
    if (c == s) return true;
  return false;
}

namespace {

std::string number_text(double x) {
  if (std::abs(x) < 1e15 && x == std::floor(x)) return std::to_string(static_cast<long long>(x));
  std::ostringstream out;
  out << x;
  return out.str();
}

}  // namespace

std::string Range::describe() const {
  if (!choices.empty()) {
    std::string s = "one of";
    for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : " ") + choices[i];
    return s;
  }
  const bool no_lo = std::isinf(lo), no_hi = std::isinf(hi);
  if (no_lo && no_hi) return "";
  if (no_hi) return lo == 0 && lo_open ? "positive" : "at least " + number_text(lo);
  if (no_lo) return "at most " + number_text(hi);
  return std::string("in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) +
         (hi_open ? ")" : "]");
}

Range any() {
  return Range{};
}

Range between(double lo, double hi) {
  Range r;
  r.lo = lo;
  r.hi = hi;
  return r;
}

Range at_least(double lo) {
  Range r;
  r.lo = lo;
  return r;
}

Range positive() {
  Range r;
  r.lo = 0;
  r.lo_open = true;
  return r;
}

Range share() {
  Range r = between(0, 1);
  r.lo_open = true;
  return r;
}

Range fraction() {
  Range r = between(0, 1);
  r.hi_open = true;
  return r;
}

std::string text(int64_t v) {
  return std::to_string(v);
}
std::string text(int v) {
  return std::to_string(v);
}
std::string text(float v) {
  return float_text(v);
}
std::string text(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}
std::string text(bool v) {
  return v ? "true" : "false";
}
std::string text(const std::string& v) {
  return v;
}
std::string text(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s.empty() ? "none" : s;
}
std::string text(const std::vector<float>& v) {
  return floats_text(v);
}

void parse(const SettingReader& r, const std::string& key, const std::string& s, int64_t& out) {
  out = r.integer(key, s);
}

void parse(const SettingReader& r, const std::string& key, const std::string& s, int& out) {
  const int64_t v = r.integer(key, s);
  // A value beyond int is out of range, not wrapped to another.
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    throw Error(r.where(key) + ": " + s + " is out of range");
  out = static_cast<int>(v);
}

void parse(const SettingReader& r, const std::string& key, const std::string& s, float& out) {
  out = r.real(key, s);
}

void parse(const SettingReader& r, const std::string& key, const std::string& s, double& out) {
  out = r.real(key, s);
}

void parse(const SettingReader& r, const std::string& key, const std::string& s, bool& out) {
  out = r.boolean(key, s);
}

void parse(const SettingReader&, const std::string&, const std::string& s, std::string& out) {
  out = s;
}

void parse(const SettingReader& r, const std::string& key, const std::string& s,
           std::vector<int64_t>& out) {
  std::string spaced = s;
  for (char& c : spaced)
    if (c == ',') c = ' ';
  std::istringstream in(spaced);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  out.clear();
  if (words.size() == 1 && words[0] == "none") return;
  for (const std::string& word : words) {
    if (word.size() > 9 || word.find_first_not_of("0123456789") != std::string::npos)
      throw Error(r.where(key) + ": expected whole numbers separated by commas, or none, got '" +
                  s + "'");
    out.push_back(std::stoll(word));
  }
}

void parse(const SettingReader& r, const std::string& key, const std::string& s,
           std::vector<float>& out) {
  out = r.reals(key, s);
}

void check_range(const std::string& key, const Range& range, double v, const std::string& shown) {
  if (!range.contains(v))
    throw UsageError("model." + key + " must be " + range.describe() + ", got " + shown);
}

void check_range(const std::string& key, const Range& range, int64_t v) {
  check_range(key, range, static_cast<double>(v), std::to_string(v));
}

void check_range(const std::string& key, const Range& range, int v) {
  check_range(key, range, static_cast<double>(v), std::to_string(v));
}

void check_range(const std::string& key, const Range& range, float v) {
  check_range(key, range, static_cast<double>(v), float_text(v));
}

void check_range(const std::string& key, const Range& range, double v) {
  check_range(key, range, v, text(v));
}

void check_range(const std::string&, const Range&, bool) {}

void check_range(const std::string& key, const Range& range, const std::string& v) {
  if (!range.allows(v))
    throw UsageError("model." + key + " must be " + range.describe() + ", got '" + v + "'");
}

void check_range(const std::string& key, const Range& range, const std::vector<int64_t>& v) {
  for (int64_t x : v) check_range(key, range, x);
}

void check_range(const std::string& key, const Range& range, const std::vector<float>& v) {
  for (float x : v) check_range(key, range, x);
}

UsageError option_error(const std::exception& e) {
  const std::string what = e.what();
  if (what.rfind("model.", 0) == 0) return UsageError("--" + what);
  if (what.rfind("--", 0) == 0) return UsageError(what);
  return UsageError("model option " + what);
}

}  // namespace vitk::settings
