#pragma once
// One ActorSystem per process: the actors it hosts, the transport that connects it to other
// processes, the timers, and the bookkeeping for asks and monitors.

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "runtime/actor.hpp"
#include "runtime/message_types.hpp"
#include "runtime/transport.hpp"

namespace omnilearn::runtime {

struct SystemOptions {
  std::string system_id;  // empty: a fresh random id
  CodecLimits limits;
  // Messages, and their bytes, from one remote system that may wait in this system's mailboxes
  // at once. Beyond either, an ask is answered with an "overloaded" error and a tell is dropped
  // (and counted): a peer that sends faster than the actors here handle cannot grow this
  // process's memory. (The message count is above the sender's own send queue, 10,000 minus
  // ZeroMQ's slack, so a well-behaved burst fits.)
  std::size_t max_in_flight_per_peer = 8192;
  std::size_t max_in_flight_bytes_per_peer = 256u << 20;
  // CURVE credentials for every connection (runtime/security.hpp); unset: plain TCP.
  std::optional<ClusterCredentials> credentials;
  // Threads that run the actors' turns (runtime/actor_scheduler.hpp); 0: max(2, cores). Any
  // number of actors share them.
  std::size_t actor_threads = 0;
  // How long an actor's turn may run on the I/O thread before the standby takes the sockets
  // over (TransportOptions::inline_takeover); that actor's turns then go to the pool for a
  // while. A thread preempted on a loaded machine looks like a long turn too.
  std::chrono::milliseconds inline_takeover{2};
};

// Counters beyond the transport's.
struct SystemStats {
  std::uint64_t dead_letters = 0;   // messages to actors that do not exist
  std::uint64_t actors = 0;
  std::uint64_t pending_asks = 0;
  std::uint64_t refused_in_flight = 0;  // messages refused by max_in_flight_per_peer
  std::uint64_t mismatched_replies = 0;  // replies from a peer other than the one asked: dropped
  std::uint64_t remote_watches = 0;      // monitors of actors on other systems still armed
  std::uint64_t actor_threads = 0;       // the scheduler's threads now (spares included)
  std::uint64_t timer_entries = 0;       // timers held, live or cancelled-not-yet-dropped
};

class ActorSystem {
 public:
  explicit ActorSystem(SystemOptions options = {});
  ~ActorSystem();  // stops every actor (on_stop runs), then the timers and the transport
  ActorSystem(const ActorSystem&) = delete;
  ActorSystem& operator=(const ActorSystem&) = delete;

  const std::string& id() const;

  // Accept connections from other processes (any thread). Returns the bound endpoint.
  std::string listen(const std::string& endpoint);

  // Starts `actor` under `name` (unique in this system); its handlers run on the system's actor
  // threads, one letter at a time. Any thread.
  // Throws std::invalid_argument if the name is taken.
  ActorAddress spawn(const std::string& name, std::unique_ptr<Actor> actor);
  template <class A, class... Args>
  ActorAddress spawn(const std::string& name, Args&&... args) {
    return spawn(name, std::make_unique<A>(std::forward<Args>(args)...));
  }
  // Stops a local actor; blocks until its on_stop has run, except when called from that actor's
  // own handler (it then finishes after the current letter). Any thread.
  void stop(const std::string& name, const std::string& reason = "stopped");
  bool has_actor(const std::string& name) const;

  // Fire-and-forget (any thread). `from` may be empty for messages from outside any actor.
  template <class M>
  void tell(const ActorAddress& to, const M& message, const ActorAddress& from = {}) {
    send(make_envelope(to, kind_of<M>(), pack_payload(message), from));
  }
  // Ask from outside an actor (any thread): the future is always satisfied, at the latest when
  // the timeout fires.
  template <class M>
  std::future<AskResult> ask(const ActorAddress& to, const M& message,
                             std::chrono::milliseconds timeout) {
    return ask_envelope(make_envelope(to, kind_of<M>(), pack_payload(message), {}), timeout);
  }
  std::future<AskResult> ask_envelope(Envelope request, std::chrono::milliseconds timeout);
  // Ask on behalf of a local actor: `on_reply` runs in one of that actor's turns.
  void ask_envelope(Envelope request, std::chrono::milliseconds timeout, AskCallback on_reply);
  // Ask from outside an actor with a completion instead of a future: `on_reply` runs exactly
  // once, on whichever thread completes the ask (the I/O thread, the timer thread, the caller's
  // or an actor's), so it must be quick and must not block. Any thread.
  void ask_then(Envelope request, std::chrono::milliseconds timeout, AskCallback on_reply);

  // Replies to `request` (any thread).
  template <class M>
  void reply(const Envelope& request, const M& message) {
    Envelope envelope = make_envelope(request.from, kind_of<M>(), pack_payload(message), request.to);
    envelope.correlation = request.correlation;
    envelope.flags = Envelope::kReply;
    envelope.reply_dealer = request.arrived_via;
    envelope.reply_router = request.from_network && request.arrived_via.empty();
    send(std::move(envelope));
  }

  // `watcher` (a local actor) receives Down when `target` stops or its system is declared down.
  void monitor(const ActorAddress& watcher, const ActorAddress& target);
  // Tells every local watcher of an actor on `system` that it is gone (failure detection lives
  // above the runtime: the node registry decides when a system is dead).
  void declare_system_down(const std::string& system, const std::string& reason);

  // Runs `task` in one of `actor`'s turns after `delay`. Returns an id for cancel_timer.
  TimerId after(const std::string& actor, std::chrono::milliseconds delay,
                std::function<void()> task);
  void cancel_timer(TimerId id);

  // Any thread.
  void send(Envelope envelope);
  Envelope make_envelope(const ActorAddress& to, MessageKind kind, std::string payload,
                         const ActorAddress& from) const;

  // A handler could not decode `request`'s payload: counted with the malformed frames
  // (TransportStats::dropped_malformed) and, when it is an ask, answered now with
  // ErrorReply{"bad-request", ...} naming the kind, so the asker does not wait out its timeout.
  // With `answer` false only counted (the handler answers in its own reply type). Any thread.
  void refuse_undecodable(const Envelope& request, bool answer = true);

  const TransportStats& transport_stats() const;
  SystemStats stats() const;

  // Nothing leaves this process for the network while `fence` gives a reason
  // (Transport::set_send_fence): a head sets it to its lease, so that once the lease may have
  // run out no answer or order of it reaches another process. Messages between its own actors
  // are not fenced. Any thread; an empty function removes the fence.
  void set_send_fence(Transport::SendFence fence);

  // Stops everything now (idempotent); the destructor calls it.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Actor helpers, defined here because they need the system.
template <class M>
std::optional<M> Actor::decode(const Envelope& message) {
  auto decoded = unpack_payload<M>(message.payload);
  if (!decoded) system_->refuse_undecodable(message);
  return decoded;
}
template <class M>
std::optional<M> Actor::decode_or_count(const Envelope& message) {
  auto decoded = unpack_payload<M>(message.payload);
  if (!decoded) system_->refuse_undecodable(message, false);
  return decoded;
}
template <class M>
void Actor::tell(const ActorAddress& to, const M& message) {
  system_->tell(to, message, self_);
}
template <class M>
void Actor::reply(const Envelope& request, const M& message) {
  system_->reply(request, message);
}
template <class M>
void Actor::ask(const ActorAddress& to, const M& message, std::chrono::milliseconds timeout,
                AskCallback on_reply) {
  system_->ask_envelope(system_->make_envelope(to, kind_of<M>(), pack_payload(message), self_), timeout,
                        std::move(on_reply));
}

}  // namespace omnilearn::runtime
