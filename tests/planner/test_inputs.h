// Small hand-made profiles and inputs for the planner tests: round numbers, so expected costs
// can be computed by hand.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "planner/estimator.h"
#include "planner/inputs.h"
#include "planner/profile.h"

namespace tessera::planner {

// One cpu device: every gather / update rate flat 1e6 rows/s (hot and cold), no per-bag or
// per-id extra (bag_s = id_s = 0), LLC 1 MiB, copy 1e9 B/s (row packing free: 1e18 B/s; the
// tests of the pack terms set their own rate), GEMM 1e9 flop/s, no launch
// overhead, base memory 1 MiB, no communicator memory; MPI collectives at every size: no
// latency, 1e6 bytes/s; tier: 1e-4 s per read from disk, 1e-5 from cache, 1e-6 per write.
inline MachineProfile FlatProfile(double latency_s = 0) {
  MachineProfile p;
  p.machine = "test machine";
  p.date = "2026-12-01";
  p.source = "tests/planner/test_inputs.h";
  DeviceProfile d;
  d.kind = "cpu";
  d.name = "flat cpu";
  d.threads = 1;
  d.memory_bytes = int64_t{1} << 34;
  d.copy_bytes_per_s = 1e9;
  d.pack_bytes_per_s = 1e18;  // the output dist's unpack and the gradient pack free
  d.llc_bytes = 1 << 20;
  d.gather = {{64, 1e6, 1e6}, {512, 1e6, 1e6}};
  d.scatter_update = {{64, 1e6, 1e6}, {512, 1e6, 1e6}};
  d.gemm = {{64, 64, 64, 1e9}};
  d.gemm_peak_flops_per_s = 1e9;
  d.launch_overhead_s = 0;
  d.base_memory_bytes = 1 << 20;
  p.devices.push_back(d);
  for (CollectiveOp op :
       {CollectiveOp::kAllToAll, CollectiveOp::kAllReduce, CollectiveOp::kAllGather}) {
    for (int ws : {2, 4, 8}) {
      CollectivePoint c;
      c.op = op;
      c.transport = "mpi";
      c.world_size = ws;
      c.same_node = true;
      c.latency_s = latency_s;
      c.bytes_per_s = 1e6;
      p.collectives.push_back(c);
    }
  }
  p.tier = {{72, 1e-5, 1e-4, 1e-6}, {4100, 1e-5, 1e-4, 1e-6}};
  return p;
}

// `tables` tables of rows[i] x dim, one feature each, pooling `ids` per bag, no dense model.
inline PlanInputs SmallInputs(const std::vector<int64_t>& rows, int64_t dim, int world,
                              int64_t batch = 100, double ids = 1) {
  PlanInputs in;
  in.source = "test";
  in.topology.world_size = world;
  in.topology.ranks_per_node = world;
  in.topology.memory.host = int64_t{8} << 30;
  in.topology.memory.disk = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    PlanTable t;
    t.config.name = "t" + std::to_string(i);
    t.config.num_rows = rows[i];
    t.config.dim = dim;
    t.config.features = {static_cast<int>(i)};
    t.ids_per_bag = ids;
    in.tables.push_back(t);
  }
  in.dense.num_dense = 4;
  in.dense.embedding_dim = dim;
  in.dense.interaction = Interaction::kDcn;
  in.dense.dcn_num_layers = 0;
  in.step.batch_per_rank = batch;
  in.step.pipeline = false;
  return in;
}

// `p` with a cross-node point (same_node false: `bytes_per_s`, `latency_s`, `compute_slowdown`)
// after each collective point of a world size up to 4, as calibrate across hosts adds them.
inline MachineProfile WithCrossNodePoints(MachineProfile p, double bytes_per_s, double latency_s,
                                          double compute_slowdown) {
  std::vector<CollectivePoint> all;
  for (const CollectivePoint& c : p.collectives) {
    all.push_back(c);
    if (c.world_size > 4) continue;
    CollectivePoint x = c;
    x.same_node = false;
    x.bytes_per_s = bytes_per_s;
    x.latency_s = latency_s;
    x.compute_slowdown = compute_slowdown;
    all.push_back(x);
  }
  p.collectives = std::move(all);
  return p;
}

// Table t placed whole on `rank`.
inline TablePlacement TableWise(int rank, const TableConfig& t) {
  TableOption o;
  o.type = ShardingType::kTableWise;
  return MakePlacement(o, {rank}, t);
}

}  // namespace tessera::planner
