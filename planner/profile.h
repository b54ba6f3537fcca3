// MachineProfile: what the planner's cost model knows about the machine it plans for, measured
// there by `tessera-plan calibrate` (tools/) or shipped as a documented default.
//
// A profile is plain data: rates and latencies per device kind, per collective and for the
// RocksDB tier, each table of points sorted by its key and interpolated (piecewise linear in
// the key, clamped at the ends) by the Rate* helpers below. The estimator reads nothing else
// about the hardware: no constants live in code.
//
// File format (YAML, docs/PLANNER.md "Profile file"): `version: 2`, a `machine` block (what it
// was measured on, when, by which command or from which published source), then `devices`,
// `collectives` and `tier`. SaveMachineProfile writes every field; LoadMachineProfile refuses a
// file of another version, a missing or unknown key, an unsorted or empty table, and a rate
// that is not positive, naming the file and the key. Version 1 files (before llc_bytes,
// comm_memory_bytes, gather bag_s and scatter_update id_s existed) are refused with a message
// that names the missing keys and says to rerun `tessera-plan calibrate`.
//
// Thread-safety: plain values; const access from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/profile_meta.h"

namespace tessera::planner {

inline constexpr int kProfileVersion = 2;

// One measured point of a rate that depends on the row size.
//   gather:         seconds = bags x bag_s + ids / rows_per_s   (rows_per_s: ids per second)
//   scatter_update: seconds = ids x id_s + distinct rows / rows_per_s
//                   (id_s: sort + gradient accumulation per id; rows_per_s: optimizer updates
//                   of distinct rows per second)
struct RowRatePoint {
  int64_t row_bytes = 0;       // bytes of one row's payload (dim x dtype size)
  double hot_rows_per_s = 0;   // ids drawn Zipf(1.05) over a table larger than the LLC
  double cold_rows_per_s = 0;  // uniform ids over a table far larger than the LLC
  double bag_s = 0;            // gather only: fixed seconds per bag (output row, offsets)
  double id_s = 0;             // scatter_update only: seconds per id before the row updates
  // scatter_update only, optional (0 when absent: not priced): distinct rows per second when
  // the rows are still cached from the forward's gather of the same batch (calibrate's
  // multi-hot Zipf run, no cache eviction between Forward and BackwardUpdate), as they are in
  // training when the dense work between the two leaves them in the LLC (estimator.h).
  double warm_rows_per_s = 0;
  // gather only, optional (0 when absent: the hot rate and bag_s): a table that fits in the LLC
  // and stays there between lookups (no eviction), uniform ids: seconds per bag and ids per
  // second from one-id and multi-id bags (calibrate). The estimator prices a table no larger
  // than llc_bytes with them.
  double cached_bag_s = 0;
  double cached_rows_per_s = 0;
};

// One measured GEMM shape (C[m x n] = A[m x k] B[k x n], fp32 unless dtype says otherwise).
struct GemmPoint {
  int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;  // 2 m n k / seconds
};

// One DCNv2 cross layer x_{l+1} = x0 * (W x_l + b) + x_l timed whole (CrossLayerForward /
// CrossLayerBackward: its GEMMs and its combine passes, which are not a Linear layer's), by shape:
// batch rows, dim, rank (0: full-rank W [dim, dim]; else U [dim, rank] V [rank, dim]). Rates
// over the layer's GEMM flops (CrossLayerFlops): full 2 b d^2 forward, twice that backward;
// low rank 4 b d r forward, twice that backward.
struct CrossPoint {
  int64_t batch = 0, dim = 0, rank = 0;
  double forward_flops_per_s = 0;
  double backward_flops_per_s = 0;
};
// The forward GEMM flops of one cross layer of that shape (the backward's are twice).
inline double CrossLayerFlops(int64_t batch, int64_t dim, int64_t rank) {
  return rank > 0 ? 4.0 * batch * dim * rank : 2.0 * batch * dim * dim;
}

// One config's dense arch timed whole (calibrate: DenseArch forward + the loss, then its
// backward, caches evicted before each forward as a step's lookup evicts them) over its parts
// timed one by one in the same rounds (each Linear layer, the interaction): scale = whole /
// parts, per pass: what running the parts as one arch adds to the layer model (the activations
// flowing through the caches, the eviction by the lookup). `shape` is DenseShapeKey
// (dense_cost.h); `batch` the samples timed. The scale prices shapes that were not timed; the
// shape timed is priced by its own whole times (forward_s, backward_s), since the layer model's
// rates come from each layer timed with warm caches (a small layer's GEMM then runs 1.3-1.4x
// faster than inside the arch, where the eviction and the other layers' data cool it).
struct DenseArchPoint {
  std::string shape;
  int64_t batch = 0;
  double forward_scale = 1;
  double backward_scale = 1;
  // Optional (0 when absent: the scale times the layer model): the arch's forward + the loss
  // and its backward, seconds at `batch` (the optimizer step not included).
  double forward_s = 0;
  double backward_s = 0;
};

struct DeviceProfile {
  std::string kind;             // "cpu" or "cuda"
  std::string name;             // e.g. "AMD EPYC 9R14 (2 cores)", "NVIDIA H200"
  int threads = 1;              // threads the CPU numbers were measured with (1 for cuda)
  int64_t memory_bytes = 0;     // capacity seen at calibration (host RAM or HBM)
  double copy_bytes_per_s = 0;  // streaming copy bandwidth (elementwise passes, activations)
  // Optional (0 when absent: copy_bytes_per_s): bytes read + written per second when rows of a
  // few hundred bytes are copied between a [bags, output dim] matrix and a packed buffer, as the
  // sharded collection packs gradients for the backward dist and adds received partial sums
  // into its output (row by row, strided on one side); measured, not the streaming rate.
  double pack_bytes_per_s = 0;
  // Optional (0 when absent: not priced): seconds per halving step of a binary search over a
  // sorted array of row ids (std::lower_bound, the array in cache), as column-split row-wise
  // AdaGrad finds each row among its sibling shards' rows: log2(rows) steps per search.
  double search_step_s = 0;
  // Optional (0 when absent: scatter_update id_s): seconds per id of the input dist's packing
  // (PackInput: each id of a shard's rows deduplicated in a hash map, its position and bag
  // length recorded), whenever T > 1.
  double pack_id_s = 0;
  // Optional (0 when absent: pack_id_s for every request): the same packing's cost per id grows
  // with the request's hash map of unique ids. pack_distinct: the unique ids per request at which
  // pack_id_s was measured (calibrate: one-id bags); pack_hot_id_s at pack_hot_distinct (40-id
  // bags over a hot table). A request with u unique ids is priced by interpolating in log(u)
  // between the two points, held at the nearer one outside them (PackIdSeconds).
  double pack_distinct = 0;
  double pack_hot_id_s = 0;
  double pack_hot_distinct = 0;
  // Optional (0 when absent: DefaultKeyProbeIdSeconds): seconds per id of a dynamic table's key
  // -> slot probe (embedding/key_index.h, KeySlotIndex::Find over a table of 2^20 keys, Zipf
  // batches, caches evicted), paid by the owner for every id of a dynamic table's shard.
  double key_probe_id_s = 0;
  // Last-level cache bytes a rank's tables compete for: a table no larger gathers at the hot
  // rate; the hot share of a larger one is the Zipf coverage of its llc_bytes hottest rows.
  int64_t llc_bytes = 0;
  // Pooled lookup (gather + sum) and the fused backward (sort/segment of the ids, then the
  // optimizer update of each distinct row, read-modify-write of row and state), by row size;
  // see RowRatePoint for what each field prices.
  std::vector<RowRatePoint> gather;          // sorted by row_bytes
  std::vector<RowRatePoint> scatter_update;  // sorted by row_bytes
  std::vector<GemmPoint> gemm;               // forward shapes of the models calibrated for
  double gemm_peak_flops_per_s = 0;          // best GEMM rate seen (fallback for other shapes)
  // Optional (empty when absent: a cross layer is priced as a Linear dim -> dim, or dim -> r ->
  // dim, plus its combine passes at copy_bytes_per_s): cross layers timed whole, by shape.
  std::vector<CrossPoint> cross;
  // Optional (false when absent): the gemm points were timed through the trainer's Linear layer
  // (LinearForward / LinearBackward: the GEMMs with the fused bias + ReLU pass, and in the
  // backward the ReLU mask and the bias gradient), as tessera-plan calibrate measures them; the
  // estimator then adds no elementwise passes of its own. False: bare GEMM rates (a datasheet's),
  // the bias + ReLU passes priced at copy_bytes_per_s on top.
  bool gemm_fused_passes = false;
  // Optional (empty when absent: the layer model unscaled): dense archs timed whole, by shape.
  std::vector<DenseArchPoint> dense_arch;
  double launch_overhead_s = 0;              // per kernel launch / per parallel region
  // Resident bytes of a training process before the model exists (runtime, libraries, thread
  // stacks, allocator slack): the base of the estimator's peak-memory prediction.
  int64_t base_memory_bytes = 0;
  // Resident bytes the communicator runtime adds to each rank of a multi-rank run (MPI's
  // shared-memory segments and progress thread, NCCL's buffers); not paid at T = 1.
  int64_t comm_memory_bytes = 0;
};

// A dynamic table's key probe when a profile does not measure it (key_probe_id_s):
// BM_DynamicResolve's 14.8 M ids/s (docs/TIER.md, AMD EPYC Zen 4).
inline double KeyProbeSeconds(const DeviceProfile& d) {
  return d.key_probe_id_s > 0 ? d.key_probe_id_s : 1.0 / 14.8e6;
}
// Bytes per row of a dynamic table's capacity beyond its values and state: the key index (16-byte
// buckets at load <= 1/2: ~32) and the per-slot key, counts and free list (28).
inline constexpr double kDynamicRowOverheadBytes = 60;

enum class CollectiveOp { kAllToAll, kAllReduce, kAllGather };
const char* CollectiveOpName(CollectiveOp op);
absl::StatusOr<CollectiveOp> ParseCollectiveOp(const std::string& name);

// alpha-beta model of one collective on one communicator size:
// seconds = latency_s + bytes_per_rank / bytes_per_s.
struct CollectivePoint {
  CollectiveOp op = CollectiveOp::kAllToAll;
  std::string transport;   // "mpi", "nccl", "self"
  int world_size = 1;      // ranks in the communicator
  bool same_node = true;   // all ranks on one node
  double latency_s = 0;    // fixed cost of one call
  double bytes_per_s = 0;  // per-rank bytes sent (all-to-all) / buffer bytes (reduce, gather)
  // Optional (0 when absent): what one blocking call adds, beyond latency_s and the bytes, when
  // every rank arrives from its own compute as the trainer's ranks do (no barrier before it):
  // waiting, busy-polling, for a rank the scheduler took the core from meanwhile; seconds of
  // wait per second of the compute each rank did since the previous collective (the longer a
  // rank computes, the likelier it lost its core). About 0 on an idle machine with a core per
  // rank; a large share when the ranks share cores with other jobs. A call after c seconds of
  // compute costs latency_s + bytes / bytes_per_s + wait_per_compute x c.
  double wait_per_compute = 0;
  // Optional (0 when absent: no bound): the wait of one call after a long compute (calibrate
  // across hosts: 16 ms), recorded where it is less than wait_per_compute x that compute: a wait
  // that the scheduler's slices bound (ranks that outnumber the cores wait for a peer's next
  // slice, however long they computed) rather than one that grows with the compute. A call
  // waits min(wait_per_compute x c, wait_cap_s).
  double wait_cap_s = 0;
  // Optional (0 when absent: bytes_per_s throughout): the rate of a call's bytes beyond the
  // device's llc_bytes (bytes_per_s is measured with a 4 MiB buffer, which stays in cache; a
  // buffer larger than the cache moves at memory speed, several times slower).
  double beyond_llc_bytes_per_s = 0;
  // Optional (0 when absent: 1): how much slower a rank's compute runs when every rank of this
  // world size computes at once on the node than alone (shared LLC and memory bandwidth, vCPUs
  // that are one core's hyperthreads); the same for every op of the world size (it is the
  // node's, not the op's). The estimator scales the ranks' memory-bound compute phases by it
  // (lookup, update, packing, the tier's probes): calibrate times random 256-byte row reads.
  double compute_slowdown = 0;
  // Optional (0 when absent: compute_slowdown): the same for the dense phases, whose GEMMs
  // mostly run in the core's own caches (calibrate times a Linear forward). On the Zen 4 VM the
  // two differ: the dense phases at T = 2 ran 0.98-1.08x their T = 1 times while one kernel of
  // both kinds measured up to 1.29x.
  double gemm_slowdown = 0;
  // Optional (1 when absent): how many groups of world_size ranks ran the op at once while it
  // was measured. Calibrate across hosts splits its whole world into such groups (strided: each
  // group spread over the hosts, as a run's cross-host sharding or replica groups; contiguous:
  // each on one host while the other hosts run theirs), because a run's groups of one kind run
  // their collectives side by side: they share the links and, on emulated hosts, the cores, and
  // the call ends with the slowest group. The estimator reads the point whose groups are
  // nearest the run's (CollectiveAtScope).
  int groups = 1;
  // Optional (0 when absent: unknown): the CPUs each host gave its ranks while a cross-host
  // point was measured (calibrate: the union of a host's ranks' affinity masks, the fewest over
  // the hosts; scripts/cluster.sh gives each emulated host its own). Where a run's ranks x
  // threads on a host outnumber them, the estimator prices the sharing as cores_share, and
  // compute_slowdown / gemm_slowdown were measured with only as many ranks per host computing
  // as it has CPUs (the contention without the sharing).
  int node_cores = 0;
};

// The order of MachineProfile::collectives: (op, transport, world_size, same_node first,
// groups).
bool CollectivePointLess(const CollectivePoint& a, const CollectivePoint& b);

// RocksDB tier cost per row (embedding + optimizer state value), by value size.
struct TierPoint {
  int64_t value_bytes = 0;
  double read_cached_s = 0;  // a row read from RocksDB's memtable / the OS page cache
  double read_disk_s = 0;    // a row read from the disk (O_DIRECT, batched MultiGet)
  double write_s = 0;        // a row written back (WriteBatch, per row)
  double hit_s = 0;          // an id found in the row cache (Resolve: probe, pin, bookkeeping)
  // Optional (0 when absent: read_cached_s): a row read while the database was never flushed
  // (every row in the memtable, no SST file), as in a run whose written rows fit in one write
  // buffer; Resolve's whole miss path, as read_cached_s.
  double read_memtable_s = 0;
};

struct MachineProfile {
  int version = kProfileVersion;
  // Where the numbers came from: machine description, date (YYYY-MM-DD), the command that
  // measured them or the published source of each.
  std::string machine;
  std::string date;
  std::string source;
  std::vector<DeviceProfile> devices;        // at most one per kind
  std::vector<CollectivePoint> collectives;  // sorted by (op, transport, world_size)
  std::vector<TierPoint> tier;               // sorted by value_bytes
  // Optional blocks (profile_meta.h): the machine it was measured on, and how the calibration
  // went (runs, spread, load, flagged keys).
  MachineFingerprint fingerprint;
  CalibrationRecord calibration;

