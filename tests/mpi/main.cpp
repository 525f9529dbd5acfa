// main() of vitk_mpi_tests, run by mpirun on two ranks (tests/CMakeLists.txt, mpi_two_ranks):
// joins the MPI world, runs the tests on every rank in the same order and returns this rank's
// result, so that mpirun fails when any rank fails. Rank 0 prints GoogleTest's usual report;
// the other ranks print only their failures, each line marked with the rank.
#include <gtest/gtest.h>

#include <exception>
#include <iostream>

#include "common/dist/world.h"

namespace {

class RankFailures : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailures(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::cerr << "[rank " << rank_ << "] " << (result.file_name() ? result.file_name() : "?") << ":"
              << result.line_number() << ": failure\n"
              << result.summary() << std::endl;
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::cerr << "[rank " << rank_ << "] FAILED " << info.test_suite_name() << "." << info.name()
                << std::endl;
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    vitk::dist::init(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "vitk_mpi_tests: " << e.what() << std::endl;
    return vitk::dist::leave(1);
  }
  ::testing::InitGoogleTest(&argc, argv);
  const vitk::dist::World& world = vitk::dist::world();
  if (!world.root()) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailures(world.rank()));
  }
  // A rank that failed leaves without finalizing, so that mpirun ends the job at once.
  return vitk::dist::leave(RUN_ALL_TESTS());
}
