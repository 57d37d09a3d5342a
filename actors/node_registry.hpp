#pragma once
// NodeRegistry: the head's membership actor. Nodes register and heartbeat to it; it declares
// silent nodes suspect, then dead, tells subscribers (schedulers) and answers status queries.
// A subscriber stays until it unsubscribes or stops (the registry monitors it).

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "actors/membership_table.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::actors {

// Counters of the head's other parts for `omnilearn status --json` (the store's key count),
// called on the registry's thread for every status request: it must be thread-safe.
using HeadCounterSource = std::function<std::map<std::string, std::uint64_t>()>;

// Where the head's dashboard answers, for StatusReply (url "" : no dashboard).
struct DashboardAddress {
  std::string url;
  bool token = false;
};

class NodeRegistry : public runtime::Actor {
 public:
  explicit NodeRegistry(MembershipConfig config, HeadCounterSource head_counters = {},
                        DashboardAddress dashboard = {});

  void on_start() override;
  void on_message(const runtime::Envelope& message) override;

 private:
  void sweep();
  void publish(const StateChange& change);
  void publish_event(const NodeInfo& node, const std::string& event);
  // The table's view of a node, with whether it is drained.
  NodeInfo info(const NodeRecord& record, std::chrono::steady_clock::time_point now) const;

  MembershipTable table_;
  HeadCounterSource head_counters_;
  DashboardAddress dashboard_;
  std::set<runtime::ActorAddress> subscribers_;
  std::uint64_t refused_registrations_ = 0;
  std::set<std::string> drained_;  // names of the nodes drained for every job
};

}  // namespace omnilearn::actors
