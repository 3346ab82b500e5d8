# SPDX-License-Identifier: Apache-2.0
# Re-init in one process (bootstrap/): 3 ranks init and allreduce, shut down, 2 of them init
# again as a world of 2 (ranks renumbered), again at the same size and at an explicit
# KOLO_RENDEZVOUS_ROUND, while the third, a stale first-round worker, must be refused at once.
# The program starts its own ranks (fork + exec of itself) over a file store or a TCP store,
# with shared memory on and off. Gloo only: MPI cannot change its world within a process.
if(KOLO_HAVE_GLOO)
  add_executable(kolo_mp_reinit_test reinit_mp_test.cc)
  target_link_libraries(kolo_mp_reinit_test PRIVATE kolo kolo_test_support)
  kolo_forked_mp_tests(reinit kolo_mp_reinit_test)
endif()
