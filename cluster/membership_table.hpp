#pragma once
// The head's view of the cluster: who registered, when each node was last heard from, and which
// nodes are alive, suspect, dead or gone. Pure bookkeeping: time is passed in, so failure
// detection is tested with a fake clock.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cluster/full_disruption.hpp"
#include "wire/membership_protocol.hpp"

namespace omnilearn::actors {

enum class NodeState { kAlive, kSuspect, kDead, kLeft };
const char* to_string(NodeState state);

struct MembershipConfig {
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds heartbeat_timeout{3000};  // silent this long -> dead
  // Silent this long -> suspect (default: two missed beats).
  std::chrono::milliseconds suspect_after{0};
  std::size_t max_nodes = 4096;  // live nodes; registrations beyond are refused
  std::chrono::milliseconds forget_after{std::chrono::minutes(10)};  // drop dead/left records
  // Full disruption: when two or more nodes are live and none of them has been heard for
  // suspect_after, the head more likely lost its own network than every node at once, so it
  // declares none of them dead (they stay suspect) for up to this long beyond the timeout.
  // Once it hears any node again, every node still silent gets a heartbeat timeout from then.
  // Declared dead, a node's trainers are written off and its agent stops them when it is heard
  // again: a head whose network flapped would otherwise restart every job's every trainer.
  // Bounded, so that a cluster that really lost every node still ends up with none alive;
  // 0 turns the rule off.
  std::chrono::milliseconds full_disruption_hold{std::chrono::minutes(5)};
};

struct NodeRecord {
  std::string id;
  std::string name;
  std::string system;  // the node agent's actor-system id
  std::string machine_id;  // RegisterNode::machine_id ("" from an older agent)
  std::uint64_t incarnation = 0;
  NodeState state = NodeState::kAlive;
  NodeResources resources;
  NodeUsage usage;
  std::vector<ActorCounters> actors;
  std::chrono::steady_clock::time_point last_heard;
  std::chrono::steady_clock::time_point state_since;
};

struct StateChange {
  NodeRecord node;  // the record after the change
  NodeState from;
  NodeState to;
};

class MembershipTable {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit MembershipTable(MembershipConfig config, std::uint64_t seed = std::random_device{}());

  // A node registers from actor system `system`. While that same system is alive or suspect the
  // call is idempotent (a retried registration); otherwise it is a new incarnation of `name`
  // with a fresh id; a live older incarnation of the same name on the same machine is declared
  // dead (the machine restarted its worker: the old process is gone). Refused (reply.accepted =
  // false, reply.refusal says why): a name that is alive on another machine (machine ids both
  // known and different), a request whose previous incarnation a newer live one of the name
  // has superseded (a forgotten process coming back after its replacement started), a bad name,
  // and beyond max_nodes. The state changes it made are appended to `changes`.
  RegisterNodeReply register_node(const RegisterNode& request, const std::string& system,
                                  TimePoint now, std::vector<StateChange>* changes = nullptr);

  // Takes over what a previous head knew (cluster/head_state.hpp): its live nodes, as alive, each
  // with two heartbeat timeouts from `now` to be heard again before it is declared dead; and
  // every name's last incarnation, so a worker restarted meanwhile gets a newer one.
  void restore(const std::vector<NodeRecord>& nodes,
               const std::map<std::string, std::uint64_t>& incarnations, TimePoint now);

  // Records a heartbeat; false if the node is unknown or no longer alive (it must re-register).
  bool heartbeat(const Heartbeat& beat, TimePoint now, std::optional<StateChange>* change = nullptr);

  // A graceful leave; false if unknown.
  bool leave(const std::string& node_id, std::uint64_t incarnation, TimePoint now,
             std::optional<StateChange>* change = nullptr);

  // Advances failure detection to `now`; returns the state changes it made.
  std::vector<StateChange> sweep(TimePoint now);
  // While the full-disruption rule holds (MembershipConfig::full_disruption_hold): when the
  // last live node was last heard. nullopt otherwise. As of the last sweep().
  std::optional<TimePoint> disrupted_since() const { return disruption_.since(); }

  std::vector<NodeRecord> nodes() const;
  const NodeRecord* find(const std::string& node_id) const;
  const NodeRecord* find_by_name(const std::string& name) const;  // the newest incarnation
  std::size_t live_count() const;
  const MembershipConfig& config() const { return config_; }

  NodeInfo info(const NodeRecord& record, TimePoint now) const;

 private:
  MembershipConfig config_;
  std::mt19937_64 rng_;
  std::map<std::string, NodeRecord> nodes_;              // by node id
  std::map<std::string, std::uint64_t> incarnations_;    // by name: last incarnation given
  // Whether the full-disruption rule holds at `now` (cluster/full_disruption.hpp).
  bool full_disruption(TimePoint now);
  FullDisruption disruption_;
};

}  // namespace omnilearn::actors
