// common/dist/world.h across two ranks (run by mpirun: ctest -R mpi_two_ranks). Inputs depend on
// the rank and every rank can work out the other's, so each checks the result itself. Checks are
// EXPECTs, not ASSERTs, so that a failure on one rank does not leave the other waiting in a
// collective.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/dist/world.h"
#include "common/error.h"
#include "mpi_test_util.h"

using vitk::dist::World;
using vitk::dist::world;
using vitk::dist::mpi_test::SmallCounts;

namespace {

float float_value(size_t i, int rank) {
  return vitk::dist::mpi_test::input_float(i, rank);
}
double double_value(size_t i, int rank) {
  return vitk::dist::mpi_test::input_double(i, rank);
}
int64_t int_value(size_t i, int rank) {
  return (int64_t{1} << 40) * (rank + 1) - static_cast<int64_t>(i) * (rank ? 3 : -7);
}

void check_sums(const World& w) {
  const size_t n = 1003;
  std::vector<float> f(n);
  std::vector<double> d(n);
  std::vector<int64_t> i(n);
  for (size_t k = 0; k < n; ++k) {
    f[k] = float_value(k, w.rank());
    d[k] = double_value(k, w.rank());
    i[k] = int_value(k, w.rank());
  }
  w.allreduce_sum(f.data(), n);
  w.allreduce_sum(d.data(), n);
  w.allreduce_sum(i.data(), n);
  size_t wrong_f = 0, wrong_d = 0, wrong_i = 0;
  for (size_t k = 0; k < n; ++k) {
    wrong_f += f[k] != float_value(k, 0) + float_value(k, 1);
    wrong_d += d[k] != double_value(k, 0) + double_value(k, 1);
    wrong_i += i[k] != int_value(k, 0) + int_value(k, 1);
  }
  EXPECT_EQ(wrong_f, 0u);
  EXPECT_EQ(wrong_d, 0u);
  EXPECT_EQ(wrong_i, 0u);
}

}  // namespace

TEST(MpiWorld, TwoDistinctRanks) {
  const World& w = world();
  EXPECT_TRUE(w.mpi());
  EXPECT_EQ(w.size(), 2);
  EXPECT_EQ(w.root(), w.rank() == 0);
  EXPECT_EQ(w.allgather(std::to_string(w.rank())), (std::vector<std::string>{"0", "1"}));
  const std::string launch = w.launch();
  EXPECT_NE(launch.find("mpirun (Open MPI"), std::string::npos) << launch;
  EXPECT_NE(launch.find("rank " + std::to_string(w.rank()) + " of 2 on host "), std::string::npos)
      << launch;
  EXPECT_EQ(launch.find('\n'), std::string::npos) << launch;
}

TEST(MpiWorld, AllreduceSum) {
  check_sums(world());
  // Empty buffers are fine.
  world().allreduce_sum(static_cast<float*>(nullptr), 0);
}

TEST(MpiWorld, AllreduceSumInChunks) {
  SmallCounts counts(7);  // 1003 elements in 144 calls
  check_sums(world());
}

TEST(MpiWorld, AllreduceMax) {
  const World& w = world();
  std::vector<int64_t> v = {w.rank() ? -5 : -9, w.rank() ? INT64_MAX : 3, w.rank() ? INT64_MIN : 0,
                            100 * (w.rank() + 1)};
  w.allreduce_max(v.data(), v.size());
  EXPECT_EQ(v, (std::vector<int64_t>{-5, INT64_MAX, 0, 200}));
}

TEST(MpiWorld, AllgatherOfDifferentLengths) {
  const World& w = world();
  const std::vector<std::string> mine = {"", std::string("rank one\0binary\n", 16)};
  EXPECT_EQ(w.allgather(mine[w.rank()]), mine);
  const std::vector<std::string> both_empty = {"", ""};
  EXPECT_EQ(w.allgather(""), both_empty);
  // Longer than a round of MPI_Allgatherv on one rank only.
  const std::vector<std::string> long_short = {std::string(1000, 'x') + "end", "ab"};
  {
    SmallCounts counts(5);
    EXPECT_EQ(w.allgather(long_short[w.rank()]), long_short);
  }
  EXPECT_EQ(w.allgather(long_short[w.rank()]), long_short);
}

// Lines each rank filled where it computed them (even lines on rank 0, odd on rank 1, with a
// colon, a digit start and a NUL inside) come back whole on both ranks; a rank that sends fewer
// lines is an error on the rank that reads them.
TEST(MpiWorld, GatherLinesPutsEachRanksLinesInPlace) {
  const World& w = world();
  const std::vector<std::string> all = {"+a bag above a coat", "-", "12:ab", std::string("x\0y", 3),
                                        ""};
  std::vector<std::string> mine(all.size());
  for (size_t i = static_cast<size_t>(w.rank()); i < all.size(); i += 2) mine[i] = all[i];
  EXPECT_EQ(w.gather_lines(mine), all);
  std::vector<std::string> uneven(w.rank() == 0 ? 3 : 2, "z");
  EXPECT_THROW(w.gather_lines(uneven), vitk::Error);
}

TEST(MpiWorld, BroadcastFromRankOne) {
  const World& w = world();
  std::string text = w.rank() == 1 ? std::string("from rank one\0!", 15) : "something much longer";
  w.broadcast(text, 1);
  EXPECT_EQ(text, std::string("from rank one\0!", 15));
  // Rank 0 sends nothing: the other's text becomes empty.
  text = w.rank() == 0 ? "" : "to be replaced";
  w.broadcast(text, 0);
  EXPECT_EQ(text, "");
  {
    SmallCounts counts(3);
    text = w.rank() == 1 ? std::string(100, 'q') : "";
    w.broadcast(text, 1);
    EXPECT_EQ(text, std::string(100, 'q'));
  }
  EXPECT_THROW(w.broadcast(text, 2), vitk::Error);
}

TEST(MpiWorld, Barrier) {
  world().barrier();
  world().barrier();
}

TEST(MpiWorld, HostOfNamesEveryRanksHost) {
  World& w = world();
  // Both ranks run on this machine: the same host, and each rank's own is host().
  EXPECT_EQ(w.host_of(w.rank()), w.host());
  EXPECT_EQ(w.host_of(1 - w.rank()), w.host());
  EXPECT_THROW(w.host_of(2), vitk::Error);
  EXPECT_THROW(w.host_of(-1), vitk::Error);
}

TEST(MpiWorld, ARankLateByLessThanTheTimeoutIsWaitedFor) {
  World& w = world();
  const double before = w.collective_timeout();
  w.set_collective_timeout(20);
  // Rank 1 arrives 1.5 s late, in a sum and in a broadcast: rank 0 waits (and sends its count
  // every half second meanwhile) and the results are whole.
  if (w.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  double v[2] = {1.0 + w.rank(), 10.0};
  w.allreduce_sum(v, 2);
  EXPECT_EQ(v[0], 3.0);
  EXPECT_EQ(v[1], 20.0);
  if (w.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::string text = w.rank() == 0 ? "from rank zero" : "";
  w.broadcast(text, 0);
  EXPECT_EQ(text, "from rank zero");
  w.set_collective_timeout(before);
}

TEST(MpiWorld, CollectiveTimeoutRange) {
  World w;
  w.set_collective_timeout(0);
  EXPECT_EQ(w.collective_timeout(), 0);
  EXPECT_THROW(w.set_collective_timeout(-1), vitk::Error);
  EXPECT_THROW(w.set_collective_timeout(std::nan("")), vitk::Error);
  EXPECT_THROW(w.set_collective_timeout(2e6), vitk::Error);
}
