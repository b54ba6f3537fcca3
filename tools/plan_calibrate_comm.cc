// Collectives: alpha-beta points of the MPI Communicator (sharding/), measured by ranks that
// Calibrate starts under mpirun. Byte conventions (what each point's bytes_per_s divides):
//   all_to_all   bytes this rank sends to the other ranks (equal blocks per peer; the
//                Communicator's byte counter, as tessera-bench prints it)
//   all_reduce   the buffer's bytes (floats x 4)
//   all_gather   the gathered buffer's bytes (world size x each rank's block)
// latency_s is the time of the call with an 8-byte block; bytes_per_s the slope between that and
// a 4 MiB buffer (the small call the fastest of its repetitions, see TimeCollective; the 4 MiB
// call each rank's median on the thread CPU clock, its input written before each, the least
// over ranks: CallClock::kCpuMedian); wait_per_compute
// the small all-reduce's median CPU time unsynchronised after 4 ms of compute, less latency_s,
// per second of that compute (TimeUnsynced; the same for every op of the world size; across
// hosts the call's wall time, the mean of the fastest 90%, per wall second of the compute, and
// wait_cap_s the wait after 16 ms of compute where it is less than that rate gives); the
// all-reduce's beyond_llc_bytes_per_s the slope from 4 to 64 MiB, both calls timed on each
// rank's thread CPU clock, the least over ranks (CallClock::kCpuLeast: a 64 MiB call outlasts
// the scheduler's slices, so a process sharing a rank's core interrupts every repetition).
// Across hosts (a world its launcher spreads over several nodes: tools/launcher_env.h says this
// node holds fewer ranks than the world) the same points are measured with a 2 MiB large call,
// each time the median of its calls, each call the slowest group's mean over its ranks (not the
// fastest), and no beyond-cache call (the link, not the
// cache, bounds them; a 64 MiB all-reduce over a 100 Mbit/s link would take seconds per call),
// compute_slowdown on the wall clock (ComputeSlowdown), and recorded as same_node: false. Calibrate
// runs them under CalibrateOptions::cross_host_mpirun with the world spread evenly over the hosts.
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/device.h"
#include "core/status.h"
#include "dense/mlp.h"
#include "sharding/mpi_communicator.h"
#include "sharding/peer_watchdog.h"
#include "tools/launcher_env.h"
#include "tools/plan_calibrate_internal.h"

namespace tessera {
namespace {

using calibrate_internal::MedianSeconds;

// How TimeCollective reads a call's time.
enum class CallClock {
  kWallFastest,  // wall seconds, each rank's fastest call, the mean over ranks
  kWallMedian,   // wall seconds, each call's mean over its group's ranks, the slowest group's,
                 // the median call (across hosts, where the link, not the scheduler, sets the
                 // time and the fastest call is the one that caught the shaper's bucket full)
  // The calling thread's CPU seconds, each rank's fastest call, the least over ranks: for a
  // call longer than the scheduler's slices (the beyond-cache all-reduce, 20-120 ms), which
  // another process on a rank's core interrupts every time. The interrupted rank's CPU clock
  // stops while it is off its core (its partner's, busy-polling, does not): the least is the
  // call's own work.
  kCpuLeast,
  // The same clock, each rank's median call (not its fastest), the least over ranks, the call's
  // input written (untimed) before each, as the lookup or the packing leaves it in a step: the
  // in-cache call as the step's dists make it. On the AMX Xeon VM a 4 MiB all-to-all of 2 ranks
  // took 0.23-0.28 ms by kCpuLeast, 0.37 ms so, 0.47-0.54 ms inside tessera-bench's steps.
  kCpuMedian,
};

// Every rank's `n` values of `v`, rank by rank.
absl::StatusOr<std::vector<double>> FromEveryRank(Communicator& comm, const double* v,
                                                  int64_t n = 1) {
  const int w = comm.size();
  std::vector<double> all(static_cast<size_t>(n) * w);
  std::vector<int64_t> counts(w, n * 8), displs(w);
  for (int r = 0; r < w; ++r) displs[r] = r * n * 8;
  TESSERA_RETURN_IF_ERROR(comm.AllGatherV(v, n * 8, all.data(), counts, displs));
  return all;
}

// The largest of every rank's `v` in `comm`.
absl::StatusOr<double> SlowestOver(Communicator& comm, double v) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<double> all, FromEveryRank(comm, &v));
  return *std::max_element(all.begin(), all.end());
}

