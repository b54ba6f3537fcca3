// `tessera-plan calibrate`: measures on this machine what the planner's cost model reads
// (planner/profile.h) through the code the trainer runs, and returns it as a MachineProfile.
//
//   gather / scatter_update  EmbeddingCollection::Forward / BackwardUpdate (the trainer's pooled
//                            lookup and fused backward: sort/segment + row optimizer) on one
//                            in-memory table of `table_bytes` (larger than the LLC) per dim, ids
//                            Zipf(1.05) (hot) and uniform (cold); rate = ids per second
//   gemm                     dense/ LinearForward / LinearBackward at every MLP layer of the
//                            configs in `configs`, at their batch sizes: the forward shape
//                            (m = batch, n = out, k = in), the input-gradient shape (m = batch,
//                            n = in, k = out) and the weight-gradient shape (m = out, n = in,
//                            k = batch), each a rate in flops per second including the fused
//                            bias / activation passes
//   collectives              the MPI Communicator's AllToAllV, AllReduce and AllGatherV at each
//                            world size in `world_sizes`: Calibrate starts
//                            `mpirun -np W --oversubscribe <worker_argv>` and the ranks run
//                            RunCollectivesWorker (alpha-beta fit: a small and a large message)
//   tier                     TieredRowStore (the RocksDB tier's own path): misses resolved from
//                            RocksDB with the database in the OS page cache and with O_DIRECT
//                            reads, and the write-back of dirty evicted rows, per row
//   cuda                     skipped (no device entry) when the build or the machine has no GPU
//
// Threads: every CPU rate is measured with `threads` threads (the planner's one-rank-per-core
// topology measures with 1). Default wall time ~1-2 minutes on 2 cores.
// Not thread-safe (sets the process's thread count; call from main).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/profile.h"

