#pragma once
// The messages of remote tasks and actors (kinds 300..399): driver <-> task router (head) <->
// executor (worker). Payloads are msgpack arrays; a newer sender may append fields.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "runtime/envelope.hpp"
#include "runtime/message_kind.hpp"

namespace omnilearn::core {

// What ActorSystem::reply needs of a request to answer it: who asked, over which connection,
// under which correlation id; without the payload, which the router and executors would
// otherwise copy once more for every task and call they hold until it is answered.
inline runtime::Envelope reply_handle(const runtime::Envelope& request) {
  runtime::Envelope handle;
  handle.kind = request.kind;
  handle.to = request.to;
  handle.from = request.from;
  handle.correlation = request.correlation;
  handle.flags = request.flags;
  handle.arrived_via = request.arrived_via;
  handle.from_network = request.from_network;
  return handle;
}

inline constexpr const char* kTaskRouterActor = "tasks";    // on the head
inline constexpr const char* kExecutorActor = "executor";   // on every worker

struct ResourceSpec {
  double cpus = 0;
  double gpus = 0;
  std::map<std::string, std::string> labels;
  MSGPACK_DEFINE(cpus, gpus, labels);
};

struct ExecutorHello {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kExecutorHello;
  std::string node;
  ResourceSpec total;
  std::vector<std::string> libraries;
  std::vector<std::string> functions;  // functions, classes and methods, by name
  MSGPACK_DEFINE(node, total, libraries, functions);
};

struct ExecutorHelloReply {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kExecutorHelloReply;
  bool ok = false;
  MSGPACK_DEFINE(ok);
};

// Error codes on the wire are omnilearn::ErrorCode's numbers.
struct TaskResult {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kTaskResult;
  int code = 0;
  std::string message;
  std::string value;  // msgpack bytes when code == 0
  MSGPACK_DEFINE(code, message, value);
};

struct SubmitTask {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kSubmitTask;
  std::string task_id;
  std::string function;
  std::string args;
  ResourceSpec resources;
  std::int32_t max_retries = 0;
  std::int64_t timeout_ms = 600000;
  MSGPACK_DEFINE(task_id, function, args, resources, max_retries, timeout_ms);
};

struct CreateActor {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kCreateActor;
  std::string actor_id;
  std::string class_name;
  std::string args;
  std::string name;
  ResourceSpec resources;
  std::int32_t max_restarts = 0;
  std::int32_t placement = 0;
  std::string group;
  std::int64_t timeout_ms = 60000;
  MSGPACK_DEFINE(actor_id, class_name, args, name, resources, max_restarts, placement, group,
                 timeout_ms);
};

struct ActorRef {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kActorRef;
  int code = 0;
  std::string message;
  std::string actor_id;
  std::string class_name;
  std::string node;
  std::int32_t restarts = 0;
  MSGPACK_DEFINE(code, message, actor_id, class_name, node, restarts);
};

struct ActorCall {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kActorCall;
  std::string actor_id;
  std::string method;
  std::string args;
  bool oneway = false;
  std::int64_t timeout_ms = 600000;
  MSGPACK_DEFINE(actor_id, method, args, oneway, timeout_ms);
};

struct GetActor {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kGetActor;
  std::string name;
  MSGPACK_DEFINE(name);
};

struct KillActor {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kKillActor;
  std::string actor_id;
  MSGPACK_DEFINE(actor_id);
};

// Answered (a TaskResult whose value is the reason, a string) when the actor has ended for good:
// killed, or died with no restarts left; at once when no such actor is running.
struct WatchActor {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kWatchActor;
  std::string actor_id;
  MSGPACK_DEFINE(actor_id);
};

struct ClusterInfoRequest {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kClusterInfoRequest;
  int unused = 0;
  MSGPACK_DEFINE(unused);
};

struct NodeSummary {
  std::string name;
  ResourceSpec total;
  ResourceSpec used;
  std::vector<std::string> libraries;
  std::vector<std::string> functions;
  std::int32_t running_tasks = 0;
  std::int32_t actors = 0;
  MSGPACK_DEFINE(name, total, used, libraries, functions, running_tasks, actors);
};

struct ClusterInfoReply {
  static constexpr runtime::MessageKind kKind = runtime::MessageKind::kClusterInfoReply;
  std::vector<NodeSummary> nodes;
  MSGPACK_DEFINE(nodes);
};

}  // namespace omnilearn::core
