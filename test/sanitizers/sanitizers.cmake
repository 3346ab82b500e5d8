# SPDX-License-Identifier: Apache-2.0
# Included by test/CMakeLists.txt when KOLO_SANITIZE is set: every test, whatever folder adds it
# (Catch2 discovery, the mp/mpi launches, the launcher and Python suites), runs with the
# sanitizer runtime options and suppressions of this folder. CTest evaluates the generated file
# when it loads the tests and exports the variables to every test process (and so to the ranks
# mpirun and run_gloo.sh start); a test's own ENVIRONMENT property still adds to them.
# halt_on_error=1 everywhere: the first report fails the test. See README.md.
set(kolo_san_dir ${CMAKE_CURRENT_LIST_DIR})

# Catch2's session (catch_main.cc) is test-framework code: at -O0 it compiles in a fifth of the
# time (17 s instead of 90 s with ASan). It stays instrumented: an uninstrumented object would
# lend the link its copies of inline library code (libstdc++'s shared_ptr release is different
# under TSan), which gave TSan false reports and would hide ASan ones.
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/catch_main.cc PROPERTIES
                            COMPILE_OPTIONS "-O0")
set(kolo_san_common "halt_on_error=1:print_stacktrace=1")
# fast_unwind_on_malloc=0: Open MPI has no frame pointers, and its leaks are suppressed by the
# library frames only the full unwinder sees (lsan.supp).
set(kolo_asan "detect_leaks=1:check_initialization_order=1:detect_stack_use_after_return=1")
string(APPEND kolo_asan ":strict_string_checks=1:fast_unwind_on_malloc=0")
set(kolo_san_vars
  "ASAN_OPTIONS=${kolo_san_common}:${kolo_asan}"
  "LSAN_OPTIONS=suppressions=${kolo_san_dir}/lsan.supp:print_suppressions=0"
  "UBSAN_OPTIONS=${kolo_san_common}:suppressions=${kolo_san_dir}/ubsan.supp"
  "TSAN_OPTIONS=${kolo_san_common}:second_deadlock_stack=1:suppressions=${kolo_san_dir}/tsan.supp")
# The same settings twice: for CTest, and as a shell file that scripts/sanitize.sh sources before
# it runs test programs directly.
set(kolo_san_cmake "")
set(kolo_san_sh "")
foreach(var IN LISTS kolo_san_vars)
  string(REGEX REPLACE "=.*" "" name "${var}")
  string(REGEX REPLACE "^[A-Z_]+=" "" value "${var}")
  string(APPEND kolo_san_cmake "set(ENV{${name}} \"${value}\")\n")
  string(APPEND kolo_san_sh "export ${name}='${value}'\n")
endforeach()
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/kolo_sanitizer_env.cmake
     CONTENT "${kolo_san_cmake}")
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/kolo_sanitizer_env.sh CONTENT "${kolo_san_sh}")
set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES
             ${CMAKE_CURRENT_BINARY_DIR}/kolo_sanitizer_env.cmake)
