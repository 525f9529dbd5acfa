#pragma once
// Progress of long work (an epoch, an evaluation): on a terminal one line redrawn in place with a
// bar, the rate and the ETA; otherwise (a log file, a pipe) a plain line every so many steps, so
// logs stay readable and grep-able.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

namespace vitk {

struct ProgressOptions {
  bool tty = false;             // redraw one line in place; false: plain lines
  double redraw_seconds = 0.2;  // tty: redraw at most this often (and always at the end)
  int64_t line_every = 50;      // not tty: one line every this many steps and at the end;
                                // 0: no lines at all (a summary follows)
  int bar_width = 24;
  std::string unit = "step";        // what `done` counts
  std::string rate_unit = "img/s";  // what `items` counts, per second
  // Seconds from an arbitrary origin; empty: a steady clock. Tests pass a fake one.
  std::function<double()> clock;
};

class Progress {
 public:
  // `label` leads every line ("epoch 3/30"); total > 0 steps; `first` is where counting starts
  // (a resumed epoch starts in the middle: the rate and ETA count only what this run did).
  Progress(std::ostream& os, std::string label, int64_t total, ProgressOptions options,
           int64_t first = 0);
  // `done` steps of `total` finished; `items` processed since `first` (images); `metrics` is
  // shown as is ("loss 0.4123  acc 85.21%").
  void update(int64_t done, int64_t items, const std::string& metrics);
  // On a terminal, erases the line (the caller prints its summary in its place).
  void finish();

  double elapsed() const;           // seconds since construction
  double items_per_second() const;  // over everything since construction
  // Seconds left at the current rate (negative before the first step is done).
  double eta() const;
  // The line update() would print now (without the terminal's control characters).
  std::string line(const std::string& metrics) const;

 private:
  std::ostream& os_;
  std::string label_;
  int64_t total_, first_, done_, items_ = 0;
  ProgressOptions options_;
  double start_, last_draw_ = -1e300;
  bool drawn_ = false;
  double now() const;
};

// "0:42", "12:03", "1:02:03".
std::string format_duration(double seconds);
// printf's %.*g and %.*f: log and table numbers ("0.0015", "88.38").
std::string format_general(double x, int precision = 4);
std::string format_fixed(double x, int decimals);
// Whether file descriptor fd is a terminal (and TERM is not "dumb").
bool is_terminal(int fd);

}  // namespace vitk
