#pragma once
// How this folder's .cpp files wait for MPI requests without waiting forever (the only header
// here that includes mpi.h; nothing outside common/dist/ includes it).
//
// Over TCP a collective whose peer is gone or unreachable never completes: Open MPI's MPI_Wait
// would spin until the kernel gives up on the connection, which can take a quarter of an hour, or
// for ever when the link is merely down. So every collective is started non-blocking and waited
// for here, polling, until the world's collective timeout passes; then the rank names the peer it
// has not heard from and ends (exit code 1) rather than hang.
//
// Naming the peer: each rank counts the collectives it enters (every rank enters the same ones
// in the same order) and, on entering one, tells every other rank its count on a communicator of
// its own (a copy of MPI_COMM_WORLD, so that these messages never match a collective's). A peer
// whose last count is below ours has not reached the collective we wait in: that is the one we
// name. Costs one 8-byte message per peer per collective.
#include <mpi.h>

#include <string>

namespace vitk::dist::detail {

// Called by init() once the world is known: the copy of the communicator for the counts.
void start_presence();
// Called by finalize(): waits briefly for the counts still being sent, then frees the copy.
void stop_presence();

// Enters the next collective: counts it and tells the other ranks. Call before starting it.
void enter_collective();

// Waits for all of requests[0, n). `call` names the MPI function for errors ("MPI_Allreduce");
// `missing` says what a peer failed to send ("gradients", "an answer in MPI_Allreduce"). When the
// world's collective timeout passes first, prints "vitk: error: rank R: no <missing> from rank S
// (host H) for N s" and ends the process with exit code 1, never returning.
void wait_all(MPI_Request* requests, int n, const char* call, const std::string& missing);

}  // namespace vitk::dist::detail
