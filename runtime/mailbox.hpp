#pragma once
// An actor's inbox: multi-producer, single-consumer, FIFO. Messages from one sender keep their
// order because every producer appends to the same queue under one lock.
//
// The mailbox also decides who runs its actor (runtime/actor_scheduler.hpp): it is either idle
// or claimed. A push into an idle mailbox claims it for the pusher, who must then schedule one
// turn of the actor; while claimed, pushes only queue. The claimer takes letters until the
// mailbox is empty, which releases the claim in the same locked step, so a letter is never left
// behind unscheduled and no two threads ever run one actor.
//
// Two buffers: producers append to `incoming_` under the lock; the claimer swaps the whole of it
// out at once and works through its own `taken_` without the lock. One lock per burst rather
// than two per letter (the I/O thread and an actor thread no longer contend per message), and
// no allocation per letter once the buffers have grown (a deque of letters this size allocates
// a node for each).

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/envelope.hpp"

namespace omnilearn::runtime {

// What one remote peer has waiting in this process's mailboxes (SystemOptions::
// max_in_flight_per_peer).
struct InFlightCounter {
  std::atomic<std::size_t> messages{0};
  std::atomic<std::size_t> bytes{0};
};

// One message's share of its peer's InFlightCounter, from delivery until the actor has handled
// it (or it is dropped). Move-only; no allocation per message.
class InFlightSlot {
 public:
  InFlightSlot() = default;
  InFlightSlot(std::shared_ptr<InFlightCounter> counter, std::size_t bytes)
      : counter_(std::move(counter)), bytes_(bytes) {
    counter_->messages.fetch_add(1);
    counter_->bytes.fetch_add(bytes_);
  }
  InFlightSlot(InFlightSlot&& other) noexcept
      : counter_(std::move(other.counter_)), bytes_(other.bytes_) {}
  InFlightSlot& operator=(InFlightSlot&& other) noexcept {
    if (this != &other) {
      release();
      counter_ = std::move(other.counter_);
      bytes_ = other.bytes_;
    }
    return *this;
  }
  ~InFlightSlot() { release(); }
  explicit operator bool() const { return counter_ != nullptr; }

 private:
  void release() {
    if (!counter_) return;
    counter_->bytes.fetch_sub(bytes_);
    counter_->messages.fetch_sub(1);
    counter_.reset();
  }
  std::shared_ptr<InFlightCounter> counter_;
  std::size_t bytes_ = 0;
};

// One item of work for an actor: a message, or a task to run on the actor's turn (timers,
// ask callbacks) — both are serialized with everything else the actor does.
struct Letter {
  std::optional<Envelope> envelope;
  std::function<void()> task;
  InFlightSlot in_flight_slot;  // remote messages only
};

class Mailbox {
 public:
  // A new mailbox is claimed by its creator, who schedules the actor's first turn (on_start).
  Mailbox() = default;

  enum class Push {
    kRejected,  // closed: `letter` is left untouched
    kQueued,    // queued; the actor is already scheduled or running
    kClaimed,   // queued into an idle mailbox: the caller now holds the claim and must schedule
  };
  // Any thread.
  Push push(Letter&& letter);

  enum class Take {
    kLetter,    // `out` holds the next letter
    kReleased,  // empty: the claim is released (the next push claims it again)
    kFinished,  // closed and empty: the actor must finish; the claim stays with the caller
  };
  // The claimer only.
  Take take(Letter& out);
  // The claimer only: releases the claim if nothing is queued (true), else keeps it (false:
  // the claimer must schedule another turn). Closed and empty counts as queued: the actor must
  // still finish.
  bool release_if_empty();

  // Any thread. Letters already queued are still delivered; then take() says kFinished. True
  // when the mailbox was idle: the caller now holds the claim and must schedule a turn, which
  // finds it finished.
  bool close();
  bool closed() const;
  std::size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::vector<Letter> incoming_;      // guarded by mutex_
  bool closed_ = false;               // guarded by mutex_
  bool claimed_ = true;               // guarded by mutex_
  std::vector<Letter> taken_;         // the claimer's; older than everything in incoming_
  std::size_t next_ = 0;              // the claimer's: the next letter of taken_
  std::atomic<std::size_t> queued_{0};  // letters in either buffer, for size()
};

}  // namespace omnilearn::runtime
