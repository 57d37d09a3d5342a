#pragma once
// An actor's inbox: multi-producer, single-consumer, FIFO. Messages from one sender keep their
// order because every producer appends to the same queue under one lock.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "runtime/envelope.hpp"

namespace omnilearn::runtime {

// One item of work for an actor: a message, or a task to run on the actor's thread (timers,
// ask callbacks) — both are serialized with everything else the actor does.
struct Letter {
  std::optional<Envelope> envelope;
  std::function<void()> task;
  // Held from delivery until the actor has handled the letter (or it is dropped): releasing it
  // frees one of the sending peer's in-flight slots (SystemOptions::max_in_flight_per_peer).
  std::shared_ptr<void> in_flight_slot;
};

class Mailbox {
 public:
  // Any thread. Returns false once the mailbox is closed; `letter` is then left untouched.
  bool push(Letter&& letter);
  // Owner thread only. Blocks until a letter arrives or the mailbox is closed and empty.
  std::optional<Letter> pop();
  // Owner thread only. Like pop() but gives up after `timeout`.
  std::optional<Letter> pop_for(std::chrono::milliseconds timeout);
  // Any thread. Wakes the owner; letters already queued are still delivered.
  void close();
  bool closed() const;
  std::size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Letter> letters_;  // guarded by mutex_
  bool closed_ = false;         // guarded by mutex_
};

}  // namespace omnilearn::runtime
