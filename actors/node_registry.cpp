#include "actors/node_registry.hpp"

#include <dirent.h>

#include <spdlog/spdlog.h>

#include "runtime/system_messages.hpp"

namespace omnilearn::actors {
namespace {
using Clock = std::chrono::steady_clock;
const char* event_name(NodeState to) {
  switch (to) {
    case NodeState::kAlive: return "alive";
    case NodeState::kSuspect: return "suspect";
    case NodeState::kDead: return "dead";
    case NodeState::kLeft: return "left";
  }
  return "unknown";
}

// Entries of a /proc/self directory (tasks: threads; fd: open descriptors), leaving out the
// descriptor this listing itself holds open. 0 where /proc is not mounted.
std::uint64_t count_proc_entries(const char* path) {
  DIR* dir = ::opendir(path);
  if (!dir) return 0;
  const std::string own_fd = std::to_string(::dirfd(dir));
  const bool listing_fds = std::string(path) == "/proc/self/fd";
  std::uint64_t count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (listing_fds && name == own_fd) continue;
    ++count;
  }
  ::closedir(dir);
  return count;
}
}  // namespace

NodeRegistry::NodeRegistry(MembershipConfig config, HeadCounterSource head_counters)
    : table_(config), head_counters_(std::move(head_counters)) {}

void NodeRegistry::on_start() {
  spdlog::info("registry: heartbeat interval {} ms, dead after {} ms",
               table_.config().heartbeat_interval.count(),
               table_.config().heartbeat_timeout.count());
  sweep();
}

void NodeRegistry::sweep() {
  for (const auto& change : table_.sweep(Clock::now())) publish(change);
  // Sweeping at a quarter of the interval bounds detection lag to timeout + interval / 4.
  after(std::max<std::chrono::milliseconds>(std::chrono::milliseconds(10),
                                            table_.config().heartbeat_interval / 4),
        [this] { sweep(); });
}

void NodeRegistry::publish(const StateChange& change) {
  const auto& node = change.node;
  if (change.to == NodeState::kAlive && change.from == NodeState::kDead) {
    spdlog::info("registry: node {} ({}) joined, incarnation {}", node.name, node.id,
                 node.incarnation);
    publish_event(table_.info(node, Clock::now()), "joined");
    return;
  }
  spdlog::info("registry: node {} ({}) is {}", node.name, node.id, to_string(change.to));
  if (change.to == NodeState::kDead || change.to == NodeState::kLeft) {
    system().declare_system_down(node.system, std::string("node ") + to_string(change.to));
  }
  publish_event(table_.info(node, Clock::now()), event_name(change.to));
}

void NodeRegistry::publish_event(const NodeInfo& node, const std::string& event) {
  for (const auto& subscriber : subscribers_) tell(subscriber, NodeEvent{node, event});
}

void NodeRegistry::on_message(const runtime::Envelope& message) {
  auto now = Clock::now();
  switch (message.kind) {
    case MessageKind::kRegisterNode: {
      auto request = decode<RegisterNode>(message);
      if (!request) return;
      std::vector<StateChange> changes;
      auto answer = table_.register_node(*request, message.from.system, now, &changes);
      if (!answer.accepted) {
        ++refused_registrations_;
        spdlog::warn("registry: refused node '{}': {}", request->name, answer.error);
      }
      reply(message, answer);
      for (const auto& change : changes) publish(change);
      return;
    }
    case MessageKind::kHeartbeat: {
      auto beat = decode<Heartbeat>(message);
      if (!beat) return;
      std::optional<StateChange> change;
      bool known = table_.heartbeat(*beat, now, &change);
      if (message.correlation != 0) reply(message, HeartbeatReply{known});
      if (change) publish(*change);
      if (known && !beat->actors.empty()) {
        if (const auto* record = table_.find(beat->node_id)) {
          publish_event(table_.info(*record, now), "heartbeat");
        }
      }
      return;
    }
    case MessageKind::kLeaveNode: {
      auto leave = decode<LeaveNode>(message);
      if (!leave) return;
      std::optional<StateChange> change;
      bool known = table_.leave(leave->node_id, leave->incarnation, now, &change);
      if (message.correlation != 0) reply(message, SimpleReply{known, known ? "" : "unknown node"});
      if (change) publish(*change);
      return;
    }
    case MessageKind::kStatusRequest: {
      auto request = decode_or_count<StatusRequest>(message);
      StatusReply status;
      for (const auto& record : table_.nodes()) {
        if (request && !request->include_dead &&
            (record.state == NodeState::kDead || record.state == NodeState::kLeft)) {
          continue;
        }
        status.nodes.push_back(table_.info(record, now));
      }
      const auto& stats = system().transport_stats();
      const auto system_stats = system().stats();
      status.counters = {
          {"messages_in", stats.messages_in.load()},
          {"messages_out", stats.messages_out.load()},
          {"dropped_malformed", stats.dropped_malformed.load()},
          {"dropped_oversized", stats.dropped_oversized.load()},
          {"dropped_unknown_kind", stats.dropped_unknown_kind.load()},
          {"dropped_bad_version", stats.dropped_bad_version.load()},
          {"dropped_unroutable", stats.dropped_unroutable.load()},
          {"dropped_send_full", stats.dropped_send_full.load()},
          {"refused_peers", stats.refused_peers.load()},
          {"failed_handshakes", stats.failed_handshakes.load()},
          {"refused_registrations", refused_registrations_},
          {"refused_in_flight", system_stats.refused_in_flight},
          {"dead_letters", system_stats.dead_letters},
          // What a long-lived head holds: none of these may grow with the number of jobs run.
          {"actors", system_stats.actors},
          {"threads", count_proc_entries("/proc/self/task")},
          {"open_fds", count_proc_entries("/proc/self/fd")},
      };
      if (head_counters_) {
        for (const auto& [name, value] : head_counters_()) status.counters[name] = value;
      }
      reply(message, status);
      return;
    }
    case MessageKind::kSubscribeNodes: {
      // Monitored so that a subscriber that stops without unsubscribing (a crashed scheduler)
      // is dropped instead of collecting events as dead letters for the life of the head.
      if (subscribers_.insert(message.from).second) monitor(message.from);
      if (message.correlation != 0) {
        StatusReply snapshot;
        for (const auto& record : table_.nodes()) snapshot.nodes.push_back(table_.info(record, now));
        reply(message, snapshot);
      }
      return;
    }
    case MessageKind::kUnsubscribeNodes:
      subscribers_.erase(message.from);
      if (message.correlation != 0) reply(message, SimpleReply{true, ""});
      return;
    case MessageKind::kDown: {
      auto down = decode<runtime::Down>(message);
      if (down) subscribers_.erase(runtime::ActorAddress{down->system, down->actor});
      return;
    }
    default:
      if (message.correlation != 0) {
        reply(message, runtime::ErrorReply{"bad-request",
                                           std::string("registry does not handle ") +
                                               std::string(runtime::kind_name(message.kind))});
      }
  }
}

}  // namespace omnilearn::actors
