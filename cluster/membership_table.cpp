#include "cluster/membership_table.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace omnilearn::actors {

const char* to_string(NodeState state) {
  switch (state) {
    case NodeState::kAlive: return "alive";
    case NodeState::kSuspect: return "suspect";
    case NodeState::kDead: return "dead";
    case NodeState::kLeft: return "left";
  }
  return "unknown";
}

namespace {

// Suspect after two missed beats unless set, and never after the timeout.
MembershipConfig normalized(MembershipConfig config) {
  if (config.suspect_after.count() <= 0) config.suspect_after = 2 * config.heartbeat_interval;
  config.suspect_after = std::min(config.suspect_after, config.heartbeat_timeout);
  return config;
}

}  // namespace

MembershipTable::MembershipTable(MembershipConfig config, std::uint64_t seed)
    : config_(normalized(config)),
      rng_(seed),
      disruption_(config_.suspect_after, config_.heartbeat_timeout, config_.full_disruption_hold) {}

RegisterNodeReply MembershipTable::register_node(const RegisterNode& request,
                                                 const std::string& system, TimePoint now,
                                                 std::vector<StateChange>* changes) {
  RegisterNodeReply reply;
  reply.heartbeat_interval_ms = static_cast<std::int32_t>(config_.heartbeat_interval.count());
  reply.heartbeat_timeout_ms = static_cast<std::int32_t>(config_.heartbeat_timeout.count());
  if (request.name.empty() || request.name.size() > 128) {
    reply.error = "node name must be 1 to 128 characters";
    reply.refusal = kRefusedBadName;
    return reply;
  }
  // A retried registration from the same live process keeps its identity.
  for (auto& [id, record] : nodes_) {
    if (record.system == system && record.name == request.name &&
        (record.state == NodeState::kAlive || record.state == NodeState::kSuspect)) {
      record.last_heard = now;
      reply.accepted = true;
      reply.node_id = record.id;
      reply.incarnation = record.incarnation;
      return reply;
    }
  }
  // A live name belongs to its process: another machine cannot take it over, and neither can
  // the process it replaced.
  for (const auto& [id, record] : nodes_) {
    if (record.name != request.name ||
        (record.state != NodeState::kAlive && record.state != NodeState::kSuspect)) {
      continue;
    }
    if (request.previous_incarnation > 0 && record.incarnation > request.previous_incarnation) {
      reply.error = fmt::format(
          "the node name '{}' now belongs to a newer worker (node {}, incarnation {}) that "
          "started while this one (incarnation {}) was out of touch with the head; stop this "
          "one, or restart it with another --name",
          request.name, record.id, record.incarnation, request.previous_incarnation);
      reply.refusal = kRefusedNameTaken;
      return reply;
    }
    if (!request.machine_id.empty() && !record.machine_id.empty() &&
        request.machine_id != record.machine_id) {
      reply.error = fmt::format(
          "the node name '{}' is taken by a live worker on another machine (node {}); start "
          "this one with another --name, or stop that one first (a name is free again once "
          "its worker leaves or is declared dead)",
          request.name, record.id);
      reply.refusal = kRefusedNameTaken;
      return reply;
    }
  }
  if (live_count() >= config_.max_nodes) {
    reply.error = fmt::format("the cluster is full ({} live nodes; the head's --max-nodes)",
                              config_.max_nodes);
    reply.refusal = kRefusedFull;
    return reply;
  }
  // Any older incarnation of this name that is still considered alive is superseded: the same
  // name from a new process on the same machine means the old process is gone.
  for (auto& [id, record] : nodes_) {
    if (record.name == request.name &&
        (record.state == NodeState::kAlive || record.state == NodeState::kSuspect)) {
      auto from = record.state;
      record.state = NodeState::kDead;
      record.state_since = now;
      if (changes) changes->push_back(StateChange{record, from, NodeState::kDead});
    }
  }
  NodeRecord record;
  do {
    record.id = fmt::format("n-{:08x}", static_cast<std::uint32_t>(rng_()));
  } while (nodes_.count(record.id));
  record.name = request.name;
  record.system = system;
  record.machine_id = request.machine_id;
  record.incarnation = ++incarnations_[request.name];
  record.resources = request.resources;
  record.last_heard = now;
  record.state_since = now;
  reply.accepted = true;
  reply.node_id = record.id;
  reply.incarnation = record.incarnation;
  if (changes) changes->push_back(StateChange{record, NodeState::kDead, NodeState::kAlive});
  nodes_.emplace(record.id, std::move(record));
  return reply;
}

