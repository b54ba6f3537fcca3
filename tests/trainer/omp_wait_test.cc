// tools/omp_wait.h: how the binaries' OpenMP pool waits between parallel regions (spin when the
// job's threads own idle cores, else sleep), the threads a rank plans, and core/parallel.h's
// thresholds scaled to the choice.
#include "tools/omp_wait.h"

#include <cstdlib>
#include <string>

#include "core/parallel.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(OmpWaitTest, SpinsOnlyWhenTheThreadsOwnIdleCores) {
  // 1 rank x 2 threads on 2 idle cores: spin.
  EXPECT_TRUE(DecideOmpWait(1, 2, 2, 0.02, 2).spin);
  // Another process keeps half a core busy (bench/busy_core.sh): sleep.
  OmpWaitDecision busy = DecideOmpWait(1, 2, 2, 0.5, 2);
  EXPECT_FALSE(busy.spin);
  EXPECT_NE(busy.why.find("other processes 0.50 of 2 cores"), std::string::npos) << busy.why;
  // A busy core does not matter where the job leaves cores free.
  EXPECT_TRUE(DecideOmpWait(1, 2, 64, 10.0, 64).spin);
  // One thread has no pool to wait; more threads than the mask allows oversubscribe.
  EXPECT_FALSE(DecideOmpWait(1, 1, 2, 0.0, 2).spin);
  EXPECT_FALSE(DecideOmpWait(2, 2, 2, 0.0, 2).spin);
  EXPECT_NE(DecideOmpWait(2, 2, 2, 0.0, 2).why.find("2 rank(s) x 2 threads > 2 CPUs"),
            std::string::npos);
  EXPECT_FALSE(DecideOmpWait(1, 2, 2, -1, 2).spin);  // /proc/stat unreadable
}

TEST(OmpWaitTest, PlannedThreadsFromFlagThenEnvironment) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("MPI_LOCALNRANKS");
  unsetenv("SLURM_TASKS_PER_NODE");
  setenv("OMP_NUM_THREADS", "3", 1);
  char a0[] = "bin", a1[] = "--threads", a2[] = "5", a3[] = "--threads=7", a4[] = "--steps";
  char* with_flag[] = {a0, a4, a2, a1, a2, nullptr};
  EXPECT_EQ(PlannedThreadsPerRank(with_flag), 5);
  char* with_eq[] = {a0, a3, nullptr};
  EXPECT_EQ(PlannedThreadsPerRank(with_eq), 7);
  char* none[] = {a0, a4, a2, nullptr};
  EXPECT_EQ(PlannedThreadsPerRank(none), 3);
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(PlannedThreadsPerRank(none), AvailableCpus());
}

TEST(OmpWaitTest, PoolSpinsAsLibgompReadsIt) {
  unsetenv("GOMP_SPINCOUNT");
  unsetenv("OMP_WAIT_POLICY");
  EXPECT_TRUE(OmpPoolSpins());  // libgomp's default spins
  setenv("OMP_WAIT_POLICY", "passive", 1);
  EXPECT_FALSE(OmpPoolSpins());
  setenv("GOMP_SPINCOUNT", "100000", 1);
  EXPECT_TRUE(OmpPoolSpins());
  setenv("GOMP_SPINCOUNT", "0", 1);
  EXPECT_FALSE(OmpPoolSpins());
  unsetenv("GOMP_SPINCOUNT");
  unsetenv("OMP_WAIT_POLICY");
}

// tessera-plan decides as if the cores were idle (no sampling); the user's setting is kept.
TEST(OmpWaitTest, AssumedIdleSpinsWhereTheThreadsFitAndKeepsTheUsersSetting) {
  for (const char* v : {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "TESSERA_OMP_WAIT",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_TASKS_PER_NODE"}) {
    unsetenv(v);
  }
  char a0[] = "tessera-plan", a1[] = "--threads", a2[] = "2";
  char* argv[] = {a0, a1, a2, nullptr};
  ASSERT_TRUE(ChooseOmpWait(argv, /*assume_idle=*/true));
  const std::string choice = OmpWaitChoice();
  if (AvailableCpus() >= 2) {
    EXPECT_NE(std::getenv("GOMP_SPINCOUNT"), nullptr) << choice;
    EXPECT_EQ(choice.rfind("spin 100000 (1 rank(s) x 2 threads", 0), 0u) << choice;
    EXPECT_NE(choice.find("assumed idle"), std::string::npos) << choice;
  } else {
    EXPECT_NE(std::getenv("OMP_WAIT_POLICY"), nullptr) << choice;
  }
  // Set now: a second call changes nothing.
  EXPECT_FALSE(ChooseOmpWait(argv, true));
  for (const char* v : {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "TESSERA_OMP_WAIT"}) unsetenv(v);
}

TEST(OmpWaitTest, ThresholdsShrinkWhileThePoolSpins) {
  SetParallelForkCheap(false);
  EXPECT_EQ(ParallelMinBytes(), kParallelMinBytes);
  EXPECT_EQ(MinChunkForBytes(8), kParallelMinBytes / 8);
  EXPECT_EQ(ScaledMinChunk(16384), 16384);
  SetParallelForkCheap(true);
  EXPECT_EQ(ParallelMinBytes(), kParallelMinBytes / kSpinGrainDivisor);
  EXPECT_EQ(ParallelMinMacs(), kParallelMinMacs / kSpinGrainDivisor);
  EXPECT_EQ(ScaledMinChunk(16384), 16384 / kSpinGrainDivisor);
  EXPECT_EQ(ScaledMinChunk(3), 1);
  SetParallelForkCheap(false);
}

}  // namespace
}  // namespace tessera
