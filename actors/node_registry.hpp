#pragma once
// NodeRegistry: the head's membership actor. Nodes register and heartbeat to it; it declares
// silent nodes suspect, then dead, tells subscribers (schedulers) and answers status queries.

#include <set>

#include "actors/membership_table.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::actors {

class NodeRegistry : public runtime::Actor {
 public:
  explicit NodeRegistry(MembershipConfig config);

  void on_start() override;
  void on_message(const runtime::Envelope& message) override;

 private:
  void sweep();
  void publish(const StateChange& change);
  void publish_event(const NodeInfo& node, const std::string& event);

  MembershipTable table_;
  std::set<runtime::ActorAddress> subscribers_;
  std::uint64_t refused_registrations_ = 0;
};

}  // namespace omnilearn::actors
