// The dispatcher in-process: how a subcommand's outcome becomes an exit code and one error line.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "tools/cli.h"

using namespace vitk::tools;

namespace {

struct Outcome {
  int code;
  std::string err;
};

// Runs `vitk fake ARGS...` against a registry holding one subcommand whose run() is `run`.
Outcome dispatch(std::function<int(const po::variables_map&)> run,
                 std::vector<std::string> args = {}) {
  Registry registry;
  Subcommand c;
  c.name = "fake";
  c.summary = "a subcommand for tests";
  c.example = "vitk fake --needed 1";
  c.add_options = [](po::options_description& o) {
    o.add_options()("needed", po::value<int>()->required(), "a required option");
  };
  c.run = std::move(run);
  registry.add(std::move(c));
  std::vector<std::string> argv_s = {"vitk", "fake"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  for (auto& a : argv_s) argv.push_back(a.c_str());
  testing::internal::CaptureStderr();
  int code = run_cli(registry, static_cast<int>(argv.size()), argv.data());
  return {code, testing::internal::GetCapturedStderr()};
}

}  // namespace

TEST(CliDispatch, ReturnsWhatRunReturns) {
  auto o = dispatch([](const po::variables_map& vm) { return vm["needed"].as<int>() == 4 ? 0 : 9; },
                    {"--needed", "4"});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.err, "");
}

TEST(CliDispatch, MissingRequiredOptionIsAUsageError) {
  auto o = dispatch([](const po::variables_map&) { return 0; });
  EXPECT_EQ(o.code, kExitUsage);
  EXPECT_NE(o.err.find("needed"), std::string::npos) << o.err;
}

TEST(CliDispatch, UsageErrorExitsTwoWithOneLine) {
  auto o = dispatch([](const po::variables_map&) -> int { throw vitk::UsageError("bad --needed"); },
                    {"--needed", "1"});
  EXPECT_EQ(o.code, kExitUsage);
  EXPECT_EQ(o.err, "vitk: error: bad --needed\n");
}

TEST(CliDispatch, RuntimeErrorExitsOneWithOneLine) {
  auto o = dispatch(
      [](const po::variables_map&) -> int { throw vitk::Error("model.h5: tensor 'w' is missing"); },
      {"--needed", "1"});
  EXPECT_EQ(o.code, kExitFailure);
  EXPECT_EQ(o.err, "vitk: error: model.h5: tensor 'w' is missing\n");
}

TEST(CliDispatch, AnyOtherExceptionExitsOne) {
  auto o = dispatch([](const po::variables_map&) -> int { throw std::out_of_range("index 7"); },
                    {"--needed", "1"});
  EXPECT_EQ(o.code, kExitFailure);
  EXPECT_NE(o.err.find("index 7"), std::string::npos) << o.err;
}
