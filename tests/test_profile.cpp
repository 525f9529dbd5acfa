// ops::profile's printer and StepProfile (the --profile flags): what is counted, when it is
// printed, and the table's form. No timing is checked, only names, counts and structure.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/ops/profile.h"

namespace profile = vitk::ops::profile;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

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
