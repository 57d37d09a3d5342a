#pragma once
// A fixed set of threads that run blocking work (user functions, actor methods), and serial
// queues on top of it: work posted to one SerialQueue runs one item at a time, in order, on
// whichever pool thread is free, so an actor's methods need no lock and any number of actors
// share the pool's threads.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/idle_threads.hpp"

namespace omnilearn::core {

class WorkPool {
 public:
  explicit WorkPool(std::size_t threads);
  ~WorkPool();  // runs what is queued, then joins
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Any thread. Work posted after the destructor began is dropped.
  void post(std::function<void()> work);
  std::size_t threads() const { return threads_.size(); }

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;  // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
  runtime::IdleThreads idle_;                // guarded by mutex_
  std::vector<std::thread> threads_;
};

class SerialQueue : public std::enable_shared_from_this<SerialQueue> {
 public:
  explicit SerialQueue(WorkPool& pool) : pool_(pool) {}
  // Any thread. `work` runs after everything posted here before it has finished.
  void post(std::function<void()> work);

 private:
  void drain();
  WorkPool& pool_;  // outlives every queue (the executor owns both, pool declared first)
  std::mutex mutex_;
  std::deque<std::function<void()>> queue_;  // guarded by mutex_
  bool running_ = false;                     // guarded by mutex_: a drain is posted or running
};

}  // namespace omnilearn::core
