# SPDX-License-Identifier: Apache-2.0
# The hierarchical allreduce of host tensors: 4 ranks under kolorun (Gloo), made into 2 hosts x 2
# ranks by fake_hosts.sh (per-rank KOLO_HOSTNAME, KOLO_LOCAL_*; Gloo on loopback). One run checks
# the unset (auto), =1 and =0 settings in turn, under kolorun and under mpirun; the fault run
# kills rank 3 mid-op.
add_executable(kolo_mp_hierarchical_test hierarchical_mp_test.cc ${KOLO_CATCH_MAIN_OBJECTS})
target_link_libraries(kolo_mp_hierarchical_test PRIVATE kolo Catch2::Catch2)
target_include_directories(kolo_mp_hierarchical_test PRIVATE ${PROJECT_SOURCE_DIR})
set(kolo_fake_hosts ${CMAKE_CURRENT_SOURCE_DIR}/fake_hosts.sh)
add_test(NAME kolo_mp_hierarchical_np4
  COMMAND ${kolo_kolorun} -np 4 --start-timeout 60 ${kolo_fake_hosts} 2
          $<TARGET_FILE:kolo_mp_hierarchical_test>)
set_tests_properties(kolo_mp_hierarchical_np4 PROPERTIES LABELS "mp" TIMEOUT 240
  ENVIRONMENT "KOLO_TIMEOUT_SECONDS=60;KOLO_TEST_TIMELINE_DIR=${CMAKE_CURRENT_BINARY_DIR}")
add_test(NAME kolo_mp_hierarchical_fault_np4
  COMMAND ${kolo_kolorun} -np 4 --start-timeout 60 ${kolo_fake_hosts} 2
          $<TARGET_FILE:kolo_mp_hierarchical_test> "[fault]")
set_tests_properties(kolo_mp_hierarchical_fault_np4 PROPERTIES LABELS "mp;fault" TIMEOUT 120
  ENVIRONMENT "KOLO_TIMEOUT_SECONDS=5;KOLO_HEARTBEAT_SECONDS=1")
if(KOLO_HAVE_MPI AND MPIEXEC_EXECUTABLE)
  # The same over MPI (the cross-host groups are MPI communicators from split).
  add_test(NAME kolo_mp_hierarchical_mpi_np4
    COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none -np 4
            -x KOLO_TIMEOUT_SECONDS=60 -x KOLO_TEST_TIMELINE_DIR=${CMAKE_CURRENT_BINARY_DIR}
            ${kolo_fake_hosts} 2 $<TARGET_FILE:kolo_mp_hierarchical_test>)
  set_tests_properties(kolo_mp_hierarchical_mpi_np4 PROPERTIES LABELS "mp;mpi" TIMEOUT 240)
endif()
