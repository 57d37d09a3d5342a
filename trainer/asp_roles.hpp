#pragma once
// The trainer process's two asynchronous-training roles, chosen by the scheduler's
// hello reply (mode = "asp"):
// - server: owns one contiguous shard (asp::ShardLayout) of the flat parameter vector, a
//   ServerCore and the job's optimizer and learning-rate schedule on that shard; an actor
//   ("server": jobs/asp_server_actor, torch-free, the optimizer and checkpoint injected)
//   answers pulls with the shard attached and applies pushes; it checkpoints every
//   `[checkpoint] every` updates and resumes from its shard's last checkpoint when restarted.
// - worker: asks the scheduler for its next batch, pulls every shard, computes the gradient of
//   the batch, pushes each shard its slice with the version it pulled, and reports the outcome
//   with its next ask. The worker told to finish pulls the final parameters, evaluates and
//   writes the model checkpoint (PyTorch-loadable, as BSP's).
//
// Threads: both run on the trainer's training thread until told to stop; the server's actor
// runs on the actor pool and owns the shard (the training thread only waits).

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "wire/job_protocol.hpp"
#include "jobs/job_spec.hpp"
#include "runtime/actor_system.hpp"
#include "training/trainer.hpp"

namespace omnilearn::actors {

struct AspRoleContext {
  runtime::ActorSystem& system;
  // The head's address now: the one that started the trainer until its agent says the job
  // goes on under another (cluster/head_follower.hpp). Every message to the scheduler reads it.
  std::function<std::string()> head;
  std::string agent;      // this node's agent (its heartbeats carry the worker's timings)
  std::string scheduler;  // the job's scheduler actor there
  std::string job;
  std::string trainer;
  std::string advertise_host;  // where a server listens (the worker's advertised address)
  const TrainerHelloReply& hello;
  const JobSpec& spec;
  training::Trainer& replica;
  std::int64_t total_steps = 0;
  // Waits up to `timeout` for a stop request; returns its reason when one came (or had come).
  std::function<std::optional<std::string>(std::chrono::milliseconds)> wait_stop;
  // Takes up a SetTrainerSpeed that arrived since the last call.
  std::function<void()> apply_slowdown;
};

// Each returns the process's exit code (0 when the scheduler ended it).
int run_asp_server(AspRoleContext& context);
int run_asp_worker(AspRoleContext& context);

}  // namespace omnilearn::actors
