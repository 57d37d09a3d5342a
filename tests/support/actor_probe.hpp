#pragma once
// In-process helpers for runtime tests: actors built from lambdas, and a probe actor that hands
// everything it receives to a queue the test thread can wait on.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/actor_system.hpp"

namespace omnilearn::testing {

// An Actor whose helpers (tell, reply, ask, after, monitor, stop_self, self, system) are public,
// so test code running on the actor's thread can call them. Still: only from that thread.
class TestActor : public runtime::Actor {
 public:
  using Actor::after;
  using Actor::ask;
  using Actor::cancel_timer;
  using Actor::decode;
  using Actor::decode_or_count;
  using Actor::monitor;
  using Actor::reply;
  using Actor::self;
  using Actor::stop_self;
  using Actor::system;
  using Actor::tell;
};

// An actor made of lambdas; each runs on the actor's thread with the actor itself.
class FunctionActor : public TestActor {
 public:
  using Handler = std::function<void(FunctionActor&, const runtime::Envelope&)>;
  using Hook = std::function<void(FunctionActor&)>;

  explicit FunctionActor(Handler on_message, Hook on_start = {}, Hook on_stop = {})
      : on_message_(std::move(on_message)),
        on_start_(std::move(on_start)),
        on_stop_(std::move(on_stop)) {}

  void on_start() override {
    if (on_start_) on_start_(*this);
  }
  void on_message(const runtime::Envelope& message) override {
    if (on_message_) on_message_(*this, message);
  }
  void on_stop() override {
    if (on_stop_) on_stop_(*this);
  }

 private:
  Handler on_message_;
  Hook on_start_;
  Hook on_stop_;
};

// A thread-safe queue of envelopes. push() from any thread; the pops from the test thread.
class EnvelopeQueue {
 public:
  void push(runtime::Envelope envelope) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(std::move(envelope));
    }
    changed_.notify_all();
  }

  // The oldest envelope, waiting up to `timeout` for one.
  std::optional<runtime::Envelope> pop(std::chrono::milliseconds timeout) {
    return pop_if([](const runtime::Envelope&) { return true; }, timeout);
  }

  // The oldest envelope satisfying `predicate` (others stay queued), waiting up to `timeout`.
  std::optional<runtime::Envelope> pop_if(
      const std::function<bool(const runtime::Envelope&)>& predicate,
      std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    std::optional<runtime::Envelope> found;
    changed_.wait_for(lock, timeout, [&] {
      for (auto it = items_.begin(); it != items_.end(); ++it) {
        if (predicate(*it)) {
          found = std::move(*it);
          items_.erase(it);
          return true;
        }
      }
      return false;
    });
    return found;
  }

  // The oldest message of type M, decoded; nullopt on timeout (or if it does not decode).
  template <class M>
  std::optional<M> pop_as(std::chrono::milliseconds timeout) {
    auto envelope = pop_if([](const runtime::Envelope& e) { return e.kind == runtime::kind_of<M>(); }, timeout);
    if (!envelope) return std::nullopt;
    return runtime::unpack_payload<M>(envelope->payload);
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return items_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<runtime::Envelope> items_;  // guarded by mutex_
};

// An actor that pushes every message it receives to an EnvelopeQueue.
class ProbeActor : public TestActor {
 public:
  explicit ProbeActor(std::shared_ptr<EnvelopeQueue> queue) : queue_(std::move(queue)) {}
  void on_message(const runtime::Envelope& message) override { queue_->push(message); }

 private:
  std::shared_ptr<EnvelopeQueue> queue_;
};

// A spawned ProbeActor: its address, its queue, and a way to run code on its thread.
struct Probe {
  runtime::ActorSystem* system = nullptr;
  runtime::ActorAddress address;
  std::shared_ptr<EnvelopeQueue> queue;
  ProbeActor* actor = nullptr;  // owned by the system; valid while the actor runs

  // Runs `task(actor)` on the probe's thread, after everything already in its mailbox (any
  // thread). The usual way to make the probe ask, monitor or set timers.
  void run(std::function<void(ProbeActor&)> task) const {
    system->after(address.actor, std::chrono::milliseconds(0),
                  [task = std::move(task), actor = actor] { task(*actor); });
  }
};

inline Probe spawn_probe(runtime::ActorSystem& system, const std::string& name) {
  Probe probe;
  probe.system = &system;
  probe.queue = std::make_shared<EnvelopeQueue>();
  auto actor = std::make_unique<ProbeActor>(probe.queue);
  probe.actor = actor.get();
  probe.address = system.spawn(name, std::move(actor));
  return probe;
}

}  // namespace omnilearn::testing