// The time of one `call` over at least 10 calls (a barrier before each call), read by `clock`.
// `comm` is the call's group; `sync` the world whose groups call at once (the barrier and the
// repetitions are the world's, and the time the slowest group's).
absl::StatusOr<double> TimeCollective(Communicator& sync, Communicator& comm, double min_seconds,
                                      const std::function<absl::Status()>& call,
                                      CallClock clock = CallClock::kWallFastest,
                                      const std::function<void()>& prepare = nullptr) {
  const bool median = clock == CallClock::kWallMedian;
  const bool cpu_median = clock == CallClock::kCpuMedian;
  const bool cpu = clock == CallClock::kCpuLeast || cpu_median;
  auto thread_cpu = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  };
  // Every rank must run the same number of repetitions: rank 0 decides by broadcasting.
  std::vector<double> t;
  Stopwatch total;
  for (int rep = 0;; ++rep) {
    int64_t go = rep < 10 || (total.ElapsedSeconds() < min_seconds && rep < 2000) ? 1 : 0;
    TESSERA_RETURN_IF_ERROR(sync.Broadcast(&go, sizeof(go), 0));
    if (!go) break;
    if (prepare) prepare();
    TESSERA_RETURN_IF_ERROR(sync.Barrier());
    Stopwatch w;
    const double c0 = cpu ? thread_cpu() : 0;
    TESSERA_RETURN_IF_ERROR(call());
    // The first call sets up buffers.
    if (rep > 0) t.push_back(cpu ? thread_cpu() - c0 : w.ElapsedSeconds());
  }
  // The fastest call: the one every rank ran through without the scheduler handing its core to
  // another job (4 ranks oversubscribe 2 cores, and other engineers' builds share them); a
  // collective waits for its slowest rank, so any interruption of any rank shows up in full.
  if (median) {
    // Each call's time: its group's ranks' mean (a rank that leaves early goes on computing),
    // the slowest group's (a group that finished early waits for the others at the next
    // world-wide call); the median over the calls.
    const int64_t n = static_cast<int64_t>(t.size());
    TESSERA_RETURN_IF_ERROR(comm.AllReduce(t.data(), n, ReduceOp::kAvg));
    TESSERA_ASSIGN_OR_RETURN(const std::vector<double> all, FromEveryRank(sync, t.data(), n));
    for (int64_t i = 0; i < n; ++i) {
      for (int r = 0; r < sync.size(); ++r) t[i] = std::max(t[i], all[r * n + i]);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
  std::sort(t.begin(), t.end());
  double med = cpu_median ? t[t.size() / 2] : t.front();
  if (cpu) {
    TESSERA_ASSIGN_OR_RETURN(const std::vector<double> all, FromEveryRank(comm, &med));
    med = *std::min_element(all.begin(), all.end());
  } else {
    TESSERA_RETURN_IF_ERROR(comm.AllReduce(&med, 1, ReduceOp::kAvg));
  }
  return SlowestOver(sync, med);
}

// The median CPU seconds of `call` (the slowest rank's median) when every rank comes to it from
// `compute_s` of its own busy compute, as the trainer's ranks come to theirs (no barrier): what
// the ranks wait for each other, busy-polling, on top of the synchronised fastest call. 250
// calls. The median, not the mean: a call that waited for a rank the scheduler gave to another
// process (other engineers' builds, bench/busy_core.sh) is the load of that moment; the mean
// of such calls made one 2-rank profile 1.07 (and 0.79) where a quiet machine gives 0.01.
// `wall` (a world across hosts): the call on the wall clock and the mean of the calls' fastest
// 90%: on emulated hosts, whose ranks outnumber the machine's cores, a rank that computed its
// share waits for a peer the scheduler has not yet given its slice, a wait the CPU clock does
// not see (the poller yields its core) and that is the run's, not a passing load's (on real
// hosts with a core per rank the two clocks agree).
struct Unsynced {
  double call_s = 0;     // the call's time, as above
  double compute_s = 0;  // the compute before it on the same clock (wall: its mean)
};
absl::StatusOr<Unsynced> TimeUnsynced(Communicator& sync, double compute_s,
                                      const std::function<absl::Status()>& call, bool wall,
                                      int calls = 250) {
  const double kComputeS = compute_s;
  const int kCalls = calls;
  auto now = [](clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  };
  const clockid_t call_clock = wall ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID;
  TESSERA_RETURN_IF_ERROR(sync.Barrier());
  std::vector<double> per_call;
  double computed = 0;
  volatile double sink = 0;
  for (int i = 0; i < kCalls; ++i) {
    const double c0 = now(call_clock);
    const double until = now(CLOCK_PROCESS_CPUTIME_ID) + kComputeS;
    while (now(CLOCK_PROCESS_CPUTIME_ID) < until) sink = sink + 1.0;
    const double t0 = now(call_clock);
    computed += t0 - c0;
    TESSERA_RETURN_IF_ERROR(call());
    per_call.push_back(now(call_clock) - t0);
  }
  std::sort(per_call.begin(), per_call.end());
  Unsynced u;
  u.call_s = per_call[per_call.size() / 2];
  u.compute_s = kComputeS;
  if (wall) {
    const size_t n = per_call.size() * 9 / 10;
    u.call_s = std::accumulate(per_call.begin(), per_call.begin() + n, 0.0) / n;
    TESSERA_ASSIGN_OR_RETURN(u.compute_s, SlowestOver(sync, computed / kCalls));
  }
  TESSERA_ASSIGN_OR_RETURN(u.call_s, SlowestOver(sync, u.call_s));
  return u;
}

// What a rank's compute slows down by when every rank of the node computes at once (shared LLC
// and memory bandwidth, vCPUs that may be one core's hyperthreads), for the step's two kinds of
// compute apart: the dense phases (`gemm`): the calibrated configs' dense archs, each its
// forward, loss and backward (without configs, a Linear forward at a bench layer shape, 2048 x
// 512 -> 256); and 16k random 256-byte row reads over 64 MiB (memory-bound, the lookup, update
// and packing: `rows`). The probe GEMM alone missed most of it: on the AMX Xeon VM (2026-12-07)
// it slowed 1.01x at 2 ranks where small.yaml's dense phases ran 1.10-1.14x their T = 1 time at
// T = 2; the five default configs' archs measure 1.02-1.03x (docs/PLANNER.md "Profile file").
// Each kind in kRounds rounds, a round timing it alone (rank round % size runs it while the
// others sleep) and then on every rank together (the slowest rank's median), on the thread's
// CPU clock: the round's together / alone, and the median over the rounds, at least 1. The
// rounds alternate the two kinds, so a minute's drift in the machine's speed (a VM's
// neighbours; 1.01-1.29 between calibrations minutes apart on the Zen 4 VM when both kinds ran
// as one kernel, once) falls on both sides of every ratio.
// `wall`: on the wall clock instead (the cross-host measurement: there ranks may share a host's
// cores, which a thread's CPU clock does not see; on real hosts with a core per rank the two
// agree), each rank's runs totalled and the ranks averaged.
// `computes` false: this rank sleeps through the together runs (a host whose ranks outnumber its
// CPUs computes with as many as it has: the contention, not the sharing, which the planner
// prices as cores_share), and the ratio is the computing ranks'.
struct Slowdowns {
  double rows = 1, gemm = 1;
};
absl::StatusOr<Slowdowns> ComputeSlowdown(Communicator& comm, bool wall,
                                          const std::vector<std::string>& configs,
                                          bool computes = true) {
  constexpr int kRounds = 7;
  // The ranks that compute together (`computes`; the others sleep through it as through a
  // lone run): their own communicator for the archs' start barriers.
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> busy, comm.Split(computes ? 0 : 1,
                                                                          comm.rank()));
  constexpr int64_t kB = 2048, kIn = 512, kOut = 256, kRows = (int64_t{64} << 20) / 256;
  std::vector<float> x(kB * kIn, 0.01f), w(kOut * kIn, 0.02f), b(kOut, 0.0f), y(kB * kOut);
  std::vector<float> table(kRows * 64, 1.0f), acc(64, 0.0f);
  std::vector<int64_t> ids(16384);
  uint64_t h = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(comm.rank() + 1);
  for (int64_t& id : ids) {
    h ^= h << 13, h ^= h >> 7, h ^= h << 17;
    id = static_cast<int64_t>(h % kRows);
  }
  // The dense kind: the configs' dense archs (one of each shape and batch), each a step's
  // forward, loss and backward.
  std::vector<std::unique_ptr<calibrate_internal::DenseArchRun>> archs;
  for (const std::string& path : configs) {
    TESSERA_ASSIGN_OR_RETURN(auto run,
                             calibrate_internal::DenseArchRun::Create(path, DeviceContext::Cpu()));
    bool seen = false;
    for (const auto& a : archs) seen |= a->key() == run->key() && a->batch() == run->batch();
    if (!seen) archs.push_back(std::move(run));
  }
  // Repetitions per measurement: 9 of the row reads and of the probe GEMM (a few ms each), 3 of
  // the archs (~0.3 s for the five default configs' together).
  auto reps_of = [&](bool gemm) { return gemm && !archs.empty() ? 3 : 9; };
  auto clock = [wall] {
    timespec ts;
    clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  };
  const DeviceContext ctx = DeviceContext::Cpu();
  auto kernel = [&](bool gemm, bool together) -> absl::StatusOr<double> {
    if (gemm && !archs.empty()) {
      double s = 0;
      for (const auto& a : archs) {
        // Together: the ranks start each arch at once (untimed), as a step's ranks leave the
        // output dist together. Not timed: the wait there is the scheduler's (wait_per_compute
        // prices it); timed, a busy process on one rank's core made the others' busy-polling
        // wait part of the slowdown (1.48x at 2 ranks against 1.02-1.03x quiet).
        if (together) TESSERA_RETURN_IF_ERROR(busy->Barrier());
        const double t0 = clock();
        TESSERA_RETURN_IF_ERROR(a->ForwardLoss().status());
        TESSERA_RETURN_IF_ERROR(a->Backward());
        s += clock() - t0;
      }
      return s;
    }
    const double t0 = clock();
    if (gemm) {
      TESSERA_RETURN_IF_ERROR(LinearForward(ctx, x.data(), w.data(), b.data(), kB, kIn, kOut,
                                            Activation::kRelu, y.data()));
    } else {
      for (int64_t id : ids) {
        const float* row = table.data() + id * 64;
        for (int j = 0; j < 64; ++j) acc[j] += row[j];
      }
    }
    return clock() - t0;
  };
  auto mid = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  // One rank's time per kernel over `reps` runs: the median run on the CPU clock; on the wall
  // clock the runs' mean, because ranks that share a core are time-sliced in slices as long as
  // a run (a few ms): a run's wall time is 1x-3x its share, and the median of such runs, then
  // the slowest rank's, measured 3.7x for 4 ranks on 2 cores where the step's dense phases ran
  // 2.1x (docs/PERFORMANCE.md "Across emulated hosts"). A mean averages the slices out.
  auto per_run = [&](bool gemm, int reps, bool together) -> absl::StatusOr<double> {
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      TESSERA_ASSIGN_OR_RETURN(double s, kernel(gemm, together));
      t.push_back(s);
    }
    return wall ? std::accumulate(t.begin(), t.end(), 0.0) / reps : mid(std::move(t));
  };
  const int n = comm.size();
  double one_s[2] = {0, 0};  // one run of each kind alone (rows, gemm), from the first touch
  auto ratio = [&](bool gemm, int round) -> absl::StatusOr<double> {
    const int reps = reps_of(gemm);
    // Alone: one rank runs while the others sleep (a barrier would busy-poll their cores).
    const int solo = round % n;
    double alone = 0;
    TESSERA_RETURN_IF_ERROR(comm.Barrier());
    if (comm.rank() == solo) {
      TESSERA_ASSIGN_OR_RETURN(alone, per_run(gemm, reps, false));
    } else {
      // Past the lone rank's runs: twice their time for the short kinds, 1.3x for the archs
      // (0.3 s a run; twice made the calibration's collectives runs 20-35 s longer).
      const double margin = gemm && !archs.empty() ? 1.3 : 2.0;
      usleep(static_cast<useconds_t>(std::min(5.0, margin * reps * one_s[gemm]) * 1e6));
    }
    TESSERA_RETURN_IF_ERROR(comm.Barrier());
    double together = -1;  // a rank that sleeps through it: none
    if (computes) {
      TESSERA_ASSIGN_OR_RETURN(together, per_run(gemm, reps, true));
    } else {
      const double margin = gemm && !archs.empty() ? 1.3 : 2.0;
      usleep(static_cast<useconds_t>(std::min(5.0, margin * reps * one_s[gemm]) * 1e6));
    }
    TESSERA_RETURN_IF_ERROR(comm.AllReduce(&alone, 1, ReduceOp::kSum));  // the solo rank's
    TESSERA_ASSIGN_OR_RETURN(std::vector<double> all, FromEveryRank(comm, &together));
    all.erase(std::remove(all.begin(), all.end(), -1.0), all.end());
    // The slowest rank's on the CPU clock (contention); on the wall clock the ranks' mean: the
    // ranks that share cores take turns, and which one ran last is the scheduler's pick, not a
    // slower rank (the step's own imbalance is priced by the critical path).
    together = wall ? std::accumulate(all.begin(), all.end(), 0.0) / all.size()
                    : *std::max_element(all.begin(), all.end());
    return alone > 0 ? together / alone : 1.0;
  };
  // First touch, and each kind's time alone for the sleepers above (the slowest rank's: a rank
  // that woke before the solo one finished would busy-poll the barrier).
  for (bool gemm : {true, false}) {
    TESSERA_ASSIGN_OR_RETURN(double one, per_run(gemm, 2, false));
    TESSERA_ASSIGN_OR_RETURN(one_s[gemm], SlowestOver(comm, one));
  }
  std::vector<double> rows, gemm;
  for (int round = 0; round < kRounds; ++round) {
    TESSERA_ASSIGN_OR_RETURN(double g, ratio(true, round));
    TESSERA_ASSIGN_OR_RETURN(double r, ratio(false, round));
    gemm.push_back(g);
    rows.push_back(r);
  }
  return Slowdowns{std::max(1.0, mid(rows)), std::max(1.0, mid(gemm))};
}

