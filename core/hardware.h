// Measured limits of the machines Tessera is developed and tested on, in one place, each with
// its source and date. Benchmarks report their results against these bounds; the planner reads
// the same numbers from its shipped profile, planner/profiles/cpu_default.yaml. Source:
// ../shared/MACHINE.md, measured 2026-11-29 on a development machine (2 cores of an AMD EPYC
// with AVX2/AVX-512, 24 GiB, no GPU), medians of 3 runs.
#pragma once

namespace tessera::hardware {

// STREAM copy, 3 x 512 MiB arrays.
inline constexpr double kCopyBytesPerSec1T = 21.8e9;
inline constexpr double kCopyBytesPerSec2T = 35.0e9;
// Random row gather, 4 GiB fp32 table, Zipf 1.05 ids, pooling 8, with huge pages + prefetch.
inline constexpr double kGatherRowsPerSecDim16_1T = 59e6;
inline constexpr double kGatherRowsPerSecDim64_1T = 33e6;
inline constexpr double kGatherRowsPerSecDim128_1T = 18e6;
inline constexpr double kGatherRowsPerSecDim16_2T = 112e6;
inline constexpr double kGatherRowsPerSecDim64_2T = 57e6;
inline constexpr double kGatherRowsPerSecDim128_2T = 38e6;
// OpenBLAS sgemm at DLRM layer shapes (2048 x 256 x 512).
inline constexpr double kSgemmFlopsPerSec1T = 100e9;
inline constexpr double kSgemmFlopsPerSec2T = 180e9;
// RocksDB 7.8.3 point reads of 512-byte values: from disk (O_DIRECT) and from the page cache.
inline constexpr double kRocksDbDiskRowsPerSec1T = 13.4e3;
inline constexpr double kRocksDbCachedRowsPerSec1T = 114e3;
inline constexpr double kRocksDbCachedRowsPerSec2T = 243e3;
// Raw disk, 4 KiB random reads, O_DIRECT.
inline constexpr double kDiskIopsDepth1 = 20e3;
inline constexpr double kDiskIopsDepth32 = 85e3;

}  // namespace tessera::hardware
