#pragma once
// The process's world for data-parallel training: which rank this process is, how many there
// are, and the few blocking collectives the one training loop (common/train/) needs.
//
// vitk uses Open MPI rather than a transport of its own. A process started by an MPI launcher
// (`mpirun -np N vitk train ...`, `srun --mpi=pmix ...`) joins an MPI world at init(); any other
// process is a world of one that never calls an MPI function, so a plain `vitk train` runs exactly
// as it did before, with no MPI start-up cost or messages. Only this folder's files include
// mpi.h; nothing else in vitk sees MPI.
//
// Threads: MPI is initialised with MPI_THREAD_FUNNELED. Only the main thread calls the functions
// below; OpenMP threads never do.
//
// Collectives are blocking and every rank must call them in the same order with the same counts.
// None waits for ever: when a collective has not completed after collective_timeout() seconds
// (the peer's process or host is gone, or the link to it), the rank prints "vitk: error: rank R:
// no answer in MPI_Allreduce from rank S (host H) for N s" naming a rank that never reached it,
// and ends with exit code 1 (waiting.h says how). In a world of one (and in an MPI world of size 1)
// they do nothing: sums and maxima leave the input as it is, allgather returns {mine}. A failing
// MPI call throws vitk::Error naming the call and carrying MPI's own text. Counts of any size are
// accepted: MPI counts are int, so a buffer longer than INT_MAX elements is sent in chunks.
//
// A process that an MPI process starts (e.g. a test running the vitk executable) inherits the
// launcher's environment and would try to join the world; clear OMPI_*, PMIX_* and PMI_* in it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vitk::dist {

class World {
 public:
  // A world of one: rank 0 of 1, never calls MPI. What world() is before init() and when no
  // launcher started the process; tests may make their own.
  World() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool root() const { return rank_ == 0; }
  // True when this process joined an MPI world at init() (also under `mpirun -np 1`).
  bool mpi() const { return mpi_; }
  // One line saying how the process was started, e.g. "not under MPI (a world of one)" or
  // "mpirun (Open MPI v4.1.4), rank 1 of 2 on host node7".
  const std::string& launch() const { return launch_; }
  // MPI's name for this process's machine (MPI_Get_processor_name); empty in a world of one.
  const std::string& host() const { return host_; }
  // The host name of `rank` (every rank's, gathered at init()); host() for a world of one.
  const std::string& host_of(int rank) const;

  // Seconds a rank waits in one collective before giving up on its peers (above); 0 waits for
  // ever. Default 300: longer than anything one rank does alone between two collectives (rank 0
  // writing a checkpoint, a slow rank's step). `--collective-timeout` sets it.
  double collective_timeout() const { return collective_timeout_; }
  // vitk::Error unless seconds is finite and >= 0.
  void set_collective_timeout(double seconds);

  // Element-wise sums (maxima) over all ranks, in place; every rank gets the result. With more
  // than two ranks the order of the additions is Open MPI's (it may differ from a plain loop).
  void allreduce_sum(double* data, size_t n) const;
  void allreduce_sum(float* data, size_t n) const;
  void allreduce_sum(int64_t* data, size_t n) const;
  void allreduce_max(int64_t* data, size_t n) const;
  // `text` of rank `root` on every rank; vitk::Error for a root outside [0, size).
  void broadcast(std::string& text, int root) const;
  // Every rank's `mine`, indexed by rank; lengths may differ (also empty).
  std::vector<std::string> allgather(const std::string& mine) const;
  // Lines that each rank filled where it computed them (the others empty), put together on every
  // rank: line i is the concatenation of every rank's line i. Each rank must pass as many lines;
  // vitk::Error otherwise.
  std::vector<std::string> gather_lines(const std::vector<std::string>& lines) const;
  void barrier() const;

  // Prints "vitk: error: rank R: message" (in a world of one "vitk: error: message") on standard
  // error and ends the whole job: MPI_Abort under MPI, std::exit(code) otherwise. For failures
  // after which the ranks can no longer meet in the same collective (one rank's file is bad).
  [[noreturn]] void abort(const std::string& message, int code) const;

 private:
  friend void init(int& argc, char**& argv);
  // True when collectives must talk to other processes.
  bool many() const { return mpi_ && size_ > 1; }

  int rank_ = 0;
  int size_ = 1;
  bool mpi_ = false;
  std::string launch_ = "not under MPI (a world of one)";
  std::string host_;
  std::vector<std::string> hosts_;  // by rank, under MPI
  double collective_timeout_ = 300;
};

// Call once at the top of main, before anything reads argv. Joins the MPI world when an MPI
// launcher started this process (see started_by_mpi_launcher), otherwise does nothing. Registers
// finalize() to run at exit unless leave() was given a failure. vitk::Error when MPI cannot start.
void init(int& argc, char**& argv);
// MPI_Finalize when init() started MPI and nothing finalized it yet; safe to call again. Every
// rank must call it (Open MPI's MPI_Finalize waits for all of them).
void finalize();
// The end of main: `return dist::leave(code);`. Exit code 0 finalizes. Any other code skips
// MPI_Finalize, also at exit: mpirun then sees a rank end without finalizing and ends the whole
// job with that code, whereas a failed rank that finalized would wait forever for ranks still
// waiting for it in a collective. Returns code.
int leave(int code);
// The process's world: a world of one before init() and when no launcher started the process.
World& world();
// The environment shows an MPI launcher: OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMIX_RANK
// (PMIx, e.g. `srun --mpi=pmix`) or PMI_RANK / PMI_SIZE (Slurm's PMI2).
bool started_by_mpi_launcher();

namespace detail {
// For common/dist/*.cpp: throws vitk::Error "rank R: CALL failed: <MPI's text>" unless `code` is
// MPI_SUCCESS (an int here so that this header needs no mpi.h).
void check(int code, const char* call);
// The largest count given to one MPI call (INT_MAX); tests lower it to exercise the chunking.
size_t max_count();
void set_max_count(size_t n);
}  // namespace detail

}  // namespace vitk::dist
