// `tessera-plan calibrate`: the subcommand (its arguments, the profile file) and the order of the
// measurements. The measurements themselves: plan_calibrate_device.cc (copy, gather /
// scatter-update, GEMM), plan_calibrate_comm.cc (collectives), plan_calibrate_tier.cc (RocksDB).
#include "tools/plan_calibrate.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/parallel.h"
#include "core/status.h"
#include "dense/mlp.h"
#include "planner/profile_quality.h"
#include "sharding/mpi_communicator.h"
#include "tools/plan_calibrate_internal.h"
#include "trainer/config.h"
#include "trainer/machine_fingerprint.h"
#include "trainer/profile_cache.h"

namespace tessera {
namespace calibrate_internal {

void Progress(const CalibrateOptions& o, const std::string& line) {
  if (o.verbose) std::fprintf(stderr, "calibrate: %s\n", line.c_str());
}

}  // namespace calibrate_internal

namespace {

using calibrate_internal::Progress;

int64_t HostMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

std::string TodayUtc() {
  std::time_t now = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

std::string SelfPath() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("tessera-plan") : p.string();
}

constexpr char kUsage[] =
    "usage: tessera-plan calibrate --out FILE [--config A.yaml,B.yaml] [--threads 1]\n"
    "         [--world_sizes 2,4] [--dims 16,32,64,128,256] [--tier_dims 16,64,128]\n"
    "         [--tier_rows 200000]"
    "\n"
    "         [--seconds_per_point 0.25] [--table_mib 256] [--batch 2048] [--pooling 1]\n"
    "         [--multi_pooling 32] [--llc_mib N] [--clock cpu|wall]\n"
    "         [--mpirun mpirun] [--scratch DIR] [--no_cuda] [--quiet]\n"
    "         [--hosts H --cross_host_mpirun 'bash scripts/cluster.sh mpirun']\n"
    "         [--runs 3] [--max_spread 0.25] [--extra_runs 2] [--strict] [--quick] [--cache]\n"
    "Measures this machine (gather / scatter-update by row size, GEMM at the configs' layer\n"
    "shapes, MPI collectives at each world size, RocksDB tier reads and writes, the GPU when\n"
    "there is one) and writes the machine profile the planner reads (docs/PLANNER.md).\n"
    "--help: this text. Empty --world_sizes or --tier_dims skips that part. Default configs: "
    "configs/bench/*.yaml.\n"
    "Every key is the median of --runs runs; a key spread wider than --max_spread or failing a\n"
    "plausibility check is measured again (--extra_runs) and, if it stays so, listed in the\n"
    "profile's calibration.flagged and at the end (--strict: exit status 3). --quick: the short\n"
    "set `sharding.profile: auto` calibrates with (3 dims, 2 ranks, one tier size; ~1 min).\n"
    "--hosts H --cross_host_mpirun CMD: also each world size's collectives across H hosts\n"
    "(CMD -np W --map-by ppr:W/H:node ...; profile same_node: false; docs/CLUSTER.md); a W\n"
    "below the largest cross-host one as that world's groups of W calling at once (groups).\n"
    "--llc_mib N: the LLC a table gets, instead of measuring it (a uniform gather's time per id\n"
    "over tables of 4 MiB up to twice sysfs's L3: where it has risen half way; a VM's sysfs may\n"
    "report its host's L3).\n"
    "--cache: write this machine's profile where `sharding.profile: auto` finds it\n"
    "($XDG_CACHE_HOME/tessera or ~/.cache/tessera, by the machine's fingerprint).\n";

int Usage(const std::string& why) {
  std::fprintf(stderr, "tessera-plan calibrate: %s\n%s", why.c_str(), kUsage);
  return 2;
}

template <typename T>
bool ParseList(const std::string& v, std::vector<T>* out) {
  out->clear();
  if (v.empty()) return true;
  for (absl::string_view s : absl::StrSplit(v, ',')) {
    T x;
    if (!absl::SimpleAtoi(s, &x) || x < 1) return false;
    out->push_back(x);
  }
  return true;
}

std::vector<std::string> DefaultConfigs() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("configs/bench", ec)) {
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Without a DCNv2 among the default configs, a Kaggle-shaped one (kaggle.yaml's tables, MLPs and
// batch with three full-rank cross layers), written to `scratch`, so that the cross kind's dense
// arch is timed whole too and a DCNv2 config gets its kind's scale, not the dot archs' (on the
// AMX Xeon VM, 2026-12-07, it measured 1.01 / 0.99, as the dot archs do: a DCNv2 of 26 Kaggle
// tables at batch 1024 still ran its dense phases 8-12% above the model). Returns its path, or
// "" when a config is already a DCNv2.
absl::StatusOr<std::string> DefaultDcnConfig(const std::vector<std::string>& configs,
                                             const std::string& scratch) {
  for (const std::string& path : configs) {
    absl::StatusOr<Config> c = LoadConfig(path);
    if (c.ok() && c->model.interaction == InteractionType::kDcn) return std::string();
  }
  std::error_code ec;
  std::filesystem::create_directories(scratch, ec);
  const std::string path = (std::filesystem::path(scratch) / "default_dcnv2.yaml").string();
  std::ofstream f(path);
  f << "seed: 1\n"
       "model: {type: dcnv2, num_dense: 13, embedding_dim: 16, bottom_mlp: [512, 256, 16],\n"
       "        top_mlp: [512, 256, 1], table_rows: criteo_kaggle, max_table_rows: 1000000}\n"
       "data: {format: synthetic, batch_size: 2048, synthetic: {zipf_exponent: 1.05, "
       "pooling: 1}}\n"
       "optimizer: {embedding: {type: rowwise_adagrad, lr: 0.05}, dense: {type: sgd, lr: 0.05}}\n"
       "output: {dir: runs/bench, export: \"\", metrics: \"\"}\n";
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return path;
}

// The profile's YAML (planner::MachineProfileToYaml) under a comment header naming the command
// and the date, written atomically (temp file + rename). The file loads with LoadMachineProfile.
absl::Status WriteProfile(const planner::MachineProfile& p, const std::string& command,
                          const std::string& path) {
  std::string text = absl::StrCat(
      "# Tessera machine profile, measured on ", p.machine, "\n# by `", command, "` on ", p.date,
      " (UTC).\n# Rates: ids per second for gather / scatter_update (duplicates included), flops "
      "per second\n# for gemm, wire bytes per second for collectives (all_to_all: bytes sent to "
      "the other\n# ranks; all_reduce: the buffer; all_gather: the gathered buffer), seconds per "
      "row for the\n# tier. docs/PLANNER.md \"Profile file\" documents every key.\n",
      planner::MachineProfileToYaml(p));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f) return absl::InternalError(absl::StrCat("calibrate: cannot write ", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("calibrate: cannot rename ", tmp, " to ", path, ": ", ec.message()));
  }
  // Read back through the planner's loader: what we ship must load.
  return planner::LoadMachineProfile(path).status();
}

// Resident bytes of this process now (VmRSS), 0 when /proc is unreadable.
int64_t ResidentBytes() {
  const std::string v = ProcFileValue("/proc/self/status", "VmRSS");
  int64_t kb = 0;
  return absl::SimpleAtoi(absl::StripSuffix(v, " kB"), &kb) ? kb * 1024 : 0;
}

// VmRSS after one 2048 x 512 x 256 LinearForward.
absl::StatusOr<int64_t> BaseResidentBytes() {
  const int64_t b = 2048, in = 512, out = 256;
  std::vector<float> x(b * in, 0.01f), w(out * in, 0.01f), bias(out, 0.0f), y(b * out);
  TESSERA_RETURN_IF_ERROR(LinearForward(DeviceContext::Cpu(), x.data(), w.data(), bias.data(), b,
                                        in, out, Activation::kRelu, y.data()));
  const int64_t scratch = static_cast<int64_t>(x.size() + w.size() + bias.size() + y.size()) * 4;
  return std::max<int64_t>(ResidentBytes() - scratch, 0);
}

}  // namespace

CalibrateOptions QuickCalibrateOptions(const std::vector<std::string>& configs) {
  CalibrateOptions o;
  o.dims = {16, 64, 256};
  o.table_bytes = int64_t{128} << 20;
  o.seconds_per_point = 0.05;
  // Three runs, and a fourth of a part only where a key's spread is wide (or implausible). Two
  // were too few on a shared VM: a GEMM point measured 88-150 GFLOP/s from run to run (a
  // neighbour's slow seconds), and the median of two is their mean, so one slow run moved the
  // kaggle T = 1 prediction +21%; the median of three ignores it (docs/PLANNER.md).
  o.runs = 3;
  o.extra_runs = 1;
  o.world_sizes.clear();
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) o.world_sizes = {2};
  o.tier_dims = {64};
  o.tier_rows = 50000;
  o.configs = configs;
  return o;
}

