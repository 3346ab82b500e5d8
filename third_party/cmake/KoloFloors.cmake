# SPDX-License-Identifier: Apache-2.0
# kolo's floors (DESIGN.md "Floors"): each top-level source folder is one static library whose
# link dependencies point only down, bottom to top
#
#   base < kernels < rendezvous < transport < timeline < ops < bootstrap < core
#
# and bindings/c (libkolo.so) sits on core. kolo_add_floor(NAME BELOW) creates kolo_<NAME> with
# the settings every engine source shares and links it to the floor directly below (which brings
# the rest, transitively). The link order does not stop an upward call: every program links all
# floors (kolo_engine), and the linker resolves a lower floor's reference from the higher floor's
# objects already pulled into the binary. What holds the direction is scripts/check_layers.py
# (CTest kolo_layers, in CI): it fails on an upward #include (or one of test/, bench/) and on a
# floor's target linking a floor above, taking an include directory there or compiling a source
# from there, reading these kolo_add_floor calls and the floors' target_* commands (its header
# lists every form); scripts/check_symbols.py (CTest kolo_layers_symbols) reads the built
# archives for kolo symbols a floor takes from a higher one. kolo_engine is every floor at once,
# for the C library, tests and benchmarks that reach inside.

function(kolo_add_floor name below)
  add_library(kolo_${name} STATIC)
  target_include_directories(kolo_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>)
  target_compile_options(kolo_${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  set_target_properties(kolo_${name} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  if(below)
    target_link_libraries(kolo_${name} PUBLIC kolo_${below})
  endif()
endfunction()
