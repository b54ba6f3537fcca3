#include "trainer/internal/config_dynamic.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera::internal {
namespace {

bool Present(const YAML::Node& map, const char* key) {
  YAML::Node n = Child(map, key);
  return n.IsDefined() && !n.IsNull();
}

}  // namespace

const std::vector<SchemaSection>& DynamicSchema() {
  static const auto* schema = new std::vector<SchemaSection>{
      {"model.tables[].dynamic", {"capacity_rows", "admission", "eviction"}},
      {"model.tables[].dynamic.admission", {"min_count", "probability", "counter_slots"}},
      {"model.tables[].dynamic.eviction", {"policy", "ttl_steps"}},
  };
  return *schema;
}

absl::Status ParseTableDynamic(const ConfigReader& r, const YAML::Node& entry,
                               const std::string& table_path, TableConfig* t) {
  const YAML::Node dyn = Child(entry, "dynamic");
  const std::string p = table_path + ".dynamic";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(dyn, entry, p, "model.tables[].dynamic"));
  if (!dyn.IsDefined() || dyn.IsNull()) return absl::OkStatus();
  DynamicTableConfig& d = t->dynamic;
  d.enabled = true;
  if (Present(entry, "rows")) {
    return r.Error(Child(entry, "rows"), entry, table_path + ".rows",
                   "a dynamic table has no rows: its ids are raw keys and its size is "
                   "dynamic.capacity_rows");
  }
  auto positive = [](int64_t v) { return v > 0; };
  int64_t capacity = -1;
  TESSERA_RETURN_IF_ERROR(r.ReadInt(dyn, p, "capacity_rows",
                                    "a positive integer (the most rows held at once)", positive,
                                    &capacity));
  if (capacity < 0) return r.Error(YAML::Node(), dyn, p + ".capacity_rows", "required");
  t->num_rows = capacity;

  const YAML::Node adm = Child(dyn, "admission");
  const std::string ap = p + ".admission";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(adm, dyn, ap, "model.tables[].dynamic.admission"));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(adm, ap, "min_count", "an integer in [1, 65535]",
                                    [](int64_t v) { return v >= 1 && v <= 65535; },
                                    &d.min_count));
  TESSERA_RETURN_IF_ERROR(r.ReadDouble(adm, ap, "probability", "a number in (0, 1]",
                                       [](double v) { return v > 0.0 && v <= 1.0; },
                                       &d.probability));
  if (Present(adm, "min_count") && Present(adm, "probability")) {
    return r.Error(Child(adm, "probability"), adm, ap + ".probability",
                   "give either min_count or probability, not both");
  }
  TESSERA_RETURN_IF_ERROR(r.ReadInt(adm, ap, "counter_slots",
                                    "a non-negative integer (0: 4 x capacity_rows)",
                                    [](int64_t v) { return v >= 0; }, &d.counter_slots));
  if (d.counter_slots > 0 && d.min_count <= 1) {
    return r.Error(Child(adm, "counter_slots"), adm, ap + ".counter_slots",
                   "only used with admission.min_count > 1");
  }

  const YAML::Node ev = Child(dyn, "eviction");
  const std::string ep = p + ".eviction";
  TESSERA_RETURN_IF_ERROR(r.CheckMap(ev, dyn, ep, "model.tables[].dynamic.eviction"));
  TESSERA_RETURN_IF_ERROR(r.ReadEnum(ev, ep, "policy", kEvictionPolicyNames, &d.policy));
  TESSERA_RETURN_IF_ERROR(r.ReadInt(ev, ep, "ttl_steps", "a positive integer (steps)", positive,
                                    &d.ttl_steps));
  if (d.policy == EvictionPolicy::kTtl && d.ttl_steps <= 0) {
    return r.Error(Child(ev, "policy"), ev, ep + ".ttl_steps",
                   "required with eviction.policy ttl (rows unused for this many steps go)");
  }
  if (d.policy != EvictionPolicy::kTtl && d.ttl_steps > 0) {
    return r.Error(Child(ev, "ttl_steps"), ev, ep + ".ttl_steps",
                   "only used with eviction.policy ttl");
  }
  return absl::OkStatus();
}

absl::Status ValidateDynamicTables(const ConfigReader& r, const YAML::Node& root,
                                   const Config& c) {
  const YAML::Node tables = Child(Child(root, "model"), "tables");
  for (size_t i = 0; i < c.model.tables.size(); ++i) {
    const TableConfig& t = c.model.tables[i];
    if (!t.dynamic.enabled) continue;
    const YAML::Node entry = tables.IsSequence() && i < tables.size() ? tables[i] : YAML::Node();
    const std::string p = absl::StrCat("model.tables[", i, "].dynamic");
    const char* why = nullptr;
    if (t.storage.device_cached()) {
      why = "dynamic tables have no device cache yet (storage.device_cache_rows / _bytes)";
    } else if (c.device != Device::kCpu) {
      why = "dynamic tables train on the CPU for now (device: cuda is not supported yet)";
    }
    if (why != nullptr) return r.Error(Child(entry, "dynamic"), entry, p, why);
  }
  return absl::OkStatus();
}

void EmitTableDynamic(YAML::Emitter& e, const TableConfig& t) {
  if (!t.dynamic.enabled) return;
  const DynamicTableConfig& d = t.dynamic;
  e << YAML::Key << "dynamic" << YAML::Value << YAML::Flow << YAML::BeginMap;
  e << YAML::Key << "capacity_rows" << YAML::Value << t.num_rows;
  e << YAML::Key << "admission" << YAML::Value << YAML::Flow << YAML::BeginMap;
  if (d.probability > 0.0) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), d.probability);
    e << YAML::Key << "probability" << YAML::Value << std::string(buf, res.ptr);
  } else {
    e << YAML::Key << "min_count" << YAML::Value << d.min_count;
  }
  if (d.counter_slots > 0) e << YAML::Key << "counter_slots" << YAML::Value << d.counter_slots;
  e << YAML::EndMap;
  e << YAML::Key << "eviction" << YAML::Value << YAML::Flow << YAML::BeginMap;
  e << YAML::Key << "policy" << YAML::Value << EvictionPolicyName(d.policy);
  if (d.policy == EvictionPolicy::kTtl) {
    e << YAML::Key << "ttl_steps" << YAML::Value << d.ttl_steps;
  }
  e << YAML::EndMap;
  e << YAML::EndMap;
}

}  // namespace tessera::internal
