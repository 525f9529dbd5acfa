// common/dist in a world of one: what every run without an MPI launcher gets. Collectives leave
// their data alone, and the gradient reducer starts nothing but still cuts its buckets as it would
// under MPI. The same code across two real ranks: tests/mpi/ (ctest -R mpi_two_ranks).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/dist/grad_reducer.h"
#include "common/dist/world.h"
#include "common/error.h"
#include "util/test_util.h"

using vitk::dist::GradReducer;
using vitk::dist::World;
using vitk::test::EnvVar;

namespace {

// Values that make a changed element show.
std::vector<float> arena(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f * static_cast<float>(i % 1000) - 7.0f;
  return v;
}

// The buckets of a reducer over n floats cover [0, n) exactly, contiguously from the end, each of
// `floats` floats but the lowest, which holds the rest.
void expect_buckets(size_t n, size_t bucket_bytes, size_t floats) {
  SCOPED_TRACE("n " + std::to_string(n) + ", bucket_bytes " + std::to_string(bucket_bytes));
  World one;
  std::vector<float> data(n);
  GradReducer reducer(one, data.data(), n, bucket_bytes);
  EXPECT_EQ(reducer.bucket_floats(), floats);
  const auto& buckets = reducer.buckets();
  ASSERT_EQ(buckets.size(), (n + floats - 1) / floats);
  size_t end = n;
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_EQ(buckets[b].end, end) << "bucket " << b;
    EXPECT_LT(buckets[b].begin, buckets[b].end) << "bucket " << b;
    EXPECT_LE(buckets[b].size(), floats) << "bucket " << b;
    if (b + 1 < buckets.size()) {
      EXPECT_EQ(buckets[b].size(), floats) << "bucket " << b;
    }
    end = buckets[b].begin;
  }
  EXPECT_EQ(end, 0u);
}

}  // namespace

TEST(DistWorld, WorldOfOne) {
  World one;
  EXPECT_EQ(one.rank(), 0);
  EXPECT_EQ(one.size(), 1);
  EXPECT_TRUE(one.root());
  EXPECT_FALSE(one.mpi());
  EXPECT_EQ(one.launch(), "not under MPI (a world of one)");
  // The test binary runs without a launcher and never calls init().
  EXPECT_FALSE(vitk::dist::world().mpi());
  EXPECT_EQ(vitk::dist::world().size(), 1);
}

TEST(DistWorld, CollectivesOfOneLeaveDataAlone) {
  World one;
  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  std::vector<double> d = {1e300, -0.0, 2.5};
  std::vector<int64_t> i = {INT64_MIN, 0, INT64_MAX};
  one.allreduce_sum(f.data(), f.size());
  one.allreduce_sum(d.data(), d.size());
  one.allreduce_sum(i.data(), i.size());
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(d, (std::vector<double>{1e300, -0.0, 2.5}));
  EXPECT_TRUE(std::signbit(d[1]));
  EXPECT_EQ(i, (std::vector<int64_t>{INT64_MIN, 0, INT64_MAX}));
  one.allreduce_max(i.data(), i.size());
  EXPECT_EQ(i, (std::vector<int64_t>{INT64_MIN, 0, INT64_MAX}));
  one.allreduce_sum(static_cast<float*>(nullptr), 0);

  EXPECT_EQ(one.allgather("mine"), std::vector<std::string>{"mine"});
  EXPECT_EQ(one.allgather(""), std::vector<std::string>{""});
  EXPECT_EQ(one.gather_lines({"a", "", "b:c"}), (std::vector<std::string>{"a", "", "b:c"}));
  std::string text("a\0b", 3);
  one.broadcast(text, 0);
  EXPECT_EQ(text, std::string("a\0b", 3));
  one.barrier();
}

