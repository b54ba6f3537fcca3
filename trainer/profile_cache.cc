#include "trainer/profile_cache.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/timer.h"
#include "trainer/machine_fingerprint.h"

extern char** environ;

namespace tessera {

namespace {

// The calibrate child must not see the launcher's variables of the job this process is a rank of
// (Open MPI / PMIx / PRRTE; OMPI_ALLOW_RUN_AS_ROOT* kept): its own mpirun would take itself
// for part of that job.
std::vector<std::string> ChildEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string v = *e;
    const bool launcher = absl::StartsWith(v, "OMPI_") || absl::StartsWith(v, "PMIX_") ||
                          absl::StartsWith(v, "PRTE_") || absl::StartsWith(v, "OPAL_");
    if (launcher && !absl::StartsWith(v, "OMPI_ALLOW_RUN_AS_ROOT")) continue;
    env.push_back(v);
  }
  return env;
}

// Runs argv with the cleaned environment; its exit status (or -1).
int Run(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env = ChildEnvironment();
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), envp.data()) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string SelfDir() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

}  // namespace

std::string ProfileCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] == '/') {
    return absl::StrCat(x, "/tessera");
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr && home[0] != '\0' ? home : "/tmp", "/.cache/tessera");
}

std::string ThisMachineProfileCachePath() {
  return absl::StrCat(ProfileCacheDir(), "/profile-",
                      planner::FingerprintKey(ThisMachineFingerprint()), ".yaml");
}

void CheckFingerprint(ResolvedProfile* p) {
  p->fingerprinted = p->profile.fingerprint.present;
  p->differences = planner::FingerprintDifferences(ThisMachineFingerprint(), p->profile.fingerprint);
}

std::string ProfileProvenance(const ResolvedProfile& p) {
  if (!p.fingerprinted) {
    return absl::StrCat("profile ", p.origin,
                        " (no machine fingerprint: a profile of another cluster or from before "
                        "fingerprints; `sharding.profile: auto` measures this machine)");
  }
  if (p.differences.empty()) return absl::StrCat("profile ", p.origin, " (this machine's)");
  return absl::StrCat("profile ", p.origin, " was measured on another machine: ",
                      absl::StrJoin(p.differences, "; "),
                      " (`sharding.profile: auto` measures this one)");
}

absl::StatusOr<ResolvedProfile> AutoProfile(const std::string& config_path) {
  const std::string path = ThisMachineProfileCachePath();
  ResolvedProfile r;
  if (std::filesystem::exists(path)) {
    absl::StatusOr<planner::MachineProfile> cached = planner::LoadMachineProfile(path);
    if (cached.ok()) {
      r.profile = *std::move(cached);
      r.origin = absl::StrCat("cached ", path);
      CheckFingerprint(&r);
      if (r.fingerprinted && r.differences.empty()) return r;
    }
    std::fprintf(stderr, "sharding.profile: auto: %s is not this machine's profile (%s); "
                         "calibrating again\n",
                 path.c_str(),
                 cached.ok() ? absl::StrJoin(r.differences, "; ").c_str()
                             : std::string(cached.status().message()).c_str());
  }
  const std::string plan = SelfDir() + "/tessera-plan";
  if (access(plan.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "auto: no profile of this machine in ", ProfileCacheDir(), " and no ", plan,
        " to calibrate one with; run `tessera-plan calibrate --cache` or name a profile"));
  }
  std::error_code ec;
  std::filesystem::create_directories(ProfileCacheDir(), ec);
  const std::string tmp = absl::StrCat(path, ".", getpid(), ".tmp");
  std::vector<std::string> argv = {plan,    "calibrate", "--quick", "--quiet", "--out",
                                   tmp,     "--scratch",
                                   absl::StrCat(ProfileCacheDir(), "/scratch-", getpid())};
  if (!config_path.empty()) {
    argv.push_back("--config");
    argv.push_back(config_path);
  }
  if (const char* extra = std::getenv("TESSERA_AUTO_CALIBRATE_FLAGS")) {
    for (absl::string_view w : absl::StrSplit(extra, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
      argv.emplace_back(w);
    }
  }
  const planner::MachineFingerprint here = ThisMachineFingerprint();
  std::fprintf(stderr,
               "sharding.profile: auto: no profile of this machine (%s, %d cores) cached; "
               "calibrating once (`%s`, about a minute) into %s\n",
               here.cpu_model.c_str(), here.cores, absl::StrJoin(argv, " ").c_str(),
               path.c_str());
  Stopwatch watch;
  const int rc = Run(argv);
  if (rc != 0 && rc != 3) {  // 3: keys flagged (the profile is written and marks them)
    std::filesystem::remove(tmp, ec);
    return absl::InternalError(
        absl::StrCat("auto: calibrating this machine failed (exit status ", rc, "): ",
                     absl::StrJoin(argv, " ")));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("auto: cannot write ", path, ": ", ec.message()));
  }
  absl::StatusOr<planner::MachineProfile> fresh = planner::LoadMachineProfile(path);
  if (!fresh.ok()) return fresh.status();
  r.profile = *std::move(fresh);
  r.origin = absl::StrCat("calibrated into ", path);
  CheckFingerprint(&r);
  std::fprintf(stderr, "sharding.profile: auto: calibrated in %.0f s%s\n", watch.ElapsedSeconds(),
               r.profile.calibration.flagged.empty()
                   ? ""
                   : absl::StrCat("; ", r.profile.calibration.flagged.size(),
                                  " key(s) stayed noisy (calibration.flagged)")
                         .c_str());
  return r;
}

}  // namespace tessera
