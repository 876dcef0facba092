#include "runtime/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace sqlrl {
namespace {

std::atomic<int> g_signal{0};

void on_signal(int sig) {
  g_signal.store(sig);
  // Only async-signal-safe calls here: write(2). SA_RESETHAND already restored the default.
  static const char msg[] = "\ninterrupted: finishing the step in flight and saving a checkpoint (again to quit now)\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupt_requested() { return g_signal.load() != 0; }
int interrupt_signal() { return g_signal.load(); }

}  // namespace sqlrl
