// common/dist/grad_reducer.h across two ranks: for every bucket size and every order of
// ready_from calls the arena ends as one MPI_Allreduce of the whole arena leaves it, bit for bit,
// and holds a + b element by element.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/dist/grad_reducer.h"
#include "common/dist/world.h"
#include "common/error.h"
#include "mpi_test_util.h"

using vitk::dist::GradReducer;
using vitk::dist::world;

namespace {

// Orders of ready_from calls within a step.
enum class Calls { kBackward, kNone, kOutOfOrder };

struct Case {
  size_t n;             // floats in the arena
  size_t bucket_bytes;  // GradReducer's bucket size
  Calls calls;
  size_t max_count = 0;  // when not 0, the largest count of one MPI call (chunked buckets)
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* calls[] = {"Backward", "None", "OutOfOrder"};
  return "n" + std::to_string(c.n) + "_bucket" + std::to_string(c.bucket_bytes) + "_" +
         calls[static_cast<int>(c.calls)] +
         (c.max_count ? "_count" + std::to_string(c.max_count) : "");
}

// Each rank's gradient; every rank can work out the other's.
float grad(size_t i, int rank) {
  return vitk::dist::mpi_test::input_float(i, rank);
}

std::vector<size_t> offsets(const Case& c) {
  const size_t n = c.n;
  switch (c.calls) {
    case Calls::kBackward: {  // 8 blocks, the last one's backward first
      std::vector<size_t> v;
      for (size_t block = 8; block-- > 0;) v.push_back(n * block / 8);
      return v;
    }
    case Calls::kNone:
      return {};
    case Calls::kOutOfOrder:
      return {n / 2, 3 * n / 4, n / 3, n, n / 3, n > 0 ? n - 1 : 0, 1 % (n + 1), n / 2};
  }
  return {};
}

class MpiGradReducer : public ::testing::TestWithParam<Case> {};

TEST_P(MpiGradReducer, SumsLikeOneAllreduce) {
  const Case& c = GetParam();
  const int rank = world().rank();
  std::vector<float> data(c.n), reference(c.n);
  for (size_t i = 0; i < c.n; ++i) data[i] = reference[i] = grad(i, rank);
  ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, reference.data(), static_cast<int>(c.n), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD),
            MPI_SUCCESS);

  std::optional<vitk::dist::mpi_test::SmallCounts> counts;
  if (c.max_count) counts.emplace(c.max_count);
  GradReducer reducer(world(), data.data(), c.n, c.bucket_bytes);
  const auto& buckets = reducer.buckets();
  // Two steps: the second sums the first one's sums, which doubles them exactly.
  for (int step = 0; step < 2; ++step) {
    reducer.begin();
    size_t lowest = c.n;
    for (size_t offset : offsets(c)) {
      reducer.ready_from(offset);
      lowest = std::min(lowest, offset);
      size_t ready = 0;
      while (ready < buckets.size() && buckets[ready].begin >= lowest) ++ready;
      EXPECT_EQ(reducer.started(), ready) << "after ready_from(" << offset << ")";
    }
    reducer.finish();
    EXPECT_EQ(reducer.started(), buckets.size());
    EXPECT_GE(reducer.wait_seconds(), 0.0);
    EXPECT_GE(reducer.total_wait_seconds(), reducer.wait_seconds());
    if (step == 0) {
      // (memcmp may not be given the null pointer of an empty vector.)
      EXPECT_TRUE(c.n == 0 || std::memcmp(data.data(), reference.data(), c.n * sizeof(float)) == 0)
          << "not bitwise the same as one MPI_Allreduce";
    }
    size_t wrong = 0, first_wrong = c.n;
    for (size_t i = 0; i < c.n; ++i) {
      const float sum = grad(i, 0) + grad(i, 1);
      const float want = step == 0 ? sum : 2 * sum;
      if (data[i] != want && wrong++ == 0) first_wrong = i;
    }
    EXPECT_EQ(wrong, 0u) << "step " << step << ", first at " << first_wrong;
  }
}

TEST(MpiGradReducerArena, RanksWithDifferentArenasAreRefused) {
  std::vector<float> data(200);
  const size_t n = world().rank() == 0 ? 100 : 200;
  try {
    GradReducer reducer(world(), data.data(), n, 64);
    ADD_FAILURE() << "no error for arenas of 100 and 200 floats";
  } catch (const vitk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("from 100 to 200 floats"), std::string::npos) << e.what();
  }
  try {
    GradReducer reducer(world(), data.data(), 100, world().rank() == 0 ? 64 : 128);
    ADD_FAILURE() << "no error for buckets of 16 and 32 floats";
  } catch (const vitk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("buckets of 16 to 32 floats"), std::string::npos)
        << e.what();
  }
}

constexpr size_t kSmall = 3001;
constexpr size_t kMb25 = GradReducer::kDefaultBucketBytes;

INSTANTIATE_TEST_SUITE_P(
    Buckets, MpiGradReducer,
    ::testing::Values(Case{kSmall, 4, Calls::kBackward}, Case{kSmall, 4, Calls::kNone},
                      Case{kSmall, 4, Calls::kOutOfOrder}, Case{kSmall, 2, Calls::kBackward},
                      Case{kSmall, 28, Calls::kBackward}, Case{kSmall, 28, Calls::kNone},
                      Case{kSmall, 28, Calls::kOutOfOrder}, Case{kSmall, 1024, Calls::kBackward},
                      Case{kSmall, 1024, Calls::kNone}, Case{kSmall, 1024, Calls::kOutOfOrder},
                      Case{kSmall, kMb25, Calls::kBackward}, Case{kSmall, kMb25, Calls::kNone},
                      Case{kSmall, kMb25, Calls::kOutOfOrder},
                      // Two 25 MB buckets and a smaller one below them.
                      Case{2 * (kMb25 / 4) + 1001, kMb25, Calls::kBackward},
                      Case{2 * (kMb25 / 4) + 1001, kMb25, Calls::kOutOfOrder},
                      // Buckets longer than one MPI call's count, sent as several requests.
                      Case{kSmall, 1024, Calls::kBackward, 37},
                      Case{kSmall, 1024, Calls::kOutOfOrder, 37}, Case{0, 1024, Calls::kBackward},
                      Case{1, 1024, Calls::kOutOfOrder}),
    case_name);

}  // namespace
