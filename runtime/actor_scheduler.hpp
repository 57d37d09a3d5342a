#pragma once
// The threads that run actors: a fixed pool shared by every actor of a system, so an actor costs
// a mailbox and a queue entry, not an OS thread (10,000 actors in one process are normal).
// An actor with letters waiting is "runnable" and sits once in the run queue; a pool thread takes
// it, handles up to `batch` letters, and puts it back at the end of the queue if more are
// waiting, so one busy actor cannot hold a thread while others wait. One letter at a time per
// actor is guaranteed by the mailbox's claim (runtime/mailbox.hpp): only the thread that claimed
// an actor runs it.
//
// Handlers should not block. Where one must (a stop() that waits for another actor's on_stop, an
// on_stop that says goodbye to the head), it wraps the wait in a BlockingScope: while a pool
// thread is inside one, the pool starts a spare thread if no other would be left to run actors,
// so waits that depend on other actors cannot deadlock the pool (the managed-blocking rule of
// Java's ForkJoinPool). Spare threads end when the wait is over and they find no work.
//
// Turns also run on the transport's I/O thread (runtime/transport.hpp: a message from the network
// that finds its actor idle is handled by the thread that read it); a BlockingScope there hands
// the sockets to the transport's standby thread for the wait.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/idle_threads.hpp"

namespace omnilearn::runtime {

class ActorScheduler {
 public:
  // `threads` pool threads (at least 1); each turn of an actor handles at most `batch` letters.
  explicit ActorScheduler(std::size_t threads, std::size_t batch = 64);
  ~ActorScheduler();  // stop()
  ActorScheduler(const ActorScheduler&) = delete;
  ActorScheduler& operator=(const ActorScheduler&) = delete;

  // A unit of work: runs one turn of an actor. Any thread.
  using Turn = std::function<void()>;
  void schedule(Turn turn);

  // Ends the threads after the queue is empty. A pool thread calling this detaches itself
  // instead of joining. Any thread; idempotent.
  void stop();

  // True on a thread of any ActorScheduler's pool.
  static bool on_pool_thread();
  std::size_t batch() const { return batch_; }
  std::size_t threads() const;  // pool threads alive now, spares included

  // Marks the current thread as blocked for its lifetime (a no-op off the pool).
  class BlockingScope {
   public:
    BlockingScope();
    ~BlockingScope();
    BlockingScope(const BlockingScope&) = delete;
    BlockingScope& operator=(const BlockingScope&) = delete;

   private:
    ActorScheduler* scheduler_;
  };

 private:
  void run(bool spare);
  void begin_blocking();
  void end_blocking();
  void start_thread_locked(bool spare);  // caller holds mutex_

  const std::size_t target_;
  const std::size_t batch_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Turn> queue_;              // guarded by mutex_
  std::size_t alive_ = 0;               // threads running run(), guarded by mutex_
  std::size_t blocked_ = 0;             // of those, inside a BlockingScope, guarded by mutex_
  IdleThreads idle_;                    // of those, waiting for a turn, guarded by mutex_
  bool stopping_ = false;               // guarded by mutex_
  struct Worker {
    std::thread thread;
    std::shared_ptr<bool> done;  // set (under mutex_) when its run() returned: joinable at once
  };
  std::vector<Worker> workers_;  // guarded by mutex_
};

}  // namespace omnilearn::runtime
