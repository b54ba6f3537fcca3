// How the binaries' OpenMP pool waits between parallel regions, chosen before libgomp loads
// (tools/blas_env.h sets it and re-executes once).
//
// Our loops, OpenBLAS (OpenMP build) and oneDNN share libgomp's pool, and a training step runs
// hundreds of short parallel regions. Between two regions an idle pool thread either spins
// (libgomp's default: ~300,000 iterations, milliseconds) or sleeps on a futex
// (OMP_WAIT_POLICY=PASSIVE), and waking a sleeping thread costs a futex wake and, in a VM, an
// inter-processor interrupt through the hypervisor: tens of microseconds per region.
// - When other work competes for the cores, a spinning thread takes the core the working thread
//   or the other process needs: on 2 loaded cores `small` at 2 threads ran 1.5x-7x slower with
//   libgomp's default than with PASSIVE (docs/PERFORMANCE_HISTORY.md "Two threads: libgomp's
//   spin-wait"), and with one core kept 50% busy by bench/busy_core.sh a bounded spin still ran
//   1.3-1.6x slower than PASSIVE at 2 threads (docs/PERFORMANCE.md "CPU speed on an AMX machine").
// - When the job's threads own idle cores, the wake-ups are the cost: on 2 quiet cores of an
//   Intel Xeon (AMX) a bounded spin ran skewed at 2 threads 1.15-1.25x and small bf16 1.2-1.35x
//   faster than PASSIVE (same section).
// So the binaries measure the machine first: other processes' busy cores over kOmpSampleMs of
// /proc/stat (this process sleeps meanwhile, so it is not counted; steal time counts as busy),
// and the job's threads on this node (launcher ranks x threads per rank, from --threads,
// OMP_NUM_THREADS or the default share; a config's `threads` key is not read this early). They
// spin for kOmpSpinCount iterations (then sleep) when those threads fit on the CPUs this process
// may use and on the cores the others leave idle; otherwise PASSIVE. A process with one thread
// has no pool to wait and stays PASSIVE. Users who set OMP_WAIT_POLICY or GOMP_SPINCOUNT keep
// theirs.
#pragma once

#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "tools/launcher_env.h"

namespace tessera {

inline constexpr int kOmpSampleMs = 50;
// Iterations of libgomp's spin before it sleeps (GOMP_SPINCOUNT). On the quiet Xeon an empty
// 2-thread region after a serial gap cost 1-6 us while the spin lasted, 50-115 us once the
// thread slept (bench/core_fork_join_bench.cc); 30,000 iterations lasted past a 200 us gap but
// not a 1 ms one, 100,000 mostly past 1 ms but not 3 ms. A step's serial stretches (a hot
// table's sort, a small layer) reach ~1 ms.
inline constexpr long kOmpSpinCount = 100000;

// The machine's busy and total CPU time from /proc/stat's first line (user, nice, system, idle,
// iowait, irq, softirq, steal; idle and iowait are not busy). False when unreadable.
inline bool ReadCpuTimes(unsigned long long* busy, unsigned long long* total, int* cpus) {
  FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return false;
  unsigned long long v[8] = {};
  char line[512];
  bool ok = std::fgets(line, sizeof(line), f) != nullptr &&
            std::sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                        &v[3], &v[4], &v[5], &v[6], &v[7]) >= 4;
  int n = 0;
  while (ok && std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "cpu", 3) == 0 && line[3] >= '0' && line[3] <= '9') ++n;
  }
  std::fclose(f);
  if (!ok || n < 1) return false;
  *total = 0;
  for (unsigned long long x : v) *total += x;
  *busy = *total - v[3] - v[4];
  *cpus = n;
  return true;
}

// Cores other processes kept busy over `ms` milliseconds (this process sleeps meanwhile); -1 when
// /proc/stat cannot be read.
inline double OtherBusyCores(int ms, int* cpus) {
  unsigned long long b0, t0, b1, t1;
  if (!ReadCpuTimes(&b0, &t0, cpus)) return -1;
  usleep(static_cast<useconds_t>(ms) * 1000);
  if (!ReadCpuTimes(&b1, &t1, cpus) || t1 <= t0) return -1;
  return static_cast<double>(b1 - b0) / static_cast<double>(t1 - t0) * *cpus;
}