  // The device of `kind`, or nullptr.
  const DeviceProfile* device(const std::string& kind) const;
};

// Reads a profile file (YAML; JSON is accepted as YAML's subset). InvalidArgument naming `path`
// and the key for a bad file, NotFound when it cannot be read.
[[nodiscard]] absl::StatusOr<MachineProfile> LoadMachineProfile(const std::string& path);
// Parses profile text; `source` names it in messages.
[[nodiscard]] absl::StatusOr<MachineProfile> ParseMachineProfile(const std::string& text,
                                                                 const std::string& source);
// The profile as YAML text (round-trips through ParseMachineProfile).
std::string MachineProfileToYaml(const MachineProfile& profile);
// Writes atomically (temp file + rename); Internal naming the path on failure.
[[nodiscard]] absl::Status SaveMachineProfile(const MachineProfile& profile,
                                              const std::string& path);

// Interpolated rates (piecewise linear in row_bytes / value_bytes; clamped outside the table).
// `hot_fraction` in [0, 1] blends cold (0) and hot (1) rates by time per row.
double GatherRowsPerSec(const DeviceProfile& d, int64_t row_bytes, double hot_fraction);
double ScatterUpdateRowsPerSec(const DeviceProfile& d, int64_t row_bytes, double hot_fraction);
// gather bag_s and scatter_update id_s at `row_bytes` (interpolated the same way).
double GatherBagSeconds(const DeviceProfile& d, int64_t row_bytes);
double ScatterIdSeconds(const DeviceProfile& d, int64_t row_bytes);
// Seconds per id of the input dist's packing for a request of `distinct` unique ids: pack_id_s,
// interpolated towards pack_hot_id_s in log(distinct) when the profile has the hot point;
// scatter_update's id_s at `row_bytes` when the profile has no pack_id_s.
double PackIdSeconds(const DeviceProfile& d, double distinct, int64_t row_bytes);
// scatter_update warm_rows_per_s at `row_bytes` (interpolated by time per row); 0 when any point
// lacks it.
double ScatterUpdateWarmRowsPerSec(const DeviceProfile& d, int64_t row_bytes);
// The gather of a table cached in the LLC: seconds for `bags` bags of `ids` ids in all at
// row_bytes, interpolated between the points by time per row; < 0 when a point lacks the rates.
double GatherCachedSeconds(const DeviceProfile& d, int64_t row_bytes, double bags, double ids);
// GEMM rate of shape (m, n, k): the rate of the measured point nearest in shape, distance
// sqrt((ln m - ln m')^2 + (ln n - ln n')^2 + (ln k - ln k')^2) (so a thin n = 1 layer is not
// priced at the rate of a square one of the same m n k); ties go to the point listed first.
// gemm_peak_flops_per_s when the table is empty.
double GemmFlopsPerSec(const DeviceProfile& d, int64_t m, int64_t n, int64_t k);
// The cross point nearest to (batch, dim, rank) by the same log distance (rank 0 counts as
// rank = dim, and a full-rank shape only matches full-rank points when the profile has one, and
// likewise low rank); nullptr when the profile has no cross points.
const CrossPoint* NearestCrossPoint(const DeviceProfile& d, int64_t batch, int64_t dim,
                                    int64_t rank);
// The point for (op, transport) at world_size, interpolated between measured sizes and
// extrapolated linearly in log2(world_size) beyond the largest one (latency grows, bandwidth is
// held at the largest size's); NotFound naming the op and transport when no point of them
// exists. Reads the points measured alone (CollectivePoint::groups 1) where there are any.
// The all-reduce's in-cache calibration call (tools/plan_calibrate_comm.cc): bytes_per_s is the
// slope from an 8-byte call to this one, beyond_llc_bytes_per_s the slope from this one to a
// 64 MiB call, so the in-cache rate holds up to this size (or llc_bytes when smaller).
inline constexpr int64_t kInCacheCallBytes = int64_t{4} << 20;
struct CollectiveCost {
  double latency_s = 0;
  double bytes_per_s = 0;
  // CollectivePoint::wait_per_compute, interpolated as latency_s, held beyond.
  double wait_per_compute = 0;
  double wait_cap_s = 0;  // CollectivePoint::wait_cap_s, interpolated as latency_s; 0: none
  double beyond_llc_bytes_per_s = 0;  // interpolated as bytes_per_s; 0: bytes_per_s
  double compute_slowdown = 1;        // interpolated as latency_s, held beyond; 1 when absent
  double gemm_slowdown = 1;           // the same; compute_slowdown where absent
  int groups = 1;                     // CollectivePoint::groups of the points read (the least)
  int node_cores = 0;                 // CollectivePoint::node_cores of the points read (the least)
  // The wait of one call after `compute_s` of compute on each rank.
  double Wait(double compute_s) const {
    const double w = wait_per_compute * compute_s;
    return wait_cap_s > 0 ? std::min(w, wait_cap_s) : w;
  }
  // Seconds to move `bytes` in one call (no latency): up to `llc_bytes` at bytes_per_s, the
  // rest at beyond_llc_bytes_per_s when given.
  double Transfer(double bytes, double llc_bytes) const {
    if (beyond_llc_bytes_per_s <= 0 || bytes <= llc_bytes) return bytes / bytes_per_s;
    return llc_bytes / bytes_per_s + (bytes - llc_bytes) / beyond_llc_bytes_per_s;
  }
};
absl::StatusOr<CollectiveCost> CollectiveAt(const MachineProfile& p, CollectiveOp op,
                                            const std::string& transport, int world_size);
// The same over the points whose same_node equals `same_node` only (all points of the op and
// transport when none has it): intra-node vs cross-node rates of one communicator size. Of the
// points of one size measured with different CollectivePoint::groups, the one with the most
// groups up to `groups` (the run's groups of that kind running the op at once), else the fewest.
absl::StatusOr<CollectiveCost> CollectiveAtScope(const MachineProfile& p, CollectiveOp op,
                                                 const std::string& transport, int world_size,
                                                 bool same_node, int groups = 1);
TierPoint TierAt(const MachineProfile& p, int64_t value_bytes);

}  // namespace tessera::planner
