# Helpers shared by the folders' CMakeLists.

# tessera_library(NAME SOURCES a.cc ... CUDA_SOURCES x.cu ... DEPS lib ... CUDA_DEPS lib ...)
# One static library per folder (shared with TESSERA_BUNDLE, cmake/bundle.cmake); CUDA sources are compiled only when the CUDA path is on.
function(tessera_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;CUDA_SOURCES;DEPS;CUDA_DEPS" ${ARGN})
  set(srcs ${ARG_SOURCES})
  if(TESSERA_HAVE_CUDA)
    list(APPEND srcs ${ARG_CUDA_SOURCES})
    list(APPEND ARG_DEPS ${ARG_CUDA_DEPS})
  endif()
  if(NOT srcs)
    # A folder whose sources have not landed yet: headers only.
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(${name} ${TESSERA_LIBRARY_TYPE} ${srcs})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(TESSERA_HAVE_CUDA)
    set_target_properties(${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
    target_compile_options(${name} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --extended-lambda -Xcompiler=-fPIC>)
  endif()
endfunction()

# tessera_test(NAME SOURCES a_test.cc ... DEPS lib ... [LABELS l ...] [TIMEOUT s])
# A GoogleTest binary registered with ctest; runs from the build dir, so tests that read
# ../shared/data find it through TESSERA_SHARED_DIR.
function(tessera_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    TESSERA_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
    TESSERA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_test(NAME ${name} COMMAND ${name})
  if(ARG_TIMEOUT)
    set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  endif()
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  set_tests_properties(${name} PROPERTIES ENVIRONMENT
    "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;${TESSERA_TEST_BLAS_ENV}")
endfunction()

# tessera_mpi_test(NAME NP n SOURCES ... DEPS ...)
# A GoogleTest binary launched as `mpirun --oversubscribe -np n` from ctest.
function(tessera_mpi_test name)
  cmake_parse_arguments(ARG "" "NP;TIMEOUT" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest MPI::MPI_CXX)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    TESSERA_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
    TESSERA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_test(NAME ${name} COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root
           -np ${ARG_NP} $<TARGET_FILE:${name}>)
  set(t 300)
  if(ARG_TIMEOUT)
    set(t ${ARG_TIMEOUT})
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${t} LABELS distributed
    ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_MCA_rmaps_base_oversubscribe=1;${TESSERA_TEST_BLAS_ENV}")
endfunction()
