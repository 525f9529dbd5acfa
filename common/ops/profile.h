#pragma once
// A tiny wall-clock profiler for benchmarks (`vitk bench vit-step`) and the --profile flags: ops
// and layers open a Scope with a name; when profiling is on, each name accumulates its *exclusive*
// time (a scope's time minus that of the scopes opened inside it), so the parts of a breakdown add
// up to the whole. Off by default: a disabled Scope costs one relaxed load and a branch. Not
// thread-safe: scopes are opened by the thread that calls the ops (never inside a parallel region,
// never on a loader thread).
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace vitk::ops::profile {

void enable(bool on);
bool enabled();
void clear();

struct Entry {
  std::string name;
  double seconds = 0;  // exclusive wall time
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
  double child_seconds_ = 0;
  std::string name_;
};

// The one printer of a breakdown: `entries` summed over `count` units (steps, batches), as
// exclusive milliseconds per unit, largest first, with the share of the total and the calls per
// unit; `what` says what was profiled. `measured_seconds` >= 0: the units' wall time measured
// around them, printed per unit next to the total so that a reader sees the two agree:
//   breakdown (one profiled round, exclusive ms per step; total 412.3 ms):
//       101.20 ms  24.5%  x12   linear_forward 16384x768x192
//   breakdown (--profile, steps 2-3, exclusive ms per step; total 412.3 ms, measured 412.3 ms):
void print_breakdown(std::ostream& out, const std::vector<Entry>& entries, int64_t count,
                     const std::string& what, const std::string& unit = "step",
                     double measured_seconds = -1);

// Profiling of a loop, for the --profile flags (`vitk train`, `vitk mt-train`, `vitk classify
// --benchmark`, `vitk translate`): profiling is on only between begin() and end() of each step
// (so validation or file writing between steps stays out), and a step's time outside every op's
// scope goes to an entry "<unit> (rest)", so the table adds up to the steps' wall time, which
// StepProfile also measures on its own clock and prints beside the total. The first `skip` steps
// are not counted (they create primitives and grow arenas).
class StepProfile {
 public:
  // every > 0: end() says when that many steps have been counted since the last print.
  explicit StepProfile(std::string unit = "step", int64_t every = 0, int64_t skip = 1);
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  void begin();
  // Ends the step; true when `every` steps have been counted since the last print.
  bool end();
  // Prints the steps counted since the last print with print_breakdown (nothing when none were),
  // then counts afresh.
  void print(std::ostream& out, const std::string& what);
  int64_t counted() const { return counted_; }
  // Wall time of the counted steps, from begin() to end() of each (since the last print).
  double wall_seconds() const { return wall_seconds_; }

 private:
  std::string unit_, rest_name_;
  int64_t every_, skip_, seen_ = 0, counted_ = 0;
  double wall_seconds_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::optional<Scope> rest_;
};

}  // namespace vitk::ops::profile
