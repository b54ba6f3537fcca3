// PeerWatchdog (see peer_watchdog.h): UDP heartbeats between ranks, a thread that watches the
// calling thread's collective waits, and the abort that names the lost ranks.
#include "sharding/peer_watchdog.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/logging.h"
#include "core/status.h"
#include "sharding/mpi_communicator.h"

namespace tessera {
namespace {

constexpr uint32_t kMagic = 0x54534842;  // "TSHB"
constexpr int kMaxAddrs = 8;
constexpr int kHostLen = 64;
constexpr int kWhatLen = 24;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What the calling (MPI) thread is waiting in, shared with the watchdog thread.
struct WaitState {
  std::mutex mu;
  int depth = 0;
  int64_t since_ns = 0;
  const char* what = "";
  const std::vector<int>* members = nullptr;
};
WaitState& Wait() {
  static WaitState* s = new WaitState;  // never destroyed: used until the process ends
  return *s;
}

// One rank's announcement, all-gathered at Start (fixed size, plain bytes).
struct Record {
  uint32_t pid = 0;
  uint16_t port = 0;  // 0: this rank has no heartbeat socket
  uint16_t naddr = 0;
  uint32_t addr[kMaxAddrs] = {};  // IPv4, network order
  char host[kHostLen] = {};
};

struct Beat {
  uint32_t magic = kMagic;
  uint32_t rank = 0;
  uint64_t nonce = 0;
  uint32_t leaving = 0;
  int32_t waiting_ms = -1;  // how long the sender has been waiting in a collective; -1: not
  char what[kWhatLen] = {};
};

std::string Addr(uint32_t a) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr in{};
  in.s_addr = a;
  inet_ntop(AF_INET, &in, buf, sizeof(buf));
  return buf;
}

// Whether address `a` (network order) on interface `name` is one `networks` names: a
// comma-separated list of CIDRs ("198.18.0.0/24") and interface names ("eth1"), as Open MPI's
// btl_tcp_if_include; an empty list names every interface.
bool OnNetworks(const std::string& networks, const char* name, uint32_t a) {
  if (networks.empty()) return true;
  for (absl::string_view item : absl::StrSplit(networks, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t slash = item.find('/');
    if (slash == absl::string_view::npos) {
      if (item == name) return true;
      continue;
    }
    in_addr net{};
    int bits = 0;
    if (inet_pton(AF_INET, std::string(item.substr(0, slash)).c_str(), &net) != 1 ||
        !absl::SimpleAtoi(item.substr(slash + 1), &bits) || bits < 0 || bits > 32) {
      continue;
    }
    const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
    if ((ntohl(a) & mask) == (ntohl(net.s_addr) & mask)) return true;
  }
  return false;
}

// This host's IPv4 addresses on `networks`: every interface that is up, loopback only when
// there is no other.
std::vector<uint32_t> LocalAddrs(const std::string& networks) {
  std::vector<uint32_t> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr && out.size() < kMaxAddrs; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
      const uint32_t a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      if (OnNetworks(networks, i->ifa_name, a)) out.push_back(a);
    }
    freeifaddrs(list);
  }
  if (out.empty()) out.push_back(htonl(INADDR_LOOPBACK));
  return out;
}

// "NAME ADDRESS": a rank's host as loss reports name it.
std::string HostOf(const Record& r) {
  return absl::StrCat(r.host, " ", r.naddr > 0 ? Addr(r.addr[0]) : "");
}

// Ends the job: prints the message, then MpiAbort(kLostPeerExitCode) with std::_Exit as the
// fallback 10 s later (MPI_Abort needs the launcher; when this host is the one cut off it may
// never return). With options.abort set (tests), hands it the message instead and returns.
void EndJob(const PeerWatchdogOptions& o, const std::string& message) {
  std::fprintf(stderr, "tessera: %s\n", message.c_str());
  std::fflush(stderr);
  if (o.abort) {
    o.abort(kLostPeerExitCode, message);
    return;
  }
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(kLostPeerExitCode);
  }).detach();
  MpiAbort(kLostPeerExitCode);
}

