# SPDX-License-Identifier: Apache-2.0
# Small allreduces through the control round (core/piggyback.h), over TCP at 2 and 3 ranks, and
# with the piggyback off (KOLO_CONTROL_PIGGYBACK_BYTES=0): the same exact results both ways.
add_executable(kolo_mp_piggyback_test piggyback_mp_test.cc ${KOLO_CATCH_MAIN_OBJECTS})
target_link_libraries(kolo_mp_piggyback_test PRIVATE kolo Catch2::Catch2)
foreach(case "2;4096;1" "3;4096;1" "3;0;0")
  list(GET case 0 np)
  list(GET case 1 budget)
  list(GET case 2 expect)
  set(name kolo_mp_piggyback_np${np}_budget${budget})
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/${name})
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} -E env KOLO_SHM=off KOLO_CONTROL_PIGGYBACK_BYTES=${budget}
            KOLO_TEST_PIGGYBACK=${expect} KOLO_TEST_PIGGYBACK_DIR=${dir}
            sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && exec \"$0\" \"$@\""
            ${kolo_kolorun} -np ${np} $<TARGET_FILE:kolo_mp_piggyback_test>)
  set_tests_properties(${name} PROPERTIES LABELS "mp" TIMEOUT 120)
endforeach()
