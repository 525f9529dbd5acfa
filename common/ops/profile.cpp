#include "common/ops/profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ostream>
#include <unordered_map>
#include <utility>

namespace vitk::ops::profile {
namespace {

std::atomic<bool> g_enabled{false};
Scope* g_current = nullptr;
std::unordered_map<std::string, Entry>& table() {
  static std::unordered_map<std::string, Entry> t;
  return t;
}

}  // namespace

void enable(bool on) {
  g_enabled.store(on, std::memory_order_relaxed);
}

bool enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}

void clear() {
  table().clear();
}

std::vector<Entry> entries() {
  std::vector<Entry> out;
  for (const auto& kv : table()) out.push_back(kv.second);
  std::sort(out.begin(), out.end(),
            [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return out;
}

Scope::Scope(const char* name, int64_t m, int64_t n, int64_t k) {
  if (!enabled()) return;
  on_ = true;
  name_ = name;
  if (m || n || k)
    name_ += " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  parent_ = g_current;
  g_current = this;
  start_ = std::chrono::steady_clock::now();
}

Scope::~Scope() {
  if (!on_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  g_current = parent_;
  if (parent_) parent_->child_seconds_ += s;
  Entry& e = table()[name_];
  e.name = name_;
  e.seconds += s - child_seconds_;
  ++e.calls;
}

void print_breakdown(std::ostream& out, const std::vector<Entry>& entries, int64_t count,
                     const std::string& what, const std::string& unit, double measured_seconds) {
  if (entries.empty() || count < 1) return;
  const double per = 1e3 / static_cast<double>(count);  // seconds in all -> ms per unit
  double total = 0;
  for (const Entry& e : entries) total += e.seconds * per;
  char measured[64] = "";
  if (measured_seconds >= 0)
    std::snprintf(measured, sizeof measured, ", measured %.1f ms", measured_seconds * per);
  char line[512];
  std::snprintf(line, sizeof line, "breakdown (%s, exclusive ms per %s; total %.1f ms%s):\n",
                what.c_str(), unit.c_str(), total, measured);
  out << line;
  for (const Entry& e : entries) {
    const double ms = e.seconds * per;
    std::snprintf(line, sizeof line, "  %8.2f ms %5.1f%%  x%-4lld %s\n", ms,
                  total > 0 ? 100.0 * ms / total : 0.0, static_cast<long long>(e.calls / count),
                  e.name.c_str());
    out << line;
  }
  out << std::flush;
}

StepProfile::StepProfile(std::string unit, int64_t every, int64_t skip)
    : unit_(std::move(unit)), rest_name_(unit_ + " (rest)"), every_(every), skip_(skip) {
  clear();
}

StepProfile::~StepProfile() {
  rest_.reset();
  enable(false);
}

void StepProfile::begin() {
  if (seen_ == skip_) clear();  // what the uncounted steps left
  enable(true);
  rest_.emplace(rest_name_.c_str());
  start_ = std::chrono::steady_clock::now();  // inside the rest scope: the table covers it all
}

bool StepProfile::end() {
  const auto stop = std::chrono::steady_clock::now();
  rest_.reset();
  enable(false);
  if (++seen_ > skip_) {
    ++counted_;
    wall_seconds_ += std::chrono::duration<double>(stop - start_).count();
  }
  return every_ > 0 && counted_ >= every_;
}

void StepProfile::print(std::ostream& out, const std::string& what) {
  if (counted_ == 0) return;
  print_breakdown(out, entries(), counted_, what, unit_, wall_seconds_);
  clear();
  counted_ = 0;
  wall_seconds_ = 0;
}

}  // namespace vitk::ops::profile