class Watchdog {
 public:
  Watchdog(const PeerWatchdogOptions& o, int rank, std::vector<Record> peers, uint64_t nonce,
           int fd)
      : o_(o),
        rank_(rank),
        peers_(std::move(peers)),
        nonce_(nonce),
        fd_(fd),
        heard_ns_(peers_.size(), 0),
        left_(peers_.size(), false),
        waiting_ms_(peers_.size(), -1),
        what_(peers_.size()) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Watchdog() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }

 private:
  void Loop() {
    const int64_t start = NowNs();
    const int64_t interval = static_cast<int64_t>(o_.heartbeat_interval_s * 1e9);
    int64_t next_send = start;
    bool warned = false;
    while (!stop_.load()) {
      int64_t now = NowNs();
      if (now >= next_send) {
        SendAll(false);
        next_send = now + interval;
      }
      pollfd p{fd_, POLLIN, 0};
      const int64_t ms = std::clamp<int64_t>((next_send - now) / 1000000, 1, 200);
      if (fd_ >= 0) {
        poll(&p, 1, static_cast<int>(ms));
        Receive();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      }
      now = NowNs();
      if (!warned && rank_ == 0 && now - start > 10'000'000'000) {
        warned = true;
        WarnUnheard();
      }
      if (!stop_.load() && !ended_) Check(now);
    }
    SendAll(true);
  }

  void SendAll(bool leaving) {
    if (fd_ < 0) return;
    Beat b;
    b.rank = static_cast<uint32_t>(rank_);
    b.nonce = nonce_;
    b.leaving = leaving ? 1 : 0;
    {
      WaitState& w = Wait();
      std::lock_guard<std::mutex> lock(w.mu);
      if (w.depth > 0) {
        b.waiting_ms =
            static_cast<int32_t>(std::min<int64_t>((NowNs() - w.since_ns) / 1000000, INT32_MAX));
        std::snprintf(b.what, sizeof(b.what), "%s", w.what);
      }
    }
    for (size_t r = 0; r < peers_.size(); ++r) {
      if (static_cast<int>(r) == rank_ || peers_[r].port == 0) continue;
      for (int a = 0; a < peers_[r].naddr; ++a) {
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_port = htons(peers_[r].port);
        to.sin_addr.s_addr = peers_[r].addr[a];
        // Errors (an unreachable network while a link is down) are what the watchdog watches for.
        (void)sendto(fd_, &b, sizeof(b), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to),
                     sizeof(to));
      }
    }
  }

  void Receive() {
    Beat b;
    while (true) {
      ssize_t n = recv(fd_, &b, sizeof(b), MSG_DONTWAIT);
      if (n < 0) return;
      if (n != static_cast<ssize_t>(sizeof(b)) || b.magic != kMagic || b.nonce != nonce_ ||
          b.rank >= peers_.size()) {
        continue;
      }
      const int r = static_cast<int>(b.rank);
      if (left_[r]) continue;  // a late datagram from before it left
      heard_ns_[r] = NowNs();
      left_[r] = b.leaving != 0;
      waiting_ms_[r] = b.waiting_ms;
      b.what[kWhatLen - 1] = 0;
      what_[r] = b.what;
    }
  }

  std::string Describe(int r) const {
    return absl::StrCat("rank ", r, " (host ", HostOf(peers_[r]), ", pid ", peers_[r].pid, ")");
  }

  void WarnUnheard() {
    std::vector<std::string> names;
    for (size_t r = 0; r < peers_.size(); ++r) {
      if (static_cast<int>(r) != rank_ && heard_ns_[r] == 0) names.push_back(Describe(r));
    }
    if (names.empty()) return;
    std::fprintf(stderr,
                 "tessera: [rank %d] warning: no heartbeat from %s after 10 s (UDP between the "
                 "hosts blocked?): a lost host is not detected for them (sharding.peer_timeout_s, "
                 "docs/CLUSTER.md)\n",
                 rank_, absl::StrJoin(names, ", ").c_str());
    std::fflush(stderr);
  }

  // When every other rank of the world is alive (heard within the last few heartbeats) and has
  // been waiting in a collective for stall_timeout_s: what each waits in ("ranks 1,3 in
  // AllGatherV; rank 2 in Broadcast"); else "". A rank never heard from, or one that left, is
  // not known to wait: no stall.
  std::string Stalled(int64_t now) const {
    const double alive_s = std::max(3 * o_.heartbeat_interval_s, 1.0);
    std::vector<std::pair<std::string, std::vector<int>>> by_what;
    for (size_t r = 0; r < peers_.size(); ++r) {
      if (static_cast<int>(r) == rank_) continue;
      if (heard_ns_[r] == 0 || left_[r] || waiting_ms_[r] < 0) return "";
      const double silent = (now - heard_ns_[r]) / 1e9;
      if (silent > alive_s || waiting_ms_[r] / 1e3 + silent < o_.stall_timeout_s) return "";
      auto it = std::find_if(by_what.begin(), by_what.end(),
                             [&](const auto& x) { return x.first == what_[r]; });
      if (it == by_what.end()) it = by_what.insert(by_what.end(), {what_[r], {}});
      it->second.push_back(static_cast<int>(r));
    }
    std::vector<std::string> parts;
    for (const auto& [w, ranks] : by_what) {
      parts.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                                   absl::StrJoin(ranks, ","), " in ", w));
    }
    return absl::StrJoin(parts, "; ");
  }

  void Check(int64_t now) {
    std::vector<int> members;
    int64_t since = 0;
    std::string what;
    {
      WaitState& w = Wait();
      std::lock_guard<std::mutex> lock(w.mu);
      if (w.depth == 0 || w.members == nullptr) return;
      members = *w.members;
      since = w.since_ns;
      what = w.what;
    }
    const double waited = (now - since) / 1e9;
    if (waited < 2 * o_.heartbeat_interval_s) return;
    std::vector<std::string> lost;
    if (o_.peer_timeout_s > 0) {
      for (int m : members) {
        if (m == rank_ || m < 0 || m >= static_cast<int>(peers_.size()) || heard_ns_[m] == 0)
          continue;
        const double silent = (now - heard_ns_[m]) / 1e9;
        if (silent < o_.peer_timeout_s) continue;
        lost.push_back(absl::StrCat(
            Describe(m),
            left_[m] ? absl::StrFormat(": left the job (finished or stopped) %.0f s ago", silent)
                     : absl::StrFormat(": no heartbeat for %.0f s", silent)));
      }
    }
    if (!lost.empty()) {
      const Record& me = peers_[rank_];
      Abort(absl::StrFormat(
          "[rank %d] lost %s; this rank (host %s, pid %d) has waited %.1f s in %s over world "
          "ranks [%s]: the host, its link or the process is gone. Ending the job "
          "(sharding.peer_timeout_s = %g; rerun the same command to resume from the last "
          "checkpoint)",
          rank_, absl::StrJoin(lost, "; "), HostOf(me), me.pid, waited, what,
          absl::StrJoin(members, ","), o_.peer_timeout_s));
      return;
    }
    if (o_.stall_timeout_s > 0 && waited >= o_.stall_timeout_s) {
      const std::string stalled = Stalled(now);
      if (!stalled.empty()) {
        Abort(absl::StrFormat(
            "[rank %d] has waited %.1f s in %s over world ranks [%s], and every other rank is "
            "alive and has waited as long (%s): nothing is computing, so what they wait for is "
            "a transfer the transport does not deliver (a connection between the ranks that "
            "failed: the transport's own messages above say which). Ending the job "
            "(sharding.stall_timeout_s = %g; rerun the same command to resume from the last "
            "checkpoint)",
            rank_, waited, what, absl::StrJoin(members, ","), stalled, o_.stall_timeout_s));
        return;
      }
    }
    if (o_.collective_timeout_s > 0 && waited >= o_.collective_timeout_s) {
      std::vector<std::string> late;
      for (int m : members) {
        if (m == rank_ || m < 0 || m >= static_cast<int>(peers_.size())) continue;
        if (waiting_ms_[m] < 0) {
          late.push_back(absl::StrCat(Describe(m), ": not in a collective"));
        } else if (what_[m] != what) {
          late.push_back(absl::StrCat(Describe(m), ": waits in ", what_[m]));
        }
      }
      Abort(absl::StrFormat(
          "[rank %d] has waited %.1f s in %s over world ranks [%s]%s. Ending the job "
          "(sharding.collective_timeout_s = %g)",
          rank_, waited, what, absl::StrJoin(members, ","),
          late.empty() ? std::string(" (every member alive and waiting)")
                       : absl::StrCat(", for ", absl::StrJoin(late, "; ")),
          o_.collective_timeout_s));
    }
  }

  // Ends the job (the default), or hands the message to options.abort and stops watching (the
  // heartbeats go on until StopPeerWatchdog, as the process would when the job ends).
  void Abort(const std::string& message) {
    EndJob(o_, message);
    if (o_.abort) ended_ = true;
  }

  const PeerWatchdogOptions o_;
  const int rank_;
  const std::vector<Record> peers_;
  const uint64_t nonce_;
  const int fd_;
  // Written and read by the watchdog thread only.
  std::vector<int64_t> heard_ns_;
  std::vector<bool> left_;
  std::vector<int32_t> waiting_ms_;
  std::vector<std::string> what_;
  bool ended_ = false;  // the job was ended through options.abort: no more checks
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::mutex g_mu;
std::unique_ptr<Watchdog>& Instance() {
  static auto* w = new std::unique_ptr<Watchdog>;
  return *w;
}

}  // namespace

