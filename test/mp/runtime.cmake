# SPDX-License-Identifier: Apache-2.0
# The runtime through the C API as N processes: under kolorun (Gloo) and under mpirun, N = 2,3,4.
add_executable(kolo_mp_runtime_test runtime_mp_test.cc ${KOLO_CATCH_MAIN_OBJECTS})
target_link_libraries(kolo_mp_runtime_test PRIVATE kolo kolo_engine Catch2::Catch2)
set(kolo_kolorun ${PROJECT_SOURCE_DIR}/bindings/launcher/kolorun)
foreach(np 2 3 4)
  add_test(NAME kolo_mp_runtime_gloo_np${np}
    COMMAND ${kolo_kolorun} -np ${np} --start-timeout 60 $<TARGET_FILE:kolo_mp_runtime_test>)
  set_tests_properties(kolo_mp_runtime_gloo_np${np} PROPERTIES LABELS "mp" TIMEOUT 300
    ENVIRONMENT "KOLO_TIMEOUT_SECONDS=60")
  if(KOLO_HAVE_MPI AND MPIEXEC_EXECUTABLE)
    add_test(NAME kolo_mp_runtime_mpi_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none -np ${np}
              $<TARGET_FILE:kolo_mp_runtime_test>)
    set_tests_properties(kolo_mp_runtime_mpi_np${np} PROPERTIES LABELS "mp;mpi" TIMEOUT 300
      ENVIRONMENT "KOLO_TIMEOUT_SECONDS=60")
  endif()
endforeach()
