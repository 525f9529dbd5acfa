#include "common/ops/profile.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

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

}  // namespace vitk::ops::profile
