#include "common/dist/grad_reducer.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/dist/waiting.h"
#include "common/error.h"
#include "common/timer.h"

namespace vitk::dist {

struct GradReducer::Requests {
  std::vector<MPI_Request> list;
};

GradReducer::GradReducer(World& world, float* data, size_t n, size_t bucket_bytes)
    : world_(world),
      data_(data),
      n_(n),
      bucket_floats_(std::max<size_t>(1, bucket_bytes / sizeof(float))),
      requests_(std::make_unique<Requests>()) {
  // Every rank must cut the same buckets, or the all-reduces would pair the wrong ranges (or
  // wait forever): one small all-reduce checks it on every rank before any step.
  const int64_t floats = static_cast<int64_t>(n), per_bucket = static_cast<int64_t>(bucket_floats_);
  int64_t seen[5] = {floats, -floats, per_bucket, -per_bucket, !data && n > 0};
  world_.allreduce_max(seen, 5);
  if (seen[4])
    throw Error("GradReducer: no arena" + std::string(data ? " on another rank" : "") + " for " +
                std::to_string(n) + " floats");
  if (seen[0] != -seen[1] || seen[2] != -seen[3])
    throw Error("GradReducer: the ranks' arenas differ: from " + std::to_string(-seen[1]) + " to " +
                std::to_string(seen[0]) + " floats, buckets of " + std::to_string(-seen[3]) +
                " to " + std::to_string(seen[2]) + " floats (rank " +
                std::to_string(world_.rank()) + " has " + std::to_string(n) + " and " +
                std::to_string(bucket_floats_) + ")");
  for (size_t end = n; end > 0;) {
    const size_t begin = end > bucket_floats_ ? end - bucket_floats_ : 0;
    buckets_.push_back({begin, end});
    end = begin;
  }
}

GradReducer::~GradReducer() {
  // No exception may leave a destructor, and an error here has nobody left to tell. A peer that
  // is gone still ends the wait, at the collective timeout.
  if (requests_->list.empty()) return;
  try {
    wait_all();
  } catch (...) {
  }
}

void GradReducer::begin() {
  if (in_step_) throw Error("GradReducer: begin() again before finish() ended the step");
  in_step_ = true;
  next_ = 0;
}

void GradReducer::ready_from(size_t offset) {
  if (!in_step_) throw Error("GradReducer: ready_from() outside a step (call begin() first)");
  if (offset > n_)
    throw Error("GradReducer: ready_from(" + std::to_string(offset) + ") is beyond the arena of " +
                std::to_string(n_) + " floats");
  if (!world_.mpi() || world_.size() < 2) return;
  // Buckets are stored highest first, so the ones now ready are a run starting at next_.
  while (next_ < buckets_.size() && buckets_[next_].begin >= offset) start(buckets_[next_++]);
  progress();
}

void GradReducer::finish() {
  if (!in_step_) throw Error("GradReducer: finish() outside a step (call begin() first)");
  Timer timer;
  // Every bucket of this rank is under way from here: the point at which the other ranks learn
  // this rank has reached the step's all-reduce (waiting.h).
  if (world_.mpi() && world_.size() > 1) detail::enter_collective();
  ready_from(0);
  in_step_ = false;
  wait_all();
  wait_seconds_ = timer.seconds();
  total_wait_seconds_ += wait_seconds_;
}

void GradReducer::start(const Bucket& bucket) {
  // A bucket longer than one MPI count allows goes as several requests.
  const size_t step = detail::max_count();
  for (size_t at = bucket.begin; at < bucket.end; at += step) {
    const int count = static_cast<int>(std::min(step, bucket.end - at));
    MPI_Request request = MPI_REQUEST_NULL;
    detail::check(MPI_Iallreduce(MPI_IN_PLACE, data_ + at, count, MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD, &request),
                  "MPI_Iallreduce");
    requests_->list.push_back(request);
  }
}

void GradReducer::progress() {
  std::vector<MPI_Request>& list = requests_->list;
  if (list.empty()) return;
  int done = 0;
  detail::check(MPI_Testall(static_cast<int>(list.size()), list.data(), &done, MPI_STATUSES_IGNORE),
                "MPI_Testall");
  if (done) list.clear();
}

void GradReducer::wait_all() {
  std::vector<MPI_Request>& list = requests_->list;
  if (list.empty()) return;
  // The requests are cleared first: when the wait throws, nothing is waited for twice.
  std::vector<MPI_Request> waiting;
  waiting.swap(list);
  detail::wait_all(waiting.data(), static_cast<int>(waiting.size()), "MPI_Iallreduce", "gradients");
}

}  // namespace vitk::dist
