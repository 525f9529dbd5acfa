// The progress display: plain lines in a log (exact text with a fake clock), one redrawn line on a
// terminal.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "common/progress.h"

using namespace vitk;

namespace {

// A clock the test moves by hand.
struct FakeClock {
  double now = 100.0;
  std::function<double()> fn() {
    return [this] { return now; };
  }
};

}  // namespace

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(42.4), "0:42");
  EXPECT_EQ(format_duration(723), "12:03");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, PlainLinesEveryNStepsAndAtTheEnd) {
  FakeClock clock;
  std::ostringstream os;
  ProgressOptions o;
  o.tty = false;
  o.line_every = 2;
  o.clock = clock.fn();
  Progress p(os, "epoch 1/3", 5, o);
  for (int step = 1; step <= 5; ++step) {
    clock.now += 2.0;  // 2 s per step of 10 images: 5 img/s
    p.update(step, step * 10, "loss " + std::to_string(step));
  }
  p.finish();
  EXPECT_EQ(os.str(),
            "epoch 1/3  step 2/5  loss 2  5.0 img/s  ETA 0:06\n"
            "epoch 1/3  step 4/5  loss 4  5.0 img/s  ETA 0:02\n"
            "epoch 1/3  step 5/5  loss 5  5.0 img/s  ETA 0:00\n");
  EXPECT_DOUBLE_EQ(p.items_per_second(), 5.0);
  EXPECT_DOUBLE_EQ(p.elapsed(), 10.0);
}

TEST(Progress, ResumedEpochCountsRateAndEtaFromWhereItStarted) {
  FakeClock clock;
  std::ostringstream os;
  ProgressOptions o;
  o.line_every = 10;
  o.unit = "batch";
  o.clock = clock.fn();
  Progress p(os, "epoch 2/2", 100, o, 60);  // steps 61.. of 100
  clock.now += 10.0;
  p.update(70, 40, "");  // 10 steps in 10 s: 30 left, 30 s
  EXPECT_EQ(os.str(), "epoch 2/2  batch 70/100  4.0 img/s  ETA 0:30\n");
}

TEST(Progress, NoLinesWhenLineEveryIsZero) {
  std::ostringstream os;
  ProgressOptions o;
  o.line_every = 0;
  Progress p(os, "validate", 3, o);
  for (int i = 1; i <= 3; ++i) p.update(i, i, "");
  p.finish();
  EXPECT_EQ(os.str(), "");
}

TEST(Progress, TerminalRedrawsOneLineAndErasesIt) {
  FakeClock clock;
  std::ostringstream os;
  ProgressOptions o;
  o.tty = true;
  o.bar_width = 10;
  o.redraw_seconds = 0.5;
  o.clock = clock.fn();
  Progress p(os, "epoch 1/1", 4, o);
  clock.now += 1;
  p.update(1, 8, "loss 1.5");   // drawn
  p.update(2, 16, "loss 1.4");  // same instant: throttled
  clock.now += 1;
  p.update(4, 32, "loss 1.2");  // the last one is always drawn
  p.finish();
  const std::string s = os.str();
  EXPECT_EQ(s.find('\n'), std::string::npos) << s;
  EXPECT_NE(s.find("\repoch 1/1 [##........] 1/4  loss 1.5  8.0 img/s  ETA 0:03\x1b[K"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("loss 1.4"), std::string::npos) << s;
  EXPECT_NE(s.find("[##########] 4/4  loss 1.2  16.0 img/s  ETA 0:00"), std::string::npos) << s;
  EXPECT_EQ(s.substr(s.size() - 4), "\r\x1b[K");
}
