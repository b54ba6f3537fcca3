// MachineProfile: the YAML reader/writer (strict: every key required, none unknown) and the
// interpolation helpers.
#include "planner/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/escape.h"
#include "core/status.h"
#include "planner/profile_meta_yaml.h"
#include "yaml-cpp/yaml.h"

namespace tessera::planner {

namespace {

struct OpName {
  CollectiveOp op;
  const char* name;
};
constexpr OpName kOpNames[] = {{CollectiveOp::kAllToAll, "all_to_all"},
                               {CollectiveOp::kAllReduce, "all_reduce"},
                               {CollectiveOp::kAllGather, "all_gather"}};

// Reads the keys of one YAML map strictly: Get* fail on a missing key or a bad value, Done fails
// on a key no Get asked for. Messages: "<source>:<line>: <path>.<key>: ...".
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string source, std::string path)
      : node_(node), source_(std::move(source)), path_(std::move(path)) {}

  absl::Status CheckMap() const {
    if (!node_.IsMap()) return Error(node_, path_, "must be a map");
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Get(const std::string& key) {
    TESSERA_ASSIGN_OR_RETURN(YAML::Node n, Node(key));
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      return Error(n, Key(key),
                   absl::StrCat("bad value '", n.IsScalar() ? n.Scalar() : "<non-scalar>", "'"));
    }
  }

  absl::StatusOr<double> GetPositive(const std::string& key) {
    TESSERA_ASSIGN_OR_RETURN(double v, Get<double>(key));
    if (!(v > 0) || !std::isfinite(v)) {
      return Error(node_[key], Key(key), absl::StrCat("must be a positive number (got ", v, ")"));
    }
    return v;
  }

  absl::StatusOr<double> GetNonNegative(const std::string& key) {
    TESSERA_ASSIGN_OR_RETURN(double v, Get<double>(key));
    if (!(v >= 0) || !std::isfinite(v)) {
      return Error(node_[key], Key(key), absl::StrCat("must be >= 0 (got ", v, ")"));
    }
    return v;
  }

  // An optional key: `fallback` when absent, else as GetNonNegative.
  absl::StatusOr<double> GetNonNegativeOr(const std::string& key, double fallback) {
    seen_.insert(key);
    if (!node_[key]) return fallback;
    return GetNonNegative(key);
  }

  // An optional true / false key: `fallback` when absent.
  absl::StatusOr<bool> GetBoolOr(const std::string& key, bool fallback) {
    seen_.insert(key);
    if (!node_[key]) return fallback;
    return Get<bool>(key);
  }

  absl::StatusOr<YAML::Node> Node(const std::string& key) {
    seen_.insert(key);
    YAML::Node n = node_[key];
    if (!n) return Error(node_, Key(key), "missing");
    return n;
  }

  absl::StatusOr<YAML::Node> List(const std::string& key) {
    TESSERA_ASSIGN_OR_RETURN(YAML::Node n, Node(key));
    if (!n.IsSequence() || n.size() == 0) return Error(n, Key(key), "must be a non-empty list");
    return n;
  }

