// ops::profile's printer and StepProfile (the --profile flags): what is counted, when it is
// printed, and the table's form. No timing is checked, only names, counts and structure.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/ops/profile.h"
#include "util/profile_table.h"
#include "util/test_util.h"

namespace profile = vitk::ops::profile;

namespace {

using vitk::test::contains;

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// One "step": two ops, one inside the other, as layers open them.
void fake_step() {
  profile::Scope outer("layer", 4, 5, 6);
  { profile::Scope inner("linear_forward", 7, 8, 9); }
  { profile::Scope inner("linear_forward", 7, 8, 9); }
}

// A step that takes some time in each scope (sleeps: the test checks sums, never a speed).
void slow_step() {
  const auto nap = [] { std::this_thread::sleep_for(std::chrono::microseconds(300)); };
  nap();
  profile::Scope outer("layer", 4, 5, 6);
  nap();
  {
    profile::Scope inner("linear_forward", 7, 8, 9);
    nap();
    {
      profile::Scope innermost("gelu_forward", 7, 8, 0);
      nap();
    }
  }
  nap();
}

}  // namespace

TEST(Profile, PrintBreakdownShowsMillisecondsPerUnitSharesAndCalls) {
  std::vector<profile::Entry> entries(2);
  entries[0].name = "linear_forward 7x8x9";
  entries[0].seconds = 0.006;  // over 3 steps: 2 ms per step
  entries[0].calls = 6;
  entries[1].name = "step (rest)";
  entries[1].seconds = 0.003;
  entries[1].calls = 3;
  std::ostringstream out;
  profile::print_breakdown(out, entries, 3, "a test");
  EXPECT_EQ(out.str(),
            "breakdown (a test, exclusive ms per step; total 3.0 ms):\n"
            "      2.00 ms  66.7%  x2    linear_forward 7x8x9\n"
            "      1.00 ms  33.3%  x1    step (rest)\n");
  std::ostringstream measured;
  profile::print_breakdown(measured, entries, 3, "a test", "batch", 0.0093);
  EXPECT_EQ(measured.str().substr(0, measured.str().find('\n')),
            "breakdown (a test, exclusive ms per batch; total 3.0 ms, measured 3.1 ms):");
  std::ostringstream none;
  profile::print_breakdown(none, {}, 3, "nothing");
  profile::print_breakdown(none, entries, 0, "no steps");
  EXPECT_EQ(none.str(), "");
}

TEST(Profile, StepProfileCountsOnlyItsStepsAfterTheSkippedOnes) {
  profile::StepProfile steps("step", 0, 1);
  EXPECT_FALSE(profile::enabled()) << "off outside begin() .. end()";
  for (int i = 0; i < 4; ++i) {
    steps.begin();
    EXPECT_TRUE(profile::enabled());
    fake_step();
    EXPECT_FALSE(steps.end()) << "every = 0: never due";
    EXPECT_FALSE(profile::enabled());
    fake_step();  // between steps (validation, saving): not counted
  }
  EXPECT_EQ(steps.counted(), 3) << "the first step is skipped";
  std::ostringstream out;
  steps.print(out, "steps 2-4");
  const std::string text = out.str();
  EXPECT_TRUE(contains(text, "breakdown (steps 2-4, exclusive ms per step; total ")) << text;
  EXPECT_TRUE(contains(text, "x2    linear_forward 7x8x9\n")) << text;
  EXPECT_TRUE(contains(text, "x1    layer 4x5x6\n")) << text;
  EXPECT_TRUE(contains(text, "x1    step (rest)\n")) << text;
  EXPECT_EQ(count_of(text, "\n"), 4) << text;
  EXPECT_EQ(steps.counted(), 0) << "print() starts counting afresh";
  std::ostringstream again;
  steps.print(again, "nothing new");
  EXPECT_EQ(again.str(), "") << "nothing counted since the last print";
}

