#include "core/work_pool.hpp"

#include <pthread.h>

#include <spdlog/spdlog.h>

namespace omnilearn::core {

WorkPool::WorkPool(std::size_t threads) {
  if (threads == 0) threads = 1;
  for (std::size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      ::pthread_setname_np(::pthread_self(), "ol-work");
      run();
    });
  }
}

WorkPool::~WorkPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void WorkPool::post(std::function<void()> work) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    queue_.push_back(std::move(work));
    wake = idle_.wake_one();
  }
  if (wake) ready_.notify_one();
}

void WorkPool::run() {
  while (true) {
    std::function<void()> work;
    {
      std::unique_lock lock(mutex_);
      if (!stopping_ && queue_.empty()) {
        idle_.about_to_wait();
        ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        idle_.woke();
      }
      if (queue_.empty()) return;  // stopping, and nothing left
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      work();
    } catch (const std::exception& e) {
      // Work items report their own errors; one that escapes is a bug, not a reason to lose
      // a pool thread.
      spdlog::error("work pool: an item threw: {}", e.what());
    }
  }
}

void SerialQueue::post(std::function<void()> work) {
  bool start;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
    start = !running_;
    running_ = true;
  }
  if (start) pool_.post([self = shared_from_this()] { self->drain(); });
}

void SerialQueue::drain() {
  // A bounded batch per turn, then back to the pool's queue: one busy actor cannot hold a
  // pool thread while others wait.
  for (int i = 0; i < 64; ++i) {
    std::function<void()> work;
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty()) {
        running_ = false;
        return;
      }
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      work();
    } catch (const std::exception& e) {
      spdlog::error("serial queue: an item threw: {}", e.what());
    }
  }
  pool_.post([self = shared_from_this()] { self->drain(); });
}

}  // namespace omnilearn::core