TEST(DistWorld, BroadcastFromARankNotInTheWorldIsAnError) {
  World one;
  std::string text = "x";
  for (int root : {1, -1}) {
    try {
      one.broadcast(text, root);
      ADD_FAILURE() << "no error for root " << root;
    } catch (const vitk::Error& e) {
      EXPECT_NE(std::string(e.what()).find("root rank " + std::to_string(root)), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(text, "x");
}

TEST(DistWorld, AbortOfOneExitsWithTheCode) {
  EXPECT_EXIT(World().abort("data/train.h5: truncated", 3), ::testing::ExitedWithCode(3),
              "^vitk: error: data/train.h5: truncated\n$");
}

TEST(DistWorld, LaunchersAreRecognisedByTheirEnvironment) {
  EnvVar a("OMPI_COMM_WORLD_SIZE", std::nullopt), b("PMIX_RANK", std::nullopt),
      c("PMI_RANK", std::nullopt), d("PMI_SIZE", std::nullopt);
  EXPECT_FALSE(vitk::dist::started_by_mpi_launcher());
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    EnvVar set(name, "2");
    EXPECT_TRUE(vitk::dist::started_by_mpi_launcher()) << name;
  }
  EnvVar empty("OMPI_COMM_WORLD_SIZE", "");
  EXPECT_FALSE(vitk::dist::started_by_mpi_launcher());
}

TEST(DistWorld, LargestCountIsChecked) {
  EXPECT_THROW(vitk::dist::detail::set_max_count(0), vitk::Error);
  EXPECT_THROW(vitk::dist::detail::set_max_count(size_t{1} << 31), vitk::Error);
  EXPECT_EQ(vitk::dist::detail::max_count(), size_t{INT32_MAX});
}

TEST(DistGradReducer, BucketsAreCutFromTheEnd) {
  expect_buckets(0, 1024, 256);
  expect_buckets(1, 1024, 256);
  expect_buckets(255, 1024, 256);
  expect_buckets(256, 1024, 256);
  expect_buckets(257, 1024, 256);
  expect_buckets(1000, 40, 10);
  expect_buckets(1001, 40, 10);
  expect_buckets(1009, 40, 10);
  expect_buckets(10, 4, 1);
  expect_buckets(10, 7, 1);  // not a whole number of floats: rounded down
  expect_buckets(10, 3, 1);  // smaller than one float: one float
  expect_buckets(10, 0, 1);
  expect_buckets(10, 10 << 20, 10 << 18);  // one bucket smaller than bucket_bytes
  const size_t default_floats = GradReducer::kDefaultBucketBytes / 4;
  EXPECT_EQ(default_floats, size_t{25} << 18);
  expect_buckets(2 * default_floats + 5, GradReducer::kDefaultBucketBytes, default_floats);
}

TEST(DistGradReducer, LowestBucketHoldsTheRest) {
  World one;
  std::vector<float> data(1001);
  GradReducer reducer(one, data.data(), data.size(), 40);
  ASSERT_EQ(reducer.buckets().size(), 101u);
  EXPECT_EQ(reducer.buckets().front().begin, 991u);
  EXPECT_EQ(reducer.buckets().front().end, 1001u);
  EXPECT_EQ(reducer.buckets().back().begin, 0u);
  EXPECT_EQ(reducer.buckets().back().end, 1u);
}

TEST(DistGradReducer, WorldOfOneLeavesTheArenaUntouched) {
  World one;
  const size_t n = 5000;
  std::vector<float> data = arena(n);
  const std::vector<float> before = data;
  GradReducer reducer(one, data.data(), n, 1024);
  for (int step = 0; step < 3; ++step) {
    reducer.begin();
    for (size_t offset : {size_t{4000}, size_t{2500}, size_t{4999}, size_t{n}, size_t{0}})
      reducer.ready_from(offset);
    EXPECT_EQ(reducer.started(), 0u);
    reducer.finish();
    EXPECT_EQ(reducer.started(), 0u);
    EXPECT_GE(reducer.wait_seconds(), 0.0);
    EXPECT_GE(reducer.total_wait_seconds(), reducer.wait_seconds());
  }
  EXPECT_EQ(std::memcmp(data.data(), before.data(), n * sizeof(float)), 0);

  // An empty arena has nothing to do.
  GradReducer empty(one, nullptr, 0);
  EXPECT_TRUE(empty.buckets().empty());
  empty.begin();
  empty.ready_from(0);
  empty.finish();
}

TEST(DistGradReducer, CallsOutOfOrderAreErrors) {
  World one;
  std::vector<float> data(10);
  GradReducer reducer(one, data.data(), data.size(), 8);
  EXPECT_THROW(reducer.ready_from(0), vitk::Error);
  EXPECT_THROW(reducer.finish(), vitk::Error);
  reducer.begin();
  EXPECT_THROW(reducer.begin(), vitk::Error);
  try {
    reducer.ready_from(11);
    ADD_FAILURE() << "no error for an offset beyond the arena";
  } catch (const vitk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ready_from(11)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("10 floats"), std::string::npos) << e.what();
  }
  reducer.ready_from(10);
  reducer.finish();
  reducer.begin();
  reducer.finish();
  EXPECT_THROW(GradReducer(one, nullptr, 3), vitk::Error);
}
