#include "trainer/machine_fingerprint.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/cuda_info.h"
#include "dense/library_versions.h"

namespace tessera {

namespace {

int64_t CacheBytes(int level) {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = absl::StrCat("/sys/devices/system/cpu/cpu0/cache/index", i, "/");
    std::ifstream lv(dir + "level"), ty(dir + "type"), sz(dir + "size");
    int l = 0;
    std::string type, size;
    if (!(lv >> l) || !(ty >> type) || !(sz >> size) || l != level || type == "Instruction") {
      continue;
    }
    int64_t mult = 1;
    if (!size.empty() && size.back() == 'K') mult = 1024;
    if (!size.empty() && size.back() == 'M') mult = int64_t{1} << 20;
    if (mult > 1) size.pop_back();
    return std::atoll(size.c_str()) * mult;
  }
  return 0;
}

int64_t MemTotalBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024;
  }
  return 0;
}

}  // namespace

std::string ProcFileValue(const std::string& path, const std::string& key) {
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

planner::MachineFingerprint ThisMachineFingerprint() {
  planner::MachineFingerprint f;
  f.present = true;
  f.cpu_model = ProcFileValue("/proc/cpuinfo", "model name");
  std::set<std::string> flags;
  {
    std::istringstream in(ProcFileValue("/proc/cpuinfo", "flags"));
    std::string w;
    while (in >> w) flags.insert(w);
  }
  for (const char* isa : {"amx_bf16", "amx_tile", "avx2", "avx512_bf16", "avx512f"}) {
    if (flags.count(isa)) f.isa.push_back(isa);
  }
  f.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  f.l2_bytes = CacheBytes(2);
  f.l3_bytes = CacheBytes(3);
  f.memory_bytes = MemTotalBytes();
  if (const int gpus = CudaDeviceCount(); gpus > 0) {
    f.gpu = absl::StrCat(CudaDeviceName(), " x", gpus);
    f.gpu_driver = CudaDriverVersion();
  }
  f.cuda_runtime = CudaRuntimeVersion();
  f.blas = BlasLibraryVersion();
  f.onednn = OneDnnLibraryVersion();
  return f;
}

}  // namespace tessera
