// Collectives: alpha-beta points of the MPI Communicator (sharding/), measured by ranks that
// Calibrate starts under mpirun. Byte conventions (what each point's bytes_per_s divides):
//   all_to_all   bytes this rank sends to the other ranks (equal blocks per peer; the
//                Communicator's byte counter, as tessera-bench prints it)
//   all_reduce   the buffer's bytes (floats x 4)
//   all_gather   the gathered buffer's bytes (world size x each rank's block)
// latency_s is the time of the call with an 8-byte block; bytes_per_s the slope between that and
// a 4 MiB buffer (each the fastest of its repetitions, see TimeCollective; the 4 MiB call on the
// thread CPU clock, the least over ranks: CallClock::kCpuLeast); wait_per_compute
// the small all-reduce's median CPU time unsynchronised after 4 ms of compute, less latency_s,
// per second of that compute (TimeUnsynced; the same for every op of the world size); the
// all-reduce's beyond_llc_bytes_per_s the slope from 4 to 64 MiB, both calls timed on each
// rank's thread CPU clock, the least over ranks (CallClock::kCpuLeast: a 64 MiB call outlasts
// the scheduler's slices, so a process sharing a rank's core interrupts every repetition).
// Across hosts (a world its launcher spreads over several nodes: tools/launcher_env.h says this
// node holds fewer ranks than the world) the same points are measured with a 2 MiB large call,
// each time the median of its calls (not the fastest), and no beyond-cache call (the link, not the
// cache, bounds them; a 64 MiB all-reduce over a 100 Mbit/s link would take seconds per call),
// compute_slowdown on the wall clock (ComputeSlowdown), and recorded as same_node: false. Calibrate
// runs them under CalibrateOptions::cross_host_mpirun with the world spread evenly over the hosts.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
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
#include "tools/launcher_env.h"
#include "tools/plan_calibrate_internal.h"

namespace tessera {
namespace {

using calibrate_internal::MedianSeconds;

// How TimeCollective reads a call's time.
enum class CallClock {
  kWallFastest,  // wall seconds, each rank's fastest call, the mean over ranks
  kWallMedian,   // wall seconds, each rank's median call (across hosts, where the link, not the
                 // scheduler, sets the time and the fastest call is the one that caught the
                 // shaper's bucket full), the mean over ranks
  // The calling thread's CPU seconds, each rank's fastest call, the least over ranks: for a
  // call longer than the scheduler's slices (the beyond-cache all-reduce, 20-120 ms), which
  // another process on a rank's core interrupts every time. The interrupted rank's CPU clock
  // stops while it is off its core (its partner's, busy-polling, does not): the least is the
  // call's own work.
  kCpuLeast,
};

// The time of one `call` over at least 10 calls (a barrier before each call), read by `clock`.
absl::StatusOr<double> TimeCollective(Communicator& comm, double min_seconds,
                                      const std::function<absl::Status()>& call,
                                      CallClock clock = CallClock::kWallFastest) {
  const bool median = clock == CallClock::kWallMedian;
  const bool cpu = clock == CallClock::kCpuLeast;
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
    TESSERA_RETURN_IF_ERROR(comm.Broadcast(&go, sizeof(go), 0));
    if (!go) break;
    TESSERA_RETURN_IF_ERROR(comm.Barrier());
    Stopwatch w;
    const double c0 = cpu ? thread_cpu() : 0;
    TESSERA_RETURN_IF_ERROR(call());
    // The first call sets up buffers.
    if (rep > 0) t.push_back(cpu ? thread_cpu() - c0 : w.ElapsedSeconds());
  }
  // The fastest call: the one every rank ran through without the scheduler handing its core to
  // another job (4 ranks oversubscribe 2 cores, and other engineers' builds share them); a
  // collective waits for its slowest rank, so any interruption of any rank shows up in full.
  std::sort(t.begin(), t.end());
  double med = median ? t[t.size() / 2] : t.front();
  if (cpu) {
    const int w = comm.size();
    std::vector<double> all(w);
    std::vector<int64_t> counts(w, sizeof(double)), displs(w);
    for (int r = 0; r < w; ++r) displs[r] = r * static_cast<int64_t>(sizeof(double));
    TESSERA_RETURN_IF_ERROR(comm.AllGatherV(&med, sizeof(double), all.data(), counts, displs));
    return *std::min_element(all.begin(), all.end());
  }
  TESSERA_RETURN_IF_ERROR(comm.AllReduce(&med, 1, ReduceOp::kAvg));
  return med;
}

// The median CPU seconds of `call` (the slowest rank's median) when every rank comes to it from
// `compute_s` of its own busy compute, as the trainer's ranks come to theirs (no barrier): what
// the ranks wait for each other, busy-polling, on top of the synchronised fastest call. 250
// calls. The median, not the mean: a call that waited for a rank the scheduler gave to another
// process (other engineers' builds, bench/busy_core.sh) is the load of that moment; the mean
// of such calls made one 2-rank profile 1.07 (and 0.79) where a quiet machine gives 0.01.
absl::StatusOr<double> TimeUnsynced(Communicator& comm, double compute_s,
                                    const std::function<absl::Status()>& call) {
  const double kComputeS = compute_s;
  constexpr int kCalls = 250;
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  };
  TESSERA_RETURN_IF_ERROR(comm.Barrier());
  std::vector<double> per_call;
  volatile double sink = 0;
  for (int i = 0; i < kCalls; ++i) {
    const double until = cpu_now() + kComputeS;
    while (cpu_now() < until) sink = sink + 1.0;
    const double t0 = cpu_now();
    TESSERA_RETURN_IF_ERROR(call());
    per_call.push_back(cpu_now() - t0);
  }
  std::sort(per_call.begin(), per_call.end());
  double mean = per_call[per_call.size() / 2];
  const int w = comm.size();
  std::vector<double> all(w);
  std::vector<int64_t> counts(w, 8), displs(w);
  for (int r = 0; r < w; ++r) displs[r] = 8 * r;
  TESSERA_RETURN_IF_ERROR(comm.AllGatherV(&mean, 8, all.data(), counts, displs));
  return *std::max_element(all.begin(), all.end());
}

