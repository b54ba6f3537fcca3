// The cost model (estimator.h).
#include "planner/estimator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "planner/dense_cost.h"
#include "planner/profile_quality.h"

namespace tessera::planner {

namespace {

constexpr double kTierSlotOverheadBytes = 48;                // TieredRowStore bookkeeping per slot
constexpr double kTierBlockCacheBytes = 64.0 * (1 << 20);    // RowDbOptions block cache
constexpr double kTierWriteBufferBytes = 128.0 * (1 << 20);  // RowDbOptions write_buffer_size
// Resident bytes a row written to the hash memtable takes beyond its value (16-byte key,
// internal key, link / skip-list node, arena): measured, tessera-bench small_tiered.yaml (8
// stores, value 260 B) VmHWM after 16 and after 76 steps of 64 distinct batches grows 559 B
// per row written (docs/PERFORMANCE.md, "The planner's accuracy"); 48 B before undercounted.
constexpr double kTierMemtableEntryBytes = 290;
constexpr double kTierBlockBytes = 4096;       // RowDbOptions block_size: one block per miss
constexpr double kTierDiskOverheadBytes = 24;  // key + SST overhead per row

double StateFloats(const StepSettings& s, int64_t cols) {
  return s.row_state_fixed + static_cast<double>(s.row_state_per_col) * cols;
}

// Share of each table's ids that hit rows the LLC keeps from one step to the next. Between a
// row's reads the step touches the dense work and the other tables' rows; an LRU cache under
// independent accesses keeps about the rows read most often, so `room` bytes hold the hottest
// rows over all tables by reads per byte. Handed out in 1/256ths of the room, each to the table
// whose next rows take the most of a step's reads (`step_ids` x its coverage gain; coverage
// curves are concave, so this greedy split is the best one). The profile's hot gather rate is
// measured with the caches evicted before each call, its cached rate on a table that stays in
// the LLC: the resident share moves a table from the one towards the other (skewed's 200k-row
// hot table, 51 MB at dim 64 next to 48 MB of LLC, read 1.4 ms per step where the evicted hot
// rate priced 2.1 and the cached rate 1.1).
std::vector<double> ResidentCoverage(const std::vector<PlanTable>& tables,
                                     const std::vector<double>& step_ids,
                                     const std::vector<double>& row_bytes, double room,
                                     const IdModel& ids) {
  const size_t n = tables.size();
  std::vector<double> cov(n, 0.0);
  if (room <= 0 || n == 0) return cov;
  constexpr int kChunks = 256;
  const double chunk = room / kChunks;
  std::vector<int64_t> held(n, 0);
  auto gain = [&](size_t i, int64_t* next) {
    const int64_t rows = tables[i].config.num_rows;
    *next = std::min<int64_t>(rows, held[i] + std::max<int64_t>(1, static_cast<int64_t>(
                                                                       chunk / row_bytes[i])));
    if (*next <= held[i]) return -1.0;
    return step_ids[i] * (ids.Coverage(tables[i], *next, rows) - cov[i]);
  };
  for (int c = 0; c < kChunks; ++c) {
    size_t best = n;
    double best_gain = 0;
    int64_t best_next = 0;
    for (size_t i = 0; i < n; ++i) {
      int64_t next = 0;
      const double g = gain(i, &next);
      if (g > best_gain) best = i, best_gain = g, best_next = next;
    }
    if (best == n) break;  // every table held whole, or no gain left
    held[best] = best_next;
    cov[best] = ids.Coverage(tables[best], best_next, tables[best].config.num_rows);
  }
  return cov;
}

}  // namespace

absl::StatusOr<Estimator> Estimator::Create(const PlanInputs& in, const MachineProfile& profile,
                                            int group_size) {
  Estimator e;
  e.in_ = &in;
  e.profile_ = &profile;
  e.t_ = in.topology.world_size;
  e.n_ = group_size;
  if (e.n_ < 1 || e.t_ % e.n_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(in.source, ": group size ", group_size, " does not divide world size ", e.t_));
  }
  e.m_ = e.t_ / e.n_;
  e.dev_ = profile.device(in.step.device);
  if (e.dev_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(in.source, ": the profile (", profile.machine,
                                                   ") has no '", in.step.device,
                                                   "' device, which the ranks compute on"));
  }
  e.table_kind_ = in.step.device == "cuda" ? kDevice : kHost;
  if (profile.tier.empty()) {
    for (const PlanTable& t : in.tables) {
      if (t.storage_fixed && t.config.storage.tier == StorageTier::kRocksDb) {
        return absl::InvalidArgumentError(absl::StrCat(
            in.source, ": table '", t.config.name, "' is on the RocksDB tier, but the profile (",
            profile.machine, ") has no tier points (calibrated with --tier_dims \"\")"));
      }
    }
  }
  const std::string& tr = in.topology.transport;
  e.nccl_ = tr == "nccl";
  // Which node each rank of sharding group 0 and of replica group 0 sits on, by the layout
  // (inputs.h Topology): world rank w is on node w / R. Every group of a kind is placed alike.
  const int r = std::max(1, in.topology.ranks_per_node);
  const bool contiguous = in.topology.groups_contiguous;
  auto world_rank = [&](int group, int shard) {
    return contiguous ? group * e.n_ + shard : shard * e.m_ + group;
  };
  e.node_of_.resize(e.n_);
  for (int s = 0; s < e.n_; ++s) e.node_of_[s] = world_rank(0, s) / r;
  e.node_ranks_ = 0;
  for (int s = 0; s < e.n_; ++s) e.node_ranks_ += e.node_of_[s] == e.node_of_[0];
  const bool group_same_node = e.node_ranks_ == e.n_;
  bool replica_same_node = true;
  for (int g = 1; g < e.m_; ++g) replica_same_node &= world_rank(g, 0) / r == world_rank(0, 0) / r;
  const bool world_same_node = e.t_ <= r;
  e.group_same_node_ = group_same_node;
  e.replica_same_node_ = replica_same_node;
  e.group_link_ = !group_same_node;
  e.world_link_ = !world_same_node;
  // Cross-node points exist in the profile (calibrate across hosts): a collective whose group
  // crosses nodes is read from them; otherwise every collective from the same-node points.
  bool has_cross = false;
  for (const CollectivePoint& c : profile.collectives)
    has_cross |= c.transport == tr && !c.same_node;
  std::vector<CollectiveCost*> cross;  // the costs read from cross-node points
  e.group_link_ &= has_cross;
  e.world_link_ &= has_cross;
  e.replica_link_ = !replica_same_node && has_cross;
  // `groups`: how many groups of `size` run the op at once (sharding groups: M, replica groups:
  // N). A profile's points measured with groups at once (calibrate across hosts) are read where
  // the run's match; a same-node point measured while the other hosts ran theirs only for a
  // world across nodes.
  auto get = [&](CollectiveOp op, int size, bool same, CollectiveCost* out,
                 int groups = 1) -> absl::Status {
    if (size <= 1) {
      *out = CollectiveCost{};
      return absl::OkStatus();
    }
    if (same && world_same_node) groups = 1;
    absl::StatusOr<CollectiveCost> c = CollectiveAtScope(profile, op, tr, size, same, groups);
    if (!c.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(in.source, ": profile '", profile.machine, "': ", c.status().message()));
    }
    *out = *c;
    if (!same && has_cross) cross.push_back(out);
    return absl::OkStatus();
  };
  TESSERA_RETURN_IF_ERROR(
      get(CollectiveOp::kAllToAll, e.n_, group_same_node, &e.a2a_group_, e.m_));
  TESSERA_RETURN_IF_ERROR(
      get(CollectiveOp::kAllToAll, std::max(2, e.node_ranks_), true, &e.a2a_intra_));
  if (e.n_ <= 1) e.a2a_intra_ = CollectiveCost{};
  TESSERA_RETURN_IF_ERROR(get(CollectiveOp::kAllReduce, e.t_, world_same_node, &e.ar_world_));
  TESSERA_RETURN_IF_ERROR(
      get(CollectiveOp::kAllGather, e.m_, replica_same_node, &e.ag_replica_, e.n_));
  TESSERA_RETURN_IF_ERROR(
      get(CollectiveOp::kAllReduce, e.m_, replica_same_node, &e.ar_replica_, e.n_));
  TESSERA_RETURN_IF_ERROR(get(CollectiveOp::kAllGather, e.n_, group_same_node, &e.ag_group_, e.m_));
  {
    // Groups that run at once share the link: a cross-node point at size W was measured with
    // its groups (CollectivePoint::groups; one: the W ranks alone) on the links, spread evenly
    // over the calibration's hosts (as many per host as a group of the run has per node, for a
    // run over as many nodes); in the run every group of a kind runs its collective at the same
    // time, so the node's min(T, R) ranks share its link where the point had its groups' ranks
    // per node.
    const double on_node = std::min(e.t_, r);
    int replica_node_ranks = 0;
    for (int g = 0; g < e.m_; ++g)
      replica_node_ranks += world_rank(g, 0) / r == world_rank(0, 0) / r;
    auto share = [&](CollectiveCost* c, int group_node_ranks) {
      if (std::find(cross.begin(), cross.end(), c) == cross.end() || c->bytes_per_s <= 0) return;
      c->bytes_per_s /= std::max(1.0, on_node / std::max(1, group_node_ranks) / c->groups);
    };
    share(&e.a2a_group_, e.node_ranks_);
    share(&e.ag_group_, e.node_ranks_);
    share(&e.ag_replica_, replica_node_ranks);
    share(&e.ar_replica_, replica_node_ranks);
  }
  {
    // Ranks computing side by side on one node, each on its own core (compute_slowdown, at
    // their count, at most the cores the profile's fingerprint names / threads per rank: past
    // that the ranks share cores, cores_share_). A world across nodes reads it from the
    // cross-node all-reduce at T when the profile has one: that calibration ran the whole
    // world at once, its ranks spread over the hosts as the run's are (on a real cluster the
    // same as R ranks of one node; on emulated hosts, which share one machine's caches and
    // memory, every rank of the world competing).
    const int cores = profile.fingerprint.present ? profile.fingerprint.cores : 0;
    const int threads = std::max(1, in.step.threads > 0 ? in.step.threads : e.dev_->threads);
    const int on_node = std::min(e.t_, r);
    CollectiveCost node;
    int node_cores = cores;  // the cores a node gives its ranks (0: unknown, no sharing priced)
    if (!world_same_node && has_cross) {
      TESSERA_RETURN_IF_ERROR(get(CollectiveOp::kAllReduce, e.t_, false, &node));
      // Across hosts: the CPUs each host gave its ranks in the calibration (its slowdowns were
      // measured with as many ranks per host computing as it had).
      node_cores = node.node_cores;
    } else {
      const int own = cores > 0 ? std::max(1, std::min(on_node, cores / threads)) : on_node;
      TESSERA_RETURN_IF_ERROR(get(CollectiveOp::kAllReduce, own, true, &node));
    }
    if (node_cores > 0) {
      e.cores_share_ = std::max(1.0, static_cast<double>(on_node) * threads / node_cores);
    }
    e.compute_slowdown_ = std::max(1.0, node.compute_slowdown);
    e.gemm_slowdown_ = std::max(1.0, node.gemm_slowdown);
    // The collectives' wait (wait_per_compute) on a node whose cores the profile knows: the
    // ranks wait for each other by the plan's own imbalance (each collective's wait at its
    // slowest rank's compute: CriticalPath) and, when they outnumber the cores, by sharing
    // them (cores_share_); what is left is the scheduler's jitter, at most
    // kMaxWaitPerComputeOwnCores. A larger measured wait is the load of the minute calibrate
    // ran in. A point measured across hosts keeps its measurement (over the links, whose jitter
    // the cores do not bound; on emulated hosts, the waits of ranks that outnumber the machine's
    // cores), and so does a profile without a fingerprint.
    if (cores > 0) {
      for (CollectiveCost* c : {&e.a2a_group_, &e.a2a_intra_, &e.ar_world_, &e.ag_replica_,
                                &e.ar_replica_, &e.ag_group_}) {
        // (groups > 1: measured under the cross-host launcher, on a node or across)
        if (c->groups > 1 || std::find(cross.begin(), cross.end(), c) != cross.end()) continue;
        c->wait_per_compute = std::min(c->wait_per_compute, kMaxWaitPerComputeOwnCores);
      }
    }
  }

  const StepSettings& st = in.step;
  const int64_t b = st.batch_per_rank;
  IdModel ids;
  e.stats_.resize(in.tables.size());
  for (size_t i = 0; i < in.tables.size(); ++i) {
    const PlanTable& t = in.tables[i];
    TableStats& s = e.stats_[i];
    const int64_t rows = t.config.num_rows;
    s.ids_local = b * IdsPerSample(t);
    s.distinct_local = ids.Distinct(t, b, rows);
    s.distinct_group = ids.Distinct(t, static_cast<double>(b) * e.n_, rows);
    s.distinct_global = ids.Distinct(t, static_cast<double>(b) * e.t_, rows);
    s.distinct_sync = st.replica_sync == ReplicaSync::kAverage
                          ? ids.Distinct(t, static_cast<double>(b) * e.t_ * st.sync_every, rows)
                          : s.distinct_global;
    // Hot/cold blend: the profile's hot rates are Zipf(1.05) over a table larger than the LLC.
    const double bytes = static_cast<double>(rows) * t.config.dim * 4;
    const double llc = static_cast<double>(e.dev_->llc_bytes);
    s.exponent = t.measured.empty() ? t.zipf_exponent : 1.05;
    s.hot = bytes <= llc ? 1.0 : std::clamp(s.exponent / 1.05, 0.0, 1.0);
    if (!t.measured.empty()) {
      // Measured: the share of accesses that hit the LLC-sized hottest rows, relative to what
      // Zipf(1.05) gives.
      int64_t llc_rows = std::max<int64_t>(1, static_cast<int64_t>(llc / (t.config.dim * 4)));
      double cov = ids.Coverage(t, llc_rows, rows);
      double ref = ZipfCoverage(llc_rows, rows, 1.05);
      s.hot = bytes <= llc ? 1.0 : std::clamp(cov / std::max(1e-9, ref), 0.0, 1.0);
    }
  }

  // Which tables stay in the LLC between lookups (the cached gather rates): the tables compete
  // for it, the smaller first; a table is in while the running total of table bytes, smallest
  // first, is within llc_bytes.
  {
    std::vector<size_t> order(in.tables.size());
    std::iota(order.begin(), order.end(), size_t{0});
    auto table_bytes = [&](size_t i) {
      return static_cast<double>(in.tables[i].config.num_rows) * in.tables[i].config.dim * 4;
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t c) { return table_bytes(a) < table_bytes(c); });
    double used = 0;
    for (size_t i : order) {
      used += table_bytes(i);
      e.stats_[i].in_llc = used <= static_cast<double>(e.dev_->llc_bytes);
    }
  }

  // Dense model, per rank (B samples): dense_cost.h.
  const PooledOutput pooled = PooledOutputOf(in);
  e.emb_out_dim_ = pooled.width;
  const DenseCost dc = ComputeDenseCost(*e.dev_, in.dense, b, pooled.features, pooled.width);
  e.dense_fwd_s_ = dc.forward_s;
  e.dense_bwd_s_ = dc.backward_s;
  e.dense_params_ = dc.params;
  e.activation_bytes_ = dc.activation_bytes;
  // What of the LLC the step's gathered rows keep until their update: the dense work between a
  // table's lookup and its update touches the activations (and their gradients) and the dense
  // weights and gradients; the ranks computing on one node share the LLC.
  const double node_ranks = std::max(1, std::min(e.t_, r));
  e.warm_room_bytes_ = static_cast<double>(e.dev_->llc_bytes) / node_ranks - dc.activation_bytes -
                       2.0 * 4 * static_cast<double>(dc.params);
  // The rows the LLC keeps between steps: the room the dense work leaves holds the hottest rows
  // of the tables (ResidentCoverage). Each of the group's N ranks holds about 1 / N of every
  // table, so one copy of the tables gets N ranks' room.
  {
    std::vector<double> step_ids(in.tables.size()), row_bytes(in.tables.size());
    for (size_t i = 0; i < in.tables.size(); ++i) {
      const TableConfig& c = in.tables[i].config;
      step_ids[i] = e.stats_[i].ids_local;
      row_bytes[i] = static_cast<double>(c.dim * 4) + StateFloats(st, c.dim) * 4;
    }
    const std::vector<double> resident =
        ResidentCoverage(in.tables, step_ids, row_bytes, e.warm_room_bytes_ * e.n_, ids);
    for (size_t i = 0; i < in.tables.size(); ++i) e.stats_[i].resident = resident[i];
  }
  return e;
}

