#pragma once
// Checks a breakdown table that a --profile flag printed (ops::profile::print_breakdown) for the
// sum relations that make it a breakdown: its lines add up to its total, the total agrees with
// the wall time StepProfile measured around the steps, and the shares add up to 100%. Sums only:
// no time is compared with an expectation of speed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

namespace vitk::test {

// The table whose header starts with `header` ("breakdown (--profile, steps 2-3, "), in `text`.
inline ::testing::AssertionResult breakdown_adds_up(const std::string& text,
                                                    const std::string& header) {
  const size_t at = text.find(header);
  if (at == std::string::npos) return ::testing::AssertionFailure() << "no '" << header << "'";
  std::istringstream in(text.substr(at));
  std::string line;
  std::getline(in, line);
  const size_t total_at = line.find("total "), measured_at = line.find(", measured ");
  if (total_at == std::string::npos || measured_at == std::string::npos)
    return ::testing::AssertionFailure() << "no total and measured time in '" << line << "'";
  const double total = std::stod(line.substr(total_at + 6));
  const double measured = std::stod(line.substr(measured_at + 11));
  double sum = 0, shares = 0;
  int rows = 0;
  while (std::getline(in, line) && line.rfind("  ", 0) == 0) {
    double ms = 0, share = 0;
    if (std::sscanf(line.c_str(), " %lf ms %lf%%", &ms, &share) != 2) break;
    sum += ms, shares += share, ++rows;
  }
  if (rows == 0) return ::testing::AssertionFailure() << "no rows under '" << header << "'";
  // Each printed figure is rounded: to 0.005 ms per row, to 0.05 ms for the totals.
  if (std::fabs(sum - total) > 0.005 * rows + 0.05)
    return ::testing::AssertionFailure() << "rows add up to " << sum << " ms, total " << total;
  if (std::fabs(shares - 100) > 0.05 * rows + 0.1)
    return ::testing::AssertionFailure() << "shares add up to " << shares << "%";
  // The table's clocks run just outside StepProfile's own: equal but for a hair.
  if (total < measured - 0.1 || total > measured * 1.02 + 0.1)
    return ::testing::AssertionFailure()
           << "total " << total << " ms against " << measured << " ms measured per step";
  return ::testing::AssertionSuccess();
}

}  // namespace vitk::test
