# kolo's floors (DESIGN.md "Floors"): each top-level source folder is one static library whose
# link dependencies point only down, bottom to top
#
#   base < kernels < rendezvous < transport < timeline < ops < bootstrap < core
#
# and bindings/c (libkolo.so) sits on core. kolo_add_floor(NAME BELOW) creates kolo_<NAME> with
# the settings every engine source shares and links it to the floor directly below (which brings
# the rest, transitively). Because a static archive is searched once, in this order, a symbol that
# a lower floor takes from a higher one does not link; scripts/check_layers.py (a CTest test)
# catches the upward #include before that. kolo_engine is every floor at once, for tests and
# benchmarks that reach inside.

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
