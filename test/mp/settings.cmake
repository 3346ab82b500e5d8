# SPDX-License-Identifier: Apache-2.0
# Job-wide settings (bootstrap/job_settings.h): 3 ranks started with a different
# KOLO_ALLREDUCE_ALGORITHM on one rank and HOROVOD_CACHE_CAPACITY on another, then a different
# KOLO_SHM, must each fail init at once on every rank naming the variable, the values and the
# ranks; equal values then init and allreduce. The program starts its own ranks over Gloo with a
# file or TCP store, or runs as the ranks of mpirun -np 3 (no store: the check rides in the
# host-name allgather over MPI, before shared memory goes over it), with shared memory on and off.
add_executable(kolo_mp_settings_test settings_mp_test.cc)
target_link_libraries(kolo_mp_settings_test PRIVATE kolo kolo_test_support)
if(KOLO_HAVE_GLOO)
  kolo_forked_mp_tests(settings kolo_mp_settings_test)
endif()
if(KOLO_HAVE_MPI AND MPIEXEC_EXECUTABLE)
  foreach(shm on off)
    add_test(NAME kolo_mp_settings_mpi_shm_${shm}
      COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none -np 3
              $<TARGET_FILE:kolo_mp_settings_test> mpi ${shm})
    set_tests_properties(kolo_mp_settings_mpi_shm_${shm} PROPERTIES LABELS "mp;mpi"
      TIMEOUT 150 ENVIRONMENT "KOLO_TIMEOUT_SECONDS=30")
  endforeach()
endif()
