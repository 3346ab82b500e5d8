# SPDX-License-Identifier: Apache-2.0
# The timeline through the runtime, under kolorun (shared memory over Gloo) at 2 and 3 ranks,
# and at 2 ranks over TCP only (KOLO_SHM=off: fused batches go through the fusion buffer).
add_executable(kolo_mp_timeline_test timeline_mp_test.cc ${KOLO_CATCH_MAIN_OBJECTS})
target_link_libraries(kolo_mp_timeline_test PRIVATE kolo Catch2::Catch2)
foreach(np 2 3)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/timeline_np${np})
  add_test(NAME kolo_mp_timeline_np${np}
    COMMAND ${CMAKE_COMMAND} -E env KOLO_TEST_TIMELINE_DIR=${dir}
            sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && exec \"$0\" \"$@\""
            ${kolo_kolorun} -np ${np} $<TARGET_FILE:kolo_mp_timeline_test>)
  set_tests_properties(kolo_mp_timeline_np${np} PROPERTIES LABELS "mp" TIMEOUT 120)
endforeach()
set(dir ${CMAKE_CURRENT_BINARY_DIR}/timeline_tcp_np2)
add_test(NAME kolo_mp_timeline_tcp_np2
  COMMAND ${CMAKE_COMMAND} -E env KOLO_TEST_TIMELINE_DIR=${dir} KOLO_SHM=off
          sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && exec \"$0\" \"$@\""
          ${kolo_kolorun} -np 2 $<TARGET_FILE:kolo_mp_timeline_test>)
set_tests_properties(kolo_mp_timeline_tcp_np2 PROPERTIES LABELS "mp" TIMEOUT 120)