// What a rank's compute slows down by when every rank of the node computes at once (shared LLC
// and memory bandwidth, vCPUs that may be one core's hyperthreads), for the step's two kinds of
// compute apart: a Linear forward at a bench layer shape (2048 x 512 -> 256, compute-bound, the
// dense phases: `gemm`) and 16k random 256-byte row reads over 64 MiB (memory-bound, the
// lookup, update and packing: `rows`). Each kind in kRounds rounds, a round timing it alone
// (rank round % size runs kReps times while the others sleep) and then on every rank together
// (the slowest rank's median), on the thread's CPU clock: the round's together / alone, and the
// median over the rounds, at least 1. The rounds alternate the two kinds, so a minute's drift in
// the machine's speed (a VM's neighbours; 1.01-1.29 between calibrations minutes apart on the
// Zen 4 VM when both kinds ran as one kernel, once) falls on both sides of every ratio.
// `wall`: on the wall clock instead (the cross-host measurement: there the ranks of emulated
// hosts share one machine's cores, which a thread's CPU clock does not see; on real hosts with
// a core per rank the two agree), each rank's runs totalled and the ranks averaged.
struct Slowdowns {
  double rows = 1, gemm = 1;
};
absl::StatusOr<Slowdowns> ComputeSlowdown(Communicator& comm, bool wall) {
  constexpr int kReps = 9, kRounds = 7;
  constexpr int64_t kB = 2048, kIn = 512, kOut = 256, kRows = (int64_t{64} << 20) / 256;
  std::vector<float> x(kB * kIn, 0.01f), w(kOut * kIn, 0.02f), b(kOut, 0.0f), y(kB * kOut);
  std::vector<float> table(kRows * 64, 1.0f), acc(64, 0.0f);
  std::vector<int64_t> ids(16384);
  uint64_t h = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(comm.rank() + 1);
  for (int64_t& id : ids) {
    h ^= h << 13, h ^= h >> 7, h ^= h << 17;
    id = static_cast<int64_t>(h % kRows);
  }
  auto clock = [wall] {
    timespec ts;
    clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  };
  const DeviceContext ctx = DeviceContext::Cpu();
  auto kernel = [&](bool gemm) -> absl::StatusOr<double> {
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
  auto per_run = [&](bool gemm, int reps) -> absl::StatusOr<double> {
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      TESSERA_ASSIGN_OR_RETURN(double s, kernel(gemm));
      t.push_back(s);
    }
    return wall ? std::accumulate(t.begin(), t.end(), 0.0) / reps : mid(std::move(t));
  };
  const int n = comm.size();
  std::vector<int64_t> counts(n, 8), displs(n);
  for (int r = 0; r < n; ++r) displs[r] = 8 * r;
  auto ratio = [&](bool gemm, int round) -> absl::StatusOr<double> {
    // Alone: one rank runs while the others sleep (a barrier would busy-poll their cores).
    const int solo = round % n;
    double alone = 0;
    TESSERA_RETURN_IF_ERROR(comm.Barrier());
    if (comm.rank() == solo) {
      TESSERA_ASSIGN_OR_RETURN(alone, per_run(gemm, kReps));
    } else {
      TESSERA_ASSIGN_OR_RETURN(double one, kernel(gemm));
      usleep(static_cast<useconds_t>(std::min(5.0, 3 * kReps * one) * 1e6));
    }
    TESSERA_RETURN_IF_ERROR(comm.Barrier());
    TESSERA_ASSIGN_OR_RETURN(double together, per_run(gemm, kReps));
    TESSERA_RETURN_IF_ERROR(comm.AllReduce(&alone, 1, ReduceOp::kSum));  // the solo rank's
    std::vector<double> all(n);
    TESSERA_RETURN_IF_ERROR(comm.AllGatherV(&together, 8, all.data(), counts, displs));
    // The slowest rank's on the CPU clock (contention); on the wall clock the ranks' mean: the
    // ranks that share cores take turns, and which one ran last is the scheduler's pick, not a
    // slower rank (the step's own imbalance is priced by the critical path).
    together = wall ? std::accumulate(all.begin(), all.end(), 0.0) / n
                    : *std::max_element(all.begin(), all.end());
    return alone > 0 ? together / alone : 1.0;
  };
  TESSERA_RETURN_IF_ERROR(per_run(true, 3).status());  // first touch
  TESSERA_RETURN_IF_ERROR(per_run(false, 3).status());
  std::vector<double> rows, gemm;
  for (int round = 0; round < kRounds; ++round) {
    TESSERA_ASSIGN_OR_RETURN(double g, ratio(true, round));
    TESSERA_ASSIGN_OR_RETURN(double r, ratio(false, round));
    gemm.push_back(g);
    rows.push_back(r);
  }
  return Slowdowns{std::max(1.0, mid(rows)), std::max(1.0, mid(gemm))};
}

}  // namespace

