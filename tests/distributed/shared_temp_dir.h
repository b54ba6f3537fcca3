// SharedTempDir: one scratch directory for all ranks of a distributed test (named after rank 0's
// pid, so the same path on every rank), created by rank 0 and removed once every rank is done.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "mpi_test_main.h"

namespace tessera::testing {

class SharedTempDir {
 public:
  // `/tmp/<prefix><rank 0's pid>`; every rank waits until rank 0 has created it.
  explicit SharedTempDir(const std::string& prefix) {
    int64_t pid = World()->rank() == 0 ? static_cast<int64_t>(::getpid()) : 0;
    EXPECT_TRUE(World()->AllReduce(&pid, 1, ReduceOp::kSum).ok());
    path_ = "/tmp/" + prefix + std::to_string(pid);
    if (World()->rank() == 0) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
    EXPECT_TRUE(World()->Barrier().ok());
  }
  // Removed after a barrier: every rank has closed its stores and files by then.
  ~SharedTempDir() {
    EXPECT_TRUE(World()->Barrier().ok());
    if (World()->rank() == 0) std::filesystem::remove_all(path_);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tessera::testing
