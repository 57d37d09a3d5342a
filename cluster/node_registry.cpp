#include "cluster/node_registry.hpp"

#include <dirent.h>

#include <fmt/format.h>
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

NodeRegistry::NodeRegistry(MembershipConfig config, HeadCounterSource head_counters,
                           DashboardAddress dashboard, RegistryState state)
    : clock_(config.heartbeat_interval),
      table_(config),
      head_counters_(std::move(head_counters)),
      dashboard_(std::move(dashboard)),
      store_(std::move(state.store)),
      head_(std::move(state.head)) {
  table_.restore(state.nodes, state.incarnations, now());
  drained_ = std::move(state.drained);
  for (const auto& node : state.nodes) awaited_.insert(node.id);
}

void NodeRegistry::stage_registration(const runtime::Envelope& message,
                                      const RegisterNodeReply& answer,
                                      const std::vector<StateChange>& changes) {
  const auto* record = table_.find(answer.node_id);
  if (!store_ || !record) {
    reply(message, answer);
    return;
  }
  for (const auto& change : changes) {
    if (change.to == NodeState::kDead && change.node.id != record->id) {
      staged_.push_back({node_key(change.node.id), std::nullopt});
    }
  }
  staged_.push_back({node_key(record->id), encode_node(*record)});
  staged_.push_back({name_key(record->name), std::to_string(record->incarnation)});
  unacknowledged_.push_back([this, message, answer](bool written) {
    if (written) {
      reply(message, answer);
    } else {
      reply(message, runtime::ErrorReply{
                          "unavailable", "the head cannot write to its state store; see its log"});
    }
  });
  schedule_flush();
}

void NodeRegistry::stage_gone(const NodeRecord& node) {
  if (!store_) return;
  staged_.push_back({node_key(node.id), std::nullopt});
  schedule_flush();
}

void NodeRegistry::schedule_flush() {
  if (flush_scheduled_) return;
  flush_scheduled_ = true;
  // A millisecond collects what the mailbox holds of a burst (each registration takes
  // microseconds to handle) into one transaction.
  after(std::chrono::milliseconds(1), [this] { flush(); });
}

void NodeRegistry::flush() {
  flush_scheduled_ = false;
  auto writes = std::move(staged_);
  auto waiting = std::move(unacknowledged_);
  staged_.clear();
  unacknowledged_.clear();
  bool ok = true;
  try {
    store_->commit(writes);
  } catch (const state::StateStoreError& e) {
    // A restarted head would miss what this batch held: unacknowledged registrations are
    // retried by their agents (idempotent, and written again); a node gone stays expected by a
    // restarted head until its heartbeat timeout.
    spdlog::error("registry: cannot write {} change(s) to the state store: {}", writes.size(),
                  e.what());
    ok = false;
  }
  for (const auto& answer : waiting) answer(ok);
}

void NodeRegistry::restored_node_settled(const std::string& node_id) {
  if (awaited_.erase(node_id) == 0 || !awaited_.empty()) return;
  head_.nodes_back_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
  spdlog::info("registry: every node of the previous head settled {:.0f} ms after the start",
               head_.nodes_back_ms);
}

void NodeRegistry::on_stop() {
  // What is staged still reaches the store: the next head reads it.
  if (!staged_.empty()) flush();
}

void NodeRegistry::on_start() {
  spdlog::info("registry: heartbeat interval {} ms, dead after {} ms",
               table_.config().heartbeat_interval.count(),
               table_.config().heartbeat_timeout.count());
  sweep();
}

Clock::time_point NodeRegistry::now() {
  const auto running = clock_.now();
  runtime::log_found_gap(clock_, "registry: the head",
                         "no node is held to the heartbeats it could not hear meanwhile");
  return running;
}

void NodeRegistry::sweep() {
  auto now = this->now();
  const auto was_disrupted = table_.disrupted_since();
  for (const auto& change : table_.sweep(now)) publish(change);
  log_full_disruption(was_disrupted, now);
  if (store_ && now - alive_written_ >= std::chrono::seconds(1)) {
    alive_written_ = now;
    staged_.push_back(
        {kHeadAliveKey,
         fmt::format("{:.3f}", std::chrono::duration<double>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count())});
    schedule_flush();
  }
  // Sweeping at a quarter of the interval bounds detection lag to timeout + interval / 4.
  after(std::max<std::chrono::milliseconds>(std::chrono::milliseconds(10),
                                            table_.config().heartbeat_interval / 4),
        [this] { sweep(); });
}

