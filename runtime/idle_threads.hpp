#pragma once
// The wake-up rule of a pool whose threads sleep on one condition variable (the actor pool's run
// queue, the executor's work pool): notify only when an idle thread has no wake-up on its way.
// A notify is a system call and a context switch; with this rule a burst of posts wakes each
// sleeper once, and the threads that wake drain the queue before they sleep again, so nothing
// queued is left without a thread coming for it.
//
// Not synchronized: every call is made under the pool's own mutex.

#include <cstddef>

namespace omnilearn::runtime {

class IdleThreads {
 public:
  // Work was just queued: true when the caller must notify one thread (after unlocking).
  bool wake_one() {
    if (idle_ <= wakes_pending_) return false;
    ++wakes_pending_;
    return true;
  }
  // Around a thread's wait on the condition variable. A thread woken for any reason (a notify,
  // a broadcast, spuriously) takes one pending wake-up with it: it drains the queue either way.
  void about_to_wait() { ++idle_; }
  void woke() {
    --idle_;
    if (wakes_pending_ > 0) --wakes_pending_;
  }

 private:
  std::size_t idle_ = 0;           // threads waiting
  std::size_t wakes_pending_ = 0;  // notified, not yet awake
};

}  // namespace omnilearn::runtime
