// The profile's fingerprint and calibration blocks (profile_meta.h, profile_meta_yaml.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "planner/profile_meta_yaml.h"

namespace tessera::planner {

namespace {

bool Apart(double a, double b) {
  if (a <= 0 || b <= 0) return false;
  return std::abs(a - b) > 0.1 * std::max(a, b);
}

std::string Bytes(int64_t b) { return absl::StrFormat("%.1f MiB", b / 1048576.0); }

}  // namespace

std::vector<std::string> FingerprintDifferences(const MachineFingerprint& here,
                                                const MachineFingerprint& profile) {
  std::vector<std::string> out;
  if (!here.present || !profile.present) return out;
  auto text = [&](const char* key, const std::string& a, const std::string& b) {
    if (a != b) {
      out.push_back(absl::StrCat(key, ": '", a, "' here, '", b, "' in the profile"));
    }
  };
  text("cpu_model", here.cpu_model, profile.cpu_model);
  text("isa", absl::StrJoin(here.isa, " "), absl::StrJoin(profile.isa, " "));
  if (here.cores != profile.cores) {
    out.push_back(absl::StrCat("cores: ", here.cores, " here, ", profile.cores, " in the profile"));
  }
  auto bytes = [&](const char* key, int64_t a, int64_t b) {
    if (Apart(static_cast<double>(a), static_cast<double>(b))) {
      out.push_back(absl::StrCat(key, ": ", Bytes(a), " here, ", Bytes(b), " in the profile"));
    }
  };
  bytes("l2_bytes", here.l2_bytes, profile.l2_bytes);
  bytes("l3_bytes", here.l3_bytes, profile.l3_bytes);
  bytes("memory_bytes", here.memory_bytes, profile.memory_bytes);
  text("gpu", here.gpu, profile.gpu);
  text("gpu_driver", here.gpu_driver, profile.gpu_driver);
  text("cuda_runtime", here.cuda_runtime, profile.cuda_runtime);
  text("blas", here.blas, profile.blas);
  text("onednn", here.onednn, profile.onednn);
  return out;
}

std::string FingerprintKey(const MachineFingerprint& f) {
  const std::string all = absl::StrCat(
      f.cpu_model, "|", absl::StrJoin(f.isa, ","), "|", f.cores, "|", f.l2_bytes, "|", f.l3_bytes,
      "|", (f.memory_bytes + (int64_t{1} << 29)) >> 30, "|", f.gpu, "|", f.gpu_driver, "|",
      f.cuda_runtime, "|", f.blas, "|", f.onednn);
  // FNV-1a 64: stable across builds and platforms (std::hash is not).
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : all) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

namespace profile_internal {

namespace {

absl::Status Bad(const YAML::Node& n, const std::string& source, const std::string& key,
                 const std::string& msg) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", n.Mark().line + 1, ": ", key, ": ", msg));
}

// Every key of map `n` must be in `known`.
absl::Status OnlyKnown(const YAML::Node& n, const std::string& source, const std::string& path,
                       const std::set<std::string>& known) {
  if (!n.IsMap()) return Bad(n, source, path, "must be a map");
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    if (!known.count(k)) {
      return Bad(kv.first, source, absl::StrCat(path, ".", k),
                 absl::StrCat("unknown key (expected ",
                              absl::StrJoin(std::vector<std::string>(known.begin(), known.end()),
                                            ", "),
                              ")"));
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Opt(const YAML::Node& n, const std::string& source, const std::string& path,
                 const char* key, T* out) {
  if (!n[key]) return absl::OkStatus();
  try {
    *out = n[key].as<T>();
  } catch (const YAML::Exception&) {
    return Bad(n[key], source, absl::StrCat(path, ".", key), "bad value");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadFingerprint(const YAML::Node& n, const std::string& source,
                             MachineFingerprint* f) {
  const std::string p = "fingerprint";
  if (absl::Status st = OnlyKnown(n, source, p,
                                  {"cpu_model", "isa", "cores", "l2_bytes", "l3_bytes",
                                   "memory_bytes", "gpu", "gpu_driver", "cuda_runtime", "blas",
                                   "onednn"});
      !st.ok()) {
    return st;
  }
  f->present = true;
  for (absl::Status st :
       {Opt(n, source, p, "cpu_model", &f->cpu_model), Opt(n, source, p, "isa", &f->isa),
        Opt(n, source, p, "cores", &f->cores), Opt(n, source, p, "l2_bytes", &f->l2_bytes),
        Opt(n, source, p, "l3_bytes", &f->l3_bytes),
        Opt(n, source, p, "memory_bytes", &f->memory_bytes), Opt(n, source, p, "gpu", &f->gpu),
        Opt(n, source, p, "gpu_driver", &f->gpu_driver),
        Opt(n, source, p, "cuda_runtime", &f->cuda_runtime), Opt(n, source, p, "blas", &f->blas),
        Opt(n, source, p, "onednn", &f->onednn)}) {
    if (!st.ok()) return st;
  }
  std::sort(f->isa.begin(), f->isa.end());
  return absl::OkStatus();
}

absl::Status ReadCalibration(const YAML::Node& n, const std::string& source,
                             CalibrationRecord* c) {
  const std::string p = "calibration";
  if (absl::Status st = OnlyKnown(n, source, p,
                                  {"runs", "max_spread", "seconds", "load_average",
                                   "other_cpu_cores", "flagged"});
      !st.ok()) {
    return st;
  }
  c->present = true;
  for (absl::Status st :
       {Opt(n, source, p, "runs", &c->runs), Opt(n, source, p, "max_spread", &c->max_spread),
        Opt(n, source, p, "seconds", &c->seconds),
        Opt(n, source, p, "load_average", &c->load_average),
        Opt(n, source, p, "other_cpu_cores", &c->other_cpu_cores)}) {
    if (!st.ok()) return st;
  }
  if (const YAML::Node list = n["flagged"]) {
    if (!list.IsSequence()) return Bad(list, source, "calibration.flagged", "must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string q = absl::StrCat("calibration.flagged[", i, "]");
      if (absl::Status st =
              OnlyKnown(list[i], source, q, {"key", "runs", "spread", "wide", "implausible"});
          !st.ok()) {
        return st;
      }
      KeyQuality k;
      for (absl::Status st :
           {Opt(list[i], source, q, "key", &k.key), Opt(list[i], source, q, "runs", &k.runs),
            Opt(list[i], source, q, "spread", &k.spread), Opt(list[i], source, q, "wide", &k.wide),
            Opt(list[i], source, q, "implausible", &k.implausible)}) {
        if (!st.ok()) return st;
      }
      if (k.key.empty()) return Bad(list[i], source, q + ".key", "missing");
      c->flagged.push_back(std::move(k));
    }
  }
  return absl::OkStatus();
}

void EmitFingerprint(YAML::Emitter& e, const MachineFingerprint& f) {
  e << YAML::Key << "fingerprint" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "cpu_model" << YAML::Value << f.cpu_model;
  e << YAML::Key << "isa" << YAML::Value << YAML::Flow << f.isa;
  e << YAML::Key << "cores" << YAML::Value << f.cores;
  e << YAML::Key << "l2_bytes" << YAML::Value << f.l2_bytes;
  e << YAML::Key << "l3_bytes" << YAML::Value << f.l3_bytes;
  e << YAML::Key << "memory_bytes" << YAML::Value << f.memory_bytes;
  e << YAML::Key << "gpu" << YAML::Value << f.gpu;
  e << YAML::Key << "gpu_driver" << YAML::Value << f.gpu_driver;
  e << YAML::Key << "cuda_runtime" << YAML::Value << f.cuda_runtime;
  e << YAML::Key << "blas" << YAML::Value << f.blas;
  e << YAML::Key << "onednn" << YAML::Value << f.onednn;
  e << YAML::EndMap;
}

void EmitCalibration(YAML::Emitter& e, const CalibrationRecord& c) {
  e << YAML::Key << "calibration" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "runs" << YAML::Value << c.runs;
  e << YAML::Key << "max_spread" << YAML::Value << c.max_spread;
  e << YAML::Key << "seconds" << YAML::Value << c.seconds;
  e << YAML::Key << "load_average" << YAML::Value << c.load_average;
  e << YAML::Key << "other_cpu_cores" << YAML::Value << c.other_cpu_cores;
  e << YAML::Key << "flagged" << YAML::Value << YAML::BeginSeq;
  for (const KeyQuality& k : c.flagged) {
    e << YAML::Flow << YAML::BeginMap << YAML::Key << "key" << YAML::Value << k.key << YAML::Key
      << "runs" << YAML::Value << k.runs << YAML::Key << "spread" << YAML::Value << k.spread
      << YAML::Key << "wide" << YAML::Value << k.wide;
    if (!k.implausible.empty()) e << YAML::Key << "implausible" << YAML::Value << k.implausible;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::EndMap;
}

}  // namespace profile_internal
}  // namespace tessera::planner
