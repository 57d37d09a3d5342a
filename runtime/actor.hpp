#pragma once
// An actor is a state object plus message handlers. The system runs each actor's handlers one
// letter at a time, in turns on a shared pool of threads (runtime/actor_scheduler.hpp), so an
// actor's state needs no lock: other threads reach it only through messages. A turn may run on
// any pool thread, so handlers must not rely on thread-local state, and should not block: a
// handler that must wait wraps the wait in ActorScheduler::BlockingScope.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "runtime/address.hpp"
#include "runtime/codec.hpp"
#include "runtime/envelope.hpp"
#include "runtime/message_types.hpp"

namespace omnilearn::runtime {

class ActorSystem;

// The outcome of an ask: a reply, or why there is none.
struct AskResult {
  enum class Status { kOk, kTimeout, kError, kUnreachable };
  Status status = Status::kTimeout;
  Envelope reply;     // valid when status == kOk (may itself be an ErrorReply: see error)
  std::string error;  // for kTimeout / kError / kUnreachable: what happened

  bool ok() const { return status == Status::kOk; }
  // The reply decoded as M, or nullopt if it is not an M (an ErrorReply, say, or malformed).
  template <class M>
  std::optional<M> as() const {
    if (status != Status::kOk || reply.kind != kind_of<M>()) return std::nullopt;
    return unpack_payload<M>(reply.payload);
  }
};
using AskCallback = std::function<void(AskResult)>;

// `envelope`'s payload as M, or nullopt when the envelope is not an M or the payload is
// malformed (never throws).
template <class M>
std::optional<M> message_as(const Envelope& envelope) {
  if (envelope.kind != kind_of<M>()) return std::nullopt;
  return unpack_payload<M>(envelope.payload);
}
using TimerId = std::uint64_t;

class Actor {
 public:
  virtual ~Actor() = default;

  // Each of these runs in one of the actor's turns.
  virtual void on_start() {}
  virtual void on_message(const Envelope& message) = 0;
  virtual void on_stop() {}
  // A message from the network (or the answer to one of its asks) that finds an actor idle is
  // handled on the transport's I/O thread, the thread that read it, saving two thread hand-offs
  // per message; a turn there that runs past the transport's takeover limit or blocks (in a
  // BlockingScope) hands the sockets to a standby thread, so nothing stalls the reading for
  // long. An actor whose turn there was taken over runs on the pool for the next second, unless
  // this says true: every handler finishes in microseconds and never blocks (the task router and
  // the executors, which only relay). Asked once, at spawn.
  virtual bool runs_inline() const { return false; }

 protected:
  const ActorAddress& self() const { return self_; }
  ActorSystem& system() { return *system_; }

  // The helpers below may be called from the actor's own handlers.
  template <class M>
  void tell(const ActorAddress& to, const M& message);
  template <class M>
  void reply(const Envelope& request, const M& message);
  // `on_reply` runs later in one of this actor's turns, exactly once: with the reply, or with a
  // timeout/unreachable status.
  template <class M>
  void ask(const ActorAddress& to, const M& message, std::chrono::milliseconds timeout,
           AskCallback on_reply);
  // `message`'s payload as M, or nullopt when it does not decode: then counted with the
  // transport's malformed frames and, when `message` is an ask, answered at once with an
  // ErrorReply "bad-request" (ActorSystem::refuse_undecodable), so no asker waits out its timeout
  // for a message that was dropped here. Every handler decodes its payloads with this (or with
  // decode_or_count, when it answers a bad request in its own reply type).
  template <class M>
  std::optional<M> decode(const Envelope& message);
  // As decode, without the answer: only counted.
  template <class M>
  std::optional<M> decode_or_count(const Envelope& message);
  // Runs `task` in one of this actor's turns after `delay` (unless cancelled first).
  TimerId after(std::chrono::milliseconds delay, std::function<void()> task);
  void cancel_timer(TimerId id);
  // Receive a Down message when `target` stops or its system is declared down.
  void monitor(const ActorAddress& target);
  // Ends this actor after the current letter; monitors get Down with `reason`.
  void stop_self(const std::string& reason = "stopped");

 private:
  friend class ActorSystem;
  ActorSystem* system_ = nullptr;
  ActorAddress self_;
};

}  // namespace omnilearn::runtime