// The fewest CPUs any node of `world` gives its ranks: per node (told apart by its first world
// rank, the launcher placing a node's ranks together) the union of its ranks' affinity masks.
absl::StatusOr<int> NodeCores(Communicator& world) {
  constexpr int kWords = CPU_SETSIZE / 32;  // 32 CPUs per value: exact in a double
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) CPU_SET(0, &set);
  std::vector<double> mine(kWords + 1, 0.0);
  mine[0] = world.rank() - LauncherLocalRank();
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) mine[1 + c / 32] += static_cast<double>(uint32_t{1} << (c % 32));
  }
  TESSERA_ASSIGN_OR_RETURN(const std::vector<double> all,
                           FromEveryRank(world, mine.data(), kWords + 1));
  std::map<int, std::vector<uint32_t>> nodes;  // first world rank -> the union's words
  for (int r = 0; r < world.size(); ++r) {
    const double* v = all.data() + static_cast<size_t>(r) * (kWords + 1);
    std::vector<uint32_t>& u = nodes[static_cast<int>(v[0])];
    u.resize(kWords, 0);
    for (int k = 0; k < kWords; ++k) u[k] |= static_cast<uint32_t>(v[1 + k]);
  }
  int fewest = CPU_SETSIZE;
  for (const auto& [first, u] : nodes) {
    int n = 0;
    for (uint32_t word : u) n += std::popcount(word);
    fewest = std::min(fewest, std::max(1, n));
  }
  return fewest;
}

}  // namespace

