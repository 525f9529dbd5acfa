#include "common/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <utility>

namespace vitk {

std::string format_general(double x, int precision) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*g", precision, x);
  return buf;
}

std::string format_fixed(double x, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[48];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  return buf;
}

bool is_terminal(int fd) {
  const char* term = std::getenv("TERM");
  if (term && std::strcmp(term, "dumb") == 0) return false;
  return ::isatty(fd) == 1;
}

Progress::Progress(std::ostream& os, std::string label, int64_t total, ProgressOptions options,
                   int64_t first)
    : os_(os),
      label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      first_(first),
      done_(first),
      options_(std::move(options)) {
  start_ = now();
}

double Progress::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Progress::elapsed() const {
  return now() - start_;
}

double Progress::items_per_second() const {
  const double t = elapsed();
  return t > 0 ? static_cast<double>(items_) / t : 0.0;
}

double Progress::eta() const {
  const int64_t steps = done_ - first_;
  if (steps <= 0) return -1;
  return elapsed() / static_cast<double>(steps) * static_cast<double>(total_ - done_);
}

std::string Progress::line(const std::string& metrics) const {
  std::string out = label_;
  char buf[96];
  if (options_.tty) {
    const int w = std::max(options_.bar_width, 1);
    const int filled = static_cast<int>(static_cast<double>(w) * static_cast<double>(done_) /
                                        static_cast<double>(total_));
    out += " [" + std::string(static_cast<size_t>(std::clamp(filled, 0, w)), '#') +
           std::string(static_cast<size_t>(w - std::clamp(filled, 0, w)), '.') + "]";
    std::snprintf(buf, sizeof buf, " %lld/%lld", static_cast<long long>(done_),
                  static_cast<long long>(total_));
  } else {
    std::snprintf(buf, sizeof buf, "  %s %lld/%lld", options_.unit.c_str(),
                  static_cast<long long>(done_), static_cast<long long>(total_));
  }
  out += buf;
  if (!metrics.empty()) out += "  " + metrics;
  std::snprintf(buf, sizeof buf, "  %.1f %s  ETA %s", items_per_second(),
                options_.rate_unit.c_str(), format_duration(eta()).c_str());
  out += buf;
  return out;
}

void Progress::update(int64_t done, int64_t items, const std::string& metrics) {
  done_ = std::min(done, total_);
  items_ = items;
  const bool last = done_ >= total_;
  if (options_.tty) {
    const double t = now();
    if (!last && t - last_draw_ < options_.redraw_seconds) return;
    last_draw_ = t;
    // \r to the start, the line, then erase whatever a longer previous line left.
    os_ << '\r' << line(metrics) << "\x1b[K" << std::flush;
    drawn_ = true;
  } else {
    const int64_t every = options_.line_every;
    if (every <= 0 || (!last && done_ % every != 0)) return;
    os_ << line(metrics) << '\n' << std::flush;
  }
}

void Progress::finish() {
  if (options_.tty && drawn_) os_ << "\r\x1b[K" << std::flush;
  drawn_ = false;
}

}  // namespace vitk
