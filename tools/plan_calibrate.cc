// `tessera-plan calibrate`: the subcommand (its arguments, the profile file) and the order of the
// measurements. The measurements themselves: plan_calibrate_device.cc (copy, gather /
// scatter-update, GEMM), plan_calibrate_comm.cc (collectives), plan_calibrate_tier.cc (RocksDB).
#include "tools/plan_calibrate.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

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
#include "sharding/mpi_communicator.h"
#include "tools/plan_calibrate_internal.h"

namespace tessera {
namespace calibrate_internal {

void Progress(const CalibrateOptions& o, const std::string& line) {
  if (o.verbose) std::fprintf(stderr, "calibrate: %s\n", line.c_str());
}

}  // namespace calibrate_internal

namespace {

using calibrate_internal::Progress;

std::string ReadFirstMatch(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
  }
  return "";
}

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
    "Measures this machine (gather / scatter-update by row size, GEMM at the configs' layer\n"
    "shapes, MPI collectives at each world size, RocksDB tier reads and writes, the GPU when\n"
    "there is one) and writes the machine profile the planner reads (docs/PLANNER.md).\n"
    "--help: this text. Empty --world_sizes or --tier_dims skips that part. Default configs: "
    "configs/bench/*.yaml.\n";

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
  const std::string v = ReadFirstMatch("/proc/self/status", "VmRSS");
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

absl::StatusOr<planner::MachineProfile> Calibrate(const CalibrateOptions& o,
                                                  const std::string& command) {
  std::error_code ec;
  std::filesystem::create_directories(o.scratch_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("calibrate: cannot create scratch directory ",
                                            o.scratch_dir, ": ", ec.message()));
  }
  SetNumThreads(std::max(1, o.threads));
  planner::MachineProfile p;
  const std::string cpu = ReadFirstMatch("/proc/cpuinfo", "model name");
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const std::string cpu_name =
      absl::StrFormat("%s (%d cores)", cpu.empty() ? "unknown CPU" : cpu, cores);
  const int gpus = CudaCompiled() ? CudaDeviceCount() : 0;
  p.machine = absl::StrFormat("%s, %.1f GiB RAM, %s", cpu_name, HostMemoryBytes() / 1073741824.0,
                              gpus > 0 ? absl::StrCat(gpus, " CUDA device(s)") : "no GPU");
  p.date = TodayUtc();
  p.source = absl::StrCat("measured by `", command, "` (", o.threads, " thread(s) per rank, ",
                          o.cpu_clock ? "CPU-clock" : "wall-clock",
                          " medians; disk reads and collectives wall-clock)");
  Stopwatch total;
  // Base memory of a training process (libraries, runtime, BLAS buffers) before any model: this
  // process links what the trainer links; one small GEMM first makes OpenBLAS allocate its
  // buffers, as the first training step does.
  TESSERA_ASSIGN_OR_RETURN(const int64_t base_bytes, BaseResidentBytes());
  TESSERA_ASSIGN_OR_RETURN(
      planner::DeviceProfile host,
      calibrate_internal::MeasureDevice(o, DeviceContext::Cpu(), cpu_name, HostMemoryBytes()));
  host.base_memory_bytes = base_bytes;
  p.devices.push_back(std::move(host));
  if (o.cuda && gpus > 0) {
    CudaContextOptions co;
    co.device = 0;
    TESSERA_ASSIGN_OR_RETURN(auto cuda, CudaContext::Create(co));
    TESSERA_ASSIGN_OR_RETURN(planner::DeviceProfile dev,
                             calibrate_internal::MeasureDevice(
                                 o, cuda->context(), absl::StrCat("CUDA device ", co.device),
                                 /*memory_bytes=*/0));
    p.devices.push_back(std::move(dev));
  } else {
    Progress(o, "cuda: skipped (no CUDA path in this build or no device visible)");
  }
  int64_t comm_memory = 0;
  TESSERA_ASSIGN_OR_RETURN(p.collectives, calibrate_internal::MeasureCollectives(o, &comm_memory));
  for (planner::DeviceProfile& d : p.devices) d.comm_memory_bytes = comm_memory;
  TESSERA_ASSIGN_OR_RETURN(p.tier, calibrate_internal::MeasureTier(o));
  std::filesystem::remove_all(o.scratch_dir, ec);
  Progress(o, absl::StrFormat("done in %.1f s", total.ElapsedSeconds()));
  return p;
}

int RunPlanCalibrate(int argc, char** argv) {
  CalibrateOptions o;
  std::string out, worker_out;
  bool have_configs = false;
  std::vector<std::string> words = {"tessera-plan calibrate"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    const size_t eq = a.find('=');
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    const bool boolean = a == "--no_cuda" || a == "--quiet";
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
    if (a != "--collectives_worker") words.push_back(boolean ? a : a + " " + v);
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
    } else if (a == "--scratch") {
      o.scratch_dir = v;
    } else if (a == "--no_cuda") {
      o.cuda = false;
    } else if (a == "--quiet") {
      o.verbose = false;
    } else if (a == "--collectives_worker") {
      worker_out = v;
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
    absl::Status st = RunCollectivesWorker(worker_out, o.seconds_per_point, before_mpi);
    if (!st.ok())
      std::fprintf(stderr, "tessera-plan calibrate: %s\n", std::string(st.message()).c_str());
    (void)MpiFinalize();
    return st.ok() ? 0 : 1;
  }
  if (out.empty()) return Usage("--out is required");
  if (!have_configs) o.configs = DefaultConfigs();
  o.worker_argv = {SelfPath(), "calibrate", "--collectives_worker"};
  if (o.seconds_per_point != CalibrateOptions().seconds_per_point) {
    o.worker_argv.insert(o.worker_argv.begin() + 2,
                         absl::StrCat("--seconds_per_point=", o.seconds_per_point));
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
  return 0;
}

}  // namespace tessera
