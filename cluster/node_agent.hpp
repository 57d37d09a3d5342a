#pragma once
// NodeAgent: the worker side of membership. Registers the node with the head, heartbeats its
// usage and the counters of the actors it hosts, re-registers when the head forgets it (head
// restart, network partition), and says goodbye when the process is asked to stop.

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "wire/membership_protocol.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::actors {

struct AgentOptions {
  std::string head_endpoint;  // "tcp://host:port"
  // Other heads over the same state (standbys, --store etcd://...): when the one in use stops
  // answering, the agent tries the next, in order, round and round.
  std::vector<std::string> other_head_endpoints;
  std::string name;
  std::string machine_id;  // local_machine_id(); "" says nothing (the head then assumes a restart)
  NodeResources resources;
  std::chrono::milliseconds register_timeout{2000};
  std::chrono::milliseconds leave_timeout{1000};
};

// What the agent knows about itself; exposed for status output and tests.
struct AgentState {
  bool registered = false;
  std::string node_id;
  std::uint64_t incarnation = 0;
};

class NodeAgent : public runtime::Actor {
 public:
  explicit NodeAgent(AgentOptions options);

  void on_start() override;
  void on_message(const runtime::Envelope& message) override;
  void on_stop() override;

 protected:
  // Hooks for subclasses that host actors (trainers): counters carried by each heartbeat and
  // the usage fields they control.
  virtual std::vector<ActorCounters> hosted_counters() { return {}; }
  virtual void fill_usage(NodeUsage& usage) {}
  // Called after every (re-)registration with the new identity.
  virtual void on_registered(const AgentState& state) {}
  // The head refused a registration (reply.refusal says why); the agent tries again after a
  // back-off whatever this does. The default logs the head's reason.
  virtual void on_refused(const RegisterNodeReply& reply);
  // The head no longer knows this incarnation: it declared the node dead (a freeze, a partition)
  // or it restarted. Whatever the node ran for the head's jobs has been written off there; the
  // node registers again as a new incarnation right after.
  virtual void on_forgotten() {}
  // The head that answers is a new start over the same state (its epoch changed) and knows this
  // node still: the node's identity holds, but the head may have ended jobs whose trainers run
  // here.
  virtual void on_head_restarted(std::uint64_t epoch) {}
  // The head answers again after heartbeats that got no reply, the first of them sent at
  // `since` (its network or this node's was down, or it stalled), and it still knows this node:
  // what was told to it from then on may not have arrived.
  virtual void on_head_answers_again(std::chrono::steady_clock::time_point since) {}
  virtual void on_other_message(const runtime::Envelope& message) {}

  const AgentState& state() const { return state_; }
  runtime::ActorAddress registry() const { return {head_endpoint_, kRegistryActor}; }
  // The head this agent talks to now: options().head_endpoint or one of the others.
  const std::string& head_endpoint() const { return head_endpoint_; }
  const AgentOptions& options() const { return options_; }

 private:
  void register_with_head();
  void schedule_heartbeat();
  void send_heartbeat();
  // Every answer of the head carries its epoch; a change from one known before is a restart.
  void note_head_epoch(std::uint64_t epoch);
  // The head in use did not answer: the next one of the list (a no-op with one head).
  void try_next_head();

  AgentOptions options_;
  std::vector<std::string> heads_;  // head_endpoint first, then the others
  std::size_t head_index_ = 0;
  std::string head_endpoint_;       // heads_[head_index_]
  AgentState state_;
  std::uint64_t last_incarnation_ = 0;  // the last one the head gave this process (0: none)
  std::uint64_t registration_epoch_ = 0;  // stale replies from an older registration are ignored
  std::uint64_t sequence_ = 0;
  std::uint64_t head_epoch_ = 0;  // the head's epoch last heard (0: none, or an older head)
  int register_attempts_ = 0;
  int missed_replies_ = 0;
  bool head_unreachable_logged_ = false;
  // When the first heartbeat without a reply was sent, while the head does not answer.
  std::chrono::steady_clock::time_point unanswered_since_{};
  std::chrono::milliseconds heartbeat_interval_{500};
  std::chrono::milliseconds heartbeat_timeout_{3000};
};

// Resources of this machine (CPUs, memory; GPUs from /dev/nvidia*), for `omnilearn worker`.
NodeResources probe_local_resources();
// Fills load average and this process's resident memory.
void probe_usage(NodeUsage& usage);

// Identifies this machine for RegisterNode::machine_id: a hash of /etc/machine-id (or
// /var/lib/dbus/machine-id) and the host name, so that containers cloned from one image (same
// machine id, different host names) count as different machines and the id itself is not sent.
// $OMNILEARN_MACHINE_ID, when set, is used as is: for tests that emulate several machines on
// one host.
std::string local_machine_id();

}  // namespace omnilearn::actors
