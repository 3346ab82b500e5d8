# Re-init in one process (bootstrap/): 3 ranks init and allreduce, shut down, 2 of them init
# again as a world of 2 (ranks renumbered), again at the same size and at an explicit
# KOLO_RENDEZVOUS_ROUND, while the third, a stale first-round worker, must be refused at once.
# The program starts its own ranks (fork + exec of itself) over a file store or a TCP store,
# with shared memory on and off. Gloo only: MPI cannot change its world within a process.
if(KOLO_HAVE_GLOO)
  add_executable(kolo_mp_reinit_test reinit_mp_test.cc)
  target_link_libraries(kolo_mp_reinit_test PRIVATE kolo kolo_test_support)
  foreach(store file tcp)
    foreach(shm on off)
      add_test(NAME kolo_mp_reinit_${store}_shm_${shm}
        COMMAND $<TARGET_FILE:kolo_mp_reinit_test> ${store} ${shm})
      set_tests_properties(kolo_mp_reinit_${store}_shm_${shm} PROPERTIES LABELS "mp"
        TIMEOUT 150 ENVIRONMENT "KOLO_TIMEOUT_SECONDS=30")
    endforeach()
  endforeach()
endif()