TEST(Profile, StepProfileIsDueEveryNStepsAndPrintsEachWindow) {
  profile::StepProfile batches("batch", 2, 0);
  std::ostringstream out;
  int due = 0;
  for (int i = 0; i < 5; ++i) {
    batches.begin();
    fake_step();
    if (batches.end()) {
      ++due;
      batches.print(out, "window " + std::to_string(due));
    }
  }
  EXPECT_EQ(due, 2);
  EXPECT_EQ(batches.counted(), 1);
  batches.print(out, "the rest");
  const std::string text = out.str();
  EXPECT_EQ(count_of(text, "breakdown ("), 3) << text;
  EXPECT_TRUE(contains(text, "breakdown (window 1, exclusive ms per batch;")) << text;
  EXPECT_TRUE(contains(text, "breakdown (the rest, exclusive ms per batch;")) << text;
  EXPECT_EQ(count_of(text, "batch (rest)"), 3) << text;
  EXPECT_EQ(count_of(text, "x2    linear_forward 7x8x9"), 3) << "calls per batch, each window";
}

TEST(Profile, TheExclusiveTimesAddUpToTheStepsWallTime) {
  profile::StepProfile steps("step", 0, 1);
  for (int i = 0; i < 4; ++i) {
    steps.begin();
    slow_step();
    steps.end();
  }
  ASSERT_EQ(steps.counted(), 3);
  const double wall = steps.wall_seconds();
  double sum = 0;
  for (const profile::Entry& e : profile::entries()) {
    EXPECT_GE(e.seconds, 0) << e.name;
    sum += e.seconds;
  }
  // Exclusive times cover each step's wall time once: nothing lost, nothing counted twice. The
  // table's clock is read just outside StepProfile's own, so the sum may exceed it by a hair.
  ASSERT_GT(wall, 0);
  EXPECT_GE(sum, wall * (1 - 1e-9));
  EXPECT_LE(sum, wall * 1.02 + 1e-3) << "sum " << sum << " s, wall " << wall << " s";
  // Every scope got its own share: the sleeps put time in each.
  for (const char* name :
       {"step (rest)", "layer 4x5x6", "linear_forward 7x8x9", "gelu_forward 7x8x0"}) {
    bool found = false;
    for (const profile::Entry& e : profile::entries())
      if (e.name == name) {
        found = true;
        EXPECT_EQ(e.calls, 3) << name;
        EXPECT_GT(e.seconds, 0) << name;
      }
    EXPECT_TRUE(found) << name;
  }
  // The printed total and the measured wall time are the same two sums, per step.
  std::ostringstream out;
  steps.print(out, "sum");
  const std::string text = out.str();
  const size_t total = text.find("total "), measured = text.find(", measured ");
  ASSERT_NE(total, std::string::npos) << text;
  ASSERT_NE(measured, std::string::npos) << text;
  const double total_ms = std::stod(text.substr(total + 6));
  const double measured_ms = std::stod(text.substr(measured + 11));
  EXPECT_NEAR(total_ms, sum * 1e3 / 3, 0.051) << text;
  EXPECT_NEAR(measured_ms, wall * 1e3 / 3, 0.051) << text;
  EXPECT_EQ(steps.wall_seconds(), 0) << "print() starts measuring afresh";
}

TEST(Profile, TheCliTablesCheckFindsTablesThatDoNotAddUp) {
  const std::string head = "breakdown (x, exclusive ms per step; total 3.0 ms, measured ";
  const std::string rows =
      "      2.00 ms  66.7%  x2    linear_forward 7x8x9\n"
      "      1.00 ms  33.3%  x1    step (rest)\n";
  EXPECT_TRUE(vitk::test::breakdown_adds_up(head + "3.0 ms):\n" + rows, "breakdown (x"));
  EXPECT_FALSE(vitk::test::breakdown_adds_up(head + "3.5 ms):\n" + rows, "breakdown (x"))
      << "the total is not the measured step";
  EXPECT_FALSE(vitk::test::breakdown_adds_up(
      head + "3.0 ms):\n      2.50 ms  66.7%  x2    linear_forward 7x8x9\n", "breakdown (x"))
      << "the rows do not add up to the total";
  EXPECT_FALSE(vitk::test::breakdown_adds_up(head + "3.0 ms):\n" + rows, "breakdown (y"));
}
