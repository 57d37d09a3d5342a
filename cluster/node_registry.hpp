#pragma once
// NodeRegistry: the head's membership actor. Nodes register and heartbeat to it; it declares
// silent nodes suspect, then dead, tells subscribers (schedulers) and answers status queries.
// A subscriber stays until it unsubscribes or stops (the registry monitors it).

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "cluster/head_state.hpp"
#include "cluster/membership_table.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/running_clock.hpp"
#include "state/state_store.hpp"

namespace omnilearn::actors {

// Counters of the head's other parts for `omnilearn status --json` (the store's key count),
// called on the registry's thread for every status request: it must be thread-safe.
using HeadCounterSource = std::function<std::map<std::string, std::uint64_t>()>;

// What the registry keeps durable and what it took over at the head's start.
struct RegistryState {
  std::shared_ptr<state::StateStore> store;  // null: nothing is written (tests)
  HeadInfo head;                             // this head's start, for status and replies
  std::vector<NodeRecord> nodes;             // live nodes of the previous head
  std::map<std::string, std::uint64_t> incarnations;
  std::set<std::string> drained;  // node names drained for every job
};

// Where the head's dashboard answers, for StatusReply (url "" : no dashboard).
struct DashboardAddress {
  std::string url;
  bool token = false;
};

class NodeRegistry : public runtime::Actor {
 public:
  explicit NodeRegistry(MembershipConfig config, HeadCounterSource head_counters = {},
                        DashboardAddress dashboard = {}, RegistryState state = {});

  void on_start() override;
  void on_stop() override;
  void on_message(const runtime::Envelope& message) override;

 private:
  // The running time (runtime/running_clock.hpp): what the table's deadlines count in.
  std::chrono::steady_clock::time_point now();
  void sweep();
  // One line when the full-disruption rule starts holding (MembershipConfig) and when it ends,
  // from the table's disrupted_since() before and after a sweep.
  void log_full_disruption(std::optional<std::chrono::steady_clock::time_point> was_disrupted,
                           std::chrono::steady_clock::time_point now);
  void publish(const StateChange& change);
  void publish_event(const NodeInfo& node, const std::string& event);
  // Stages a registration for the store: the node's record and its name's incarnation, and the
  // removal of the incarnations it superseded. Its reply goes out once the batch is on disk.
  void stage_registration(const runtime::Envelope& message, const RegisterNodeReply& answer,
                          const std::vector<StateChange>& changes);
  // A node that died or left is no longer one a restarted head should expect.
  void stage_gone(const NodeRecord& node);
  // Group commit: everything staged since the last flush goes to the store in one batch (one
  // fsync for a burst of registrations, rather than one each), then the replies waiting on it.
  void schedule_flush();
  void flush();
  // A restored node was heard from, or declared dead: once none is awaited, the time since the
  // start is the head's nodes_back_ms.
  void restored_node_settled(const std::string& node_id);
  // The table's view of a node, with whether it is drained.
  NodeInfo info(const NodeRecord& record, std::chrono::steady_clock::time_point now) const;

  runtime::RunningClock clock_;  // the head's stalls are not the nodes' silence
  MembershipTable table_;
  HeadCounterSource head_counters_;
  DashboardAddress dashboard_;
  std::set<runtime::ActorAddress> subscribers_;
  std::uint64_t refused_registrations_ = 0;
  std::shared_ptr<state::StateStore> store_;
  HeadInfo head_;
  std::set<std::string> awaited_;  // restored nodes not yet heard from
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point alive_written_{};
  std::vector<state::Write> staged_;  // not yet committed
  // Replies waiting on the staged batch: each is told whether it reached the store.
  std::vector<std::function<void(bool written)>> unacknowledged_;
  bool flush_scheduled_ = false;
  std::set<std::string> drained_;  // names of the nodes drained for every job
};

}  // namespace omnilearn::actors
