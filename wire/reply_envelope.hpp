#pragma once
// A reply as an envelope the caller can still add attachments to (parameters, checkpoint
// bytes), addressed as ActorSystem::reply addresses its replies; send it with
// ActorSystem::send.

#include <string>
#include <utility>

#include "runtime/actor_system.hpp"

namespace omnilearn::actors {

inline runtime::Envelope reply_envelope(runtime::ActorSystem& system,
                                        const runtime::Envelope& request,
                                        runtime::MessageKind kind, std::string payload) {
  runtime::Envelope envelope =
      system.make_envelope(request.from, kind, std::move(payload), request.to);
  envelope.correlation = request.correlation;
  envelope.flags = runtime::Envelope::kReply;
  envelope.reply_dealer = request.arrived_via;
  envelope.reply_router = request.from_network && request.arrived_via.empty();
  return envelope;
}

}  // namespace omnilearn::actors