void MembershipTable::restore(const std::vector<NodeRecord>& nodes,
                              const std::map<std::string, std::uint64_t>& incarnations,
                              TimePoint now) {
  for (const auto& [name, incarnation] : incarnations) {
    auto& last = incarnations_[name];
    last = std::max(last, incarnation);
  }
  for (auto record : nodes) {
    record.state = NodeState::kAlive;
    // Heard from one heartbeat timeout from now: a restored node has two timeouts to be heard
    // again, since its agent only moves to this head once it has given up on the one before
    // (a frozen head costs it a heartbeat timeout, a standby not yet elected a few retries).
    record.last_heard = now + config_.heartbeat_timeout;
    record.state_since = now;
    auto& last = incarnations_[record.name];
    last = std::max(last, record.incarnation);
    nodes_[record.id] = std::move(record);
  }
}

bool MembershipTable::heartbeat(const Heartbeat& beat, TimePoint now,
                                std::optional<StateChange>* change) {
  auto it = nodes_.find(beat.node_id);
  if (it == nodes_.end()) return false;
  auto& record = it->second;
  if (record.incarnation != beat.incarnation) return false;
  if (record.state == NodeState::kDead || record.state == NodeState::kLeft) return false;
  record.last_heard = now;
  record.usage = beat.usage;
  record.actors = beat.actors;
  if (record.state == NodeState::kSuspect) {
    record.state = NodeState::kAlive;
    record.state_since = now;
    if (change) *change = StateChange{record, NodeState::kSuspect, NodeState::kAlive};
  }
  return true;
}

bool MembershipTable::leave(const std::string& node_id, std::uint64_t incarnation, TimePoint now,
                            std::optional<StateChange>* change) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.incarnation != incarnation) return false;
  auto& record = it->second;
  if (record.state == NodeState::kLeft || record.state == NodeState::kDead) return true;
  auto from = record.state;
  record.state = NodeState::kLeft;
  record.state_since = now;
  if (change) *change = StateChange{record, from, NodeState::kLeft};
  return true;
}

bool MembershipTable::full_disruption(TimePoint now) {
  std::vector<TimePoint*> last_heard;
  for (auto& [id, record] : nodes_) {
    if (record.state == NodeState::kAlive || record.state == NodeState::kSuspect) {
      last_heard.push_back(&record.last_heard);
    }
  }
  return disruption_.update(last_heard, now);
}

std::vector<StateChange> MembershipTable::sweep(TimePoint now) {
  const bool hold = full_disruption(now);
  std::vector<StateChange> changes;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    auto& record = it->second;
    auto silent = now - record.last_heard;
    if ((record.state == NodeState::kDead || record.state == NodeState::kLeft) &&
        now - record.state_since > config_.forget_after) {
      it = nodes_.erase(it);
      continue;
    }
    if (record.state == NodeState::kAlive || record.state == NodeState::kSuspect) {
      NodeState next = record.state;
      if (silent >= config_.heartbeat_timeout && !hold) {
        next = NodeState::kDead;
      } else if (silent >= config_.suspect_after) {
        next = NodeState::kSuspect;
      }
      if (next != record.state) {
        auto from = record.state;
        record.state = next;
        record.state_since = now;
        changes.push_back(StateChange{record, from, next});
      }
    }
    ++it;
  }
  return changes;
}

std::vector<NodeRecord> MembershipTable::nodes() const {
  std::vector<NodeRecord> result;
  for (const auto& [id, record] : nodes_) result.push_back(record);
  return result;
}

const NodeRecord* MembershipTable::find(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeRecord* MembershipTable::find_by_name(const std::string& name) const {
  const NodeRecord* best = nullptr;
  for (const auto& [id, record] : nodes_) {
    if (record.name == name && (!best || record.incarnation > best->incarnation)) best = &record;
  }
  return best;
}

std::size_t MembershipTable::live_count() const {
  std::size_t count = 0;
  for (const auto& [id, record] : nodes_) {
    if (record.state == NodeState::kAlive || record.state == NodeState::kSuspect) ++count;
  }
  return count;
}

NodeInfo MembershipTable::info(const NodeRecord& record, TimePoint now) const {
  NodeInfo info;
  info.id = record.id;
  info.name = record.name;
  info.state = to_string(record.state);
  info.incarnation = record.incarnation;
  info.last_heartbeat_ms = std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(now - record.last_heard).count());
  info.system = record.system;
  info.resources = record.resources;
  info.usage = record.usage;
  info.actors = record.actors;
  return info;
}

}  // namespace omnilearn::actors
