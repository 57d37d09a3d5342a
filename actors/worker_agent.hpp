#pragma once
// WorkerAgent: the node agent of `omnilearn worker`. On top of membership it hosts trainers:
// starts a trainer process per SpawnTrainer, collects their per-step reports into the counters
// its heartbeats carry, reports trainers that die, and applies the node's emulated resources
// (slowdown factor, CPU quota) to itself and its trainers.

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>

#include "actors/cpu_quota.hpp"
#include "actors/job_protocol.hpp"
#include "actors/node_agent.hpp"

namespace omnilearn::actors {

struct WorkerOptions {
  AgentOptions agent;
  std::string trainer_binary;   // path of omnilearn-trainer
  std::string local_endpoint;   // where this agent listens for its trainers (loopback)
  std::string gloo_host;        // address peers reach this node's collectives at
  double slowdown = 1.0;
  // The cluster file the trainers read their credentials from; empty: they run --insecure like
  // this agent.
  std::string cluster_file;
};

class WorkerAgent : public NodeAgent {
 public:
  // `quota`, when given, already holds this process (created by the caller so that a cgroup
  // problem is reported before the node joins).
  explicit WorkerAgent(WorkerOptions options, std::unique_ptr<CpuQuota> quota = nullptr);
  ~WorkerAgent() override;

  void on_start() override;
  void on_stop() override;

 protected:
  std::vector<ActorCounters> hosted_counters() override;
  void fill_usage(NodeUsage& usage) override;
  void on_other_message(const runtime::Envelope& message) override;
  void on_forgotten() override;

 private:
  struct Hosted {
    std::string job_id;
    std::string trainer;
    std::string scheduler;
    pid_t pid = -1;
    std::string system;  // the trainer's actor system, once it reported
    // Last report and the aggregate since the last heartbeat, at the current batch.
    TrainerReport last;
    double compute_sum = 0;
    double step_sum = 0;
    int samples = 0;  // steps aggregated
    ActorCounters published;
  };

  void spawn(const SpawnTrainer& request);
  void reap();
  void set_resources(const runtime::Envelope& message, const SetNodeResources& request);

  WorkerOptions options_;
  std::map<std::string, Hosted> hosted_;  // by trainer name
  std::unique_ptr<CpuQuota> quota_;
};

}  // namespace omnilearn::actors