absl::Status StartPeerWatchdog(Communicator& world, const PeerWatchdogOptions& o) {
  auto bad = [](double v) { return !std::isfinite(v) || v < 0; };
  if (bad(o.peer_timeout_s) || bad(o.collective_timeout_s) || bad(o.stall_timeout_s) ||
      bad(o.heartbeat_interval_s) || o.heartbeat_interval_s == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "StartPeerWatchdog: peer_timeout_s %g, collective_timeout_s %g, stall_timeout_s %g must "
        "be >= 0 and heartbeat_interval_s %g > 0",
        o.peer_timeout_s, o.collective_timeout_s, o.stall_timeout_s, o.heartbeat_interval_s));
  }
  if (world.size() == 1 ||
      (o.peer_timeout_s == 0 && o.collective_timeout_s == 0 && o.stall_timeout_s == 0)) {
    return absl::OkStatus();
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (Instance() != nullptr) {
      return absl::FailedPreconditionError("StartPeerWatchdog: a watchdog is already running");
    }
  }
  Record mine;
  mine.pid = static_cast<uint32_t>(getpid());
  gethostname(mine.host, kHostLen - 1);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof(any);
    if (bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&any), &len) != 0) {
      close(fd);
      fd = -1;
    } else {
      mine.port = ntohs(any.sin_port);
    }
  }
  if (fd < 0) {
    std::fprintf(stderr,
                 "tessera: [rank %d] warning: no UDP socket for heartbeats (%s): a lost host is "
                 "not detected for this rank\n",
                 world.rank(), std::strerror(errno));
  }
  std::string networks = o.networks;
  if (networks.empty()) {
    if (const char* v = std::getenv("OMPI_MCA_btl_tcp_if_include")) networks = v;
  }
  const std::vector<uint32_t> addrs = LocalAddrs(networks);
  mine.naddr = static_cast<uint16_t>(addrs.size());
  std::copy(addrs.begin(), addrs.end(), mine.addr);

  const int p = world.size();
  std::vector<Record> all(p);
  std::vector<int64_t> bytes(p, sizeof(Record)), displs(p);
  for (int r = 0; r < p; ++r) displs[r] = r * static_cast<int64_t>(sizeof(Record));
  absl::Status st = world.AllGatherV(&mine, sizeof(Record), all.data(), bytes, displs);
  uint64_t nonce = 0;
  if (st.ok()) {
    if (world.rank() == 0) {
      std::random_device rd;
      nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(NowNs());
    }
    st = world.Broadcast(&nonce, sizeof(nonce), 0);
  }
  if (!st.ok()) {
    if (fd >= 0) close(fd);
    return st;
  }
  for (Record& r : all) r.host[kHostLen - 1] = 0;
  if (world.rank() == 0) {  // which ranks are where, for reading a later loss report
    std::vector<std::pair<std::string, std::vector<int>>> hosts;  // in order of first rank
    for (int r = 0; r < p; ++r) {
      const std::string h = HostOf(all[r]);
      auto it =
          std::find_if(hosts.begin(), hosts.end(), [&](const auto& x) { return x.first == h; });
      if (it == hosts.end()) {
        hosts.push_back({h, {r}});
      } else {
        it->second.push_back(r);
      }
    }
    std::vector<std::string> parts;
    for (const auto& [h, ranks] : hosts) {
      parts.push_back(absl::StrCat(h, ": ranks ", absl::StrJoin(ranks, ",")));
    }
    TESSERA_LOG(INFO) << "hosts: " << absl::StrJoin(parts, "; ")
                      << " (peer watchdog: " << o.peer_timeout_s << " s)";
  }
  std::lock_guard<std::mutex> lock(g_mu);
  Instance() = std::make_unique<Watchdog>(o, world.rank(), std::move(all), nonce, fd);
  return absl::OkStatus();
}

