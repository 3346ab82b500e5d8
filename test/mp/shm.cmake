# SPDX-License-Identifier: Apache-2.0
# The shared-memory transport (transport/shm) under the multi-process suites: KOLO_SHM=on puts it
# over the launcher's transport -- Gloo under kolorun at N = 2, 3, 4, MPI under mpirun at N = 2 --
# for the transport tests (every collective, ring and native, every dtype) and the runtime tests.
# The "[fault]" case (a rank exits mid-allreduce) runs under kolorun with a short timeout: the
# survivors must name the dead rank (shm notices the missing process, not a timeout).
# KOLO_SHM defaults to auto, which would put shm under every one-host test of this folder too:
# the existing Gloo/MPI registrations are pinned to KOLO_SHM=off so they keep testing those
# transports' own point-to-point and natives.
set(kolo_shm_kolorun ${PROJECT_SOURCE_DIR}/bindings/launcher/kolorun)
foreach(np 2 3 4)
  add_test(NAME kolo_mp_transport_shm_np${np}
    COMMAND ${kolo_shm_kolorun} -np ${np} --start-timeout 60
            $<TARGET_FILE:kolo_mp_transport_test>)
  set_tests_properties(kolo_mp_transport_shm_np${np} PROPERTIES LABELS "mp" TIMEOUT 300
    ENVIRONMENT "KOLO_SHM=on;KOLO_TIMEOUT_SECONDS=30")
  add_test(NAME kolo_mp_runtime_shm_np${np}
    COMMAND ${kolo_shm_kolorun} -np ${np} --start-timeout 60 $<TARGET_FILE:kolo_mp_runtime_test>)
  set_tests_properties(kolo_mp_runtime_shm_np${np} PROPERTIES LABELS "mp" TIMEOUT 300
    ENVIRONMENT "KOLO_SHM=on;KOLO_TIMEOUT_SECONDS=60")
  # Under mpirun only at N = 2: shm's set-up over MPI is the part that differs (its data path is
  # the same under either launcher, and N = 3, 4 cost CI about 27 s for nothing new).
  if(KOLO_HAVE_MPI AND MPIEXEC_EXECUTABLE AND np EQUAL 2)
    add_test(NAME kolo_mp_transport_shm_mpi_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none -np ${np}
              $<TARGET_FILE:kolo_mp_transport_test>)
    set_tests_properties(kolo_mp_transport_shm_mpi_np${np} PROPERTIES LABELS "mp;mpi"
      TIMEOUT 300 ENVIRONMENT "KOLO_SHM=on;KOLO_TIMEOUT_SECONDS=30")
  endif()
endforeach()
foreach(np 2 3)
  add_test(NAME kolo_mp_transport_shm_fault_np${np}
    COMMAND ${kolo_shm_kolorun} -np ${np} --start-timeout 60
            $<TARGET_FILE:kolo_mp_transport_test> "[fault]")
  set_tests_properties(kolo_mp_transport_shm_fault_np${np} PROPERTIES LABELS "mp;fault"
    TIMEOUT 90 ENVIRONMENT "KOLO_SHM=on;KOLO_TIMEOUT_SECONDS=3")
endforeach()

foreach(np 2 3 4)
  foreach(name kolo_mp_transport_mpi_np${np} kolo_mp_transport_gloo_np${np}
               kolo_mp_runtime_gloo_np${np} kolo_mp_runtime_mpi_np${np})
    if(TEST ${name})
      set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT "KOLO_SHM=off")
    endif()
  endforeach()
  if(TEST kolo_mp_transport_gloo_fault_np${np})
    set_property(TEST kolo_mp_transport_gloo_fault_np${np} APPEND PROPERTY ENVIRONMENT
      "KOLO_SHM=off")
  endif()
endforeach()