double Estimator::TierDbMemoryBytes(const PlanTable& tab, double frac, double rows,
                                    double value_bytes, double table_hot, double misses,
                                    bool* in_memtable) const {
  // The database starts empty (rows are initialised on first touch) and takes a row when the
  // row cache evicts it dirty; with in-place updates the memtable holds one entry per row
  // written. Over S steps that is the distinct rows outside the cached hottest ones among S
  // steps' ids (every row of the shard for an unbounded run, steps = 0).
  const StepSettings& st = in_->step;
  double written = rows;
  if (st.steps > 0) {
    const double ids = static_cast<double>(st.steps) * n_ * st.batch_per_rank * IdsPerSample(tab);
    written = std::min(rows, frac * ExpectedDistinct(ids, tab.config.num_rows, stats_exponent(tab),
                                                     static_cast<int64_t>(table_hot)));
  }
  const double entries = written * (value_bytes + kTierMemtableEntryBytes);
  // The hash memtable's bucket array (one 8-byte bucket per 512 bytes of write buffer).
  double bytes = kTierWriteBufferBytes / 512 * 8 + std::min(kTierWriteBufferBytes, entries);
  *in_memtable = entries <= kTierWriteBufferBytes;
  if (entries > kTierWriteBufferBytes) {
    // Past one write buffer the rows are flushed to SST files and misses read 4 KiB blocks,
    // which the block cache keeps (up to its capacity).
    const double reads = st.steps > 0 ? static_cast<double>(st.steps) * misses * kTierBlockBytes
                                      : kTierBlockCacheBytes;
    bytes += std::min(kTierBlockCacheBytes, reads);
  }
  return bytes;
}

