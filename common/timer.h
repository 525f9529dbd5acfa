#pragma once
#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <vector>

namespace vitk {

// Wall-clock seconds since construction or the last reset().
class Timer {
 public:
  Timer() { reset(); }
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// CPU seconds of the whole process (all threads). On a shared machine this moves much less with
// the load than wall time (with OMP_WAIT_POLICY=passive, so that waiting threads sleep).
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds per call of `call`, repeated until at least min_seconds have passed, after one untimed
// call that creates primitives and grows arenas.
inline double seconds_per_call(const std::function<void()>& call, double min_seconds) {
  call();
  int iterations = 0;
  Timer t;
  do {
    call();
    ++iterations;
  } while (t.seconds() < min_seconds);
  return t.seconds() / iterations;
}

}  // namespace vitk
