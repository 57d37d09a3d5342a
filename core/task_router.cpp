#include "core/task_router.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <omnilearn/omnilearn.hpp>

#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::core {
namespace {

using runtime::AskResult;
using runtime::Envelope;
using runtime::MessageKind;

TaskResult failure(ErrorCode code, std::string message) {
  return TaskResult{static_cast<int>(code), std::move(message), {}};
}

// The executor's answer, or the reason there is none, as a TaskResult.
TaskResult result_of(const AskResult& answer) {
  if (answer.status == AskResult::Status::kTimeout) {
    return failure(ErrorCode::kTimeout, answer.error);
  }
  if (answer.status != AskResult::Status::kOk) {
    return failure(ErrorCode::kNodeDied, answer.error);
  }
  if (auto result = answer.as<TaskResult>()) return *result;
  if (answer.reply.kind == MessageKind::kError) return failure(ErrorCode::kRefused, answer.error);
  return failure(ErrorCode::kBadValue, "the executor's answer was malformed");
}

void add(ResourceSpec& total, const ResourceSpec& more, double sign) {
  total.cpus = std::max(0.0, total.cpus + sign * more.cpus);
  total.gpus = std::max(0.0, total.gpus + sign * more.gpus);
}

std::chrono::milliseconds at_least_1ms(std::chrono::steady_clock::duration left) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(left));
}

}  // namespace

void TaskRouter::on_message(const Envelope& message) {
  switch (message.kind) {
    case MessageKind::kExecutorHello:
      if (auto hello = decode<ExecutorHello>(message)) {
        on_hello(message, std::move(*hello));
      }
      break;
    case MessageKind::kSubmitTask:
      if (auto task = decode<SubmitTask>(message)) {
        on_submit(message, std::move(*task));
      }
      break;
    case MessageKind::kCreateActor:
      if (auto request = decode<CreateActor>(message)) {
        on_create(message, std::move(*request));
      }
      break;
    case MessageKind::kActorCall:
      if (auto call = decode<ActorCall>(message)) {
        on_call(message, std::move(*call));
      }
      break;
    case MessageKind::kGetActor:
      if (auto request = decode<GetActor>(message)) {
        on_get(message, *request);
      }
      break;
    case MessageKind::kKillActor:
      if (auto request = decode<KillActor>(message)) on_kill(*request);
      break;
    case MessageKind::kWatchActor:
      if (auto request = decode<WatchActor>(message)) {
        on_watch(message, *request);
      }
      break;
    case MessageKind::kClusterInfoRequest: {
      ClusterInfoReply info;
      for (const auto& [id, node] : nodes_) {
        info.nodes.push_back(NodeSummary{node.load.name, node.load.total, node.load.used,
                                         node.libraries,
                                         node.functions, node.running_tasks, node.actors});
      }
      if (message.correlation) reply(message, info);
      break;
    }
    case MessageKind::kDown:
      if (auto down = decode<runtime::Down>(message)) {
        if (nodes_.count(down->system)) on_node_down(down->system, down->reason);
      }
      break;
    default:
      break;
  }
}

void TaskRouter::on_hello(const Envelope& message, ExecutorHello hello) {
  const std::string& system = message.from.system;
  auto [it, added] = nodes_.try_emplace(system);
  Node& node = it->second;
  node.load.id = system;
  node.load.name = hello.node;
  node.executor = runtime::ActorAddress{system, kExecutorActor};
  node.load.total = std::move(hello.total);
  node.libraries = std::move(hello.libraries);
  node.functions = std::move(hello.functions);
  if (added) {
    // Down comes when the executor stops or the registry declares its node dead.
    monitor(node.executor);
    rebuild_loads();
    spdlog::info("tasks: node {} ({}) can run {} function(s) from {} librar(ies)", node.load.name,
                 system, node.functions.size(), node.libraries.size());
  }
}

PlacementDecision TaskRouter::choose(const ResourceSpec& need, PlacementStrategy strategy,
                                     const std::string& group) {
  // Group counts are per request; only actor placements in a group need them.
  for (auto& [id, node] : nodes_) node.load.group_members = 0;
  if (!group.empty()) {
    for (const auto& [actor_id, actor] : actors_) {
      if (actor.spec.group != group || actor.state == ActorState::kDead) continue;
      auto node = nodes_.find(actor.node);
      if (node != nodes_.end()) ++node->second.load.group_members;
    }
  }
  return place_among(loads_, need, strategy);
}

void TaskRouter::rebuild_loads() {
  loads_.clear();
  for (const auto& [id, node] : nodes_) loads_.push_back(&node.load);
}