double Estimator::stats_exponent(const PlanTable& tab) const {
  return tab.measured.empty() ? tab.zipf_exponent : 1.05;
}

double Estimator::LookupSeconds(const TableStats& s, int64_t row_bytes, double bags,
                                double ids) const {
  if (s.in_llc) {
    const double cached = GatherCachedSeconds(*dev_, row_bytes, bags, ids);
    if (cached >= 0) return cached;
  }
  double per_id = 1.0 / GatherRowsPerSec(*dev_, row_bytes, s.hot);
  if (s.resident > 0) {
    const double cached = GatherCachedSeconds(*dev_, row_bytes, 0, 1);
    if (cached >= 0) per_id = s.resident * cached + (1 - s.resident) * per_id;
  }
  return bags * GatherBagSeconds(*dev_, row_bytes) + ids * per_id;
}

double Estimator::UpdateRowsSeconds(int64_t row_bytes, double hot, double rows,
                                    double bytes_per_row, bool in_llc) const {
  const double cached = rows / ScatterUpdateRowsPerSec(*dev_, row_bytes, hot);
  const double warm_rate = ScatterUpdateWarmRowsPerSec(*dev_, row_bytes);
  // Only a table that stays in the LLC still has the forward's rows there at its update: the
  // others' rows are evicted by the dense forward and backward in between (on the AMX Xeon VM,
  // 2026-12-07, small.yaml's update measured 1.21-1.43 ms against 0.60 priced warm and 1.10
  // priced evicted; kaggle.yaml's 1.93-2.40 against 0.99 and 1.47; skewed.yaml's, whose hot
  // table stays in the LLC, 1.97-2.38 against 2.13 and, all evicted, 4.06).
  if (!in_llc || warm_rate <= 0 || rows <= 0 || warm_room_bytes_ <= 0) return cached;
  // The share of the rows (weights + state) the LLC still holds from the forward's gather.
  const double w = std::clamp(warm_room_bytes_ / (rows * bytes_per_row), 0.0, 1.0);
  return w * rows / warm_rate + (1 - w) * cached;
}

