# TESSERA_BUNDLE: the build bench/gpu_bundle.sh packs for a bare GPU machine (docs/CUDA.md).
#
# The GPU machine has the CUDA driver, toolkit and pip's cuBLAS/NCCL but none of our Debian
# libraries. A bundle is bin/, tests/ and lib/ side by side; this mode makes that layout work:
#   - our folder libraries are SHARED (lib/libtessera_*.so), so the dozen executables share one
#     copy of the code and its CUDA kernels (static, each would carry it: ~10 MB apiece, over
#     the 64 MiB the device tool carries);
#   - GoogleTest and GoogleMock (Debian ships only .a) are linked statically; Abseil, yaml-cpp,
#     RocksDB (Debian's librocksdb.a is not position-independent, so it cannot go into a shared
#     library), OpenBLAS (the OpenMP build, which Debian ships only as .so), Google Benchmark,
#     OpenMPI and libstdc++ stay shared and gpu_bundle.sh copies them into lib/;
#   - every binary carries DT_RPATH $ORIGIN/../lib (not RUNPATH: DT_RPATH also applies to the
#     dependencies of the copied libraries, which have no RPATH of their own);
#   - the CUDA runtime is the shared libcudart.so.13 (copied too: it is small and must match
#     the toolkit we compiled with); cuBLAS and NCCL are found at run time on the device
#     (bench/gpu_env.sh puts pip's nvidia/*/lib folders on LD_LIBRARY_PATH).
option(TESSERA_BUNDLE
  "Build for bench/gpu_bundle.sh (shared folder libraries, RPATH \$ORIGIN/../lib)" OFF)

set(TESSERA_LIBRARY_TYPE STATIC)
set(TESSERA_ROCKSDB_TARGET RocksDB::rocksdb)
if(TESSERA_BUNDLE)
  set(TESSERA_LIBRARY_TYPE SHARED)
  set(TESSERA_ROCKSDB_TARGET RocksDB::rocksdb-shared)
  set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  set(CMAKE_SKIP_BUILD_RPATH OFF)
  set(CMAKE_BUILD_WITH_INSTALL_RPATH ON)
  set(CMAKE_INSTALL_RPATH "\$ORIGIN/../lib")
  set(CMAKE_INSTALL_RPATH_USE_LINK_PATH OFF)
  add_link_options(LINKER:--disable-new-dtags)
  message(STATUS "Tessera: bundle build (shared folder libraries, RPATH \$ORIGIN/../lib)")
endif()
