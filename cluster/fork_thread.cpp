#include "cluster/fork_thread.hpp"

#include <pthread.h>

#include <cerrno>

namespace omnilearn::actors {

ForkThread::ForkThread() : thread_([this] { loop(); }) {}

ForkThread::~ForkThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

pid_t ForkThread::run(const std::function<pid_t()>& fork_child) {
  std::lock_guard one_at_a_time(callers_);
  std::unique_lock lock(mutex_);
  job_ = &fork_child;
  done_ = false;
  wake_.notify_all();
  wake_.wait(lock, [this] { return done_; });
  errno = error_;
  return result_;
}

void ForkThread::loop() {
  ::pthread_setname_np(::pthread_self(), "ol-fork");
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || job_ != nullptr; });
    if (job_ == nullptr) return;  // stopping, nothing left to run
    const auto* job = job_;
    job_ = nullptr;
    lock.unlock();
    errno = 0;
    pid_t result = (*job)();
    int error = errno;
    lock.lock();
    result_ = result;
    error_ = error;
    done_ = true;
    wake_.notify_all();
  }
}

}  // namespace omnilearn::actors