double Estimator::A2aSeconds(double bytes, bool intra) const {
  const CollectiveCost& c = intra ? a2a_intra_ : a2a_group_;
  if (bytes <= 0 || c.bytes_per_s <= 0) return 0;
  return bytes / c.bytes_per_s;
}

double Estimator::PackSeconds(double bytes) const {
  const double rate = dev_->pack_bytes_per_s > 0 ? dev_->pack_bytes_per_s : dev_->copy_bytes_per_s;
  return bytes / rate;
}

Contribution Estimator::Contribute(int t, const TablePlacement& p) const {
  const PlanTable& tab = in_->tables[t];
  const TableStats& s = stats_[t];
  const TableConfig& c = tab.config;
  const StepSettings& st = in_->step;
  const TableOption& o = p.option;
  double memo_in_s = 0, memo_out_s = 0;
  const double b = static_cast<double>(st.batch_per_rank);
  const double bags = b * tab.num_features;
  const double e = st.payload_bytes;
  const int n = n_;
  const int kind = table_kind_;
  Contribution out;

  const int64_t full_row_bytes = c.dim * 4;
  if (o.type == ShardingType::kDataParallel) {
    // Stored bytes per row: 2 per weight for a 16-bit table (storage.dtype).
    const double row_bytes = static_cast<double>(c.dim * RowDtypeBytes(c.storage.dtype));
    MetricVec& u = out.uniform;
    u[kLookupS] = LookupSeconds(s, full_row_bytes, bags, s.ids_local);
    // Every rank aggregates its ids, then updates the rows the world touched.
    u[kUpdateS] = s.ids_local * ScatterIdSeconds(*dev_, full_row_bytes) +
                  UpdateRowsSeconds(full_row_bytes, s.hot, s.distinct_global,
                                    full_row_bytes + StateFloats(st, c.dim) * 4, s.in_llc);
    const double weights = c.num_rows * row_bytes;
    const double state = c.num_rows * StateFloats(st, c.dim) * 4;
    const double grad = c.num_rows * (c.dim + 1) * 4.0;
    if (t_ > 1) {
      // The dense [rows, dim + 1] gradient table (DataParallelBackward), kept across steps:
      // the touched rows written, the whole table scanned for touched rows after the world
      // all-reduce (priced in StepFromMaxima), the touched rows cleared.
      u[kUpdateS] += (grad + 2 * s.distinct_global * (c.dim + 1) * 4.0) / dev_->copy_bytes_per_s;
    }
    u[kMemDevice + kind] = weights + state + 2 * grad;
    out.uniform_memory.weights = weights;
    out.uniform_memory.optimizer_state = state;
    out.uniform_memory.comm_buffers = 2 * grad;
    if (t_ > 1) out.world_allreduce_bytes = grad;
    return out;
  }

  const bool intra = o.type == ShardingType::kTableRowWise;
  int col_pieces = 1;
  for (const Shard& sh : p.shards) {
    if (sh.col_begin == 0 && sh.col_end < c.dim) {
      col_pieces = std::max<int64_t>(col_pieces, (c.dim + sh.num_cols() - 1) / sh.num_cols());
    }
  }
  const bool column_split_adagrad = col_pieces > 1 && st.row_state_fixed > 0;
  MetricVec& u = out.uniform;
  // Shards of one shape cost the same: computed once per (rows, cols).
  int64_t memo_rows = -1, memo_cols = -1;
  MetricVec memo_d{};
  MemoryBreakdown memo_mem;
  double memo_send = 0;
  for (const Shard& sh : p.shards) {
    const int64_t rows_i = sh.num_rows(), cols = sh.num_cols();
    if (rows_i != memo_rows || cols != memo_cols) {
      memo_rows = rows_i;
      memo_cols = cols;
      MetricVec d{};
      const double frac = static_cast<double>(rows_i) / c.num_rows;
      // Input dist, per sender: the ids of the shard's row range (unique ids, positions) and the
      // lengths of every bag; column shards of one row range each get the same ids.
      const double in_bytes = 8 * frac * s.distinct_local + 4 * frac * s.ids_local + 4 * bags;
      const double out_bytes = bags * cols * e;
      if (n > 1) {
        // Every other rank sends ids to the owner and receives its partial sums (charged to
        // every rank in `uniform` at the group's rate, taken back from the owner here).
        // table_row_wise routes as row_wise (every rank of the group exchanges with the owner
        // directly): the owner's peers on its own node at the intra-node rate, the group's
        // ranks on other nodes at the group's.
        const double in_s = A2aSeconds(in_bytes, false);
        const double out_s = A2aSeconds(out_bytes, false);
        const double near = intra ? node_ranks_ - 1 : 0, far = n - 1 - near;
        d[kInSend] -= in_s;
        d[kOutRecv] -= out_s;
        d[kInRecv] += near * A2aSeconds(in_bytes, true) + far * in_s;
        d[kOutSend] += near * A2aSeconds(out_bytes, true) + far * out_s;
      }
      const double owner_ids = n * frac * s.ids_local;
      const int64_t row_bytes = cols * 4;
      const double rows = static_cast<double>(rows_i);
      const double state_floats = StateFloats(st, cols);
      const double value_bytes = cols * RowDtypeBytes(c.storage.dtype) + state_floats * 4;
      const double touched_group = frac * s.distinct_group;
      // Rows the update writes: the group's distinct rows, or with exact replica sync the union
      // over the M replicas (every replica applies the summed gradients of all of them).
      const double updated_rows = m_ > 1 && st.replica_sync == ReplicaSync::kExact
                                      ? frac * s.distinct_global
                                      : touched_group;
      // The owner pools every bag of the group's N B samples (row pieces return a partial sum
      // of each bag) and sorts every id it received before updating each distinct row once.
      const double id_s = ScatterIdSeconds(*dev_, row_bytes);
      d[kLookupS] = LookupSeconds(s, row_bytes, n * bags, owner_ids);
      d[kUpdateS] = owner_ids * id_s +
                    UpdateRowsSeconds(row_bytes, s.hot, updated_rows, row_bytes + state_floats * 4,
                                      s.in_llc);
      // A dynamic table: every id the owner resolves is first a key -> slot probe.
      if (c.dynamic.enabled) d[kLookupS] += owner_ids * KeyProbeSeconds(*dev_);
      if (column_split_adagrad && dev_->search_step_s > 0) {
        // Every updated row's squared-gradient sum gathers the partials of its col_pieces
        // sibling shards, each found by a binary search over that shard's updated rows.
        d[kUpdateS] += updated_rows * col_pieces * std::log2(std::max(2.0, updated_rows)) *
                       dev_->search_step_s;
      }
      if (column_split_adagrad && ag_group_.bytes_per_s > 0) {
        d[kSyncS] +=
            ag_group_.latency_s + touched_group * 4 * (col_pieces - 1) / ag_group_.bytes_per_s;
      }
      double sync_buffer = 0;  // the replica all-reduce's buffer, kept across steps
      if (m_ > 1) {
        const double mm = m_;
        // The all-reduce of the buffer is priced per call in StepParts (kSyncBytes).
        if (st.replica_sync == ReplicaSync::kExact) {
          const double ag = 8 * touched_group * (mm - 1);
          const double union_bytes = frac * s.distinct_global * cols * 4;
          d[kSyncS] += ag / ag_replica_.bytes_per_s;
          d[kSyncBytes] += union_bytes;
          sync_buffer = union_bytes;
          // the exact sync's own work: sort + unique of the M replicas' ids, the union's buffer
          // zeroed, the gradients placed into it and copied back (4 bytes each per value).
          d[kSyncS] += mm * touched_group * id_s + 3 * union_bytes / dev_->copy_bytes_per_s;
        } else {
          // Every k-th step: the union of the replicas' rows touched since the last sync (an
          // id all-gather, then sort + unique; sync_rows all: every row, no ids), each synced
          // row's weights and state gathered into the buffer and, averaged, its weights
          // scattered back, its state snapshot taken and the previous sync's state average
          // applied: rows visited one by one, at the gather's cold rate unless the table stays
          // in the LLC (TableStats::in_llc; replica_sync.cc AverageSync).
          const double k = static_cast<double>(st.sync_every);
          const double synced = st.sync_all_rows ? rows : frac * s.distinct_sync;
          const double hot = s.in_llc ? 1.0 : 0.0;
          const int64_t state_bytes = static_cast<int64_t>(state_floats * 4);
          double t = 2 * ag_replica_.latency_s;
          if (!st.sync_all_rows) {
            t += 8 * synced * (mm - 1) / ag_replica_.bytes_per_s + mm * synced * id_s;
          }
          t += synced / GatherRowsPerSec(*dev_, static_cast<int64_t>(value_bytes), hot) +
               synced / GatherRowsPerSec(*dev_, row_bytes, hot);
          if (state_bytes > 0) t += 2 * synced / GatherRowsPerSec(*dev_, state_bytes, hot);
          d[kSyncS] += t / k;
          d[kSyncBytes] += synced * value_bytes / k;
          // The buffer, and the delayed state average and its snapshot.
          sync_buffer = synced * (value_bytes + 2.0 * state_bytes);
        }
      }
      MemoryBreakdown mem;
      // The owner's buffers: ids received (twice when pipelined: the next batch is packed),
      // partial sums sent and gradients received, gradient aggregation of the touched rows.
      const double pipe = st.pipeline ? 2 : 1;
      mem.comm_buffers = pipe * n * in_bytes + 2 * n * out_bytes + touched_group * cols * 4 +
                         owner_ids * 8 + sync_buffer;
      if (o.tiered) {
        int64_t cache_rows;
        if (o.cache_rows_fixed > 0) {
          cache_rows =
              static_cast<int64_t>(std::ceil(static_cast<double>(o.cache_rows_fixed) * rows * cols /
                                             (static_cast<double>(c.num_rows) * c.dim)));
        } else {
          cache_rows = static_cast<int64_t>(std::ceil(o.cache_share * rows));
        }
        cache_rows = std::min<int64_t>(
            rows_i, std::max<int64_t>(cache_rows, static_cast<int64_t>(touched_group) + 1));
        // Misses: the step's distinct rows of the shard outside the cached hottest ones.
        const double table_hot =
            std::min<double>(c.num_rows, static_cast<double>(cache_rows) * c.num_rows / rows_i);
        const double misses = frac * ExpectedDistinct(n * b * IdsPerSample(tab), c.num_rows,
                                                      s.exponent, static_cast<int64_t>(table_hot));
        const double db_bytes = rows * (value_bytes + kTierDiskOverheadBytes);
        const TierPoint tp = TierAt(*profile_, static_cast<int64_t>(value_bytes));
        // The database is read from the memtable while the rows the run writes fit in one write
        // buffer (never flushed), else from the page cache when it fits in half the host memory.
        const bool page_cache = db_bytes < 0.5 * in_->topology.memory.host;
        bool memtable = false;
        const double db_mem =
            TierDbMemoryBytes(tab, frac, rows, value_bytes, table_hot, misses, &memtable);
        d[kTierS] = misses * (memtable && tp.read_memtable_s > 0 ? tp.read_memtable_s
                              : page_cache                       ? tp.read_cached_s
                                                                 : tp.read_disk_s);
        d[kTierWriteS] = misses * tp.write_s;
        // Every id the owner looks up first goes through the row cache (TieredRowStore Resolve),
        // and before that through the prefetch of the next batch (TieredRowStore Prefetch, on
        // the training thread: the same probe per id, then the misses handed to the tier's
        // threads).
        d[kLookupS] += owner_ids * tp.hit_s;
        d[kTierProbeS] += owner_ids * tp.hit_s;
        mem.caches = cache_rows * (value_bytes + kTierSlotOverheadBytes) + db_mem;
        mem.disk = db_bytes;
        d[kMemHost] += mem.caches;
        d[kMemDisk] += mem.disk;
      } else {
        mem.weights = rows * cols * RowDtypeBytes(c.storage.dtype);
        mem.optimizer_state = rows * state_floats * 4;
        // A dynamic shard holds its share of the capacity: rows plus the key index and per-row
        // bookkeeping (DynamicRowStore::MemoryBytes).
        if (c.dynamic.enabled) mem.weights += rows * kDynamicRowOverheadBytes;
        d[kMemDevice + kind] += mem.weights + mem.optimizer_state;
      }
      d[kMemDevice + kind] += mem.comm_buffers;
      memo_d = d;
      memo_mem = mem;
      // Sender side: the ids packed for the owner (twice when pipelined) and the partial sums
      // received plus their gradients sent back.
      memo_send = n > 1 ? pipe * in_bytes + 2 * out_bytes : 0;
      memo_in_s = n > 1 ? A2aSeconds(in_bytes, false) : 0;
      memo_out_s = n > 1 ? A2aSeconds(out_bytes, false) : 0;
    }
    // PackInput on every rank (T > 1): the ids of the shard's row range bucketed per
    // destination and deduplicated, on the critical path (the pipeline hides only the
    // transfer). Priced per id at the profile's packing rate for the request's unique ids
    // (PackIdSeconds).
    if (t_ > 1) {
      // The request's map holds the shard's share of the rank's distinct ids of the table.
      const double share = static_cast<double>(rows_i) / c.num_rows;
      const double pack_id_s = PackIdSeconds(*dev_, share * s.distinct_local, cols * 4);
      u[kPackS] += share * s.ids_local * pack_id_s;
      // Every rank's share of the shard's B bags x cols per feature: received partial sums
      // written into the output (read, write) by the first shard over its columns and added by
      // the others (read, read-modify-write), output gradients packed (read, write).
      const double block = bags * cols * 4.0;
      bool first = true;
      for (const Shard& o : p.shards) {
        if (&o == &sh) break;
        if (o.col_begin < sh.col_end && sh.col_begin < o.col_end) first = false;
      }
      u[kUnpackS] += PackSeconds((first ? 2 : 3) * block);
      u[kGradPackS] += PackSeconds(2 * block);
    }
    u[kInSend] += memo_in_s;
    u[kOutRecv] += memo_out_s;
    u[kMemDevice + kind] += memo_send;
    out.uniform_memory.comm_buffers += memo_send;
    out.per_rank.push_back({sh.rank, memo_d});
    out.memory.push_back({sh.rank, memo_mem});
  }
  return out;
}

MetricVec Estimator::FixedPerRank() const {
  MetricVec v{};
  MemoryBreakdown m = FixedMemory();
  v[kMemDevice + static_cast<int>(table_kind_)] += m.activations + m.dense;
  v[kMemHost] += m.base;
  return v;
}

MemoryBreakdown Estimator::FixedMemory() const {
  MemoryBreakdown m;
  m.activations = activation_bytes_;
  // Weights, gradients, optimizer state, the all-reduce bucket buffer.
  m.dense = dense_params_ * 4.0 * (3 + in_->dense.optimizer_state_floats);
  m.base = static_cast<double>(dev_->base_memory_bytes);
  if (t_ > 1) m.base += static_cast<double>(dev_->comm_memory_bytes);
  return m;
}

}  // namespace tessera::planner
