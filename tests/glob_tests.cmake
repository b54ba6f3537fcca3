# Each <name>_test.cc in the including folder becomes the test binary <folder>_<name>_test.
function(tessera_glob_tests folder)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  foreach(src ${tests})
    get_filename_component(base ${src} NAME_WE)
    tessera_test(${folder}_${base} SOURCES ${src} DEPS ${ARG_DEPS})
  endforeach()
endfunction()
