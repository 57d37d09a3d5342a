#pragma once
// What nodes and the head say to each other about membership (message kinds 100..199).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "runtime/message_kind.hpp"

namespace omnilearn::actors {

using runtime::MessageKind;

// Well-known actor names.
inline constexpr const char* kRegistryActor = "registry";
inline constexpr const char* kAgentActor = "agent";

struct NodeResources {
  double cpus = 0;
  std::int64_t memory_bytes = 0;
  std::int32_t gpus = 0;
  std::map<std::string, std::string> labels;
  MSGPACK_DEFINE(cpus, memory_bytes, gpus, labels);
};

struct NodeUsage {
  double load_average = 0;       // 1-minute load average of the machine
  std::int64_t rss_bytes = 0;    // resident memory of the node agent
  double slowdown = 1.0;         // emulated slowdown factor (1 = native speed)
  double cpu_quota = 0;          // emulated CPU quota in CPUs (0 = none)
  MSGPACK_DEFINE(load_average, rss_bytes, slowdown, cpu_quota);
};

// Per-actor counters carried by heartbeats: the throughput the scheduler feeds its controller.
struct ActorCounters {
  std::string actor;
  std::string job_id;
  std::int32_t rank = -1;
  std::int64_t steps = 0;
  std::int32_t batch = 0;
  double samples_per_s = 0;
  double step_time_s = 0;
  double compute_time_s = 0;
  MSGPACK_DEFINE(actor, job_id, rank, steps, batch, samples_per_s, step_time_s, compute_time_s);
};

struct RegisterNode {
  static constexpr MessageKind kKind = MessageKind::kRegisterNode;
  std::string name;
  NodeResources resources;
  std::string version;
  // Which machine the node runs on (local_machine_id()): a name alive on another machine is
  // refused, the same name from the same machine is a restart. Empty (an older agent): treated
  // as the same machine, as before.
  std::string machine_id;
  // The incarnation this agent process last held (0: none yet). An agent forgotten by the head
  // (frozen, cut off) that comes back after a newer process took over its name is refused
  // instead of taking the name back.
  std::uint64_t previous_incarnation = 0;
  MSGPACK_DEFINE(name, resources, version, machine_id, previous_incarnation);
};

// RegisterNodeReply::refusal: why a registration was refused.
inline constexpr const char* kRefusedNameTaken = "name-taken";  // choose another name
inline constexpr const char* kRefusedFull = "cluster-full";     // --max-nodes live nodes
inline constexpr const char* kRefusedBadName = "bad-name";

struct RegisterNodeReply {
  static constexpr MessageKind kKind = MessageKind::kRegisterNodeReply;
  bool accepted = false;
  std::string node_id;
  std::uint64_t incarnation = 0;
  std::int32_t heartbeat_interval_ms = 500;
  std::int32_t heartbeat_timeout_ms = 3000;
  std::string error;  // when refused: why, and what to do
  std::string refusal;  // when refused: kRefused* (empty from an older head)
  // The head's epoch (HeadInfo::epoch; 0 from an older head): a change tells the agent that the
  // head restarted, so it asks which of its trainers' jobs the head still runs.
  std::uint64_t head_epoch = 0;
  MSGPACK_DEFINE(accepted, node_id, incarnation, heartbeat_interval_ms, heartbeat_timeout_ms,
                 error, refusal, head_epoch);
};

struct Heartbeat {
  static constexpr MessageKind kKind = MessageKind::kHeartbeat;
  std::string node_id;
  std::uint64_t incarnation = 0;
  std::uint64_t sequence = 0;
  NodeUsage usage;
  std::vector<ActorCounters> actors;
  MSGPACK_DEFINE(node_id, incarnation, sequence, usage, actors);
};

struct HeartbeatReply {
  static constexpr MessageKind kKind = MessageKind::kHeartbeatReply;
  bool known = true;  // false: the head does not know this node (it restarted, or declared the
                      // node dead): register again
  std::uint64_t head_epoch = 0;  // as RegisterNodeReply::head_epoch
  MSGPACK_DEFINE(known, head_epoch);
};

struct LeaveNode {
  static constexpr MessageKind kKind = MessageKind::kLeaveNode;
  std::string node_id;
  std::uint64_t incarnation = 0;
  std::string reason;
  MSGPACK_DEFINE(node_id, incarnation, reason);
};

// Generic acknowledgement for requests that only succeed or fail.
struct SimpleReply {
  static constexpr MessageKind kKind = MessageKind::kSimpleReply;
  bool ok = true;
  std::string message;
  MSGPACK_DEFINE(ok, message);
};

struct StatusRequest {
  static constexpr MessageKind kKind = MessageKind::kStatusRequest;
  bool include_dead = true;
  MSGPACK_DEFINE(include_dead);
};

struct NodeInfo {
  std::string id;
  std::string name;
  std::string state;  // alive | suspect | dead | left
  std::uint64_t incarnation = 0;
  std::int64_t last_heartbeat_ms = 0;  // age of the last heartbeat
  std::string system;
  NodeResources resources;
  NodeUsage usage;
  std::vector<ActorCounters> actors;
  // Drained (`omnilearn node drain`): no job places trainers on it, until it is undrained. By
  // name, so a restarted node stays drained.
  bool drained = false;
  MSGPACK_DEFINE(id, name, state, incarnation, last_heartbeat_ms, system, resources, usage, actors,
                 drained);
};

struct JobWorkerInfo {
  std::string node;
  std::string actor;
  std::int32_t rank = -1;
  std::int32_t batch = 0;
  double samples_per_s = 0;
  double step_time_s = 0;
  MSGPACK_DEFINE(node, actor, rank, batch, samples_per_s, step_time_s);
};

struct JobInfo {
  std::string id;
  std::string name;
  std::string state;  // pending | running | succeeded | failed | stopped
  std::string reason;
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  std::int64_t generation = 0;
  double loss = 0;
  std::vector<JobWorkerInfo> workers;
  std::string checkpoint;       // the newest checkpoint's path, on the disk of...
  std::string checkpoint_node;  // ...this node (trainers write where they run)
  MSGPACK_DEFINE(id, name, state, reason, step, total_steps, generation, loss, workers, checkpoint,
                 checkpoint_node);
};

// The head itself: where it keeps its state and what its last start restored.
struct HeadInfo {
  std::string store;             // StateStore::describe(): "sqlite:<dir>/state.db", "memory: ..."
  std::string role = "active";   // active (the only role of a head over a local store)
  std::uint64_t epoch = 0;       // how many heads have started over this state, this one included
  double started_at = 0;         // Unix time of this head's start
  double outage_s = -1;          // from the previous head's last sign of life to this start (-1:
                                 // the first start over this state)
  std::int32_t restored_nodes = 0;  // live nodes the previous head knew, taken over as alive
  std::int32_t restored_jobs = 0;   // jobs read back, finished or not
  std::int32_t failed_jobs = 0;     // running jobs this start ended as failed (ASP jobs)
  std::int32_t resumed_jobs = 0;    // pending or running jobs this start carries on
  double restore_ms = 0;            // reading the state and applying it
  double nodes_back_ms = -1;  // from the start until every restored node was heard from or
                              // declared dead (-1: not yet, or nothing restored)
  MSGPACK_DEFINE(store, role, epoch, started_at, outage_s, restored_nodes, restored_jobs,
                 failed_jobs, restore_ms, nodes_back_ms, resumed_jobs);
};

struct StatusReply {
  static constexpr MessageKind kKind = MessageKind::kStatusReply;
  std::vector<NodeInfo> nodes;
  std::vector<JobInfo> jobs;
  std::map<std::string, std::uint64_t> counters;  // the head's transport and registry counters
  // The head's web dashboard ("" without one): "http://HOST:PORT/" ("HOST" for a wildcard
  // interface), and whether it asks for the token derived from the cluster file.
  std::string dashboard_url;
  bool dashboard_token = false;
  HeadInfo head;  // from the registry (empty from an older head)
  MSGPACK_DEFINE(nodes, jobs, counters, dashboard_url, dashboard_token, head);
};

// jobs -> registry: mark the node named `node` drained for every job, or usable again. The
// registry then tells its subscribers ("drained" / "undrained" NodeEvents).
struct SetNodeDrained {
  static constexpr MessageKind kKind = MessageKind::kSetNodeDrained;
  std::string node;  // name
  bool drained = true;
  MSGPACK_DEFINE(node, drained);
};

// Sent by the registry to subscribers when a node changes state.
struct NodeEvent {
  static constexpr MessageKind kKind = MessageKind::kNodeEvent;
  NodeInfo node;
  std::string event;  // joined | suspect | alive | dead | left | heartbeat | drained | undrained
  MSGPACK_DEFINE(node, event);
};

// Ask the registry for NodeEvents; the reply is a StatusReply snapshot of current nodes.
struct SubscribeNodes {
  static constexpr MessageKind kKind = MessageKind::kSubscribeNodes;
  bool snapshot = true;
  MSGPACK_DEFINE(snapshot);
};

// actor -> registry: stop sending me NodeEvents (a finished job's scheduler). The registry also
// drops a local subscriber whose actor stops.
struct UnsubscribeNodes {
  static constexpr MessageKind kKind = MessageKind::kUnsubscribeNodes;
  bool unused = false;
  MSGPACK_DEFINE(unused);
};

}  // namespace omnilearn::actors
