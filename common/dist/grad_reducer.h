#pragma once
// Sums the flat gradient arena over all ranks in buckets while backward is still running, as
// PyTorch's DistributedDataParallel does with its 25 MB buckets: communication of the last layers'
// gradients overlaps the backward of the first ones.
//
// The buckets are contiguous ranges of the arena cut from its END backwards, each of about
// bucket_bytes, because backward finishes the last parameters first; the lowest range, cut last,
// may be smaller. A step is
//
//   reducer.begin();                  // before backward
//   reducer.ready_from(offset);       // after each block's backward: grads[offset, n) are final
//   ...
//   reducer.finish();                 // after backward: grads hold the sums over all ranks
//
// ready_from starts (MPI_Iallreduce, in place, MPI_SUM) every bucket lying wholly at >= offset that
// has not been started, and tests the outstanding ones so that Open MPI progresses them (it has no
// progress thread). Offsets may come in any order; a smaller one covers more. finish() starts what
// is left, waits for everything and records the time it took, so that --profile can show the
// all-reduce wait.
//
// The result is the SUM over ranks, not the mean: the caller scales its loss so that the sum is the
// gradient it wants. With two ranks every element is a + b whatever the buckets, so the result is
// bitwise the same for any bucket size and any ready_from sequence; with more ranks the order of
// the additions is Open MPI's choice for each bucket's length.
//
// In a world of one (and an MPI world of size 1) nothing is started and the arena is untouched.
// Only the main thread calls these (MPI_THREAD_FUNNELED).
#include <cstddef>
#include <memory>
#include <vector>

#include "common/dist/world.h"

namespace vitk::dist {

class GradReducer {
 public:
  static constexpr size_t kDefaultBucketBytes = size_t{25} << 20;

  // One contiguous range [begin, end) of the arena, in floats.
  struct Bucket {
    size_t begin = 0, end = 0;
    size_t size() const { return end - begin; }
  };

  // `data` holds n floats and must outlive the reducer. A bucket holds bucket_bytes / 4 floats
  // (at least one). Under MPI this is a collective: every rank constructs its reducer at the same
  // point with the same n and bucket size (vitk::Error on every rank otherwise).
  GradReducer(World& world, float* data, size_t n, size_t bucket_bytes = kDefaultBucketBytes);
  // Waits for anything still in flight (a step abandoned by an exception), so that MPI never
  // writes into an arena that is gone.
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // In the order they are started: buckets()[0] ends at n, each next one ends where the previous
  // one begins, the last one begins at 0. Empty when n is 0.
  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t bucket_floats() const { return bucket_floats_; }

  // A new step; vitk::Error if the previous one was not finished.
  void begin();
  // Every float at index >= offset is final for this step. vitk::Error outside a step or for an
  // offset beyond n.
  void ready_from(size_t offset);
  // Starts what is left and waits for all; then the arena holds the sums.
  void finish();

  // Buckets started so far in this step (all of them after finish()).
  size_t started() const { return next_; }
  // Seconds spent in the last finish(), and in every finish() so far.
  double wait_seconds() const { return wait_seconds_; }
  double total_wait_seconds() const { return total_wait_seconds_; }

 private:
  struct Requests;  // the MPI requests in flight (mpi.h stays in the .cpp)

  void start(const Bucket& bucket);
  void progress();
  void wait_all();

  World& world_;
  float* data_;
  size_t n_;
  size_t bucket_floats_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<Requests> requests_;
  bool in_step_ = false;
  size_t next_ = 0;  // buckets_[next_] is the next one to start
  double wait_seconds_ = 0;
  double total_wait_seconds_ = 0;
};

}  // namespace vitk::dist
