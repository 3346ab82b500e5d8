# SPDX-License-Identifier: Apache-2.0
# KOLO_SANITIZE=address|undefined|thread (address may be combined: "address,undefined").
# KOLO_BUILD_FUZZERS=ON (Clang only) instruments everything for libFuzzer's coverage feedback and
# builds the fuzz targets in test/fuzz (see test/fuzz/README.md); combine it with
# KOLO_SANITIZE=address,undefined so the fuzzers catch memory errors, not only crashes.
# Runtime options and suppressions for the tests live in test/sanitizers (test/CMakeLists.txt
# hands them to CTest when KOLO_SANITIZE is set).
option(KOLO_BUILD_FUZZERS "Build the libFuzzer targets in test/fuzz (requires Clang)" OFF)

if(KOLO_SANITIZE)
  string(REPLACE "," ";" kolo_sanitizers "${KOLO_SANITIZE}")
  foreach(s IN LISTS kolo_sanitizers)
    if(NOT s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "KOLO_SANITIZE: unknown sanitizer '${s}' (address|undefined|thread)")
    endif()
  endforeach()
  if("thread" IN_LIST kolo_sanitizers AND "address" IN_LIST kolo_sanitizers)
    message(FATAL_ERROR "KOLO_SANITIZE: 'thread' cannot be combined with 'address'")
  endif()
  add_compile_options(-fsanitize=${KOLO_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=${KOLO_SANITIZE})
  # -O1 -g1 (after the build type's flags, so they win; ops/ keeps its own -O3): what the
  # sanitizers recommend, half the compile time of -O2 -g, and line tables are all a report needs.
  add_compile_options(-O1 -g1)
endif()

if(KOLO_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KOLO_BUILD_FUZZERS needs Clang (libFuzzer), e.g. "
                        "-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14")
  endif()
  # Coverage instrumentation for every object (the engine included); only the fuzz targets link
  # libFuzzer's main (-fsanitize=fuzzer, test/fuzz/CMakeLists.txt).
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
