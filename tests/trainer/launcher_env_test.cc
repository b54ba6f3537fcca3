// tools/launcher_env.h: the launcher's local rank count and the default threads per rank.
#include "tools/launcher_env.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace tessera {
namespace {

// Clears every variable LauncherLocalSize and DefaultThreadsPerRank read, and restores nothing:
// each test sets what it needs (the test binary is not launched by mpirun).
void ClearLauncherEnv() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_TASKS_PER_NODE",
                        "SLURM_NODEID", "OMP_NUM_THREADS"}) {
    unsetenv(v);
  }
}

TEST(LauncherEnvTest, SlurmTasksPerNodeSyntax) {
  EXPECT_EQ(SlurmTasksOnNode("4", 0), 4);
  EXPECT_EQ(SlurmTasksOnNode("4", 1), 0);
  EXPECT_EQ(SlurmTasksOnNode("2(x3),1", 0), 2);
  EXPECT_EQ(SlurmTasksOnNode("2(x3),1", 2), 2);
  EXPECT_EQ(SlurmTasksOnNode("2(x3),1", 3), 1);
  EXPECT_EQ(SlurmTasksOnNode("2(x3),1", 4), 0);
  EXPECT_EQ(SlurmTasksOnNode("x", 0), 0);
  EXPECT_EQ(SlurmTasksOnNode("2(x3", 0), 0);
}

TEST(LauncherEnvTest, LocalSizeFromEachLauncher) {
  ClearLauncherEnv();
  EXPECT_EQ(LauncherLocalSize(), 1);
  setenv("SLURM_TASKS_PER_NODE", "3(x2)", 1);
  setenv("SLURM_NODEID", "1", 1);
  EXPECT_EQ(LauncherLocalSize(), 3);
  setenv("MPI_LOCALNRANKS", "5", 1);
  EXPECT_EQ(LauncherLocalSize(), 5);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  EXPECT_EQ(LauncherLocalSize(), 4);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "garbage", 1);
  EXPECT_EQ(LauncherLocalSize(), 5);  // unreadable: the next launcher's variable
  ClearLauncherEnv();
}

TEST(LauncherEnvTest, EachRankTakesItsShareNeverZero) {
  ClearLauncherEnv();
  EXPECT_EQ(DefaultThreadsPerRank(), 0);  // one process: OpenMP's own default
  const int cpus = AvailableCpus();
  ASSERT_GE(cpus, 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  EXPECT_EQ(DefaultThreadsPerRank(), std::max(1, cpus / 2));
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1000", 1);  // more ranks than cores: 1 each
  EXPECT_EQ(DefaultThreadsPerRank(), 1);
  setenv("OMP_NUM_THREADS", "3", 1);  // the user's explicit choice wins
  EXPECT_EQ(DefaultThreadsPerRank(), 0);
  ClearLauncherEnv();
}

}  // namespace
}  // namespace tessera
