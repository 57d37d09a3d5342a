#pragma once
// The unit the runtime moves: a typed, addressed msgpack payload, plus optional bulk frames.

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/address.hpp"
#include "runtime/message_kind.hpp"

namespace omnilearn::runtime {

struct Envelope {
  enum Flags : std::uint8_t { kNone = 0, kReply = 1 };

  MessageKind kind = MessageKind::kError;
  ActorAddress to;     // to.system is only used for routing; the wire carries to.actor
  ActorAddress from;   // from.system is filled by the sender's system
  std::uint64_t correlation = 0;  // non-zero for asks and their replies
  std::uint8_t flags = kNone;
  std::string payload;                   // msgpack bytes of the typed message
  std::vector<std::string> attachments;  // bulk frames (tensors) sent as separate zero-copy frames

  bool is_reply() const { return (flags & kReply) != 0; }
};

}  // namespace omnilearn::runtime