absl::Status RunCollectivesWorker(const std::string& out_path, double seconds_per_point,
                                  int64_t rss_before_mpi, int groups, bool strided,
                                  const std::vector<std::string>& configs) {
  // The ranks' first collectives (the world's MPI_Comm_dup, the groups' split and the nodes'
  // exchange) are bounded as tessera-train's are (sharding/peer_watchdog.h StartupDeadline, the
  // default stall timeout): a transport between hosts that never connects ends the worker (exit
  // 75) instead of leaving calibrate waiting.
  StartupDeadline first(PeerWatchdogOptions(), MpiWorldRank(),
                        "the calibrate worker's communicators");
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world, CreateMpiWorldCommunicator());
  // The groups that call at once (one: the world), and whether a group spans nodes: the ranks'
  // nodes told apart by the first world rank on each (the launcher places a node's ranks
  // together: --map-by ppr:N:node).
  groups = std::max(1, groups);
  if (world->size() % groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("calibrate worker: ", groups,
                                                   " groups do not divide ", world->size(),
                                                   " ranks"));
  }
  std::unique_ptr<Communicator> split;
  if (groups > 1) {
    const int per = world->size() / groups;
    const int color = strided ? world->rank() % groups : world->rank() / per;
    TESSERA_ASSIGN_OR_RETURN(split, world->Split(color, world->rank()));
  }
  Communicator* comm = split ? split.get() : world.get();
  const int w = comm->size();
  bool cross = LauncherLocalSize() < w;
  if (split) {
    const double node = world->rank() - LauncherLocalRank();
    TESSERA_ASSIGN_OR_RETURN(const std::vector<double> nodes, FromEveryRank(*comm, &node));
    cross = std::any_of(nodes.begin(), nodes.end(), [&](double n) { return n != nodes[0]; });
  }
  first.Done();
  // A world across nodes is timed on the wall clock, each call's median (`link`), also where
  // its groups stay on one node: the emulated hosts share one machine's cores, which a thread's
  // CPU clock does not see, and on real hosts the two agree. A group across nodes (`cross`) has
  // a 2 MiB large call and no beyond-cache call: the link, not the cache, bounds it.
  const bool link = LauncherLocalSize() < world->size();
  const int64_t kSmall = 8, kHuge = int64_t{64} << 20;
  const int64_t kLarge = cross ? int64_t{2} << 20 : planner::kInCacheCallBytes;
  std::ostringstream out;
  if (cross) out << "scope cross_node\n";
  if (groups > 1) out << "groups " << groups << "\n";
  // What MPI added: VmRSS after one small call of each collective (the shared-memory segments
  // and the progress engine touched), before any large buffer exists.
  int64_t mpi_bytes = 0;
  {
    std::vector<char> s(8 * w, 1), r(8 * w);
    std::vector<int64_t> c(w, 8), d(w);
    for (int i = 0; i < w; ++i) d[i] = 8 * i;
    float f[2] = {1, 1};
    TESSERA_RETURN_IF_ERROR(comm->AllToAllV(s.data(), c, d, r.data(), c, d));
    TESSERA_RETURN_IF_ERROR(comm->AllReduce(f, 2, ReduceOp::kSum));
    TESSERA_RETURN_IF_ERROR(comm->AllGatherV(s.data(), 8, r.data(), c, d));
    std::ifstream st("/proc/self/status");
    std::string line;
    while (std::getline(st, line)) {
      if (line.rfind("VmRSS:", 0) == 0) {
        int64_t kb = std::strtoll(line.c_str() + 6, nullptr, 10);
        mpi_bytes = std::max<int64_t>(0, kb * 1024 - rss_before_mpi);
      }
    }
    TESSERA_ASSIGN_OR_RETURN(const double most, SlowestOver(*world, static_cast<double>(mpi_bytes)));
    mpi_bytes = static_cast<int64_t>(most);
  }
  // All-to-all: `block` bytes to every rank (own block included, as the trainer's calls do).
  int64_t buffers = 0;  // the largest bytes of this worker's own buffers alive at once
  constexpr double kGap = 4e-3;
  double per = 0, cap = 0;
  std::vector<std::string> lines;
  std::vector<double> large_s;  // per op, the kLarge call's seconds
  for (const char* op : {"all_to_all", "all_reduce", "all_gather"}) {
    double t[2], bytes[2];
    for (int i = 0; i < 2; ++i) {
      const int64_t total = i == 0 ? kSmall * w : kLarge;
      const int64_t block = std::max<int64_t>(total / w / 8 * 8, 8);
      std::vector<char> send(block * w, 1), recv(block * w);
      std::vector<float> fl(std::max<int64_t>(total / 4, 2), 1.0f);
      buffers = std::max<int64_t>(buffers, 2 * block * w + static_cast<int64_t>(fl.size()) * 4);
      std::vector<int64_t> counts(w, block), displs(w);
      for (int r = 0; r < w; ++r) displs[r] = r * block;
      std::function<absl::Status()> call;
      if (std::string(op) == "all_to_all") {
        bytes[i] = static_cast<double>(block) * (w - 1);
        call = [&] {
          return comm->AllToAllV(send.data(), counts, displs, recv.data(), counts, displs);
        };
      } else if (std::string(op) == "all_reduce") {
        bytes[i] = static_cast<double>(fl.size()) * 4;
        call = [&] {
          return comm->AllReduce(fl.data(), static_cast<int64_t>(fl.size()), ReduceOp::kSum);
        };
      } else {
        bytes[i] = static_cast<double>(block) * w;
        call = [&] { return comm->AllGatherV(send.data(), block, recv.data(), counts, displs); };
      }
      // The 4 MiB call on the CPU clock (on one node): at load it is interrupted as often as
      // not, and its rate is what the trainer's ranks see on theirs; the median call, its input
      // freshly written (kCpuMedian).
      const CallClock clock = link     ? CallClock::kWallMedian
                              : i == 1 ? CallClock::kCpuMedian
                                       : CallClock::kWallFastest;
      const std::function<void()> write_input = [&] {
        std::fill(send.begin(), send.end(), static_cast<char>(1));
        std::fill(fl.begin(), fl.end(), 1.0f);
      };
      TESSERA_ASSIGN_OR_RETURN(
          t[i], TimeCollective(*world, *comm, seconds_per_point, call, clock, write_input));
      // The wait (the scheduler's, not the op's: measured once, with the small all-reduce):
      // that call unsynchronised after kGap of compute, per second of compute.
      if (i == 0 && std::string(op) == "all_reduce") {
        TESSERA_ASSIGN_OR_RETURN(const Unsynced u, TimeUnsynced(*world, kGap, call, link));
        per = std::max(0.0, u.call_s - t[0]) / u.compute_s;
        if (link) {
          // After 4x the compute: a wait that does not grow with it is bounded (wait_cap_s).
          TESSERA_ASSIGN_OR_RETURN(const Unsynced l,
                                   TimeUnsynced(*world, 4 * kGap, call, link, 60));
          const double wait_long = std::max(0.0, l.call_s - t[0]);
          if (wait_long < per * l.compute_s) cap = wait_long;
        }
      }
    }
    const double latency = t[0];
    const double slope = std::max(t[1] - t[0], 1e-9);
    lines.push_back(absl::StrCat(op, " ", w, " ", latency, " ", (bytes[1] - bytes[0]) / slope));
    large_s.push_back(t[1]);
  }
  // Large messages make MPI touch more of its shared-memory segments: the peak (VmHWM) after
  // the large calls, less this worker's own buffers, when it is above the small-call figure.
  {
    std::ifstream st("/proc/self/status");
    std::string line;
    int64_t hwm = 0;
    while (std::getline(st, line)) {
      if (line.rfind("VmHWM:", 0) == 0) hwm = std::strtoll(line.c_str() + 6, nullptr, 10) * 1024;
    }
    const int64_t large = std::max<int64_t>(0, hwm - rss_before_mpi - buffers);
    TESSERA_ASSIGN_OR_RETURN(const double most, SlowestOver(*world, static_cast<double>(large)));
    mpi_bytes = std::max(mpi_bytes, static_cast<int64_t>(most));
  }
  // Beyond the cache (after the memory figure, which is the trainer's buffers' regime): the
  // all-reduce of kHuge bytes, its slope from the kLarge point (all_reduce only: the one
  // collective the trainer calls with buffers that large, a data-parallel gradient table).
  double beyond = 0;
  if (!cross) {
    std::vector<float> fl(kHuge / 4, 1.0f);
    auto huge = [&] {
      return comm->AllReduce(fl.data(), static_cast<int64_t>(fl.size()), ReduceOp::kSum);
    };
    TESSERA_ASSIGN_OR_RETURN(
        const double t,
        TimeCollective(*world, *comm, seconds_per_point, huge,
                       link ? CallClock::kWallMedian : CallClock::kCpuLeast));
    // large_s[1]: the kLarge all-reduce, on the CPU clock too (its median call; this one's
    // fastest: a 64 MiB call is interrupted by any load, its median would time the load).
    beyond = static_cast<double>(kHuge - kLarge) / std::max(t - large_s[1], 1e-9);
  }
  if (cap > 0) out << "wait_cap " << cap << "\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    out << lines[i] << " " << per << " " << (i == 1 ? beyond : 0.0) << "\n";
  }
  out << "memory " << mpi_bytes << "\n";
  // Across hosts, the CPUs of each host (the union of its ranks' affinity masks; the fewest over
  // the hosts): where a host's ranks outnumber them, they share cores, which the planner prices
  // as the node's cores_share; the slowdown is then measured with as many ranks per host
  // computing as it has CPUs (the others sleep), the contention alone.
  bool computes = true;
  if (link) {
    TESSERA_ASSIGN_OR_RETURN(const int cores, NodeCores(*world));
    out << "node_cores " << cores << "\n";
    computes = LauncherLocalRank() < cores;
  }
  TESSERA_ASSIGN_OR_RETURN(const Slowdowns slowdown,
                           ComputeSlowdown(*world, link, configs, computes));
  out << "compute_slowdown " << w << " " << slowdown.rows << " " << slowdown.gemm << "\n";
  if (world->rank() == 0) {
    std::ofstream f(out_path);
    f << out.str();
    if (!f) return absl::InternalError(absl::StrCat("calibrate worker: cannot write ", out_path));
  }
  return world->Barrier();
}