namespace tessera {

// The subcommand: tools/plan_main.cc dispatches `tessera-plan calibrate ...` here before it
// parses its own flags (argv[0] is "calibrate", the rest its arguments; `--help` for them).
// Returns the process exit status: 0 done (the profile written with SaveMachineProfile), 1 an
// error (one message on stderr, no file written), 2 bad usage.
int RunPlanCalibrate(int argc, char** argv);

struct CalibrateOptions {
  // CPU threads every CPU rate is measured with. Default: 1 (one rank per core).
  int threads = 1;
  // Row sizes (fp32 dims) of the gather / scatter-update points. Default: 16 .. 256.
  std::vector<int64_t> dims = {16, 32, 64, 128, 256};
  // Bytes of the table each row rate is measured on; far above the LLC (32 MiB here).
  // Default: 256 MiB.
  int64_t table_bytes = int64_t{256} << 20;
  // Samples per measured batch and ids per bag (one feature). The rates are per id but include
  // the per-bag and per-call work, so they are measured at the shape of one table's call in the
  // bench configs (batch 2048, one id per bag): at pooling 8 the same code runs ~2x more ids per
  // second (tessera-bench small.yaml: 1.1 ms for 8 x 2048 ids at dim 64, where pooling-8 calls
  // give 48 M ids/s). Default: 2048 x 1.
  int64_t batch_size = 2048;
  int64_t pooling = 1;
  // Ids per bag of the third row-rate run (hot ids), which splits the gather into a per-bag and
  // a per-id cost and the update into a per-id and a per-distinct-row cost. Default: 32.
  int64_t multi_pooling = 32;
  // The LLC the estimator's hot/cold blend reads (profile llc_bytes). 0: the largest cache of
  // cpu0 in /sys/devices/system/cpu/cpu0/cache (a VM may report the host's; give it then).
  // Default: 0. CUDA devices: cuda_llc_bytes (default 50 MiB, H100/H200 L2).
  int64_t llc_bytes = 0;
  int64_t cuda_llc_bytes = int64_t{50} << 20;
  // Bytes of scratch written (untimed) before every timed gather / scatter-update call, so
  // that, as in training (where the dense layers run in between), the previous calls' rows are
  // no longer cached. 0: none. Default: 48 MiB, raised to 1.5x the LLC (llc_bytes, measured or
  // given) before the runs.
  int64_t evict_bytes = int64_t{48} << 20;
  // The pass before calls whose data a step reuses every step, sized by the batch or the model
  // rather than the tables: each dense arch's forward (MeasureDenseArch: its weights and
  // activations), the per-id work (the update's duplicate-id run, which sets id_s: its sort
  // scratch; the input packing: its hash maps) and the warm update run (a table the LLC keeps).
  // What evicts them in a step is the rest of the step's traffic, not the whole LLC: a full
  // pass priced skewed (86k ids per step, a 64-wide arch) 10-30% above its steps. 0: none.
  // Default: 48 MiB.
  int64_t light_evict_bytes = int64_t{48} << 20;
  // Distinct batches of ids cycled through (fresh ids, as training sees them: a few batches
  // cycled would keep their rows in the caches). Run tessera-bench with as many --batches to
  // compare with it. Default: 64.
  int distinct_batches = 64;
  // Zipf exponent of the hot ids. Default: 1.05 (the synthetic data's).
  double zipf_exponent = 1.05;
  // Tessera configs (YAML) whose MLP layer shapes are measured at their batch sizes.
  // Default: none (then `gemm` holds a 2048 x 512 x 256 point only).
  std::vector<std::string> configs;
  // Minimum seconds of repetitions per measured point (the median of the repetitions' rates is
  // recorded). Default: 0.25.
  double seconds_per_point = 0.25;
  // World sizes of the collective points (each run under mpirun --oversubscribe). Empty: no
  // collective points. Default: 2 and 4.
  std::vector<int> world_sizes = {2, 4};
  // The launcher and the command line that starts this binary as a collectives worker (the
  // binary then calls RunCollectivesWorker with the file given after it). Empty worker_argv:
  // collectives skipped. Default: "mpirun", {}.
  std::string mpirun = "mpirun";
  std::vector<std::string> worker_argv;
  // Cross-host points (profile same_node: false): a launcher command that places ranks on
  // `hosts` hosts (e.g. "bash scripts/cluster.sh mpirun" for emulated hosts, or "mpirun
  // --hostfile H" with the interfaces named). For each world size W of `world_sizes` that
  // `hosts` divides, the collectives are measured again under
  // `<cross_host_mpirun> -np W --map-by ppr:W/hosts:node <worker_argv>` (the world spread evenly
  // over the hosts, as both process-grid layouts spread a group that crosses them). Empty or
  // hosts < 2: none. Default: "", 0.
  // A W below the largest such world size X is measured as a run with X ranks runs its groups
  // of W: X ranks split into X / W groups calling at once (profile groups: X / W), strided over
  // the hosts (each group across them); and, where W fits on one host, also contiguous (each
  // group on one host, every host busy: the same-node point of a run across hosts).
  std::string cross_host_mpirun;
  int hosts = 0;
  // Set by Calibrate for a collectives part of one world size: X above (0: none).
  int cross_world = 0;
  // RocksDB tier points: value sizes are dim x 4 + 4 (row-wise AdaGrad state) for these dims.
  // Empty: no tier points. Default: 16, 64, 128.
  std::vector<int64_t> tier_dims = {16, 64, 128};
  // Rows in the calibration database per tier dim. Default: 200000.
  int64_t tier_rows = 200000;
  // Scratch directory (created; the RocksDB databases and worker outputs go there, removed at
  // the end). Default: "/tmp/tessera-calibrate".
  std::string scratch_dir = "/tmp/tessera-calibrate";
  // Measure the CUDA device when the build has the CUDA path and a GPU is visible.
  // Default: true.
  bool cuda = true;
  // Time compute points (gather, scatter-update, copy, GEMM, RocksDB reads from the page cache
  // and writes) in this process's CPU seconds rather than wall seconds: on a machine shared with
  // other jobs the wall time of a point includes the time the scheduler gave them, its CPU time
  // does not. Disk reads and collectives are always wall time (they wait, and their best
  // repetitions are taken). Meaningful with threads = 1. Default: true.
  bool cpu_clock = true;
  // Progress lines on stderr. Default: true.
  bool verbose = true;
  // Runs of every part (the device, each world size's collectives, the tier), interleaved; each
  // key of the profile is the median of its part's runs (planner/profile_quality.h). Default: 3.
  int runs = 3;
  // Recorded in the profile (the machine it was measured on). Default: none.
  planner::MachineFingerprint fingerprint;
  // A key whose runs spread wider than this ((max - min) / median, with a floor per key) or that
  // fails a plausibility check has its part measured again, up to `extra_runs` more times; what
  // stays wide or implausible is marked in the profile's `calibration.flagged` and printed at the
  // end. Default: 0.25, 2.
  double max_spread = 0.25;
  int extra_runs = 2;
};

// A calibration of under a minute on 2 cores (38-50 s on an Intel Xeon VM) for
// `sharding.profile: auto`'s first use
// (trainer/auto_plan.h): dims 16, 64 and 256 over a 128 MiB table, 0.05 s per point, 3 runs
// (1 extra), collectives at 2 ranks (when the machine has 2 cores or more), one tier size of
// 50k rows, the GEMM shapes of `configs` only.
CalibrateOptions QuickCalibrateOptions(const std::vector<std::string>& configs);

// Runs every measurement and returns the profile (machine, date and source filled in;
// `command` is recorded as the source). Errors: Internal naming the step that failed
// (a worker's exit status, a RocksDB error).
[[nodiscard]] absl::StatusOr<planner::MachineProfile> Calibrate(const CalibrateOptions& options,
                                                                const std::string& command);

// The collectives measurement, run by every rank of an MPI job that Calibrate started: MPI must
// be active (the caller ran MpiInitialize). A world whose launcher puts fewer ranks on this
// node than the world has (tools/launcher_env.h) is measured as cross-host: a 2 MiB large call
// (the links are slow), no beyond-cache call, and a first line "scope cross_node". Rank 0 writes
// one line per point to `out_path`:
// "<op> <world_size> <latency_s> <bytes_per_s>", then "memory <bytes>": what the MPI runtime adds
// to a rank, the largest over the ranks of VmRSS after a round of small collectives and of VmHWM
// after the large ones less the worker's own buffers, each minus `rss_before_mpi` (VmRSS before
// MPI_Init). Collective over the MPI world.
// `groups` > 1: the world is split into that many groups (`strided`: rank r in group r % groups;
// else contiguous blocks) that measure their collectives at once, each call started together
// (a world barrier before it) and read as the slowest group's; the compute slowdowns are the
// whole world's, the dense one over the dense archs of `configs` (ComputeSlowdown in
// plan_calibrate_comm.cc; a probe GEMM when empty).
[[nodiscard]] absl::Status RunCollectivesWorker(const std::string& out_path,
                                                double seconds_per_point, int64_t rss_before_mpi,
                                                int groups = 1, bool strided = true,
                                                const std::vector<std::string>& configs = {});

}  // namespace tessera