// The threads one rank will run: --threads N / --threads=N on the command line, else
// OMP_NUM_THREADS, else the launcher's default share (DefaultThreadsPerRank) or every CPU.
inline int PlannedThreadsPerRank(char** argv) {
  int n = 0;
  for (int i = 1; argv[i] != nullptr; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--threads") == 0 && argv[i + 1] != nullptr) {
      if (absl::SimpleAtoi(argv[i + 1], &n) && n > 0) return n;
    } else if (std::strncmp(a, "--threads=", 10) == 0) {
      if (absl::SimpleAtoi(a + 10, &n) && n > 0) return n;
    }
  }
  if (const char* v = std::getenv("OMP_NUM_THREADS"); v != nullptr && absl::SimpleAtoi(v, &n)) {
    return n > 0 ? n : 1;
  }
  const int share = DefaultThreadsPerRank();
  return share > 0 ? share : AvailableCpus();
}

// The decision of ChooseOmpWait from what it measured: `local` ranks of `threads` threads on
// this node, `usable` CPUs in this process's affinity mask, `other` cores busy with other
// processes (-1: unknown) of `cpus` online. Spin iff more than one thread, the job's threads fit
// the mask, and they fit beside the others' load with a quarter core to spare (what timer ticks
// and daemons leave on an idle machine; bench/busy_core.sh's default is half a core).
struct OmpWaitDecision {
  bool spin = false;
  std::string why;
};
inline OmpWaitDecision DecideOmpWait(int local, int threads, int usable, double other, int cpus) {
  OmpWaitDecision d;
  if (threads <= 1) {
    d.why = "one thread per rank";
  } else if (local * threads > usable) {
    d.why = absl::StrFormat("%d rank(s) x %d threads > %d CPUs", local, threads, usable);
  } else if (other < 0) {
    d.why = "/proc/stat unreadable";
  } else {
    d.spin = local * threads + other <= cpus + 0.25;
    d.why = absl::StrFormat("%d rank(s) x %d threads, other processes %.2f of %d cores", local,
                            threads, other, cpus);
  }
  return d;
}

// Sets OMP_WAIT_POLICY or GOMP_SPINCOUNT as the comment above says, and TESSERA_OMP_WAIT to a
// line saying what was chosen and why (OmpWaitChoice). Returns false when the user set either
// variable (nothing changed). assume_idle: decide as if no other process used the cores, without
// sampling (tessera-plan: a profile prices the machine as a job that owns its cores sees it, not
// the load of the minute it was made in).
inline bool ChooseOmpWait(char** argv, bool assume_idle = false) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return false;
  }
  const int threads = PlannedThreadsPerRank(argv);
  const int local = LauncherLocalSize();
  const int usable = AvailableCpus();
  int cpus = usable;
  double other = 0;
  if (!assume_idle) {
    other = threads > 1 && local * threads <= usable ? OtherBusyCores(kOmpSampleMs, &cpus) : -1;
  }
  OmpWaitDecision d = DecideOmpWait(local, threads, usable, other, cpus);
  if (assume_idle) d.why += ", assumed idle: a profile prices cores the job owns";
  if (d.spin) {
    setenv("GOMP_SPINCOUNT", std::to_string(kOmpSpinCount).c_str(), 1);
    setenv("TESSERA_OMP_WAIT", absl::StrFormat("spin %ld (%s)", kOmpSpinCount, d.why).c_str(), 1);
  } else {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("TESSERA_OMP_WAIT", absl::StrFormat("passive (%s)", d.why).c_str(), 1);
  }
  return true;
}

// Whether this process's libgomp pool spins between regions (what it read at load): a positive
// GOMP_SPINCOUNT, else anything but OMP_WAIT_POLICY=PASSIVE (libgomp's default spins).
inline bool OmpPoolSpins() {
  if (const char* v = std::getenv("GOMP_SPINCOUNT")) {
    return std::strcmp(v, "0") != 0 && v[0] != '\0';
  }
  const char* p = std::getenv("OMP_WAIT_POLICY");
  return p == nullptr || strcasecmp(p, "PASSIVE") != 0;
}

// What the pool's threads do between regions in this process, for the binaries' reports:
// TESSERA_OMP_WAIT's line, else the user's setting.
inline std::string OmpWaitChoice() {
  if (const char* v = std::getenv("TESSERA_OMP_WAIT")) return v;
  if (const char* v = std::getenv("GOMP_SPINCOUNT")) return std::string("spin ") + v + " (set)";
  if (const char* v = std::getenv("OMP_WAIT_POLICY")) return std::string(v) + " (set)";
  return "libgomp default";
}

}  // namespace tessera
