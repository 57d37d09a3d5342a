#pragma once
// Messages the runtime itself speaks (kinds 1..99).

#include <cstdint>
#include <string>

#include <msgpack.hpp>

#include "runtime/message_kind.hpp"

namespace omnilearn::runtime {

// Reply to an ask that could not be served (no such actor, handler error, refused).
struct ErrorReply {
  static constexpr MessageKind kKind = MessageKind::kError;
  std::string code;     // "no-such-actor", "bad-request", "refused", "internal", "limit"
  std::string message;  // for people: what went wrong and what to do
  MSGPACK_DEFINE(code, message);
};

// Sent to a remote system's "$system" actor: tell `watcher` when `target` stops.
struct MonitorRequest {
  static constexpr MessageKind kKind = MessageKind::kMonitor;
  std::string watcher_actor;
  std::string target_actor;
  MSGPACK_DEFINE(watcher_actor, target_actor);
};

// A monitored actor (or its whole system, when actor is empty) is gone.
struct Down {
  static constexpr MessageKind kKind = MessageKind::kDown;
  std::string system;
  std::string actor;
  std::string reason;
  MSGPACK_DEFINE(system, actor, reason);
};

struct Ping {
  static constexpr MessageKind kKind = MessageKind::kPing;
  std::uint64_t sequence = 0;
  MSGPACK_DEFINE(sequence);
};

struct Pong {
  static constexpr MessageKind kKind = MessageKind::kPong;
  std::uint64_t sequence = 0;
  MSGPACK_DEFINE(sequence);
};

}  // namespace omnilearn::runtime