void TaskRouter::release(const std::string& node, const ResourceSpec& resources, bool task) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  add(it->second.load.used, resources, -1);
  if (task) {
    it->second.running_tasks = std::max(0, it->second.running_tasks - 1);
  } else {
    it->second.actors = std::max(0, it->second.actors - 1);
  }
}

// ---- tasks

void TaskRouter::on_submit(const Envelope& message, SubmitTask task) {
  if (task.task_id.empty()) return;
  auto [slot, inserted] = tasks_.try_emplace(task.task_id);
  if (!inserted) return;  // a duplicate
  auto decision = choose(task.resources, PlacementStrategy::kLeastLoaded, "");
  if (!decision.feasible) {
    tasks_.erase(slot);
    reply(message, failure(ErrorCode::kInfeasible,
                           fmt::format("task {} cannot run anywhere: {}", task.function,
                                       decision.missing)));
    return;
  }
  // The key, not the request's id: `task` is moved into the entry below.
  const std::string& id = slot->first;
  Task& entry = slot->second;
  entry.request = reply_handle(message);
  entry.payload = message.payload;  // forwarded as it came, on every attempt
  entry.deadline = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(std::max<std::int64_t>(1, task.timeout_ms));
  entry.spec = std::move(task);
  start_task(id);
}

void TaskRouter::start_task(const std::string& task_id) {
  Task& task = tasks_.at(task_id);
  ++task.attempt;
  auto decision = choose(task.spec.resources, PlacementStrategy::kLeastLoaded, "");
  if (!decision.feasible) {
    finish_task(task_id, failure(task.attempt > 1 ? ErrorCode::kNodeDied : ErrorCode::kInfeasible,
                                 fmt::format("task {} has no node left to run on: {}",
                                             task.spec.function, decision.missing)));
    return;
  }
  Node& node = nodes_.at(decision.node_id);
  task.node = decision.node_id;
  add(node.load.used, task.spec.resources, +1);
  ++node.running_tasks;
  auto timeout = at_least_1ms(task.deadline - std::chrono::steady_clock::now());
  system().ask_envelope(
      system().make_envelope(node.executor, MessageKind::kSubmitTask, task.payload, self()),
      timeout, [this, task_id, attempt = task.attempt](AskResult answer) {
        auto it = tasks_.find(task_id);
        if (it == tasks_.end() || it->second.attempt != attempt) return;  // a stale attempt
        Task& t = it->second;
        if (answer.status == AskResult::Status::kUnreachable &&
            t.attempt <= t.spec.max_retries) {
          // The node is gone (its connection closed): try another without waiting for the
          // registry to declare it dead.
          release(t.node, t.spec.resources, true);
          t.node.clear();
          start_task(task_id);
          return;
        }
        finish_task(task_id, result_of(answer));
      });
}

void TaskRouter::finish_task(const std::string& task_id, const TaskResult& result) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  if (!it->second.node.empty()) release(it->second.node, it->second.spec.resources, true);
  // A driver that went away meanwhile makes this reply undeliverable; nothing else changes.
  reply(it->second.request, result);
  tasks_.erase(it);
}

// ---- actors

ActorRef TaskRouter::ref_of(const std::string& actor_id, const RemoteActor& actor) const {
  auto node = nodes_.find(actor.node);
  return ActorRef{0, {}, actor_id, actor.spec.class_name,
                  node == nodes_.end() ? std::string() : node->second.load.name, actor.restarts};
}

void TaskRouter::on_create(const Envelope& message, CreateActor request) {
  if (request.actor_id.empty() || actors_.count(request.actor_id)) return;  // a duplicate
  if (!request.name.empty() && names_.count(request.name)) {
    reply(message, ActorRef{static_cast<int>(ErrorCode::kRefused),
                            fmt::format("an actor named '{}' already exists", request.name),
                            {}, {}, {}, 0});
    return;
  }
  auto decision = choose(request.resources, static_cast<PlacementStrategy>(request.placement),
                         request.group);
  if (!decision.feasible) {
    reply(message, ActorRef{static_cast<int>(ErrorCode::kInfeasible),
                            fmt::format("actor {} cannot be placed: {}", request.class_name,
                                        decision.missing),
                            {}, {}, {}, 0});
    return;
  }
  auto id = request.actor_id;
  RemoteActor& actor = actors_[id];
  if (!request.name.empty()) names_[request.name] = id;
  actor.create_request = reply_handle(message);
  actor.spec = std::move(request);
  create_on_node(id);
}

