#pragma once
// An actor is a state object plus message handlers. The system runs each actor's handlers on the
// actor's own thread, one letter at a time, so an actor's state needs no lock: other threads
// reach it only through messages.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "runtime/address.hpp"
#include "runtime/codec.hpp"
#include "runtime/envelope.hpp"

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
    if (status != Status::kOk || reply.kind != M::kKind) return std::nullopt;
    return unpack_payload<M>(reply.payload);
  }
};
using AskCallback = std::function<void(AskResult)>;
using TimerId = std::uint64_t;

class Actor {
 public:
  virtual ~Actor() = default;

  // Each of these runs on the actor's thread.
  virtual void on_start() {}
  virtual void on_message(const Envelope& message) = 0;
  virtual void on_stop() {}

 protected:
  const ActorAddress& self() const { return self_; }
  ActorSystem& system() { return *system_; }

  // The helpers below may be called from the actor's own thread (its handlers).
  template <class M>
  void tell(const ActorAddress& to, const M& message);
  template <class M>
  void reply(const Envelope& request, const M& message);
  // `on_reply` runs later on this actor's thread, exactly once: with the reply, or with a
  // timeout/unreachable status.
  template <class M>
  void ask(const ActorAddress& to, const M& message, std::chrono::milliseconds timeout,
           AskCallback on_reply);
  // Runs `task` on this actor's thread after `delay` (unless cancelled first).
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
