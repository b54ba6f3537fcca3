// PeerWatchdog under 4 ranks (sharding/peer_watchdog.h): a slow but live rank does not trip the
// others, a rank that left is named by every rank that waits on it (and only by those), the
// collective timeout names the ranks that are not waiting, bad options are refused. The abort is
// replaced by a hook that records the message; the end-to-end abort of a real job (a cut link,
// a killed host) is tests/distributed/lost_host_check.sh.
#include "sharding/peer_watchdog.h"

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"

namespace tessera {
namespace {

using ::tessera::testing::World;
using ::testing::HasSubstr;
using ::testing::Not;

struct Recorder {
  std::mutex mu;
  std::vector<std::string> messages;
  int code = 0;
};

PeerWatchdogOptions Fast(Recorder* rec, double peer_timeout, double collective_timeout = 0,
                         double stall_timeout = 0) {
  PeerWatchdogOptions o;
  o.peer_timeout_s = peer_timeout;
  o.collective_timeout_s = collective_timeout;
  o.stall_timeout_s = stall_timeout;
  o.heartbeat_interval_s = 0.1;
  o.abort = [rec](int code, const std::string& m) {
    std::lock_guard<std::mutex> lock(rec->mu);
    rec->messages.push_back(m);
    rec->code = code;
  };
  return o;
}

void Sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

std::vector<std::string> Messages(Recorder& rec) {
  std::lock_guard<std::mutex> lock(rec.mu);
  return rec.messages;
}

TEST(PeerWatchdogTest, RefusesBadOptions) {
  PeerWatchdogOptions o;
  o.peer_timeout_s = -1;
  EXPECT_EQ(StartPeerWatchdog(*World(), o).code(), absl::StatusCode::kInvalidArgument);
  o.peer_timeout_s = 30;
  o.heartbeat_interval_s = 0;
  EXPECT_EQ(StartPeerWatchdog(*World(), o).code(), absl::StatusCode::kInvalidArgument);
  o = PeerWatchdogOptions();
  o.stall_timeout_s = -1;
  EXPECT_EQ(StartPeerWatchdog(*World(), o).code(), absl::StatusCode::kInvalidArgument);
  o = PeerWatchdogOptions();
  o.peer_timeout_s = 0;  // every timeout off: nothing runs
  o.stall_timeout_s = 0;
  ASSERT_TRUE(StartPeerWatchdog(*World(), o).ok());
  EXPECT_FALSE(PeerWatchdogRunning());
  auto one = CreateSingleProcessCommunicator();
  ASSERT_TRUE(StartPeerWatchdog(*one, PeerWatchdogOptions()).ok());
  EXPECT_FALSE(PeerWatchdogRunning());
}

TEST(PeerWatchdogTest, SlowLiveRankDoesNotTrip) {
  Recorder rec;
  // Neither the peer timeout nor the stall timeout: the waiting ranks wait on one that computes.
  ASSERT_TRUE(StartPeerWatchdog(*World(), Fast(&rec, 0.6, 0, 0.6)).ok());
  EXPECT_TRUE(PeerWatchdogRunning());
  EXPECT_EQ(StartPeerWatchdog(*World(), Fast(&rec, 0.6)).code(),
            absl::StatusCode::kFailedPrecondition);
  // Rank 1 computes for 5 peer timeouts; the others wait for it in a real barrier.
  if (World()->rank() == 1) Sleep(3.0);
  ASSERT_TRUE(World()->Barrier().ok());
  ASSERT_TRUE(World()->Barrier().ok());
  StopPeerWatchdog();
  EXPECT_FALSE(PeerWatchdogRunning());
  EXPECT_THAT(Messages(rec), ::testing::IsEmpty());
}

TEST(PeerWatchdogTest, LeftRankIsNamedByThoseWaitingOnIt) {
  Recorder rec;
  ASSERT_TRUE(StartPeerWatchdog(*World(), Fast(&rec, 0.8)).ok());
  Sleep(0.5);  // everyone heard from everyone
  ASSERT_TRUE(World()->Barrier().ok());
  const int me = World()->rank();
  if (me == 3) {
    StopPeerWatchdog();  // rank 3 leaves: its heartbeats stop
    Sleep(3.0);
  } else {
    // A wait that does not involve rank 3 is not disturbed...
    static const std::vector<int> others = {0, 1, 2};
    {
      CollectiveWait w("Test", others);
      Sleep(1.5);
    }
    EXPECT_THAT(Messages(rec), ::testing::IsEmpty());
    // ...one that does is ended, naming rank 3, within its timeout (plus a heartbeat).
    static const std::vector<int> all = {0, 1, 2, 3};
    CollectiveWait w("AllReduce", all);
    Sleep(1.5);
  }
  ASSERT_TRUE(World()->Barrier().ok());
  StopPeerWatchdog();
  if (me != 3) {
    std::vector<std::string> m = Messages(rec);
    ASSERT_EQ(m.size(), 1u);
    EXPECT_THAT(m[0], HasSubstr("lost rank 3 (host "));
    EXPECT_THAT(m[0], HasSubstr("left the job"));
    EXPECT_THAT(m[0], HasSubstr("in AllReduce over world ranks [0,1,2,3]"));
    EXPECT_THAT(m[0], Not(HasSubstr("lost rank 0")));
    EXPECT_EQ(rec.code, kLostPeerExitCode);
  }
}

TEST(PeerWatchdogTest, CollectiveTimeoutNamesRanksNotWaiting) {
  Recorder rec;
  ASSERT_TRUE(StartPeerWatchdog(*World(), Fast(&rec, 0, 1.0)).ok());
  Sleep(0.3);
  ASSERT_TRUE(World()->Barrier().ok());
  const int me = World()->rank();
  static const std::vector<int> all = {0, 1, 2, 3};
  if (me == 0) {
    CollectiveWait w("Broadcast", all);
    Sleep(2.0);
  } else if (me == 1) {
    CollectiveWait w("AllGatherV", all);  // "waiting" in another collective
    Sleep(2.0);
  } else {
    Sleep(2.0);
  }
  ASSERT_TRUE(World()->Barrier().ok());
  StopPeerWatchdog();
  std::vector<std::string> m = Messages(rec);
  if (me == 0) {
    ASSERT_EQ(m.size(), 1u);
    EXPECT_THAT(m[0], HasSubstr("has waited"));
    EXPECT_THAT(m[0], HasSubstr("in Broadcast"));
    EXPECT_THAT(m[0], HasSubstr("rank 1 (host"));
    EXPECT_THAT(m[0], HasSubstr("waits in AllGatherV"));
    EXPECT_THAT(m[0], HasSubstr("rank 2 (host"));
    EXPECT_THAT(m[0], HasSubstr("not in a collective"));
  } else if (me == 1) {
    ASSERT_EQ(m.size(), 1u);  // rank 1 waited as long: it names rank 0 as in another collective
    EXPECT_THAT(m[0], HasSubstr("waits in Broadcast"));
  } else {
    EXPECT_THAT(m, ::testing::IsEmpty());
  }
}

// Every rank waiting (in different collectives: a broadcast some ranks finished) for the stall
// timeout is a stall, named by each rank with what every rank waits in; three waiting on a
// fourth that computes is not.
TEST(PeerWatchdogTest, StallEndsAJobWhereEveryRankWaits) {
  Recorder rec;
  ASSERT_TRUE(StartPeerWatchdog(*World(), Fast(&rec, 30, 0, 1.0)).ok());
  Sleep(0.3);
  ASSERT_TRUE(World()->Barrier().ok());
  const int me = World()->rank();
  static const std::vector<int> all = {0, 1, 2, 3};
  if (me != 3) {
    CollectiveWait w("AllToAllV", all);
    Sleep(2.0);
  } else {
    Sleep(2.0);
  }
  ASSERT_TRUE(World()->Barrier().ok());
  EXPECT_THAT(Messages(rec), ::testing::IsEmpty());
  {
    CollectiveWait w(me == 2 ? "Broadcast" : "AllGatherV", all);
    Sleep(2.5);
  }
  ASSERT_TRUE(World()->Barrier().ok());
  StopPeerWatchdog();
  std::vector<std::string> m = Messages(rec);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_THAT(m[0], HasSubstr("every other rank is alive and has waited as long"));
  EXPECT_THAT(m[0], HasSubstr(me == 2 ? "in Broadcast" : "in AllGatherV"));
  if (me != 2) {
    EXPECT_THAT(m[0], HasSubstr("rank 2 in Broadcast"));
  }
  EXPECT_THAT(m[0], HasSubstr("sharding.stall_timeout_s = 1"));
  EXPECT_EQ(rec.code, kLostPeerExitCode);
}

// The stretch before any heartbeat (the world's first collectives) is bounded by a
// StartupDeadline: a rank that arrives after the stall timeout is reported by the ranks that
// waited for it (the hook gets the message; the barrier then completes); Done() in time is quiet.
TEST(PeerWatchdogTest, StartupDeadlineBoundsTheFirstCollectives) {
  Recorder rec;
  const PeerWatchdogOptions o = Fast(&rec, 30, 0, 0.8);
  const int me = World()->rank();
  {
    StartupDeadline d(o, me, "a test barrier");
    ASSERT_TRUE(World()->Barrier().ok());
  }
  EXPECT_THAT(Messages(rec), ::testing::IsEmpty());
  if (me == 3) Sleep(2.0);
  {
    StartupDeadline d(o, me, "a test barrier");
    ASSERT_TRUE(World()->Barrier().ok());
    d.Done();
  }
  std::vector<std::string> m = Messages(rec);
  if (me != 3) {
    ASSERT_EQ(m.size(), 1u);
    EXPECT_THAT(m[0], HasSubstr("the ranks' first exchange (a test barrier)"));
    EXPECT_THAT(m[0], HasSubstr("has not completed after 0.8 s"));
    EXPECT_EQ(rec.code, kLostPeerExitCode);
  } else {
    EXPECT_THAT(m, ::testing::IsEmpty());
  }
}

}  // namespace
}  // namespace tessera
