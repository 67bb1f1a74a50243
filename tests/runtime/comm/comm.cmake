# comm.cmake — the communication layer (runtime/comm/): the pipeline transport under mpirun, and the NCCL
# implementation on the CPU emulation of CUDA and NCCL. Multi-rank tests run under a timeout so a hang fails
# instead of stalling CI.
add_executable(test_transport tests/runtime/comm/test_transport.c)
target_link_libraries(test_transport PRIVATE rrfp_core)
foreach(np 2 4)
  add_test(NAME transport_np${np}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "transport: ok" timeout 120 ${RRFP_MPIRUN} -np ${np} $<TARGET_FILE:test_transport>)
  set_tests_properties(transport_np${np} PROPERTIES LABELS mpi TIMEOUT 150)
endforeach()
# A lost peer must not hang: rank 0 dies within its 2 s timeout naming what it waited for.
add_test(NAME transport_lost_peer
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 1 "pipeline rank 0 waited [0-9]+ s without any message; still expecting: gradient chunk 0 mb 3 from rank 1" timeout 60 ${RRFP_MPIRUN} -np 2 $<TARGET_FILE:test_transport> lost)
set_tests_properties(transport_lost_peer PROPERTIES LABELS mpi TIMEOUT 90)
# A rank that crashes dies at once: every rank's fatal signals are at their default actions after MPI_Init (Open MPI's
# backtrace handlers can block on malloc's lock after heap corruption), and rank 1's SIGSEGV ends the job, named.
add_test(NAME transport_crash
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 139 "rank 0: fatal signals at their default actions.*rank 1: fatal signals at their default actions.*rank 1 .*exited on signal 11|rank 1: fatal signals at their default actions.*rank 0: fatal signals at their default actions.*rank 1 .*exited on signal 11" timeout 60 ${RRFP_MPIRUN} -np 2 $<TARGET_FILE:test_transport> crash)
set_tests_properties(transport_crash PROPERTIES LABELS mpi TIMEOUT 90)
# NCCL emulated over MPI (tests/support/cuda_emu/nccl_emu.cpp) under runtime/comm/comm_nccl.c: a delayed receive is
# NaN until its event (the control), a send that skips its producer's event sends stale data under the
# delayed compute stream (the control of RR_EMU_COMPUTE_DELAY), the FIFO transport with device payloads,
# the collectives (host ones over NCCL, without MPI).
rrfp_emu_executable(test_nccl_emu tests/runtime/comm/test_nccl_emu.c)
foreach(np 2 4)
  add_test(NAME nccl_emu_np${np}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "nccl emu: ok" timeout 120 ${RRFP_MPIRUN} -np ${np}
                   -x RR_EMU_COMM_DELAY=3 $<TARGET_FILE:test_nccl_emu>)
  # the same with the compute streams delayed too: everything must still hold, and the control of
  # RR_EMU_COMPUTE_DELAY (a send that skips its producer's event sends stale data) must see it
  add_test(NAME nccl_emu_np${np}_compute_delay
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/support/util/expect.sh 0 "nccl emu: ok" timeout 120 ${RRFP_MPIRUN} -np ${np}
                   -x RR_EMU_COMM_DELAY=3 -x RR_EMU_COMPUTE_DELAY=2 $<TARGET_FILE:test_nccl_emu> --compute-delay)
  set_tests_properties(nccl_emu_np${np} nccl_emu_np${np}_compute_delay PROPERTIES LABELS mpi TIMEOUT 150)
endforeach()