void TaskRouter::create_on_node(const std::string& actor_id) {
  RemoteActor& actor = actors_.at(actor_id);
  auto decision = choose(actor.spec.resources,
                         static_cast<PlacementStrategy>(actor.spec.placement), actor.spec.group);
  if (!decision.feasible) {
    actor_failed(actor_id, actor.restarts > 0 ? ErrorCode::kNodeDied : ErrorCode::kInfeasible,
                 fmt::format("actor {} has no node to run on: {}", actor.spec.class_name,
                             decision.missing));
    return;
  }
  Node& node = nodes_.at(decision.node_id);
  actor.node = decision.node_id;
  add(node.load.used, actor.spec.resources, +1);
  ++node.actors;
  int incarnation = ++actor.incarnation;
  ask(node.executor, actor.spec, std::chrono::milliseconds(std::max<std::int64_t>(1, actor.spec.timeout_ms)),
      [this, actor_id, incarnation](AskResult answer) {
        auto it = actors_.find(actor_id);
        if (it == actors_.end() || it->second.incarnation != incarnation ||
            it->second.state == ActorState::kDead) {
          return;
        }
        RemoteActor& a = it->second;
        if (answer.status == AskResult::Status::kUnreachable && a.restarts < a.spec.max_restarts) {
          release(a.node, a.spec.resources, false);
          ++a.restarts;
          create_on_node(actor_id);
          return;
        }
        auto result = result_of(answer);
        if (result.code != 0) {
          actor_failed(actor_id, static_cast<ErrorCode>(result.code), result.message);
          return;
        }
        a.state = ActorState::kAlive;
        if (a.create_request) {
          reply(*a.create_request, ref_of(actor_id, a));
          a.create_request.reset();
        }
        auto waiting = std::move(a.waiting);
        a.waiting.clear();
        for (const auto& call : waiting) forward_call(a, actor_id, call, nullptr);
      });
}

void TaskRouter::on_call(const Envelope& message, ActorCall call) {
  auto it = actors_.find(call.actor_id);
  if (it == actors_.end() || it->second.state == ActorState::kDead) {
    if (message.correlation) {
      reply(message, failure(ErrorCode::kNoSuchActor,
                             fmt::format("no live actor {}", call.actor_id)));
    }
    return;
  }
  RemoteActor& actor = it->second;
  if (actor.state != ActorState::kAlive) {
    actor.waiting.push_back(message);  // forwarded in order once it exists (payload and all)
    return;
  }
  forward_call(actor, call.actor_id, message, &call);
}

void TaskRouter::forward_call(RemoteActor& actor, const std::string& actor_id,
                              const Envelope& message, const ActorCall* decoded) {
  std::optional<ActorCall> decoded_here;
  if (!decoded) {  // a call that waited for its actor: decoded again, once
    decoded_here = runtime::unpack_payload<ActorCall>(message.payload);
    if (decoded_here) decoded = &*decoded_here;
  }
  const ActorCall* call = decoded;
  const auto& executor = nodes_.at(actor.node).executor;
  Envelope forward =
      system().make_envelope(executor, MessageKind::kActorCall, message.payload, self());
  if (!call || call->oneway || message.correlation == 0) {
    system().send(std::move(forward));
    return;
  }
  std::uint64_t sequence = ++actor.next_call;
  actor.in_flight.emplace(sequence, reply_handle(message));
  system().ask_envelope(
      std::move(forward), std::chrono::milliseconds(std::max<std::int64_t>(1, call->timeout_ms)),
      [this, actor_id, sequence](AskResult answer) {
        auto it = actors_.find(actor_id);
        if (it == actors_.end()) return;
        auto call_it = it->second.in_flight.find(sequence);
        if (call_it == it->second.in_flight.end()) return;  // already failed (node died)
        Envelope request = std::move(call_it->second);
        it->second.in_flight.erase(call_it);
        reply(request, result_of(answer));
      });
}

void TaskRouter::on_get(const Envelope& message, const GetActor& request) {
  auto name = names_.find(request.name);
  if (name == names_.end()) {
    reply(message, ActorRef{static_cast<int>(ErrorCode::kNoSuchActor),
                            fmt::format("no actor named '{}'", request.name), {}, {}, {}, 0});
    return;
  }
  reply(message, ref_of(name->second, actors_.at(name->second)));
}

void TaskRouter::on_kill(const KillActor& request) {
  auto it = actors_.find(request.actor_id);
  if (it == actors_.end() || it->second.state == ActorState::kDead) return;
  auto node = nodes_.find(it->second.node);
  if (node != nodes_.end()) tell(node->second.executor, request);
  actor_failed(request.actor_id, ErrorCode::kNoSuchActor, "the actor was killed");
}

