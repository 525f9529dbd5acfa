#include "common/dist/waiting.h"

#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <vector>

#include "common/dist/world.h"
#include "common/error.h"
#include "common/progress.h"

namespace vitk::dist::detail {

namespace {

using Clock = std::chrono::steady_clock;

// While a rank waits it tells the others its count this often, so that a peer that has reached
// the collective but stopped (its host's link is down, it is frozen) is told apart from one that
// is waiting too.
constexpr std::chrono::milliseconds kHeartbeat{500};
// After the timeout, how long a rank still listens before deciding whom it has not heard from.
constexpr std::chrono::seconds kListen{2};

struct Presence {
  MPI_Comm comm = MPI_COMM_NULL;
  uint64_t entered = 0;                 // collectives this rank has entered
  std::vector<uint64_t> heard;          // per rank: the highest count it has told us
  std::vector<Clock::time_point> when;  // per rank: when its last count arrived
  // Counts being sent, with their requests; a deque keeps each value's address while it is sent.
  std::deque<std::pair<uint64_t, MPI_Request>> sending;
};

Presence& presence() {
  static Presence p;
  return p;
}

// Takes every count that has arrived, without waiting.
void receive_counts() {
  Presence& p = presence();
  if (p.comm == MPI_COMM_NULL) return;
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    check(MPI_Iprobe(MPI_ANY_SOURCE, 0, p.comm, &arrived, &status), "MPI_Iprobe");
    if (!arrived) return;
    uint64_t count = 0;
    check(MPI_Recv(&count, 1, MPI_UINT64_T, status.MPI_SOURCE, 0, p.comm, MPI_STATUS_IGNORE),
          "MPI_Recv");
    const size_t from = static_cast<size_t>(status.MPI_SOURCE);
    if (count > p.heard[from]) p.heard[from] = count;
    p.when[from] = Clock::now();
  }
}

// Forgets the sends that are done (the oldest are done first).
void reap_sends() {
  Presence& p = presence();
  while (!p.sending.empty()) {
    int done = 0;
    check(MPI_Test(&p.sending.front().second, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) return;
    p.sending.pop_front();
  }
}

// Tells every other rank this rank's count.
void send_count() {
  Presence& p = presence();
  reap_sends();
  const World& w = world();
  for (int r = 0; r < w.size(); ++r) {
    if (r == w.rank()) continue;
    p.sending.emplace_back(p.entered, MPI_REQUEST_NULL);
    auto& [value, request] = p.sending.back();
    check(MPI_Isend(&value, 1, MPI_UINT64_T, r, 0, p.comm, &request), "MPI_Isend");
  }
}

// The ranks this one has not heard from since `since`, or that have not reached its collective.
std::vector<int> silent_ranks(Clock::time_point since) {
  const Presence& p = presence();
  const World& w = world();
  std::vector<int> silent;
  for (int r = 0; r < w.size(); ++r) {
    const size_t i = static_cast<size_t>(r);
    if (r != w.rank() && (p.heard[i] < p.entered || p.when[i] < since)) silent.push_back(r);
  }
  return silent;
}

[[noreturn]] void give_up(const std::string& missing, double seconds,
                          const std::vector<int>& silent) {
  const World& w = world();
  std::string who;
  if (!silent.empty()) {
    who = "rank " + std::to_string(silent[0]) + " (host " + w.host_of(silent[0]) + ")";
    const size_t others = silent.size() - 1;
    if (others) who += " and " + std::to_string(others) + " other rank" + (others > 1 ? "s" : "");
  } else {
    // Every peer reached the collective and is still heard from, yet it did not complete.
    who = "the other ranks (each is still heard from: a link between two of them?)";
  }
  std::cout.flush();
  std::cerr << "vitk: error: rank " << w.rank() << ": no " << missing << " from " << who << " for "
            << format_general(seconds) << " s (--collective-timeout); the last complete checkpoint "
            << "is the one to resume from" << std::endl;
  std::fflush(nullptr);
  // Not MPI_Abort: it asks mpirun to end the job, and when the link to mpirun is the one that is
  // gone that request can wait for ever. mpirun sees the rank end without MPI_Finalize and ends
  // the job itself.
  std::_Exit(1);
}

void pause_briefly() {
  const timespec pause{0, 100'000};  // 0.1 ms
  nanosleep(&pause, nullptr);
}

}  // namespace

void start_presence() {
  Presence& p = presence();
  check(MPI_Comm_dup(MPI_COMM_WORLD, &p.comm), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(p.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  p.heard.assign(static_cast<size_t>(world().size()), 0);
  p.when.assign(static_cast<size_t>(world().size()), Clock::now());
}

void stop_presence() {
  Presence& p = presence();
  if (p.comm == MPI_COMM_NULL) return;
  // The last counts are tiny and go out at once to live peers; give up on them after a second
  // rather than wait for a peer that is gone.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!p.sending.empty() && std::chrono::steady_clock::now() < until) {
    int done = 0;
    if (MPI_Test(&p.sending.front().second, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done)
      p.sending.pop_front();
    else
      pause_briefly();
  }
  for (auto& sent : p.sending) MPI_Request_free(&sent.second);
  p.sending.clear();
  int flag = 0;
  MPI_Status status;
  while (MPI_Iprobe(MPI_ANY_SOURCE, 0, p.comm, &flag, &status) == MPI_SUCCESS && flag) {
    uint64_t count = 0;
    MPI_Recv(&count, 1, MPI_UINT64_T, status.MPI_SOURCE, 0, p.comm, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&p.comm);
  p.comm = MPI_COMM_NULL;
}

void enter_collective() {
  Presence& p = presence();
  if (p.comm == MPI_COMM_NULL) return;
  ++p.entered;
  receive_counts();
  send_count();
}

void wait_all(MPI_Request* requests, int n, const char* call, const std::string& missing) {
  if (n <= 0) return;
  const Clock::time_point start = Clock::now();
  const double timeout = world().collective_timeout();
  const bool tell = presence().comm != MPI_COMM_NULL;
  // Spin for the first few milliseconds (a collective between live ranks usually completes in
  // that time), then poll every 0.1 ms so that a rank waiting for a slow one leaves it the core.
  const auto spin = std::chrono::milliseconds(5);
  Clock::time_point next_beat = start + kHeartbeat, listen_from{};
  bool listening = false;
  for (;;) {
    int done = 0;
    check(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE), call);
    if (done) return;
    const Clock::time_point now = Clock::now();
    if (now - start <= spin) continue;
    if (tell) {
      receive_counts();
      if (now >= next_beat) send_count(), next_beat = now + kHeartbeat;
    }
    if (timeout > 0 && std::chrono::duration<double>(now - start).count() > timeout) {
      // Listen a little longer: a peer that is alive and waiting too will be heard from. What
      // arrived before (perhaps long queued while this rank was frozen) does not count.
      if (!listening) {
        if (tell) receive_counts();
        listening = true;
        listen_from = Clock::now();
      }
      if (!tell || now - listen_from >= kListen)
        give_up(missing, timeout, tell ? silent_ranks(listen_from) : std::vector<int>{});
    }
    pause_briefly();
  }
}

}  // namespace vitk::dist::detail
