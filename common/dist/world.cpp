#include "common/dist/world.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <iostream>

#include "common/dist/waiting.h"
#include "common/error.h"

namespace vitk::dist {

namespace {

bool g_started = false;  // MPI_Init_thread succeeded in this process
bool g_failed = false;   // leave() was given a failure: never finalize
size_t g_max_count = INT_MAX;

bool has_env(const char* name) {
  const char* value = std::getenv(name);
  return value && *value;
}

// Who started us, for launch(): the launcher's name as a user would type it.
std::string launcher_name() {
  const bool slurm = has_env("SLURM_JOB_ID");
  if (has_env("OMPI_COMM_WORLD_SIZE")) return "mpirun";
  if (has_env("PMIX_RANK")) return slurm ? "srun (PMIx)" : "a PMIx launcher";
  return slurm ? "srun (PMI2)" : "a PMI launcher";
}

// "Open MPI v4.1.4" out of Open MPI's "Open MPI v4.1.4, package: ..., ident: ..., repo rev: ...".
std::string library_name() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  detail::check(MPI_Get_library_version(text, &length), "MPI_Get_library_version");
  std::string name(text, static_cast<size_t>(std::max(length, 0)));
  name = name.substr(0, name.find_first_of(",\n"));
  while (!name.empty() && (name.back() == ' ' || name.back() == '\0')) name.pop_back();
  return name.empty() ? "unknown MPI library" : name;
}

std::string host_name() {
  char text[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  detail::check(MPI_Get_processor_name(text, &length), "MPI_Get_processor_name");
  return std::string(text, static_cast<size_t>(std::max(length, 0)));
}

// Runs call(pointer offset, count) over [0, n) in pieces of at most max_count() elements.
template <typename Call>
void in_chunks(size_t n, Call call) {
  const size_t step = detail::max_count();
  for (size_t at = 0; at < n; at += step) call(at, static_cast<int>(std::min(step, n - at)));
}

// Enters a collective, starts it with start(&request) (an MPI_I... call named `call`) and waits
// for it, at most the world's collective timeout.
template <typename Start>
void collective(const char* call, Start start) {
  detail::enter_collective();
  MPI_Request request = MPI_REQUEST_NULL;
  detail::check(start(&request), call);
  detail::wait_all(&request, 1, call, std::string("answer in ") + call);
}

template <typename T>
void allreduce(T* data, size_t n, MPI_Datatype type, MPI_Op op) {
  in_chunks(n, [&](size_t at, int count) {
    collective("MPI_Allreduce", [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, data + at, count, type, op, MPI_COMM_WORLD, r);
    });
  });
}

}  // namespace

namespace detail {

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  std::string what = length > 0 ? std::string(text, static_cast<size_t>(length))
                                : "MPI error code " + std::to_string(code);
  throw Error("rank " + std::to_string(world().rank()) + ": " + call + " failed: " + what);
}

size_t max_count() {
  return g_max_count;
}

void set_max_count(size_t n) {
  if (n < 1 || n > static_cast<size_t>(INT_MAX))
    throw Error("dist: the largest MPI count must be in [1, INT_MAX], got " + std::to_string(n));
  g_max_count = n;
}

}  // namespace detail

bool started_by_mpi_launcher() {
  return has_env("OMPI_COMM_WORLD_SIZE") || has_env("PMIX_RANK") || has_env("PMI_RANK") ||
         has_env("PMI_SIZE");
}

World& world() {
  static World the_world;
  return the_world;
}

void init(int& argc, char**& argv) {
  World& w = world();
  if (g_started || !started_by_mpi_launcher()) return;
  // The gradients' non-blocking all-reduce: Open MPI 4.1 (coll/libnbc) takes a binomial tree for
  // every in-place MPI_Iallreduce, a reduce to rank 0 and a broadcast back, which carries every
  // byte twice over each level of the tree (on 2 hosts, twice the time of the link). Reduce-
  // scatter then all-gather (Rabenseifner's algorithm, "3") carries 2(N-1)/N of the bytes, as a
  // ring does, in log2(N) steps. A user's own setting of it is left alone.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
  int provided = MPI_THREAD_SINGLE;
  detail::check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  g_started = true;
  std::atexit([] {
    if (!g_failed) finalize();
  });
  detail::check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                "MPI_Comm_set_errhandler");
  if (provided < MPI_THREAD_FUNNELED)
    throw Error("MPI_Init_thread: the MPI library does not support MPI_THREAD_FUNNELED (" +
                library_name() + ")");
  detail::check(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_), "MPI_Comm_rank");
  detail::check(MPI_Comm_size(MPI_COMM_WORLD, &w.size_), "MPI_Comm_size");
  w.mpi_ = true;
  w.host_ = host_name();
  detail::start_presence();
  // Every rank's host, for naming a rank that stops answering.
  w.hosts_ = w.allgather(w.host_);
  w.launch_ = launcher_name() + " (" + library_name() + "), rank " + std::to_string(w.rank_) +
              " of " + std::to_string(w.size_) + " on host " + w.host_;
}

void finalize() {
  if (!g_started) return;
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && finalized) return;
  detail::stop_presence();
  MPI_Finalize();
}