namespace {

// CPU time of the whole machine (busy jiffies of /proc/stat's first line) and of this process
// with its waited-for children (the mpirun workers), for the other processes' share.
struct CpuSample {
  double wall = 0, machine_busy_s = 0, self_s = 0;
};
CpuSample SampleCpu() {
  CpuSample c;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  c.wall = ts.tv_sec + 1e-9 * ts.tv_nsec;
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) {
    c.machine_busy_s =
        (user + nice + system + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage r;
    if (getrusage(who, &r) == 0) {
      c.self_s += r.ru_utime.tv_sec + 1e-6 * r.ru_utime.tv_usec + r.ru_stime.tv_sec +
                  1e-6 * r.ru_stime.tv_usec;
    }
  }
  return c;
}
double OtherCores(const CpuSample& a, const CpuSample& b) {
  const double wall = b.wall - a.wall;
  if (wall <= 0) return 0;
  return std::max(0.0, (b.machine_busy_s - a.machine_busy_s) - (b.self_s - a.self_s)) / wall;
}
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double l = 0;
  in >> l;
  return l;
}

}  // namespace

absl::StatusOr<planner::MachineProfile> Calibrate(const CalibrateOptions& opts,
                                                  const std::string& command) {
  CalibrateOptions o = opts;
  std::error_code ec;
  std::filesystem::create_directories(o.scratch_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("calibrate: cannot create scratch directory ",
                                            o.scratch_dir, ": ", ec.message()));
  }
  SetNumThreads(std::max(1, o.threads));
  const CpuSample cpu_start = SampleCpu();
  const std::string cpu = ProcFileValue("/proc/cpuinfo", "model name");
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const std::string cpu_name =
      absl::StrFormat("%s (%d cores)", cpu.empty() ? "unknown CPU" : cpu, cores);
  const int gpus = CudaCompiled() ? CudaDeviceCount() : 0;
  const int runs = std::max(1, o.runs);
  planner::MachineProfile p;
  p.machine = absl::StrFormat("%s, %.1f GiB RAM, %s", cpu_name, HostMemoryBytes() / 1073741824.0,
                              gpus > 0 ? absl::StrCat(gpus, " CUDA device(s)") : "no GPU");
  p.date = TodayUtc();
  p.source = absl::StrCat("measured by `", command, "` (", o.threads, " thread(s) per rank, ",
                          o.cpu_clock ? "CPU-clock" : "wall-clock",
                          " medians; disk reads and collectives wall-clock; each key the median "
                          "of ",
                          runs, " runs or more)");
  p.fingerprint = o.fingerprint;
  Stopwatch total;
  // Base memory of a training process (libraries, runtime, BLAS buffers) before any model: this
  // process links what the trainer links; one small GEMM first makes OpenBLAS allocate its
  // buffers, as the first training step does.
  TESSERA_ASSIGN_OR_RETURN(const int64_t base_bytes, BaseResidentBytes());

  // The LLC, measured once for every run (unless --llc_mib gives it): what sysfs reports may be
  // the host's.
  if (o.llc_bytes <= 0) {
    std::string curve;
    TESSERA_ASSIGN_OR_RETURN(o.llc_bytes,
                             calibrate_internal::MeasureEffectiveLlc(o, HostMemoryBytes(), &curve));
    Progress(o, absl::StrFormat("cpu last-level cache: a uniform gather's ns per id by table size "
                                "%s: %.0f MiB (sysfs: %.0f MiB)",
                                curve, o.llc_bytes / 1048576.0, o.fingerprint.l3_bytes / 1048576.0));
  }
  // The eviction pass before each timed call covers 1.5x that LLC: in a step the dense work
  // between two lookups (and between a lookup and its update, or the output dist's passes)
  // leaves little of them cached. On the AMX Xeon VM (LLC measured 77-154 MiB) the 48 MiB pass
  // left the pack / unpack buffers and the tables' hot rows cached: pack 21 GB/s against 11-16
  // in tessera-bench's steps (16.6 with this pass), the row work at T = 1 2x under-predicted.
  if (o.evict_bytes > 0) o.evict_bytes = std::max(o.evict_bytes, o.llc_bytes * 3 / 2);
  // Every part's runs as partial profiles (devices only, one world size's collectives only, the
  // tier only): MedianOfRuns takes the median per key over a part's runs.
  std::map<std::string, std::vector<planner::MachineProfile>> part_runs;
  int64_t comm_memory = 0;
  int parts_done = 0, parts_planned = 0;
  auto measure = [&](const std::string& part) -> absl::Status {
    planner::MachineProfile r;
    const CpuSample before = SampleCpu();
    if (part == "device") {
      TESSERA_ASSIGN_OR_RETURN(
          planner::DeviceProfile host,
          calibrate_internal::MeasureDevice(o, DeviceContext::Cpu(), cpu_name, HostMemoryBytes()));
      host.base_memory_bytes = base_bytes;
      r.devices.push_back(std::move(host));
      if (o.cuda && gpus > 0) {
        CudaContextOptions co;
        co.device = 0;
        TESSERA_ASSIGN_OR_RETURN(auto cuda, CudaContext::Create(co));
        TESSERA_ASSIGN_OR_RETURN(planner::DeviceProfile dev,
                                 calibrate_internal::MeasureDevice(
                                     o, cuda->context(), absl::StrCat("CUDA device ", co.device),
                                     /*memory_bytes=*/0));
        r.devices.push_back(std::move(dev));
      }
    } else if (part == "tier") {
      TESSERA_ASSIGN_OR_RETURN(r.tier, calibrate_internal::MeasureTier(o));
    } else {  // "collectives.W"
      CalibrateOptions ow = o;
      // The cross-host world whose groups the smaller world sizes are measured as.
      for (int w : o.world_sizes) {
        if (o.hosts >= 2 && w % o.hosts == 0) ow.cross_world = std::max(ow.cross_world, w);
      }
      ow.world_sizes = {std::atoi(part.c_str() + std::strlen("collectives."))};
      int64_t mem = 0;
      TESSERA_ASSIGN_OR_RETURN(r.collectives, calibrate_internal::MeasureCollectives(ow, &mem));
      comm_memory = std::max(comm_memory, mem);
    }
    const CpuSample after = SampleCpu();
    Progress(o, absl::StrFormat("%s: run %d done in %.1f s (%.1f CPU s); other processes used "
                                "%.2f cores meanwhile (load average %.1f)",
                                part, static_cast<int>(part_runs[part].size()) + 1,
                                after.wall - before.wall, after.self_s - before.self_s,
                                OtherCores(before, after), LoadAverage()));
    part_runs[part].push_back(std::move(r));
    ++parts_done;
    if (!o.verbose) {
      // --quiet (sharding.profile: auto): one progress line, rewritten in place on a terminal.
      const bool tty = isatty(STDERR_FILENO) != 0;
      std::fprintf(stderr, "%scalibrate: %d of %d measurements done (%s run %d), %.0f s%s",
                   tty ? "\r" : "", parts_done, std::max(parts_done, parts_planned), part.c_str(),
                   static_cast<int>(part_runs[part].size()), total.ElapsedSeconds(),
                   tty ? "" : "\n");
      std::fflush(stderr);
    }
    return absl::OkStatus();
  };
  std::vector<std::string> parts = {"device"};
  if (!o.worker_argv.empty()) {
    for (int w : o.world_sizes) parts.push_back(absl::StrCat("collectives.", w));
  } else if (!o.world_sizes.empty()) {
    Progress(o, "collectives: skipped (no worker command)");
  }
  if (!o.tier_dims.empty()) parts.push_back("tier");
  if (!(o.cuda && gpus > 0)) {
    Progress(o, "cuda: skipped (no CUDA path in this build or no device visible)");
  }
  // Interleaved (device, collectives, tier, device, ...): a burst of load hits one run of each
  // part rather than every run of one.
  parts_planned = runs * static_cast<int>(parts.size());
  for (int r = 0; r < runs; ++r) {
    Progress(o, absl::StrFormat("run %d of %d", r + 1, runs));
    for (const std::string& part : parts) TESSERA_RETURN_IF_ERROR(measure(part));
  }
  // The median profile, every key's quality, and the keys of each part that are flagged.
  std::vector<planner::KeyQuality> flagged;
  auto combine = [&]() -> absl::StatusOr<planner::MachineProfile> {
    planner::MachineProfile m = p;
    flagged.clear();
    std::vector<planner::KeyQuality> q;
    for (const std::string& part : parts) {
      TESSERA_ASSIGN_OR_RETURN(planner::MachineProfile med,
                               planner::MedianOfRuns(part_runs[part], o.max_spread, &q));
      for (planner::DeviceProfile& d : med.devices) {
        // The peak is the best GEMM rate seen: the medians' best, not the median of the bests.
        for (const planner::GemmPoint& g : d.gemm) {
          d.gemm_peak_flops_per_s = std::max(d.gemm_peak_flops_per_s, g.flops_per_s);
        }
        m.devices.push_back(std::move(d));
      }
      for (planner::CollectivePoint& c : med.collectives) m.collectives.push_back(c);
      for (planner::TierPoint& t : med.tier) m.tier.push_back(t);
    }
    std::sort(m.collectives.begin(), m.collectives.end(), planner::CollectivePointLess);
    for (planner::DeviceProfile& d : m.devices) d.comm_memory_bytes = comm_memory;
    for (planner::KeyQuality& k : q) {
      if (k.wide) flagged.push_back(k);
    }
    for (planner::KeyQuality& k : planner::ImplausibleKeys(m)) {
      bool merged = false;
      for (planner::KeyQuality& f : flagged) {
        if (f.key == k.key) {
          f.implausible = k.implausible;
          merged = true;
        }
      }
      if (!merged) {
        for (const planner::KeyQuality& all : q) {
          if (all.key == k.key) {
            k.runs = all.runs;
            k.spread = all.spread;
          }
        }
        flagged.push_back(k);
      }
    }
    return m;
  };
  TESSERA_ASSIGN_OR_RETURN(planner::MachineProfile med, combine());
  for (int extra = 0; extra < o.extra_runs && !flagged.empty(); ++extra) {
    // The parts that measured a flagged key, measured once more.
    std::map<std::string, std::string> part_of;
    for (const planner::MeasuredKey& k : planner::MeasuredKeys(&med)) {
      part_of[k.name] = absl::StartsWith(k.part, "device.") ? "device" : k.part;
    }
    std::set<std::string> again;
    std::vector<std::string> names;
    for (const planner::KeyQuality& k : flagged) {
      again.insert(part_of.count(k.key) ? part_of[k.key] : "device");
      names.push_back(k.key);
    }
    Progress(o, absl::StrCat("measuring again (", absl::StrJoin(again, ", "), ") for ",
                             absl::StrJoin(names, ", ")));
    parts_planned += static_cast<int>(again.size());
    for (const std::string& part : again) TESSERA_RETURN_IF_ERROR(measure(part));
    TESSERA_ASSIGN_OR_RETURN(med, combine());
  }
  // What a check refused is replaced by the bound it broke (and stays flagged).
  for (planner::KeyQuality& k : flagged) {
    if (k.implausible.empty()) continue;
    for (planner::CollectivePoint& c : med.collectives) {
      if (k.key == planner::CollectiveKeyPrefix(c) + "wait_per_compute") {
        c.wait_per_compute = std::min(c.wait_per_compute, planner::kMaxWaitPerComputeOwnCores);
      }
      if (k.key == planner::CollectiveKeyPrefix(c) + "beyond_llc_bytes_per_s") {
        const planner::DeviceProfile* cpu = med.device("cpu");
        c.beyond_llc_bytes_per_s =
            std::max(c.beyond_llc_bytes_per_s,
                     planner::BeyondLlcFallback(c, cpu != nullptr ? cpu->copy_bytes_per_s : 0));
      }
    }
  }
  std::filesystem::remove_all(o.scratch_dir, ec);
  if (!o.verbose && isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
  med.calibration.present = true;
  med.calibration.runs = runs;
  med.calibration.max_spread = o.max_spread;
  med.calibration.seconds = total.ElapsedSeconds();
  med.calibration.load_average = LoadAverage();
  med.calibration.other_cpu_cores = OtherCores(cpu_start, SampleCpu());
  med.calibration.flagged = flagged;
  Progress(o, absl::StrFormat("done in %.1f s; other processes used %.2f cores on average "
                              "meanwhile, load average %.1f",
                              med.calibration.seconds, med.calibration.other_cpu_cores,
                              med.calibration.load_average));
  for (const planner::KeyQuality& k : flagged) {
    Progress(o, absl::StrFormat(
                    "FLAGGED %s: spread %.0f%% over %d runs%s", k.key, 100 * k.spread, k.runs,
                    k.implausible.empty() ? "" : absl::StrCat("; implausible: ", k.implausible)));
  }
  return med;
}

