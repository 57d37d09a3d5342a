#pragma once
// Polling with a deadline: the one way tests wait for something asynchronous to become true.

#include <chrono>
#include <thread>

namespace omnilearn::testing {

// Calls `predicate` every `poll` until it returns true or `timeout` has passed; true if it did.
// The predicate is always tried at least once, and once more at the deadline.
template <class Predicate>
bool wait_until(Predicate&& predicate, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (predicate()) return true;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    auto left = deadline - now;
    std::this_thread::sleep_for(left < poll ? left : decltype(left)(poll));
  }
}

}  // namespace omnilearn::testing
