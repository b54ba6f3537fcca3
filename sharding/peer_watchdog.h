// PeerWatchdog: a lost host, link or rank ends the job within a bounded time instead of leaving
// the other ranks in a collective forever.
//
// Why: MPI over TCP does not notice a peer whose link was cut (or whose host froze): the sockets
// only retransmit, for many minutes, and every rank waiting on that peer waits with them. A dead
// process on a reachable host is noticed by the launcher (Open MPI ends the job about 1 s later);
// a lost link or host is not.
//
// How: every rank runs one thread (no MPI calls in it) that sends a small UDP datagram to every
// other rank once per `heartbeat_interval_s` and receives theirs, remembering when it last heard
// from each rank. The MPI backend marks each blocking wait of the calling thread (every blocking
// collective, a nonblocking one's Wait, Split, MPI_Finalize) with a CollectiveWait scope naming
// the communicator's members. When this rank has been waiting and a member it heard from before
// has been silent for `peer_timeout_s`, the thread prints which ranks (world rank, host name,
// address, pid) it lost, what this rank was waiting in and for how long, and ends the job through
// `abort` (MpiAbort: every rank and mpirun end, exit code kLostPeerExitCode); if that has not
// ended this process 10 s later, it exits by itself. Compute between collectives is never timed:
// a slow but live rank keeps sending heartbeats (the thread is independent of the training loop),
// so a long checkpoint or reshard on one rank does not trip the others.
// `collective_timeout_s` (off by default) also ends the job when a wait lasts that long although
// every member is alive, naming the members that are not waiting (a rank stuck in its own code,
// or collectives called in different orders).
//
// A stalled job: every rank alive (heartbeats arriving) and every one waiting in a collective for
// `stall_timeout_s` (default 120 s). No rank computes, so no rank will send anything new: what
// they wait for is a transfer the transport does not deliver. Seen with Open MPI's TCP transport
// on emulated hosts: a connection between two ranks failed as the job started ("connect() to ...
// failed ... Your Open MPI job may now hang"), and every rank then waited forever. The watchdog
// ends such a job naming what each rank waits in. Only the whole world counts: a rank waiting on
// a peer that waits on a third rank busy computing (a long checkpoint) is not a stall. The world's
// first collectives (the communicator's creation, Start's own exchange), before any heartbeat,
// are bounded by the same timeout (StartupDeadline). What it cannot tell from a stall: one
// collective moving more than a link carries in `stall_timeout_s`.
//
// Addresses: each rank binds one UDP socket on all interfaces (a port the kernel picks) and
// announces its IPv4 addresses on the data network (`networks` below; loopback only when there
// is no other) in an all-gather at Start; heartbeats go to every announced address of a peer, and a
// datagram counts only with this job's nonce (rank 0's random number, broadcast at Start) and the
// sender's rank. A peer never heard from (UDP between hosts blocked by a firewall) is not
// watched: rank 0 warns about it after 10 s, and such a run behaves as without the watchdog.
//
// Process-wide: one watchdog per process, for the world it was started on.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "sharding/communicator.h"

namespace tessera {

// The exit status of a job ended by the watchdog (EX_TEMPFAIL: rerunning the same command, with
// train.resume, continues from the last checkpoint).
inline constexpr int kLostPeerExitCode = 75;

struct PeerWatchdogOptions {
  double peer_timeout_s = 30;       // a peer silent this long while this rank waits: abort; 0 = off
  double collective_timeout_s = 0;  // a wait this long with every peer alive: abort; 0 = off
  double stall_timeout_s = 120;     // every rank alive and waiting this long: abort; 0 = off
  double heartbeat_interval_s = 1;  // how often each rank tells the others it is alive
  // The networks heartbeats travel: comma-separated CIDRs and interface names. Empty: the
  // networks Open MPI's TCP transport was told to use (OMPI_MCA_btl_tcp_if_include, which
  // mpirun --mca btl_tcp_if_include sets), else every interface. Heartbeats must share the
  // network of the ranks' data: over another one (a management network) they would still arrive
  // when the data network is cut.
  std::string networks;
  // How the job is ended. Unset (the default): MpiAbort(code), and std::_Exit(code) when that
  // has not ended the process 10 s later. Tests set it: it gets the message, and the watchdog
  // then stops checking (its heartbeats go on; StopPeerWatchdog still has to be called).
  std::function<void(int code, const std::string& message)> abort;
};

// Collective over `world` (every rank calls it; the same options): exchanges the heartbeat
// addresses and starts the thread. OK without doing anything for a world of one or when every
// timeout is 0. Its exchange runs before any heartbeat: callers bound it (and the collectives
// before it) with a StartupDeadline. InvalidArgument for negative or non-finite values,
// FailedPrecondition when one is already running. A socket that cannot be opened is a warning,
// not an error: that rank then runs unwatched (its peers do not watch it either).
absl::Status StartPeerWatchdog(Communicator& world, const PeerWatchdogOptions& options);
// Tells the peers this rank is leaving and stops the thread (MpiFinalize calls it once
// MPI_Finalize has returned). Safe to call when none runs.
void StopPeerWatchdog();
// True while a watchdog thread runs in this process.
bool PeerWatchdogRunning();

// Bounds a stretch of start-up that runs before any heartbeat: the ranks' first collectives (the
// world communicator's creation, Start's exchange). When Done() (or the destructor) has not come
// within options.stall_timeout_s, ends the job as the watchdog would (exit kLostPeerExitCode, or
// options.abort), naming `what`. 0 = unbounded: no thread.
class StartupDeadline {
 public:
  StartupDeadline(const PeerWatchdogOptions& options, int rank, std::string what);
  ~StartupDeadline();
  StartupDeadline(const StartupDeadline&) = delete;
  StartupDeadline& operator=(const StartupDeadline&) = delete;
  void Done();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Marks the calling thread as waiting in `what` on a communicator whose members are the world
// ranks `members` (which must outlive the scope). Nested scopes count as the outermost one.
// Cheap (one uncontended mutex) and a no-op for the watchdog when none runs.
class CollectiveWait {
 public:
  CollectiveWait(const char* what, const std::vector<int>& members);
  ~CollectiveWait();
  CollectiveWait(const CollectiveWait&) = delete;
  CollectiveWait& operator=(const CollectiveWait&) = delete;
};

}  // namespace tessera