void StopPeerWatchdog() {
  std::unique_ptr<Watchdog> w;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    w = std::move(Instance());
  }
  w.reset();  // joins the thread, which says it is leaving
}

bool PeerWatchdogRunning() {
  std::lock_guard<std::mutex> lock(g_mu);
  return Instance() != nullptr;
}

StartupDeadline::StartupDeadline(const PeerWatchdogOptions& o, int rank, std::string what) {
  if (o.stall_timeout_s <= 0) return;
  thread_ = std::thread([this, o, rank, what = std::move(what)] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(o.stall_timeout_s),
                     [this] { return done_; })) {
      return;
    }
    lock.unlock();
    EndJob(o, absl::StrFormat(
                  "[rank %d] the ranks' first exchange (%s) has not completed after %g s: a "
                  "rank did not start, or the transport between the ranks did not connect (its "
                  "own messages above say which, if any). Ending the job "
                  "(sharding.stall_timeout_s = %g; rerun the same command to resume from the "
                  "last checkpoint)",
                  rank, what, o.stall_timeout_s, o.stall_timeout_s));
  });
}

StartupDeadline::~StartupDeadline() { Done(); }

void StartupDeadline::Done() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CollectiveWait::CollectiveWait(const char* what, const std::vector<int>& members) {
  WaitState& w = Wait();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.depth++ == 0) {
    w.since_ns = NowNs();
    w.what = what;
    w.members = &members;
  }
}

CollectiveWait::~CollectiveWait() {
  WaitState& w = Wait();
  std::lock_guard<std::mutex> lock(w.mu);
  if (--w.depth == 0) {
    w.members = nullptr;
    w.what = "";
  }
}

}  // namespace tessera