  absl::Status Done() const {
    for (const auto& kv : node_) {
      std::string key = kv.first.as<std::string>();
      if (!seen_.count(key)) {
        std::vector<std::string> keys(seen_.begin(), seen_.end());
        return Error(kv.first, Key(key),
                     absl::StrCat("unknown key (expected ", absl::StrJoin(keys, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }

  std::string Key(const std::string& key) const {
    return path_.empty() ? key : absl::StrCat(path_, ".", key);
  }
  absl::Status Error(const YAML::Node& n, const std::string& key, const std::string& msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ":", n.Mark().line + 1, ": ", key, ": ", msg));
  }
  const std::string& source() const { return source_; }

 private:
  YAML::Node node_;
  std::string source_;
  std::string path_;
  std::set<std::string> seen_;
};

// `extra`: the per-table key beyond the rates (gather: bag_s, scatter_update: id_s).
// Each item of `list` (the value of `key` under r) as a map, through `read` (its reader, named
// key[i], and its node); the first error stops.
absl::Status EachMap(MapReader& r, const std::string& key, const YAML::Node& list,
                     const std::function<absl::Status(MapReader&, const YAML::Node&)>& read) {
  for (size_t i = 0; i < list.size(); ++i) {
    MapReader p(list[i], r.source(), absl::StrCat(r.Key(key), "[", i, "]"));
    TESSERA_RETURN_IF_ERROR(p.CheckMap());
    TESSERA_RETURN_IF_ERROR(read(p, list[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RowRatePoint>> ReadRowRates(MapReader& r, const std::string& key,
                                                       const std::string& extra) {
  TESSERA_ASSIGN_OR_RETURN(YAML::Node list, r.List(key));
  std::vector<RowRatePoint> out;
  for (size_t i = 0; i < list.size(); ++i) {
    MapReader p(list[i], r.source(), absl::StrCat(r.Key(key), "[", i, "]"));
    TESSERA_RETURN_IF_ERROR(p.CheckMap());
    RowRatePoint pt;
    TESSERA_ASSIGN_OR_RETURN(pt.row_bytes, p.Get<int64_t>("row_bytes"));
    TESSERA_ASSIGN_OR_RETURN(pt.hot_rows_per_s, p.GetPositive("hot_rows_per_s"));
    TESSERA_ASSIGN_OR_RETURN(pt.cold_rows_per_s, p.GetPositive("cold_rows_per_s"));
    TESSERA_ASSIGN_OR_RETURN(double x, p.GetNonNegative(extra));
    (extra == "bag_s" ? pt.bag_s : pt.id_s) = x;
    if (extra == "bag_s") {
      TESSERA_ASSIGN_OR_RETURN(pt.cached_bag_s, p.GetNonNegativeOr("cached_bag_s", 0.0));
      TESSERA_ASSIGN_OR_RETURN(pt.cached_rows_per_s,
                               p.GetNonNegativeOr("cached_rows_per_s", 0.0));
    }
    if (extra == "id_s") {
      TESSERA_ASSIGN_OR_RETURN(pt.warm_rows_per_s, p.GetNonNegativeOr("warm_rows_per_s", 0.0));
    }
    TESSERA_RETURN_IF_ERROR(p.Done());
    if (pt.row_bytes <= 0 || (!out.empty() && pt.row_bytes <= out.back().row_bytes)) {
      return p.Error(list[i], p.Key("row_bytes"),
                     absl::StrCat("must be positive and increasing (got ", pt.row_bytes, ")"));
    }
    out.push_back(pt);
  }
  return out;
}

absl::StatusOr<DeviceProfile> ReadDevice(const YAML::Node& n, const std::string& source,
                                         const std::string& path) {
  MapReader r(n, source, path);
  TESSERA_RETURN_IF_ERROR(r.CheckMap());
  DeviceProfile d;
  TESSERA_ASSIGN_OR_RETURN(d.kind, r.Get<std::string>("kind"));
  if (d.kind != "cpu" && d.kind != "cuda") {
    return r.Error(n["kind"], r.Key("kind"),
                   absl::StrCat("must be cpu or cuda (got '", d.kind, "')"));
  }
  TESSERA_ASSIGN_OR_RETURN(d.name, r.Get<std::string>("name"));
  TESSERA_ASSIGN_OR_RETURN(d.threads, r.Get<int>("threads"));
  if (d.threads < 1) return r.Error(n["threads"], r.Key("threads"), "must be >= 1");
  TESSERA_ASSIGN_OR_RETURN(d.memory_bytes, r.Get<int64_t>("memory_bytes"));
  if (d.memory_bytes <= 0) return r.Error(n["memory_bytes"], r.Key("memory_bytes"), "must be > 0");
  TESSERA_ASSIGN_OR_RETURN(d.copy_bytes_per_s, r.GetPositive("copy_bytes_per_s"));
  TESSERA_ASSIGN_OR_RETURN(d.pack_bytes_per_s, r.GetNonNegativeOr("pack_bytes_per_s", 0.0));
  TESSERA_ASSIGN_OR_RETURN(d.search_step_s, r.GetNonNegativeOr("search_step_s", 0.0));
  TESSERA_ASSIGN_OR_RETURN(d.pack_id_s, r.GetNonNegativeOr("pack_id_s", 0.0));
  TESSERA_ASSIGN_OR_RETURN(d.pack_distinct, r.GetNonNegativeOr("pack_distinct", 0.0));
  TESSERA_ASSIGN_OR_RETURN(d.pack_hot_id_s, r.GetNonNegativeOr("pack_hot_id_s", 0.0));
  TESSERA_ASSIGN_OR_RETURN(d.pack_hot_distinct, r.GetNonNegativeOr("pack_hot_distinct", 0.0));
  TESSERA_ASSIGN_OR_RETURN(d.key_probe_id_s, r.GetNonNegativeOr("key_probe_id_s", 0.0));
  if (d.pack_hot_id_s > 0 &&
      (d.pack_id_s <= 0 || d.pack_distinct < 1 || d.pack_hot_distinct <= d.pack_distinct)) {
    return r.Error(n["pack_hot_id_s"], r.Key("pack_hot_id_s"),
                   "needs pack_id_s, pack_distinct >= 1 and pack_hot_distinct > pack_distinct");
  }
  TESSERA_ASSIGN_OR_RETURN(double llc, r.GetPositive("llc_bytes"));
  d.llc_bytes = static_cast<int64_t>(llc);
  TESSERA_ASSIGN_OR_RETURN(d.gather, ReadRowRates(r, "gather", "bag_s"));
  TESSERA_ASSIGN_OR_RETURN(d.scatter_update, ReadRowRates(r, "scatter_update", "id_s"));
  TESSERA_ASSIGN_OR_RETURN(YAML::Node gemm, r.List("gemm"));
  TESSERA_RETURN_IF_ERROR(
      EachMap(r, "gemm", gemm, [&](MapReader& p, const YAML::Node& item) -> absl::Status {
        GemmPoint g;
        TESSERA_ASSIGN_OR_RETURN(g.m, p.Get<int64_t>("m"));
        TESSERA_ASSIGN_OR_RETURN(g.n, p.Get<int64_t>("n"));
        TESSERA_ASSIGN_OR_RETURN(g.k, p.Get<int64_t>("k"));
        TESSERA_ASSIGN_OR_RETURN(g.flops_per_s, p.GetPositive("flops_per_s"));
        TESSERA_RETURN_IF_ERROR(p.Done());
        if (g.m <= 0 || g.n <= 0 || g.k <= 0) {
          return p.Error(item, p.Key("m"), "m, n and k must be positive");
        }
        d.gemm.push_back(g);
        return absl::OkStatus();
      }));
  TESSERA_ASSIGN_OR_RETURN(d.gemm_peak_flops_per_s, r.GetPositive("gemm_peak_flops_per_s"));
  if (n["cross"]) {
    TESSERA_ASSIGN_OR_RETURN(YAML::Node cross, r.Node("cross"));
    if (!cross.IsSequence()) return r.Error(cross, r.Key("cross"), "must be a list");
    TESSERA_RETURN_IF_ERROR(
        EachMap(r, "cross", cross, [&](MapReader& p, const YAML::Node& item) -> absl::Status {
          CrossPoint c;
          TESSERA_ASSIGN_OR_RETURN(c.batch, p.Get<int64_t>("batch"));
          TESSERA_ASSIGN_OR_RETURN(c.dim, p.Get<int64_t>("dim"));
          TESSERA_ASSIGN_OR_RETURN(c.rank, p.Get<int64_t>("rank"));
          TESSERA_ASSIGN_OR_RETURN(c.forward_flops_per_s, p.GetPositive("forward_flops_per_s"));
          TESSERA_ASSIGN_OR_RETURN(c.backward_flops_per_s, p.GetPositive("backward_flops_per_s"));
          TESSERA_RETURN_IF_ERROR(p.Done());
          if (c.batch <= 0 || c.dim <= 0 || c.rank < 0) {
            return p.Error(item, p.Key("batch"), "batch and dim must be positive, rank >= 0");
          }
          d.cross.push_back(c);
          return absl::OkStatus();
        }));
  }
  TESSERA_ASSIGN_OR_RETURN(d.gemm_fused_passes, r.GetBoolOr("gemm_fused_passes", false));
  if (n["dense_arch"]) {
    TESSERA_ASSIGN_OR_RETURN(YAML::Node arch, r.Node("dense_arch"));
    if (!arch.IsSequence()) return r.Error(arch, r.Key("dense_arch"), "must be a list");
    TESSERA_RETURN_IF_ERROR(
        EachMap(r, "dense_arch", arch, [&](MapReader& p, const YAML::Node& item) -> absl::Status {
          DenseArchPoint a;
          TESSERA_ASSIGN_OR_RETURN(a.shape, p.Get<std::string>("shape"));
          TESSERA_ASSIGN_OR_RETURN(a.batch, p.Get<int64_t>("batch"));
          TESSERA_ASSIGN_OR_RETURN(a.forward_scale, p.GetPositive("forward_scale"));
          TESSERA_ASSIGN_OR_RETURN(a.backward_scale, p.GetPositive("backward_scale"));
          TESSERA_ASSIGN_OR_RETURN(a.forward_s, p.GetNonNegativeOr("forward_s", 0));
          TESSERA_ASSIGN_OR_RETURN(a.backward_s, p.GetNonNegativeOr("backward_s", 0));
          TESSERA_RETURN_IF_ERROR(p.Done());
          if (a.shape.empty() || a.batch <= 0) {
            return p.Error(item, p.Key("shape"), "shape must be non-empty and batch positive");
          }
          d.dense_arch.push_back(a);
          return absl::OkStatus();
        }));
  }
  TESSERA_ASSIGN_OR_RETURN(d.launch_overhead_s, r.GetNonNegative("launch_overhead_s"));
  TESSERA_ASSIGN_OR_RETURN(double base, r.GetNonNegative("base_memory_bytes"));
  d.base_memory_bytes = static_cast<int64_t>(base);
  TESSERA_ASSIGN_OR_RETURN(double comm, r.GetNonNegative("comm_memory_bytes"));
  d.comm_memory_bytes = static_cast<int64_t>(comm);
  TESSERA_RETURN_IF_ERROR(r.Done());
  return d;
}

absl::StatusOr<MachineProfile> ParseRoot(const YAML::Node& root, const std::string& source) {
  MapReader r(root, source, "");
  if (!root.IsMap()) return r.Error(root, "profile", "must be a map with version, machine, ...");
  MachineProfile p;
  TESSERA_ASSIGN_OR_RETURN(p.version, r.Get<int>("version"));
  if (p.version == 1) {
    return r.Error(root["version"], "version",
                   absl::StrCat("profile version 1 is not supported (this build reads version ",
                                kProfileVersion,
                                ", which adds devices[].llc_bytes, devices[].comm_memory_bytes, "
                                "gather[].bag_s and scatter_update[].id_s, the last priced per "
                                "distinct row; rerun tessera-plan calibrate, docs/PLANNER.md "
                                "\"Profile file\")"));
  }
  if (p.version != kProfileVersion) {
    return r.Error(root["version"], "version",
                   absl::StrCat("profile version ", p.version,
                                " is not supported (this build "
                                "reads version ",
                                kProfileVersion, "; rerun tessera-plan calibrate)"));
  }
  {
    TESSERA_ASSIGN_OR_RETURN(YAML::Node m, r.Node("machine"));
    MapReader mr(m, source, "machine");
    TESSERA_RETURN_IF_ERROR(mr.CheckMap());
    TESSERA_ASSIGN_OR_RETURN(p.machine, mr.Get<std::string>("description"));
    TESSERA_ASSIGN_OR_RETURN(p.date, mr.Get<std::string>("date"));
    TESSERA_ASSIGN_OR_RETURN(p.source, mr.Get<std::string>("source"));
    TESSERA_RETURN_IF_ERROR(mr.Done());
  }
  TESSERA_ASSIGN_OR_RETURN(YAML::Node devs, r.List("devices"));
  for (size_t i = 0; i < devs.size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(DeviceProfile d,
                             ReadDevice(devs[i], source, absl::StrCat("devices[", i, "]")));
    if (p.device(d.kind) != nullptr) {
      return r.Error(devs[i], absl::StrCat("devices[", i, "].kind"),
                     absl::StrCat("device kind '", d.kind, "' listed twice"));
    }
    p.devices.push_back(std::move(d));
  }
  TESSERA_ASSIGN_OR_RETURN(YAML::Node cols, r.List("collectives"));
  for (size_t i = 0; i < cols.size(); ++i) {
    MapReader c(cols[i], source, absl::StrCat("collectives[", i, "]"));
    TESSERA_RETURN_IF_ERROR(c.CheckMap());
    CollectivePoint pt;
    TESSERA_ASSIGN_OR_RETURN(std::string op, c.Get<std::string>("op"));
    absl::StatusOr<CollectiveOp> parsed = ParseCollectiveOp(op);
    if (!parsed.ok())
      return c.Error(cols[i]["op"], c.Key("op"), std::string(parsed.status().message()));
    pt.op = *parsed;
    TESSERA_ASSIGN_OR_RETURN(pt.transport, c.Get<std::string>("transport"));
    TESSERA_ASSIGN_OR_RETURN(pt.world_size, c.Get<int>("world_size"));
    if (pt.world_size < 1)
      return c.Error(cols[i]["world_size"], c.Key("world_size"), "must be >= 1");
    TESSERA_ASSIGN_OR_RETURN(pt.same_node, c.Get<bool>("same_node"));
    TESSERA_ASSIGN_OR_RETURN(pt.latency_s, c.GetNonNegative("latency_s"));
    TESSERA_ASSIGN_OR_RETURN(pt.bytes_per_s, c.GetPositive("bytes_per_s"));
    TESSERA_ASSIGN_OR_RETURN(pt.wait_per_compute, c.GetNonNegativeOr("wait_per_compute", 0.0));
    TESSERA_ASSIGN_OR_RETURN(pt.wait_cap_s, c.GetNonNegativeOr("wait_cap_s", 0.0));
    TESSERA_ASSIGN_OR_RETURN(pt.compute_slowdown, c.GetNonNegativeOr("compute_slowdown", 0.0));
    TESSERA_ASSIGN_OR_RETURN(pt.gemm_slowdown, c.GetNonNegativeOr("gemm_slowdown", 0.0));
    TESSERA_ASSIGN_OR_RETURN(pt.beyond_llc_bytes_per_s,
                             c.GetNonNegativeOr("beyond_llc_bytes_per_s", 0.0));
    TESSERA_ASSIGN_OR_RETURN(const double groups, c.GetNonNegativeOr("groups", 1.0));
    if (groups < 1 || groups != std::floor(groups) || groups > 1e6) {
      return c.Error(cols[i]["groups"], c.Key("groups"),
                     absl::StrCat("must be a whole number >= 1 (got ", groups, ")"));
    }
    pt.groups = static_cast<int>(groups);
    TESSERA_ASSIGN_OR_RETURN(const double node_cores, c.GetNonNegativeOr("node_cores", 0.0));
    if (node_cores != std::floor(node_cores) || node_cores > 1e6) {
      return c.Error(cols[i]["node_cores"], c.Key("node_cores"),
                     absl::StrCat("must be a whole number >= 0 (got ", node_cores, ")"));
    }
    pt.node_cores = static_cast<int>(node_cores);
    TESSERA_RETURN_IF_ERROR(c.Done());
    if (!p.collectives.empty()) {
      const CollectivePoint& b = p.collectives.back();
      if (!CollectivePointLess(b, pt)) {
        return c.Error(cols[i], c.Key("world_size"),
                       "collectives must be sorted by (op, transport, world_size, same_node "
                       "first, groups) without repeats");
      }
    }
    p.collectives.push_back(pt);
  }
  // The tier may be empty (`tier: []`, calibrate --tier_dims ""): the planner then keeps every
  // table off it and refuses a config that puts one there (Estimator::Create).
  TESSERA_ASSIGN_OR_RETURN(YAML::Node tier, r.Node("tier"));
  if (!tier.IsSequence()) return r.Error(tier, r.Key("tier"), "must be a list (empty: no tier points)");
  for (size_t i = 0; i < tier.size(); ++i) {
    MapReader t(tier[i], source, absl::StrCat("tier[", i, "]"));
    TESSERA_RETURN_IF_ERROR(t.CheckMap());
    TierPoint pt;
    TESSERA_ASSIGN_OR_RETURN(pt.value_bytes, t.Get<int64_t>("value_bytes"));
    TESSERA_ASSIGN_OR_RETURN(pt.read_cached_s, t.GetPositive("read_cached_s"));
    TESSERA_ASSIGN_OR_RETURN(pt.read_disk_s, t.GetPositive("read_disk_s"));
    TESSERA_ASSIGN_OR_RETURN(pt.write_s, t.GetPositive("write_s"));
    TESSERA_ASSIGN_OR_RETURN(pt.hit_s, t.GetNonNegative("hit_s"));
    TESSERA_ASSIGN_OR_RETURN(pt.read_memtable_s, t.GetNonNegativeOr("read_memtable_s", 0.0));
    TESSERA_RETURN_IF_ERROR(t.Done());
    if (pt.value_bytes <= 0 || (!p.tier.empty() && pt.value_bytes <= p.tier.back().value_bytes)) {
      return t.Error(tier[i], t.Key("value_bytes"), "must be positive and increasing");
    }
    p.tier.push_back(pt);
  }
  if (const YAML::Node f = root["fingerprint"]) {
    TESSERA_RETURN_IF_ERROR(r.Node("fingerprint").status());
    TESSERA_RETURN_IF_ERROR(profile_internal::ReadFingerprint(f, source, &p.fingerprint));
  }
  if (const YAML::Node c = root["calibration"]) {
    TESSERA_RETURN_IF_ERROR(r.Node("calibration").status());
    TESSERA_RETURN_IF_ERROR(profile_internal::ReadCalibration(c, source, &p.calibration));
  }
  TESSERA_RETURN_IF_ERROR(r.Done());
  return p;
}

}  // namespace

const char* CollectiveOpName(CollectiveOp op) {
  for (const OpName& o : kOpNames) {
    if (o.op == op) return o.name;
  }
  return "?";
}

absl::StatusOr<CollectiveOp> ParseCollectiveOp(const std::string& name) {
  for (const OpName& o : kOpNames) {
    if (name == o.name) return o.op;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown collective '", name, "' (expected all_to_all, all_reduce, all_gather)"));
}

bool CollectivePointLess(const CollectivePoint& a, const CollectivePoint& b) {
  return std::make_tuple(static_cast<int>(a.op), a.transport, a.world_size, !a.same_node,
                         a.groups) <
         std::make_tuple(static_cast<int>(b.op), b.transport, b.world_size, !b.same_node, b.groups);
}

const DeviceProfile* MachineProfile::device(const std::string& kind) const {
  for (const DeviceProfile& d : devices) {
    if (d.kind == kind) return &d;
  }
  return nullptr;
}

absl::StatusOr<MachineProfile> ParseMachineProfile(const std::string& text,
                                                   const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": not valid YAML: ",
                     EscapeBytes(e.msg, 200)));
  }
  try {
    return ParseRoot(root, source);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": ", EscapeBytes(e.msg, 200)));
  }
}

absl::StatusOr<MachineProfile> LoadMachineProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read profile '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseMachineProfile(ss.str(), path);
}

std::string MachineProfileToYaml(const MachineProfile& p) {
  YAML::Emitter e;
  e.SetDoublePrecision(6);
  e << YAML::BeginMap;
  e << YAML::Key << "version" << YAML::Value << p.version;
  e << YAML::Key << "machine" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "description" << YAML::Value << p.machine;
  e << YAML::Key << "date" << YAML::Value << p.date;
  e << YAML::Key << "source" << YAML::Value << p.source;
  e << YAML::EndMap;
  if (p.fingerprint.present) profile_internal::EmitFingerprint(e, p.fingerprint);
  if (p.calibration.present) profile_internal::EmitCalibration(e, p.calibration);
  auto rates = [&](const char* key, const std::vector<RowRatePoint>& pts, bool gather) {
    e << YAML::Key << key << YAML::Value << YAML::BeginSeq;
    for (const RowRatePoint& r : pts) {
      e << YAML::Flow << YAML::BeginMap << YAML::Key << "row_bytes" << YAML::Value << r.row_bytes
        << YAML::Key << "hot_rows_per_s" << YAML::Value << r.hot_rows_per_s << YAML::Key
        << "cold_rows_per_s" << YAML::Value << r.cold_rows_per_s << YAML::Key
        << (gather ? "bag_s" : "id_s") << YAML::Value << (gather ? r.bag_s : r.id_s);
      if (!gather && r.warm_rows_per_s > 0) {
        e << YAML::Key << "warm_rows_per_s" << YAML::Value << r.warm_rows_per_s;
      }
      if (gather && r.cached_rows_per_s > 0) {
        e << YAML::Key << "cached_bag_s" << YAML::Value << r.cached_bag_s << YAML::Key
          << "cached_rows_per_s" << YAML::Value << r.cached_rows_per_s;
      }
      e << YAML::EndMap;
    }
    e << YAML::EndSeq;
  };
  e << YAML::Key << "devices" << YAML::Value << YAML::BeginSeq;
  for (const DeviceProfile& d : p.devices) {
    e << YAML::BeginMap;
    e << YAML::Key << "kind" << YAML::Value << d.kind;
    e << YAML::Key << "name" << YAML::Value << d.name;
    e << YAML::Key << "threads" << YAML::Value << d.threads;
    e << YAML::Key << "memory_bytes" << YAML::Value << d.memory_bytes;
    e << YAML::Key << "copy_bytes_per_s" << YAML::Value << d.copy_bytes_per_s;
    if (d.pack_bytes_per_s > 0) {
      e << YAML::Key << "pack_bytes_per_s" << YAML::Value << d.pack_bytes_per_s;
    }
    if (d.search_step_s > 0) {
      e << YAML::Key << "search_step_s" << YAML::Value << d.search_step_s;
    }
    if (d.pack_id_s > 0) e << YAML::Key << "pack_id_s" << YAML::Value << d.pack_id_s;
    if (d.key_probe_id_s > 0) {
      e << YAML::Key << "key_probe_id_s" << YAML::Value << d.key_probe_id_s;
    }
    if (d.pack_hot_id_s > 0) {
      e << YAML::Key << "pack_distinct" << YAML::Value << d.pack_distinct;
      e << YAML::Key << "pack_hot_id_s" << YAML::Value << d.pack_hot_id_s;
      e << YAML::Key << "pack_hot_distinct" << YAML::Value << d.pack_hot_distinct;
    }
    e << YAML::Key << "llc_bytes" << YAML::Value << d.llc_bytes;
    rates("gather", d.gather, true);
    rates("scatter_update", d.scatter_update, false);
    e << YAML::Key << "gemm" << YAML::Value << YAML::BeginSeq;
    for (const GemmPoint& g : d.gemm) {
      e << YAML::Flow << YAML::BeginMap << YAML::Key << "m" << YAML::Value << g.m << YAML::Key
        << "n" << YAML::Value << g.n << YAML::Key << "k" << YAML::Value << g.k << YAML::Key
        << "flops_per_s" << YAML::Value << g.flops_per_s << YAML::EndMap;
    }
    e << YAML::EndSeq;
    e << YAML::Key << "gemm_peak_flops_per_s" << YAML::Value << d.gemm_peak_flops_per_s;
    if (!d.cross.empty()) {
      e << YAML::Key << "cross" << YAML::Value << YAML::BeginSeq;
      for (const CrossPoint& c : d.cross) {
        e << YAML::Flow << YAML::BeginMap << YAML::Key << "batch" << YAML::Value << c.batch
          << YAML::Key << "dim" << YAML::Value << c.dim << YAML::Key << "rank" << YAML::Value
          << c.rank << YAML::Key << "forward_flops_per_s" << YAML::Value << c.forward_flops_per_s
          << YAML::Key << "backward_flops_per_s" << YAML::Value << c.backward_flops_per_s
          << YAML::EndMap;
      }
      e << YAML::EndSeq;
    }
    if (d.gemm_fused_passes) {
      e << YAML::Key << "gemm_fused_passes" << YAML::Value << true;
    }
    if (!d.dense_arch.empty()) {
      e << YAML::Key << "dense_arch" << YAML::Value << YAML::BeginSeq;
      for (const DenseArchPoint& a : d.dense_arch) {
        e << YAML::Flow << YAML::BeginMap << YAML::Key << "shape" << YAML::Value << a.shape
          << YAML::Key << "batch" << YAML::Value << a.batch << YAML::Key << "forward_scale"
          << YAML::Value << a.forward_scale << YAML::Key << "backward_scale" << YAML::Value
          << a.backward_scale;
        if (a.forward_s > 0 && a.backward_s > 0) {
          e << YAML::Key << "forward_s" << YAML::Value << a.forward_s << YAML::Key << "backward_s"
            << YAML::Value << a.backward_s;
        }
        e << YAML::EndMap;
      }
      e << YAML::EndSeq;
    }
    e << YAML::Key << "launch_overhead_s" << YAML::Value << d.launch_overhead_s;
    e << YAML::Key << "base_memory_bytes" << YAML::Value << d.base_memory_bytes;
    e << YAML::Key << "comm_memory_bytes" << YAML::Value << d.comm_memory_bytes;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::Key << "collectives" << YAML::Value << YAML::BeginSeq;
  for (const CollectivePoint& c : p.collectives) {
    e << YAML::Flow << YAML::BeginMap << YAML::Key << "op" << YAML::Value << CollectiveOpName(c.op)
      << YAML::Key << "transport" << YAML::Value << c.transport << YAML::Key << "world_size"
      << YAML::Value << c.world_size << YAML::Key << "same_node" << YAML::Value << c.same_node
      << YAML::Key << "latency_s" << YAML::Value << c.latency_s << YAML::Key << "bytes_per_s"
      << YAML::Value << c.bytes_per_s;
    if (c.wait_per_compute > 0) {
      e << YAML::Key << "wait_per_compute" << YAML::Value << c.wait_per_compute;
    }
    if (c.wait_cap_s > 0) e << YAML::Key << "wait_cap_s" << YAML::Value << c.wait_cap_s;
    if (c.compute_slowdown > 0) {
      e << YAML::Key << "compute_slowdown" << YAML::Value << c.compute_slowdown;
    }
    if (c.gemm_slowdown > 0) {
      e << YAML::Key << "gemm_slowdown" << YAML::Value << c.gemm_slowdown;
    }
    if (c.beyond_llc_bytes_per_s > 0) {
      e << YAML::Key << "beyond_llc_bytes_per_s" << YAML::Value << c.beyond_llc_bytes_per_s;
    }
    if (c.groups > 1) e << YAML::Key << "groups" << YAML::Value << c.groups;
    if (c.node_cores > 0) e << YAML::Key << "node_cores" << YAML::Value << c.node_cores;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::Key << "tier" << YAML::Value << YAML::BeginSeq;
  for (const TierPoint& t : p.tier) {
    e << YAML::Flow << YAML::BeginMap << YAML::Key << "value_bytes" << YAML::Value << t.value_bytes
      << YAML::Key << "read_cached_s" << YAML::Value << t.read_cached_s << YAML::Key
      << "read_disk_s" << YAML::Value << t.read_disk_s << YAML::Key << "write_s" << YAML::Value
      << t.write_s << YAML::Key << "hit_s" << YAML::Value << t.hit_s;
    if (t.read_memtable_s > 0) {
      e << YAML::Key << "read_memtable_s" << YAML::Value << t.read_memtable_s;
    }
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::EndMap;
  return absl::StrCat("# Tessera machine profile (docs/PLANNER.md \"Profile file\")\n", e.c_str(),
                      "\n");
}

absl::Status SaveMachineProfile(const MachineProfile& profile, const std::string& path) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << MachineProfileToYaml(profile);
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write profile '", tmp, "'"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename '", tmp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace tessera::planner
