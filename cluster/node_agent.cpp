#include "cluster/node_agent.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime/actor_scheduler.hpp"

namespace omnilearn::actors {

NodeAgent::NodeAgent(AgentOptions options) : options_(std::move(options)) {
  heads_.push_back(options_.head_endpoint);
  for (const auto& other : options_.other_head_endpoints) {
    if (std::find(heads_.begin(), heads_.end(), other) == heads_.end()) heads_.push_back(other);
  }
  head_endpoint_ = heads_.front();
}

void NodeAgent::try_next_head() {
  if (heads_.size() < 2) return;
  head_index_ = (head_index_ + 1) % heads_.size();
  head_endpoint_ = heads_[head_index_];
  spdlog::info("agent: trying the head at {}", head_endpoint_);
}

void NodeAgent::on_start() { register_with_head(); }

void NodeAgent::register_with_head() {
  state_.registered = false;
  std::uint64_t epoch = ++registration_epoch_;
  RegisterNode request{options_.name, options_.resources, OMNILEARN_VERSION, options_.machine_id,
                       last_incarnation_};
  ask(registry(), request, options_.register_timeout, [this, epoch](runtime::AskResult result) {
    if (epoch != registration_epoch_) return;
    auto reply = result.as<RegisterNodeReply>();
    if (reply && reply->accepted) {
      state_ = AgentState{true, reply->node_id, reply->incarnation};
      last_incarnation_ = reply->incarnation;
      heartbeat_interval_ = std::chrono::milliseconds(std::max(10, reply->heartbeat_interval_ms));
      heartbeat_timeout_ = std::chrono::milliseconds(std::max(50, reply->heartbeat_timeout_ms));
      register_attempts_ = 0;
      missed_replies_ = 0;
      head_unreachable_logged_ = false;
      spdlog::info("agent: registered as {} (node {}, incarnation {})", options_.name,
                   reply->node_id, reply->incarnation);
      on_registered(state_);
      note_head_epoch(reply->head_epoch);
      schedule_heartbeat();
      return;
    }
    ++register_attempts_;
    if (reply) {
      on_refused(*reply);
    } else {
      if (register_attempts_ == 1 || register_attempts_ % 10 == 0) {
        spdlog::warn("agent: cannot register with the head at {} ({}); retrying",
                     head_endpoint_, result.error.empty() ? "bad reply" : result.error);
      }
      try_next_head();  // a standby may be the active head now
    }
    // Back off up to 2 s so a head that comes back is found quickly without flooding it.
    auto delay = std::chrono::milliseconds(std::min(2000, 100 << std::min(register_attempts_, 4)));
    after(delay, [this, epoch] {
      if (epoch == registration_epoch_) register_with_head();
    });
  });
}

void NodeAgent::schedule_heartbeat() {
  std::uint64_t epoch = registration_epoch_;
  after(heartbeat_interval_, [this, epoch] {
    if (epoch != registration_epoch_ || !state_.registered) return;
    send_heartbeat();
    schedule_heartbeat();
  });
}

void NodeAgent::send_heartbeat() {
  Heartbeat beat;
  beat.node_id = state_.node_id;
  beat.incarnation = state_.incarnation;
  beat.sequence = ++sequence_;
  probe_usage(beat.usage);
  fill_usage(beat.usage);
  beat.actors = hosted_counters();
  std::uint64_t epoch = registration_epoch_;
  ask(registry(), beat, heartbeat_timeout_,
      [this, epoch, sent_to = head_endpoint_,
       sent_at = std::chrono::steady_clock::now()](runtime::AskResult result) {
    if (epoch != registration_epoch_) return;
    // A beat sent to a head this agent has already left behind says nothing about the one in
    // use: not by its silence, and not by an "unknown" either (a deposed head, thawed after a
    // standby took over, may no longer know a node the active head knows).
    if (sent_to != head_endpoint_) return;
    if (auto reply = result.as<HeartbeatReply>()) {
      missed_replies_ = 0;
      const bool was_unreachable = head_unreachable_logged_;
      if (was_unreachable) spdlog::info("agent: the head answers again");
      head_unreachable_logged_ = false;
      if (!reply->known) {
        spdlog::warn("agent: the head no longer knows node {}; registering again",
                     state_.node_id);
        on_forgotten();
        register_with_head();
        return;
      }
      note_head_epoch(reply->head_epoch);
      if (was_unreachable) on_head_answers_again(unanswered_since_);
      return;
    }
    if (++missed_replies_ >= 1 && !head_unreachable_logged_) {
      head_unreachable_logged_ = true;
      unanswered_since_ = sent_at;
      spdlog::warn("agent: no heartbeat reply from the head at {} ({}); still trying",
                   head_endpoint_, result.error);
    }
    // Two missed in a row: the next head of the list, which knows this node too if it took
    // over the same state.
    if (heads_.size() > 1 && missed_replies_ >= 2) {
      missed_replies_ = 0;
      try_next_head();
    }
  });
}

void NodeAgent::note_head_epoch(std::uint64_t epoch) {
  if (epoch == 0 || epoch == head_epoch_) return;
  const bool restarted = head_epoch_ != 0;
  head_epoch_ = epoch;
  if (!restarted) return;
  spdlog::info("agent: the head restarted (start {}) and still knows node {} (incarnation {})",
               epoch, state_.node_id, state_.incarnation);
  on_head_restarted(epoch);
}

void NodeAgent::on_refused(const RegisterNodeReply& reply) {
  spdlog::error("agent: the head refused this node: {}", reply.error);
}

void NodeAgent::on_message(const runtime::Envelope& message) { on_other_message(message); }

void NodeAgent::on_stop() {
  if (!state_.registered) return;
  // Blocking here is deliberate: the process is exiting and the head should hear the goodbye
  // before the socket closes, so the node shows as left instead of dying after the timeout.
  runtime::ActorScheduler::BlockingScope blocking;
  auto answer = system().ask(registry(), LeaveNode{state_.node_id, state_.incarnation, "shutdown"},
                             options_.leave_timeout);
  if (answer.wait_for(options_.leave_timeout + std::chrono::milliseconds(200)) ==
          std::future_status::ready &&
      answer.get().ok()) {
    spdlog::info("agent: left the cluster");
  } else {
    spdlog::warn("agent: the head did not confirm the leave; it will time the node out");
  }
}

NodeResources probe_local_resources() {
  NodeResources resources;
  resources.cpus = std::max(1u, std::thread::hardware_concurrency());
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {
    resources.memory_bytes = static_cast<std::int64_t>(pages) * page_size;
  }
  std::error_code ec;
  for (int i = 0; i < 64; ++i) {
    if (!std::filesystem::exists("/dev/nvidia" + std::to_string(i), ec)) break;
    ++resources.gpus;
  }
  return resources;
}

std::string local_machine_id() {
  if (const char* forced = std::getenv("OMNILEARN_MACHINE_ID"); forced && *forced) return forced;
  std::string id;
  for (const char* path : {"/etc/machine-id", "/var/lib/dbus/machine-id"}) {
    std::ifstream in(path);
    if (in >> id && !id.empty()) break;
    id.clear();
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  // FNV-1a, 64 bits: stable across builds and platforms (std::hash is not), and it keeps the
  // machine id, which systemd asks programs not to reveal, on this machine.
  std::uint64_t hash = 14695981039346656037ull;
  for (char c : "omnilearn-machine:" + id + "/" + host) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return fmt::format("{:016x}", hash);
}

void probe_usage(NodeUsage& usage) {
  std::ifstream loadavg("/proc/loadavg");
  loadavg >> usage.load_average;
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  if (statm >> size >> resident) usage.rss_bytes = resident * sysconf(_SC_PAGESIZE);
}

}  // namespace omnilearn::actors