absl::Status RunCollectivesWorker(const std::string& out_path, double seconds_per_point,
                                  int64_t rss_before_mpi) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateMpiWorldCommunicator());
  const int w = comm->size();
  const bool cross = LauncherLocalSize() < w;
  const int64_t kSmall = 8, kHuge = int64_t{64} << 20;
  const int64_t kLarge = cross ? int64_t{2} << 20 : planner::kInCacheCallBytes;
  std::ostringstream out;
  if (cross) out << "scope cross_node\n";
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
    std::vector<int64_t> all(w);
    TESSERA_RETURN_IF_ERROR(comm->AllGatherV(&mpi_bytes, 8, all.data(), c, d));
    mpi_bytes = *std::max_element(all.begin(), all.end());
  }
  // All-to-all: `block` bytes to every rank (own block included, as the trainer's calls do).
  int64_t buffers = 0;  // the largest bytes of this worker's own buffers alive at once
  constexpr double kGap = 4e-3;
  double per = 0;
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
      // not, and its rate is what the trainer's ranks see on theirs.
      const CallClock clock = cross    ? CallClock::kWallMedian
                              : i == 1 ? CallClock::kCpuLeast
                                       : CallClock::kWallFastest;
      TESSERA_ASSIGN_OR_RETURN(t[i], TimeCollective(*comm, seconds_per_point, call, clock));
      // The wait (the scheduler's, not the op's: measured once, with the small all-reduce):
      // that call unsynchronised after kGap of compute, per second of compute.
      if (i == 0 && std::string(op) == "all_reduce") {
        TESSERA_ASSIGN_OR_RETURN(const double wait, TimeUnsynced(*comm, kGap, call));
        per = std::max(0.0, wait - t[0]) / kGap;
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
    std::vector<int64_t> c(w, 8), d(w), all(w);
    for (int i = 0; i < w; ++i) d[i] = 8 * i;
    int64_t large = std::max<int64_t>(0, hwm - rss_before_mpi - buffers);
    TESSERA_RETURN_IF_ERROR(comm->AllGatherV(&large, 8, all.data(), c, d));
    mpi_bytes = std::max(mpi_bytes, *std::max_element(all.begin(), all.end()));
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
    TESSERA_ASSIGN_OR_RETURN(const double t,
                             TimeCollective(*comm, seconds_per_point, huge, CallClock::kCpuLeast));
    // large_s[1]: the kLarge all-reduce, on the same clock.
    beyond = static_cast<double>(kHuge - kLarge) / std::max(t - large_s[1], 1e-9);
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    out << lines[i] << " " << per << " " << (i == 1 ? beyond : 0.0) << "\n";
  }
  out << "memory " << mpi_bytes << "\n";
  TESSERA_ASSIGN_OR_RETURN(const Slowdowns slowdown, ComputeSlowdown(*comm, cross));
  out << "compute_slowdown " << w << " " << slowdown.rows << " " << slowdown.gemm << "\n";
  if (comm->rank() == 0) {
    std::ofstream f(out_path);
    f << out.str();
    if (!f) return absl::InternalError(absl::StrCat("calibrate worker: cannot write ", out_path));
  }
  return comm->Barrier();
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
  // (world size, across hosts): every world size on this host, then across the hosts.
  std::vector<std::pair<int, bool>> jobs;
  for (int w : o.world_sizes) {
    jobs.push_back({w, false});
    if (!o.cross_host_mpirun.empty() && o.hosts >= 2 && w % o.hosts == 0) jobs.push_back({w, true});
  }
  for (const auto& [w, across] : jobs) {
    const std::string out =
        absl::StrCat(o.scratch_dir, "/collectives-", w, across ? "-cross" : "", ".txt");
    std::remove(out.c_str());
    std::vector<std::string> args = {o.mpirun, "-np", std::to_string(w), "--oversubscribe"};
    if (across) {
      args = {o.cross_host_mpirun, "-np", std::to_string(w), "--map-by",
              absl::StrCat("ppr:", w / o.hosts, ":node")};
    }
    for (const std::string& a : o.worker_argv) args.push_back("'" + a + "'");
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
    while (in >> op) {
      if (op == "scope") {
        std::string scope;
        in >> scope;
        same_node = scope != "cross_node";
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
      p.beyond_llc_bytes_per_s = beyond;
      points.push_back(p);
      Progress(o, absl::StrFormat("collectives: %s world %d%s: latency %.1f us, %.3f GB/s, "
                                  "unsynchronised wait %.3f x compute",
                                  op, size, same_node ? "" : " across hosts", latency * 1e6,
                                  bw / 1e9, wait_per));
    }
    if (across == same_node) {
      return absl::InternalError(
          absl::StrCat("calibrate: the collectives worker at world size ", w, " ran ",
                       same_node ? "on one host where hosts" : "across hosts where one host",
                       " were asked for (the launcher's placement: ", cmd, ")"));
    }
    for (size_t i = first; i < points.size(); ++i) {
      points[i].compute_slowdown = slowdown;
      points[i].gemm_slowdown = gemm_slowdown;
    }
  }
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(static_cast<int>(a.op), a.transport, a.world_size, !a.same_node) <
           std::make_tuple(static_cast<int>(b.op), b.transport, b.world_size, !b.same_node);
  });
  return points;
}

}  // namespace calibrate_internal
}  // namespace tessera