int leave(int code) {
  if (code == 0) {
    finalize();
  } else {
    g_failed = true;
    // What this rank printed must not be lost with the job.
    std::cout.flush();
    std::cerr.flush();
  }
  return code;
}

// ---- Collectives ------------------------------------------------------------------------------

void World::allreduce_sum(double* data, size_t n) const {
  if (many()) allreduce(data, n, MPI_DOUBLE, MPI_SUM);
}

void World::allreduce_sum(float* data, size_t n) const {
  if (many()) allreduce(data, n, MPI_FLOAT, MPI_SUM);
}

void World::allreduce_sum(int64_t* data, size_t n) const {
  if (many()) allreduce(data, n, MPI_INT64_T, MPI_SUM);
}

void World::allreduce_max(int64_t* data, size_t n) const {
  if (many()) allreduce(data, n, MPI_INT64_T, MPI_MAX);
}

void World::broadcast(std::string& text, int root) const {
  if (root < 0 || root >= size_)
    throw Error("broadcast: root rank " + std::to_string(root) + " is not in a world of " +
                std::to_string(size_));
  if (!many()) return;
  uint64_t length = text.size();
  collective("MPI_Bcast", [&](MPI_Request* r) {
    return MPI_Ibcast(&length, 1, MPI_UINT64_T, root, MPI_COMM_WORLD, r);
  });
  text.resize(length);
  in_chunks(text.size(), [&](size_t at, int count) {
    collective("MPI_Bcast", [&](MPI_Request* r) {
      return MPI_Ibcast(&text[at], count, MPI_CHAR, root, MPI_COMM_WORLD, r);
    });
  });
}

std::vector<std::string> World::allgather(const std::string& mine) const {
  if (!many()) return {mine};
  const size_t ranks = static_cast<size_t>(size_);
  uint64_t my_length = mine.size();
  std::vector<uint64_t> lengths(ranks);
  collective("MPI_Allgather", [&](MPI_Request* r) {
    return MPI_Iallgather(&my_length, 1, MPI_UINT64_T, lengths.data(), 1, MPI_UINT64_T,
                          MPI_COMM_WORLD, r);
  });
  std::vector<std::string> all(ranks);
  for (size_t r = 0; r < ranks; ++r) all[r].resize(lengths[r]);
  // Rounds of MPI_Allgatherv, each carrying at most `share` bytes of every rank's string, so that
  // a round's total and its displacements fit in an int.
  const size_t share = std::max<size_t>(1, detail::max_count() / ranks);
  const size_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<int> counts(ranks), offsets(ranks);
  std::vector<char> round;
  for (size_t at = 0; at < longest; at += share) {
    size_t total = 0;
    for (size_t r = 0; r < ranks; ++r) {
      counts[r] = static_cast<int>(lengths[r] > at ? std::min(share, lengths[r] - at) : 0);
      offsets[r] = static_cast<int>(total);
      total += static_cast<size_t>(counts[r]);
    }
    round.resize(total);
    const char* send = mine.data() + std::min<size_t>(at, mine.size());
    collective("MPI_Allgatherv", [&](MPI_Request* r) {
      return MPI_Iallgatherv(send, counts[rank_], MPI_CHAR, round.data(), counts.data(),
                             offsets.data(), MPI_CHAR, MPI_COMM_WORLD, r);
    });
    for (size_t r = 0; r < ranks; ++r)
      std::copy_n(round.data() + offsets[r], counts[r], all[r].begin() + at);
  }
  return all;
}

std::vector<std::string> World::gather_lines(const std::vector<std::string>& lines) const {
  if (!many()) return lines;
  std::string packed;  // "<length>:<bytes>" per line
  for (const std::string& l : lines) packed += std::to_string(l.size()) + ":" + l;
  std::vector<std::string> all(lines.size());
  for (const std::string& theirs : allgather(packed)) {
    size_t at = 0;
    for (std::string& line : all) {
      const size_t colon = theirs.find(':', at);
      if (colon == std::string::npos)
        throw Error("gather_lines: a rank sent fewer than " + std::to_string(lines.size()) +
                    " lines");
      const size_t n = std::stoul(theirs.substr(at, colon - at));
      line += theirs.substr(colon + 1, n);
      at = colon + 1 + n;
    }
    if (at != theirs.size())
      throw Error("gather_lines: a rank sent more than " + std::to_string(lines.size()) + " lines");
  }
  return all;
}

void World::barrier() const {
  if (many())
    collective("MPI_Barrier", [](MPI_Request* r) { return MPI_Ibarrier(MPI_COMM_WORLD, r); });
}

const std::string& World::host_of(int rank) const {
  if (rank < 0 || rank >= size_)
    throw Error("host_of: rank " + std::to_string(rank) + " is not in a world of " +
                std::to_string(size_));
  return hosts_.empty() ? host_ : hosts_[static_cast<size_t>(rank)];
}

void World::set_collective_timeout(double seconds) {
  if (!(seconds >= 0 && seconds <= 1e6))
    throw Error("the collective timeout must be in [0, 1e6] seconds, got " +
                std::to_string(seconds));
  collective_timeout_ = seconds;
}

void World::abort(const std::string& message, int code) const {
  std::cout.flush();
  std::cerr << "vitk: error: " << (mpi_ ? "rank " + std::to_string(rank_) + ": " : "") << message
            << std::endl;
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace vitk::dist