namespace {
// Watchers one actor may have; one more is refused (a driver that watches in a loop must not
// grow the head without bound: answered watches go, unanswered ones stay until the actor ends).
constexpr std::size_t kMaxWatchersPerActor = 4096;

TaskResult ended_because(const std::string& why) {
  TaskResult result;
  result.value = runtime::pack_payload(why);
  return result;
}
}  // namespace

void TaskRouter::on_watch(const Envelope& message, const WatchActor& request) {
  if (!message.correlation) return;
  auto it = actors_.find(request.actor_id);
  if (it == actors_.end() || it->second.state == ActorState::kDead) {
    reply(message, ended_because("no such actor is running (it has already ended, or never "
                                 "existed)"));
    return;
  }
  auto& watchers = it->second.watchers;
  if (watchers.size() >= kMaxWatchersPerActor) {
    reply(message, failure(ErrorCode::kRefused,
                           fmt::format("actor {} already has {} monitors", request.actor_id,
                                       kMaxWatchersPerActor)));
    return;
  }
  watchers.push_back(reply_handle(message));
}

void TaskRouter::actor_failed(const std::string& actor_id, ErrorCode code, const std::string& why) {
  auto it = actors_.find(actor_id);
  if (it == actors_.end()) return;
  RemoteActor& actor = it->second;
  if (actor.state != ActorState::kDead) release(actor.node, actor.spec.resources, false);
  actor.state = ActorState::kDead;
  if (actor.create_request) {
    reply(*actor.create_request, ActorRef{static_cast<int>(code), why, {}, {}, {}, 0});
  }
  for (auto& call : actor.waiting) {
    if (call.correlation) reply(call, failure(code, why));
  }
  for (auto& [sequence, call] : actor.in_flight) reply(call, failure(code, why));
  for (auto& watcher : actor.watchers) reply(watcher, ended_because(why));
  if (!actor.spec.name.empty()) {
    auto name = names_.find(actor.spec.name);
    if (name != names_.end() && name->second == actor_id) names_.erase(name);
  }
  // The record goes: a later call finds no actor (kNoSuchActor).
  actors_.erase(it);
}

void TaskRouter::on_node_down(const std::string& system, const std::string& reason) {
  auto node_it = nodes_.find(system);
  std::string name = node_it->second.load.name;
  nodes_.erase(node_it);
  rebuild_loads();
  spdlog::warn("tasks: node {} is gone ({}); rescheduling its work", name, reason);

  std::vector<std::string> task_ids;
  for (const auto& [id, task] : tasks_) {
    if (task.node == system) task_ids.push_back(id);
  }
  for (const auto& id : task_ids) {
    Task& task = tasks_.at(id);
    task.node.clear();  // its resources went with the node
    if (task.attempt <= task.spec.max_retries) {
      spdlog::info("tasks: retrying {} ({}), attempt {} of {}", task.spec.function, id,
                   task.attempt + 1, task.spec.max_retries + 1);
      start_task(id);
    } else {
      finish_task(id, failure(ErrorCode::kNodeDied,
                              fmt::format("node {} died ({}) while running {} (attempt {} of {})",
                                          name, reason, task.spec.function, task.attempt,
                                          task.spec.max_retries + 1)));
    }
  }

  std::vector<std::string> actor_ids;
  for (const auto& [id, actor] : actors_) {
    if (actor.node == system) actor_ids.push_back(id);
  }
  for (const auto& id : actor_ids) {
    RemoteActor& actor = actors_.at(id);
    std::string why = fmt::format("node {} died ({}) with actor {}", name, reason, id);
    // Calls that were running there are lost: they fail, the actor may come back.
    for (auto& [sequence, call] : actor.in_flight) reply(call, failure(ErrorCode::kNodeDied, why));
    actor.in_flight.clear();
    if (actor.restarts < actor.spec.max_restarts) {
      ++actor.restarts;
      actor.state = actor.state == ActorState::kCreating ? ActorState::kCreating
                                                          : ActorState::kRestarting;
      spdlog::info("tasks: restarting actor {} ({}), restart {} of {}", id,
                   actor.spec.class_name, actor.restarts, actor.spec.max_restarts);
      create_on_node(id);
    } else {
      actor.node.clear();
      actor_failed(id, ErrorCode::kNodeDied, why);
    }
  }
}

}  // namespace omnilearn::core
