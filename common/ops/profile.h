#pragma once
// A tiny wall-clock profiler for benchmarks (`vitk bench vit-step`): ops and layers open a Scope
// with a name; when profiling is on, each name accumulates its *exclusive* time (a scope's time
// minus that of the scopes opened inside it), so the parts of a breakdown add up to the whole.
// Off by default: a disabled Scope costs one relaxed load and a branch. Not thread-safe: scopes
// are opened by the thread that calls the ops (never inside a parallel region).
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace vitk::ops::profile {

void enable(bool on);
bool enabled();
void clear();

struct Entry {
  std::string name;
  double seconds = 0;      // exclusive wall time
  double cpu_seconds = 0;  // exclusive CPU time of the process (all threads)
  int64_t calls = 0;
};
// Sorted by time, largest first.
std::vector<Entry> entries();

class Scope {
 public:
  // The name is formatted only when profiling is on: "name" or "name MxNxK" for the shape.
  explicit Scope(const char* name, int64_t m = 0, int64_t n = 0, int64_t k = 0);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool on_ = false;
  Scope* parent_ = nullptr;
  std::chrono::steady_clock::time_point start_;
  double start_cpu_ = 0;
  double child_seconds_ = 0, child_cpu_seconds_ = 0;
  std::string name_;
};

}  // namespace vitk::ops::profile
