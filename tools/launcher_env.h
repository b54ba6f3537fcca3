// What a rank's launcher (mpirun, mpiexec, srun) tells the process through its environment, for
// the binaries (libraries read no environment): the rank's place on its node and the CPU
// threads it should use by default.
//
// Threads under a launcher: every rank of a node is a separate process, and each one taking
// every core (OpenMP's default) puts local_size x cores threads on the node's cores. On the 2-core
// development machines `mpirun -np 4` ran at 4,657 samples/s that way against 279,054 with one
// thread per rank (issue 13). So by default each rank takes its share of the cores it may run
// on: max(1, cores / local ranks).
#pragma once

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace tessera {

// This process's rank on its node as its launcher tells it (Open MPI, MPICH/Hydra, Slurm); 0 when
// not launched as a rank. With device: cuda it picks the GPU (CudaDeviceForLocalRank).
inline int LauncherLocalRank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

// Tasks on node `node` from Slurm's SLURM_TASKS_PER_NODE syntax ("2(x3),1": 2 tasks on each of
// the first 3 nodes, 1 on the 4th). 0 when the text does not parse or has no such node.
inline int SlurmTasksOnNode(const std::string& spec, int node) {
  int first = 0;  // index of the first node the current entry describes
  for (absl::string_view entry : absl::StrSplit(spec, ',')) {
    int tasks = 0, repeat = 1;
    const size_t paren = entry.find("(x");
    if (!absl::SimpleAtoi(entry.substr(0, paren), &tasks)) return 0;
    if (paren != absl::string_view::npos) {
      absl::string_view r = entry.substr(paren + 2);
      if (r.empty() || r.back() != ')' || !absl::SimpleAtoi(r.substr(0, r.size() - 1), &repeat))
        return 0;
    }
    if (node < first + repeat) return tasks;
    first += repeat;
  }
  return 0;
}

// Ranks of this job on this node, as the launcher tells it: OMPI_COMM_WORLD_LOCAL_SIZE (Open
// MPI), MPI_LOCALNRANKS (MPICH/Hydra), SLURM_TASKS_PER_NODE at SLURM_NODEID (srun). 1 when not
// launched as a rank or the launcher does not say.
inline int LauncherLocalSize() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    int n = 0;
    if (const char* v = std::getenv(var); v != nullptr && absl::SimpleAtoi(v, &n) && n >= 1)
      return n;
  }
  const char* spec = std::getenv("SLURM_TASKS_PER_NODE");
  const char* node = std::getenv("SLURM_NODEID");
  int node_id = 0;
  if (spec != nullptr && node != nullptr && absl::SimpleAtoi(node, &node_id)) {
    const int n = SlurmTasksOnNode(spec, node_id);
    if (n >= 1) return n;
  }
  return 1;
}

// CPUs this process may run on (its affinity mask: a container's cpuset, or the cores a
// launcher bound the rank to); the online count when the mask cannot be read.
inline int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n >= 1) return n;
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online >= 1 ? static_cast<int>(online) : 1;
}

// The default thread count of one rank, for a config whose `threads` is 0 (and no --threads
// flag): 0 (keep OpenMP's default: OMP_NUM_THREADS or every core) when OMP_NUM_THREADS is set or
// the process is the only rank on its node; otherwise max(1, AvailableCpus() / local ranks).
// A rank bound to a few cores by its launcher sees only those, so it takes at most their share
// (1 when bound to one core): never more threads than cores, at worst fewer.
inline int DefaultThreadsPerRank() {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return 0;
  const int local = LauncherLocalSize();
  if (local <= 1) return 0;
  const int share = AvailableCpus() / local;
  return share >= 1 ? share : 1;
}

}  // namespace tessera
