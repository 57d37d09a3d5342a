#pragma once
// The unit the runtime moves: a typed, addressed msgpack payload, plus optional bulk frames.

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/address.hpp"
#include "runtime/bytes.hpp"
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
  // Bulk frames (tensors), each its own ZeroMQ frame: handed to the socket and taken from it
  // without a copy (runtime/bytes.hpp).
  std::vector<Bytes> attachments;
  // Local only, never on the wire: the endpoint of our DEALER it arrived through ("" when it
  // came in through our ROUTER or from this process). Lets an ask whose target was an endpoint
  // accept a reply only from the peer at that endpoint.
  std::string arrived_via;
  bool from_network = false;  // local only: set by the transport on everything it receives
  // Local only, on replies: go back over the connection the request came in on (our DEALER to
  // this endpoint, or our ROUTER), so the reply reaches the asker from the peer it asked even
  // when the two systems are connected both ways.
  std::string reply_dealer;
  bool reply_router = false;

  bool is_reply() const { return (flags & kReply) != 0; }
};

}  // namespace omnilearn::runtime
