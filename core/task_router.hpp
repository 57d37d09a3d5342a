#pragma once
// TaskRouter: the head's actor for remote tasks and actors. Executors (one per worker) announce
// themselves and what they can run; drivers send tasks, actor creations and actor calls here,
// and the router places each on a node (core/placement.hpp), forwards it to that node's
// executor and relays the answer back to the driver that asked. It watches every executor:
// when a node dies (the registry declares its system down, or the executor stops) its running
// tasks are retried elsewhere up to max_retries, its actors re-created up to max_restarts under
// the same id and name, and everything else fails with node-died.
//
// Its state is touched only in its turns (it is an actor); nothing here blocks.

#include <deque>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "core/placement.hpp"
#include "core/protocol.hpp"
#include <omnilearn/omnilearn.hpp>

#include "runtime/actor.hpp"

namespace omnilearn::core {

class TaskRouter : public runtime::Actor {
 public:
  void on_message(const runtime::Envelope& message) override;
  // Its handlers only place and relay (no I/O, no waits): they may run on the I/O thread.
  bool runs_inline() const override { return true; }

  // Introspection for tests and status (on the router's thread only).
  std::size_t node_count() const { return nodes_.size(); }

 private:
  struct Node {
    NodeLoad load;  // id, name, total and used resources: what placement reads, in place
    runtime::ActorAddress executor;
    std::vector<std::string> libraries;
    std::vector<std::string> functions;
    int running_tasks = 0;
    int actors = 0;
  };
  struct Task {
    runtime::Envelope request;  // the driver's ask, without its payload: the reply goes to it
    std::string payload;        // the SubmitTask as the driver sent it
    SubmitTask spec;
    std::string node;           // system id of the node running the current attempt
    int attempt = 0;            // attempts started
    std::chrono::steady_clock::time_point deadline;
  };
  enum class ActorState { kCreating, kAlive, kRestarting, kDead };
  struct RemoteActor {
    CreateActor spec;
    std::string node;  // system id
    ActorState state = ActorState::kCreating;
    int restarts = 0;
    int incarnation = 0;  // bumped per creation: answers for an older one are stale
    std::optional<runtime::Envelope> create_request;  // the driver's spawn, until answered
    std::deque<runtime::Envelope> waiting;            // calls held while (re)creating
    std::vector<runtime::Envelope> watchers;          // WatchActor asks, answered at its end
    std::map<std::uint64_t, runtime::Envelope> in_flight;  // forwarded calls, by sequence
    std::uint64_t next_call = 0;
  };

  void on_hello(const runtime::Envelope& message, ExecutorHello hello);
  void on_submit(const runtime::Envelope& message, SubmitTask task);
  void start_task(const std::string& task_id);
  void finish_task(const std::string& task_id, const TaskResult& result);
  void on_create(const runtime::Envelope& message, CreateActor request);
  void create_on_node(const std::string& actor_id);
  void on_call(const runtime::Envelope& message, ActorCall call);
  // `decoded` is the call already decoded from `message`, or nullptr to decode it here.
  void forward_call(RemoteActor& actor, const std::string& actor_id,
                    const runtime::Envelope& message, const ActorCall* decoded);
  void on_get(const runtime::Envelope& message, const GetActor& request);
  void on_kill(const KillActor& request);
  void on_watch(const runtime::Envelope& message, const WatchActor& request);
  void on_node_down(const std::string& system, const std::string& reason);
  void actor_failed(const std::string& actor_id, ErrorCode code, const std::string& why);
  void release(const std::string& node, const ResourceSpec& resources, bool task);
  PlacementDecision choose(const ResourceSpec& need, PlacementStrategy strategy,
                           const std::string& group);
  void rebuild_loads();
  ActorRef ref_of(const std::string& actor_id, const RemoteActor& actor) const;

  std::map<std::string, Node> nodes_;          // by executor system id
  std::vector<const NodeLoad*> loads_;         // into nodes_, rebuilt when a node joins or goes
  // Hashed: every task and call looks one of these up several times (ids are long strings).
  std::unordered_map<std::string, Task> tasks_;          // by task id
  std::unordered_map<std::string, RemoteActor> actors_;  // by actor id
  std::map<std::string, std::string> names_;   // actor name -> id
};

}  // namespace omnilearn::core
