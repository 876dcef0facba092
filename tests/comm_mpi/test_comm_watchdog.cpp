// The communicator's watchdog (runtime/comm.h): rank 1 never joins the barrier (as a rank that
// hangs, or one that died where the launcher does not end the job); rank 0 must give up after
// SQLRL_COMM_TIMEOUT_S (1 s here, set by ctest) with a message naming itself, and end the job.
// ctest expects that message (PASS_REGULAR_EXPRESSION) within its timeout.
#include <chrono>
#include <cstdio>
#include <thread>

#include "runtime/comm.h"

int main() {
  sqlrl::Comm comm = sqlrl::comm_init();
  if (comm.rank == 0) {
    sqlrl::comm_barrier(comm);  // the watchdog ends the job here
    std::fprintf(stderr, "watchdog test: the barrier returned without rank 1\n");
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::seconds(60));  // stuck
  return 1;
}
