// The MPI backend of Communicator (host memory) and the process bootstrap for binaries.
// Ranks are started by `mpirun` (or a scheduler's launcher that starts MPI ranks); Tessera has no
// process manager of its own. mpi.h stays out of this header: the communicator is created by the
// factory below and used through Communicator.
//
// A binary calls MpiInitialize(&argc, &argv) first thing in main() and MpiFinalize() at the end;
// between them, CreateWorldCommunicator() returns the MPI world (or a world of one when the
// program was not started by a launcher and MPI reports a single rank).
// Thread-safety: MPI is initialised with MPI_THREAD_FUNNELED: call MPI from the main thread only.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sharding/communicator.h"

namespace tessera {

// Initialises MPI unless it already is. Returns Internal when MPI_Init_thread fails.
absl::Status MpiInitialize(int* argc, char*** argv);
// Finalises MPI when it was initialised and not yet finalised. All MPI communicators must be
// destroyed first.
absl::Status MpiFinalize();
// True between MpiInitialize and MpiFinalize.
bool MpiActive();
// MPI_COMM_WORLD's rank and size (no communication); 0 and 1 when MPI is not active.
int MpiWorldRank();
int MpiWorldSize();
// True when an MPI launcher (Open MPI's mpirun, PMI/PMIx: MPICH, Slurm's srun --mpi) started this
// process, judged from the environment the launcher sets.
bool UnderMpiLauncher();
// Ends every rank of MPI_COMM_WORLD with `code` (MPI_Abort): the way a binary stops all ranks
// when one of them hit an error others cannot know about. Does not return.
[[noreturn]] void MpiAbort(int code);

// The world (a duplicate of MPI_COMM_WORLD, so our traffic never mixes with other libraries').
// REQUIRES: MpiActive(). Returns FailedPrecondition otherwise.
// Float and double sums are reduce-scatter (all-to-all of chunks, summed in rank order) then
// all-gather, so every rank gets the same bits whatever MPI's own algorithms are.
// Nonblocking collectives (StartAllReduce, StartAllToAllV) run on two duplicates of the MPI
// communicator made by the constructor: MPI_Ialltoallv on one; the ordered all-reduce as
// MPI_Ialltoallv of chunks, the rank-ordered sum of this rank's chunk once they are in (done
// inside Test/Wait), then MPI_Iallgatherv on the other, started in the order the all-reduces
// were (the same bits as the blocking AllReduce). MPI_Iallreduce is not used: Open MPI promises
// no summation order for it.
absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiWorldCommunicator();

// The MPI world when MpiActive(), else a world of one.
absl::StatusOr<std::unique_ptr<Communicator>> CreateWorldCommunicator();

}  // namespace tessera