int RunPlanCalibrate(int argc, char** argv) {
  CalibrateOptions o;
  std::string out, worker_out;
  int worker_groups = 1;
  bool worker_strided = true;
  bool have_configs = false, strict = false, cache = false;
  std::vector<std::string> words = {"tessera-plan calibrate"};
  // --quick first: the short set, which the other flags then adjust.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") o = QuickCalibrateOptions({});
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    const size_t eq = a.find('=');
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    const bool boolean =
        a == "--no_cuda" || a == "--quiet" || a == "--strict" || a == "--quick" || a == "--cache";
    if (a.rfind("--", 0) != 0) return Usage("unexpected argument '" + a + "'");
    if (!boolean) {
      if (eq != std::string::npos) {
        v = a.substr(eq + 1);
        a = a.substr(0, eq);
      } else if (i + 1 < argc) {
        v = argv[++i];
      } else {
        return Usage(a + " needs a value");
      }
    }
    if (a != "--collectives_worker" && a != "--collectives_groups") {
      words.push_back(boolean ? a : a + " " + v);
    }
    bool ok = true;
    if (a == "--out") {
      out = v;
    } else if (a == "--config") {
      o.configs = absl::StrSplit(v, ',', absl::SkipEmpty());
      have_configs = true;
    } else if (a == "--threads") {
      ok = absl::SimpleAtoi(v, &o.threads) && o.threads >= 1;
    } else if (a == "--world_sizes") {
      ok = ParseList(v, &o.world_sizes);
    } else if (a == "--dims") {
      ok = ParseList(v, &o.dims) && !o.dims.empty();
    } else if (a == "--tier_dims") {
      ok = ParseList(v, &o.tier_dims);
    } else if (a == "--tier_rows") {
      ok = absl::SimpleAtoi(v, &o.tier_rows) && o.tier_rows >= 4096;
    } else if (a == "--batch") {
      ok = absl::SimpleAtoi(v, &o.batch_size) && o.batch_size >= 1;
    } else if (a == "--pooling") {
      ok = absl::SimpleAtoi(v, &o.pooling) && o.pooling >= 1;
    } else if (a == "--multi_pooling") {
      ok = absl::SimpleAtoi(v, &o.multi_pooling) && o.multi_pooling >= 2;
    } else if (a == "--llc_mib") {
      int64_t mib = 0;
      ok = absl::SimpleAtoi(v, &mib) && mib >= 1;
      o.llc_bytes = mib << 20;
    } else if (a == "--seconds_per_point") {
      ok = absl::SimpleAtod(v, &o.seconds_per_point) && o.seconds_per_point > 0;
    } else if (a == "--table_mib") {
      int64_t mib = 0;
      ok = absl::SimpleAtoi(v, &mib) && mib >= 1;
      o.table_bytes = mib << 20;
    } else if (a == "--clock") {
      ok = v == "cpu" || v == "wall";
      o.cpu_clock = v == "cpu";
    } else if (a == "--mpirun") {
      o.mpirun = v;
    } else if (a == "--cross_host_mpirun") {
      o.cross_host_mpirun = v;
    } else if (a == "--hosts") {
      ok = absl::SimpleAtoi(v, &o.hosts) && o.hosts >= 2;
    } else if (a == "--scratch") {
      o.scratch_dir = v;
    } else if (a == "--runs") {
      ok = absl::SimpleAtoi(v, &o.runs) && o.runs >= 1;
    } else if (a == "--extra_runs") {
      ok = absl::SimpleAtoi(v, &o.extra_runs) && o.extra_runs >= 0;
    } else if (a == "--max_spread") {
      ok = absl::SimpleAtod(v, &o.max_spread) && o.max_spread > 0;
    } else if (a == "--strict") {
      strict = true;
    } else if (a == "--cache") {
      cache = true;
    } else if (a == "--quick") {
      // applied above
    } else if (a == "--no_cuda") {
      o.cuda = false;
    } else if (a == "--quiet") {
      o.verbose = false;
    } else if (a == "--collectives_worker") {
      worker_out = v;
    } else if (a == "--collectives_groups") {
      // Internal (MeasureCollectives' jobs): G:strided or G:contiguous.
      const std::vector<std::string> g = absl::StrSplit(v, ':');
      ok = g.size() == 2 && absl::SimpleAtoi(g[0], &worker_groups) && worker_groups >= 1 &&
           (g[1] == "strided" || g[1] == "contiguous");
      if (ok) worker_strided = g[1] == "strided";
    } else {
      return Usage("unknown flag " + a);
    }
    if (!ok) return Usage(absl::StrCat("bad value '", v, "' for ", a));
  }
  if (!worker_out.empty()) {
    // A rank of the collectives job Calibrate started (under mpirun). VmRSS before MPI_Init:
    // the worker reports what the MPI runtime added (comm_memory_bytes).
    const int64_t before_mpi = ResidentBytes();
    if (!MpiInitialize(&argc, &argv).ok()) return 1;
    // The threads per rank the profile is for (its kernels then run as the trainer's ranks
    // do): left at the core count, the co-running GEMM ran on 2 OpenBLAS threads per rank,
    // so alone it had both cores and together 4 ranks x 2 threads shared them, and the
    // cross-host GEMM slowdown of 4 ranks on 2 cores came out 3.7-4.1 (the step's: 2.1).
    SetNumThreads(std::max(1, o.threads));
    absl::Status st = RunCollectivesWorker(worker_out, o.seconds_per_point, before_mpi,
                                           worker_groups, worker_strided, o.configs);
    if (!st.ok())
      std::fprintf(stderr, "tessera-plan calibrate: %s\n", std::string(st.message()).c_str());
    (void)MpiFinalize();
    return st.ok() ? 0 : 1;
  }
  if (cache) {
    // This machine's entry of the per-user cache `sharding.profile: auto` reads.
    std::error_code ec;
    std::filesystem::create_directories(ProfileCacheDir(), ec);
    if (out.empty()) out = ThisMachineProfileCachePath();
  }
  if (out.empty()) return Usage("--out is required (or --cache)");
  {
    // Before minutes of measuring: the profile's file must be writable where it goes.
    const std::string probe = out + ".tmp";
    std::ofstream f(probe, std::ios::app);
    if (!f) {
      std::fprintf(stderr, "tessera-plan calibrate: cannot write %s (--out %s): %s\n",
                   probe.c_str(), out.c_str(), std::strerror(errno));
      return 1;
    }
    f.close();
    std::remove(probe.c_str());
  }
  if (!have_configs) {
    o.configs = DefaultConfigs();
    absl::StatusOr<std::string> dcn = DefaultDcnConfig(o.configs, o.scratch_dir);
    if (!dcn.ok()) {
      std::fprintf(stderr, "tessera-plan calibrate: %s\n", std::string(dcn.status().message()).c_str());
      return 1;
    }
    if (!dcn->empty()) o.configs.push_back(*dcn);
  }
  o.fingerprint = ThisMachineFingerprint();
  o.worker_argv = {SelfPath(), "calibrate", "--collectives_worker"};
  if (o.seconds_per_point != CalibrateOptions().seconds_per_point) {
    o.worker_argv.insert(o.worker_argv.begin() + 2,
                         absl::StrCat("--seconds_per_point=", o.seconds_per_point));
  }
  if (o.threads != CalibrateOptions().threads) {
    o.worker_argv.insert(o.worker_argv.begin() + 2, absl::StrCat("--threads=", o.threads));
  }
  if (!o.configs.empty()) {
    // The configs whose dense archs the workers run at once (the dense compute slowdown),
    // absolute: a cross-host launcher may start them elsewhere.
    std::vector<std::string> paths;
    for (const std::string& c : o.configs) paths.push_back(std::filesystem::absolute(c).string());
    o.worker_argv.insert(o.worker_argv.begin() + 2,
                         absl::StrCat("--config=", absl::StrJoin(paths, ",")));
  }
  const std::string command = absl::StrJoin(words, " ");
  absl::StatusOr<planner::MachineProfile> p = Calibrate(o, command);
  if (p.ok()) {
    absl::Status st = WriteProfile(*p, command, out);
    if (!st.ok()) p = st;
  }
  if (!p.ok()) {
    std::fprintf(stderr, "tessera-plan calibrate: %s\n", std::string(p.status().message()).c_str());
    return 1;
  }
  std::printf("tessera-plan calibrate: wrote %s (%s)\n", out.c_str(), p->machine.c_str());
  if (!p->calibration.flagged.empty()) {
    std::printf(
        "tessera-plan calibrate: %d key(s) stayed wide or implausible after %d extra "
        "run(s) (calibration.flagged in the profile)%s\n",
        static_cast<int>(p->calibration.flagged.size()), o.extra_runs,
        strict ? "; --strict: exit status 3" : "");
    if (strict) return 3;
  }
  return 0;
}

}  // namespace tessera