namespace calibrate_internal {

absl::StatusOr<std::vector<planner::CollectivePoint>> MeasureCollectives(
    const CalibrateOptions& o, int64_t* comm_memory_bytes) {
  *comm_memory_bytes = 0;
  std::vector<planner::CollectivePoint> points;
  if (o.worker_argv.empty() || o.world_sizes.empty()) {
    Progress(o, "collectives: skipped (no worker command)");
    return points;
  }
  if (geteuid() == 0) {
    // Open MPI refuses root without these; the caller's environment may already say so.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  // The jobs: every world size on this host, then across the hosts (alone, or as the groups of
  // the cross-host world X: strided across the hosts and, where a group fits on one, contiguous;
  // CalibrateOptions::cross_host_mpirun).
  struct Job {
    int w;
    bool across;      // under the cross-host launcher
    int groups;       // groups of w calling at once (the launcher starts w x groups ranks)
    bool strided;     // groups across the hosts (else each on one host)
    bool same_node;   // the scope the points must come out with
  };
  std::vector<Job> jobs;
  const bool hosts = !o.cross_host_mpirun.empty() && o.hosts >= 2;
  const int x = std::max(o.cross_world, 0);
  for (int w : o.world_sizes) {
    jobs.push_back({w, false, 1, true, true});
    if (!hosts || w % o.hosts != 0) continue;
    const bool grouped = x > w && x % w == 0;
    jobs.push_back({w, true, grouped ? x / w : 1, true, false});
    if (grouped && (x / o.hosts) % w == 0) jobs.push_back({w, true, x / w, false, true});
  }
  for (const Job& job : jobs) {
    const int w = job.w;
    const bool across = job.across;
    const std::string out = absl::StrCat(o.scratch_dir, "/collectives-", w, across ? "-hosts" : "",
                                         job.groups > 1 ? absl::StrCat("-g", job.groups) : "",
                                         job.strided ? "" : "-contiguous", ".txt");
    std::remove(out.c_str());
    const int np = w * job.groups;
    std::vector<std::string> args = {o.mpirun, "-np", std::to_string(np), "--oversubscribe"};
    if (across) {
      args = {o.cross_host_mpirun, "-np", std::to_string(np), "--map-by",
              absl::StrCat("ppr:", np / o.hosts, ":node")};
    }
    for (size_t i = 0; i < o.worker_argv.size(); ++i) {
      // The groups flag goes before the worker flag, whose value (the output file) comes last.
      if (job.groups > 1 && i + 1 == o.worker_argv.size()) {
        args.push_back(absl::StrCat("'--collectives_groups=", job.groups,
                                    job.strided ? ":strided" : ":contiguous", "'"));
      }
      args.push_back("'" + o.worker_argv[i] + "'");
    }
    args.push_back("'" + out + "'");
    const std::string cmd = absl::StrJoin(args, " ") + " 1>&2";
    Progress(o, absl::StrCat("collectives: ", cmd));
    const int rc = std::system(cmd.c_str());
    std::ifstream in(out);
    if (rc != 0 || !in) {
      return absl::InternalError(absl::StrCat("calibrate: collectives worker at world size ", w,
                                              across ? " across hosts" : "",
                                              " failed (exit status ", rc, "): ", cmd));
    }
    std::string op;
    int size;
    double latency, bw, wait_per, beyond;
    size_t first = points.size();
    double slowdown = 0, gemm_slowdown = 0;
    bool same_node = true;
    int groups = 1;
    double wait_cap = 0;
    int node_cores = 0;
    while (in >> op) {
      if (op == "scope") {
        std::string scope;
        in >> scope;
        same_node = scope != "cross_node";
        continue;
      }
      if (op == "groups") {
        in >> groups;
        continue;
      }
      if (op == "wait_cap") {
        in >> wait_cap;
        continue;
      }
      if (op == "node_cores") {
        in >> node_cores;
        Progress(o, absl::StrFormat("collectives: world %d across hosts: %d CPU(s) per host", w,
                                    node_cores));
        continue;
      }
      if (op == "compute_slowdown") {
        in >> size >> slowdown >> gemm_slowdown;
        Progress(o, absl::StrFormat("collectives: world %d: with every rank busy, row reads "
                                    "%.3fx and GEMMs %.3fx slower than alone",
                                    size, slowdown, gemm_slowdown));
        continue;
      }
      if (op == "memory") {
        int64_t m = 0;
        in >> m;
        *comm_memory_bytes = std::max(*comm_memory_bytes, m);
        Progress(o, absl::StrFormat("collectives: world %d: MPI adds %.1f MiB per rank", w,
                                    m / 1048576.0));
        continue;
      }
      if (!(in >> size >> latency >> bw >> wait_per >> beyond)) break;
      planner::CollectivePoint p;
      p.op = op == "all_to_all"   ? planner::CollectiveOp::kAllToAll
             : op == "all_reduce" ? planner::CollectiveOp::kAllReduce
                                  : planner::CollectiveOp::kAllGather;
      p.transport = "mpi";
      p.world_size = size;
      p.same_node = same_node;
      p.latency_s = latency;
      p.bytes_per_s = bw;
      p.wait_per_compute = wait_per;
      p.wait_cap_s = wait_cap;
      p.beyond_llc_bytes_per_s = beyond;
      p.groups = groups;
      points.push_back(p);
      Progress(o, absl::StrFormat("collectives: %s world %d%s%s: latency %.1f us, %.3f GB/s, "
                                  "unsynchronised wait %.3f x compute%s",
                                  op, size, same_node ? "" : " across hosts",
                                  groups > 1 ? absl::StrCat(", ", groups, " groups at once") : "",
                                  latency * 1e6, bw / 1e9, wait_per,
                                  wait_cap > 0 ? absl::StrFormat(", at most %.2f ms",
                                                                 1e3 * wait_cap)
                                               : ""));
    }
    if (job.same_node != same_node || groups != job.groups) {
      return absl::InternalError(absl::StrCat(
          "calibrate: the collectives worker at world size ", w, " ran ",
          same_node ? "on one host" : "across hosts", " in ", groups, " group(s) where ",
          job.same_node ? "one host" : "hosts", " and ", job.groups,
          " group(s) were asked for (the launcher's placement: ", cmd, ")"));
    }
    for (size_t i = first; i < points.size(); ++i) {
      points[i].compute_slowdown = slowdown;
      points[i].gemm_slowdown = gemm_slowdown;
      points[i].node_cores = node_cores;
    }
  }
  std::sort(points.begin(), points.end(), planner::CollectivePointLess);
  return points;
}

}  // namespace calibrate_internal
}  // namespace tessera