void NodeRegistry::log_full_disruption(
    std::optional<std::chrono::steady_clock::time_point> was_disrupted,
    std::chrono::steady_clock::time_point now) {
  const auto since = table_.disrupted_since();
  const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  const auto& config = table_.config();
  if (since && !was_disrupted) {
    spdlog::warn(
        "registry: heard from no node for {:.1f} s ({} live): this head's own network "
        "may be down; no node is declared dead while none is heard, for at most {:.0f} s",
        seconds(now - *since), table_.live_count(),
        seconds(config.heartbeat_timeout + config.full_disruption_hold));
  } else if (!since && was_disrupted) {
    std::size_t dead = 0, silent = 0;
    for (const auto& node : table_.nodes()) {
      dead += node.state == NodeState::kDead && node.state_since == now ? 1 : 0;
      silent += node.state == NodeState::kSuspect ? 1 : 0;
    }
    if (dead > 0) {
      spdlog::warn("registry: heard from no node for {:.1f} s: {} declared dead",
                   seconds(now - *was_disrupted), dead);
    } else if (silent > 0) {
      spdlog::info(
          "registry: heard from a node again after {:.1f} s without any; {} still "
          "silent have {:.1f} s to be heard",
          seconds(now - *was_disrupted), silent, seconds(config.heartbeat_timeout));
    } else {
      spdlog::info("registry: heard from every node again after {:.1f} s without any",
                   seconds(now - *was_disrupted));
    }
  }
}

void NodeRegistry::publish(const StateChange& change) {
  const auto& node = change.node;
  if (change.to == NodeState::kAlive && change.from == NodeState::kDead) {
    spdlog::info("registry: node {} ({}) joined, incarnation {}", node.name, node.id,
                 node.incarnation);
    publish_event(info(node, now()), "joined");
    return;
  }
  spdlog::info("registry: node {} ({}) is {}", node.name, node.id, to_string(change.to));
  if (change.to == NodeState::kDead || change.to == NodeState::kLeft) {
    stage_gone(node);
    restored_node_settled(node.id);
    system().declare_system_down(node.system, std::string("node ") + to_string(change.to));
  }
  publish_event(info(node, now()), event_name(change.to));
}

NodeInfo NodeRegistry::info(const NodeRecord& record, Clock::time_point now) const {
  NodeInfo node = table_.info(record, now);
  node.drained = drained_.count(node.name) > 0;
  return node;
}

void NodeRegistry::publish_event(const NodeInfo& node, const std::string& event) {
  for (const auto& subscriber : subscribers_) tell(subscriber, NodeEvent{node, event});
}

void NodeRegistry::on_message(const runtime::Envelope& message) {
  auto now = this->now();
  switch (message.kind) {
    case MessageKind::kRegisterNode: {
      auto request = decode<RegisterNode>(message);
      if (!request) return;
      std::vector<StateChange> changes;
      auto answer = table_.register_node(*request, message.from.system, now, &changes);
      answer.head_epoch = head_.epoch;
      if (!answer.accepted) {
        ++refused_registrations_;
        spdlog::warn("registry: refused node '{}': {}", request->name, answer.error);
        reply(message, answer);
      } else {
        // Acknowledged once on disk (flush); a retry after a failed write is idempotent and
        // staged again.
        stage_registration(message, answer, changes);
      }
      for (const auto& change : changes) publish(change);
      return;
    }
    case MessageKind::kHeartbeat: {
      auto beat = decode<Heartbeat>(message);
      if (!beat) return;
      std::optional<StateChange> change;
      bool known = table_.heartbeat(*beat, now, &change);
      if (message.correlation != 0) reply(message, HeartbeatReply{known, head_.epoch});
      if (known) restored_node_settled(beat->node_id);
      if (change) publish(*change);
      if (known && !beat->actors.empty()) {
        if (const auto* record = table_.find(beat->node_id)) {
          publish_event(info(*record, now), "heartbeat");
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
        status.nodes.push_back(info(record, now));
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
      status.head = head_;
      status.dashboard_url = dashboard_.url;
      status.dashboard_token = dashboard_.token;
      reply(message, status);
      return;
    }
    case MessageKind::kSubscribeNodes: {
      // Monitored so that a subscriber that stops without unsubscribing (a crashed scheduler)
      // is dropped instead of collecting events as dead letters for the life of the head.
      if (subscribers_.insert(message.from).second) monitor(message.from);
      if (message.correlation != 0) {
        StatusReply snapshot;
        for (const auto& record : table_.nodes()) snapshot.nodes.push_back(info(record, now));
        reply(message, snapshot);
      }
      return;
    }
    case MessageKind::kSetNodeDrained: {
      auto request = runtime::unpack_payload<SetNodeDrained>(message.payload);
      if (!request) return;
      const bool changed = request->drained ? drained_.insert(request->node).second
                                            : drained_.erase(request->node) > 0;
      if (changed) {
        spdlog::info("registry: node {} {}", request->node,
                     request->drained ? "drained for every job" : "usable again");
        for (const auto& record : table_.nodes()) {
          if (record.name == request->node) {
            publish_event(info(record, now), request->drained ? "drained" : "undrained");
          }
        }
      }
      if (!changed || !store_) {
        if (message.correlation != 0) reply(message, SimpleReply{true, ""});
        return;
      }
      // A drain holds for later jobs, so it holds across a head restart too: written first.
      staged_.push_back({drained_key(request->node),
                         request->drained ? std::optional<std::string>("1") : std::nullopt});
      unacknowledged_.push_back([this, message](bool written) {
        if (message.correlation == 0) return;
        reply(message, SimpleReply{written, written ? "" : "the head cannot write to its state "
                                                           "store; see its log"});
      });
      schedule_flush();
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
