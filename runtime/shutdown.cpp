#include "runtime/shutdown.hpp"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <ctime>

namespace omnilearn::runtime {
namespace {
sigset_t shutdown_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void block_shutdown_signals() {
  sigset_t set = shutdown_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int wait_for_shutdown_signal(std::chrono::milliseconds timeout) {
  sigset_t set = shutdown_set();
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1000000);
  while (true) {
    int signal = sigtimedwait(&set, nullptr, &ts);
    if (signal > 0) return signal;
    if (errno == EINTR) continue;
    return 0;
  }
}

}  // namespace omnilearn::runtime
