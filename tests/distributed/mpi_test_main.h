// main() for the tests under mpirun: MPI up, GoogleTest, MPI down; only rank 0 prints the
// progress; other ranks print only their failed assertions, and the exit code is the max over
// ranks.
// Included once by each tests/distributed/*_test.cc (tessera_mpi_test links no gtest_main).
#pragma once

#include <mpi.h>

#include <cstdio>
#include <memory>

#include "gtest/gtest.h"
#include "sharding/mpi_communicator.h"

namespace tessera::testing {

// The world communicator of the test run; set by main() before the tests.
inline std::shared_ptr<Communicator>& World() {
  static std::shared_ptr<Communicator> world;
  return world;
}

// On ranks other than 0: print failed assertions only, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
            r.line_number(), r.message());
  }

 private:
  int rank_;
};

}  // namespace tessera::testing

int main(int argc, char** argv) {
  if (!tessera::MpiInitialize(&argc, &argv).ok()) return 2;
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    // Keep failures visible (they print from any rank) but drop the progress lines.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new tessera::testing::RankFailurePrinter(rank));
  }
  auto world = tessera::CreateMpiWorldCommunicator();
  if (!world.ok()) {
    fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 2;
  }
  tessera::testing::World() = std::move(*world);
  int rc = RUN_ALL_TESTS();
  tessera::testing::World().reset();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  (void)tessera::MpiFinalize();
  return worst;
}
