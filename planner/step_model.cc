// The step of a placement (estimator.h): each rank's phases from its metrics (StepParts), and
// the step as the critical path over the ranks with each rank's wait at every blocking
// collective (CriticalPath).
#include <algorithm>
#include <cmath>

#include "planner/estimator.h"

namespace tessera::planner {

namespace {

// The step's blocking collectives in the trainer's order (docs/SHARDING.md "One step"), each
// with the phases whose compute runs before it since the previous one and the phases whose
// collectives it is. Every rank of the group leaves a collective when its last rank has
// arrived and the call's slowest transfer is done; the tier's probe of the next batch and the
// packing run before the input dist.
struct Segment {
  std::vector<Phase> compute;
  std::vector<Phase> collectives;
};
const std::vector<Segment>& StepSegments() {
  static const auto* s = new std::vector<Segment>{
      {{kTierMisses, kInputDist}, {kInputDist}},
      {{kLookup}, {kOutputDist}},
      {{kOutputDist, kDenseForward, kDenseBackward, kBackwardDist}, {kBackwardDist}},
      {{kEmbeddingUpdate}, {kEmbeddingUpdate, kReplicaSync, kDenseAllReduce}},
  };
  return *s;
}

}  // namespace

PhaseTimes Estimator::StepFromMaxima(const MetricVec& raw, double world_allreduce_bytes) const {
  return StepParts(raw, world_allreduce_bytes, nullptr);
}

PhaseTimes Estimator::StepParts(const MetricVec& raw, double world_allreduce_bytes,
                                PhaseTimes* collective) const {
  PhaseTimes p;
  PhaseTimes coll;  // the part of each phase spent in its collectives (not compute)
  // The ranks' compute, slower when every rank of the node computes at once (the profile's
  // compute_slowdown for the row work and gemm_slowdown for the dense phases, at the node's rank
  // count; 1 for one rank) and when they share cores.
  const double slow = compute_slowdown_ * cores_share_;
  MetricVec mx = raw;
  // The replica sync's own work (sorts, row visits, copies) is compute too; the small id
  // all-gathers priced in kSyncS go along.
  for (int k : {kLookupS, kUpdateS, kPackS, kUnpackS, kGradPackS, kTierProbeS, kSyncS})
    mx[k] *= slow;
  const double dense_fwd = gemm_slowdown_ * cores_share_ * dense_fwd_s_;
  const double dense_bwd = gemm_slowdown_ * cores_share_ * dense_bwd_s_;
  const double a2a_lat = n_ > 1 ? a2a_group_.latency_s : 0;
  const double out_s = n_ > 1 ? a2a_lat + std::max(mx[kOutSend], mx[kOutRecv]) : 0;
  p.s[kOutputDist] = out_s + mx[kUnpackS];
  p.s[kBackwardDist] = out_s + mx[kGradPackS];
  coll.s[kOutputDist] = coll.s[kBackwardDist] = out_s;
  p.s[kLookup] = mx[kLookupS];
  p.s[kDenseForward] = dense_fwd;
  p.s[kDenseBackward] = dense_bwd;
  p.s[kEmbeddingUpdate] = mx[kUpdateS];
  // Exact sync: one step's three replica collectives (counts and ids all-gathers, gradient
  // all-reduce); average sync's all-gather latencies are per shard in kSyncS. The all-reduce:
  // priced as one call of all the rank's shards' buffer (kSyncBytes; exact mode calls once per
  // shard, each call's latency microseconds on a node), every step (exact) or every k-th
  // (average), beyond the LLC at the beyond-cache rate; on one node the ring's 2 (M-1)/M share
  // of the buffer moved, across nodes (a link-bound cross-node point) the buffer at its rate.
  const bool exact = in_->step.replica_sync == ReplicaSync::kExact;
  p.s[kReplicaSync] = mx[kSyncS] + (m_ > 1 && exact ? 2 * ag_replica_.latency_s : 0);
  if (m_ > 1 && (exact || mx[kSyncBytes] > 0)) {
    const double k = exact ? 1.0 : static_cast<double>(std::max<int64_t>(1, in_->step.sync_every));
    const double call = mx[kSyncBytes] * k;
    const double moved = replica_link_ ? 1.0 : 2.0 * (m_ - 1) / m_;
    const double in_cache = std::min<double>(static_cast<double>(dev_->llc_bytes),
                                             static_cast<double>(kInCacheCallBytes));
    const double transfer =
        ar_replica_.bytes_per_s > 0 ? ar_replica_.Transfer(moved * call, in_cache) : 0;
    p.s[kReplicaSync] += (ar_replica_.latency_s + transfer) / k;
  }
  coll.s[kReplicaSync] = p.s[kReplicaSync];
  // Dense all-reduce (world), bucketed: buckets travel during the backward dist and the update
  // (MPI progresses inside MPI calls) or the whole backward (NCCL); the last bucket is exposed.
  double ar = 0;
  if (t_ > 1) {
    const double bytes = 4.0 * dense_params_;
    const double f = 2.0 * (t_ - 1) / t_;
    const double buckets =
        std::max(1.0, std::ceil(bytes / std::max<int64_t>(1, in_->step.bucket_bytes)));
    // The profile's all-reduce rate is buffer bytes per second (calibrate); on one node the
    // ring's 2 (T-1)/T share of them is priced as moved, across nodes (a link-bound cross-node
    // point) the buffer's bytes at that rate as measured.
    const double moved = world_link_ ? 1.0 : f;
    const double full = buckets * ar_world_.latency_s + moved * bytes / ar_world_.bytes_per_s;
    // Across nodes with both exchanges on the link (cross-node points), the backward dist and
    // the buckets share its bytes: overlapping them saves no link time.
    const double window = nccl_                        ? dense_bwd + out_s + p.s[kEmbeddingUpdate]
                          : group_link_ && world_link_ ? 0
                                                       : out_s;
    const double last = full / buckets;
    ar = std::max(last, full - window);
    ar += ar_world_.latency_s;  // the loss / count all-reduce
    if (world_allreduce_bytes > 0) {
      // Data-parallel tables: DataParallelBackward all-reduces their gradient tables inside the
      // embedding update (blocking, not bucketed or overlapped).
      // One call of all their bytes: beyond the LLC at the profile's beyond-cache rate.
      // beyond_llc_bytes_per_s is the slope from calibrate's in-cache call (kInCacheCallBytes)
      // to its 64 MiB one, so the in-cache rate holds up to that call's size, not the LLC's.
      const double in_cache = std::min<double>(static_cast<double>(dev_->llc_bytes),
                                               static_cast<double>(kInCacheCallBytes));
      const double dp =
          ar_world_.latency_s + ar_world_.Transfer(moved * world_allreduce_bytes, in_cache);
      p.s[kEmbeddingUpdate] += dp;
      coll.s[kEmbeddingUpdate] += dp;
    }
  }
  p.s[kDenseAllReduce] = coll.s[kDenseAllReduce] = ar;
  // Input dist: header all-to-all always; the payload hidden behind the previous step's
  // other collectives (MPI) or its compute (NCCL) when pipelined.
  if (n_ > 1) {
    const double payload = a2a_lat + std::max(mx[kInSend], mx[kInRecv]);
    double exposed = payload;
    // A sharding group across nodes (cross-node points): its payload shares the link with the
    // exchanges it would hide behind, which the link's bytes bound, not their overlap.
    if (in_->step.pipeline && !group_link_) {
      const double window = nccl_ ? p.total() : 2 * out_s + ar + p.s[kReplicaSync];
      exposed = std::max(0.0, payload - window);
    }
    p.s[kInputDist] = coll.s[kInputDist] = a2a_lat + exposed;
  }
  p.s[kInputDist] += mx[kPackS];
  // Waiting in the blocking collectives for ranks the scheduler took the core from (profile
  // wait_per_compute): each collective, in the trainer's order, waits its rate x the compute
  // since the one before it (the update's compute for the last, and the next step's packing).
  {
    double since = mx[kPackS];
    auto wait = [&](const CollectiveCost& c, Phase ph) {
      p.s[ph] += c.Wait(since);
      coll.s[ph] += c.Wait(since);
      since = 0;
    };
    if (n_ > 1) wait(a2a_group_, kInputDist);
    since += mx[kLookupS];
    if (n_ > 1) wait(a2a_group_, kOutputDist);
    since += mx[kUnpackS] + dense_fwd + dense_bwd + mx[kGradPackS];
    if (n_ > 1) wait(a2a_group_, kBackwardDist);
    since += mx[kUpdateS];
    if (m_ > 1 && in_->step.replica_sync == ReplicaSync::kExact) wait(ag_replica_, kReplicaSync);
    if (t_ > 1 && world_allreduce_bytes > 0) wait(ar_world_, kEmbeddingUpdate);
    if (t_ > 1) wait(ar_world_, kDenseAllReduce);
  }
  // The tier: the training thread probes the next batch's ids (Prefetch); the tier's threads
  // read the misses during the rest of the step and write the step's evictions back during the
  // next one (TieredRowStore FinishStep), each exposed only by what outlasts the step.
  const double rest = p.total() + mx[kTierProbeS];
  const double reads_exposed = std::max(0.0, mx[kTierS] - rest);
  const double writes_exposed = std::max(0.0, mx[kTierWriteS] - rest);
  p.s[kTierMisses] = mx[kTierProbeS] + reads_exposed + writes_exposed;
  p.background_s = mx[kTierS] - reads_exposed + mx[kTierWriteS] - writes_exposed;
  if (collective != nullptr) *collective = coll;
  return p;
}

void Estimator::CriticalPath(const std::vector<MetricVec>& rank, double world_allreduce_bytes,
                             StepEstimate* est) const {
  const int n = static_cast<int>(rank.size());
  std::vector<PhaseTimes> coll(n);
  est->per_rank.assign(n, PhaseTimes{});
  for (int r = 0; r < n; ++r)
    est->per_rank[r] = StepParts(rank[r], world_allreduce_bytes, &coll[r]);
  const std::vector<PhaseTimes>& own = est->per_rank;
  est->wait.assign(n, PhaseTimes{});
  PhaseTimes& step = est->step;
  step = PhaseTimes{};
  for (const Segment& seg : StepSegments()) {
    // Each rank's compute since the previous collective; the slowest sets when the segment's
    // first collective can start, and every other rank waits in it for the difference.
    std::vector<double> c(n, 0);
    int slowest = 0;
    for (int r = 0; r < n; ++r) {
      for (Phase ph : seg.compute) c[r] += own[r].s[ph] - coll[r].s[ph];
      if (c[r] > c[slowest]) slowest = r;
    }
    for (Phase ph : seg.compute) step.s[ph] += own[slowest].s[ph] - coll[slowest].s[ph];
    for (int r = 0; r < n; ++r) est->wait[r].s[seg.collectives.front()] += c[slowest] - c[r];
    // A collective ends with its slowest rank's part (its transfer, its own scheduler wait).
    for (Phase ph : seg.collectives) {
      double top = 0;
      for (int r = 0; r < n; ++r) top = std::max(top, coll[r].s[ph]);
      step.s[ph] += top;
      for (int r = 0; r < n; ++r) est->wait[r].s[ph] += top - coll[r].s[ph];
    }
  }
  for (int r = 0; r < n; ++r) step.background_s = std::max(step.background_s, own[r].background_s);
}

StepEstimate Estimator::Evaluate(const std::vector<TablePlacement>& placement) const {
  StepEstimate est;
  std::vector<MetricVec> rank(n_, FixedPerRank());
  std::vector<MemoryBreakdown> mem(n_, FixedMemory());
  double world_bytes = 0;
  auto add_mem = [](MemoryBreakdown& a, const MemoryBreakdown& b) {
    a.weights += b.weights;
    a.optimizer_state += b.optimizer_state;
    a.caches += b.caches;
    a.comm_buffers += b.comm_buffers;
    a.activations += b.activations;
    a.dense += b.dense;
    a.disk += b.disk;
  };
  for (size_t t = 0; t < placement.size(); ++t) {
    Contribution c = Contribute(static_cast<int>(t), placement[t]);
    for (int r = 0; r < n_; ++r) {
      for (int k = 0; k < kNumMetrics; ++k) rank[r][k] += c.uniform[k];
      add_mem(mem[r], c.uniform_memory);
    }
    for (const auto& [r, d] : c.per_rank) {
      for (int k = 0; k < kNumMetrics; ++k) rank[r][k] += d[k];
    }
    for (const auto& [r, m] : c.memory) add_mem(mem[r], m);
    world_bytes += c.world_allreduce_bytes;
  }
  CriticalPath(rank, world_bytes, &est);
  double sum = 0, top = 0;
  for (int r = 0; r < n_; ++r) {
    est.memory.push_back({rank[r][kMemDevice], rank[r][kMemHost], rank[r][kMemDisk]});
    const double emb = rank[r][kLookupS] + rank[r][kUpdateS] + rank[r][kTierS] +
                       std::max(rank[r][kInSend], rank[r][kInRecv]) +
                       2 * std::max(rank[r][kOutSend], rank[r][kOutRecv]);
    sum += emb;
    top = std::max(top, emb);
  }
  est.memory_detail = std::move(mem);
  est.imbalance = sum > 0 ? top / (sum / n_) : 1;
  return est;
}

}  // namespace tessera::planner
