#include "actors/job_manager.hpp"

#include <algorithm>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/job_spec.hpp"
#include "actors/scheduler_actor.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::actors {

JobManager::JobManager(JobManagerOptions options) : options_(std::move(options)) {}

void JobManager::on_start() {
  ask(runtime::ActorAddress{"", kRegistryActor}, SubscribeNodes{}, std::chrono::seconds(5),
      [this](runtime::AskResult result) {
        if (auto snapshot = result.as<StatusReply>()) {
          for (const auto& node : snapshot->nodes) nodes_[node.id] = node;
        } else {
          spdlog::error("jobs: cannot subscribe to the node registry: {}", result.error);
        }
      });
}

const NodeInfo* JobManager::find_node(const std::string& name_or_id) const {
  auto it = nodes_.find(name_or_id);
  if (it != nodes_.end()) return &it->second;
  const NodeInfo* best = nullptr;
  for (const auto& [id, node] : nodes_) {
    if (node.name != name_or_id) continue;
    if (node.state != "alive" && node.state != "suspect") continue;
    if (!best || node.incarnation > best->incarnation) best = &node;
  }
  return best;
}

void JobManager::submit(const runtime::Envelope& message, const SubmitJob& request) {
  SubmitJobReply reply;
  if (jobs_.size() >= options_.max_jobs) {
    // Make room by forgetting the oldest finished job (its run directory stays on disk); a head
    // full of live jobs refuses: memory on the head is bounded by max_jobs either way.
    auto finished = std::find_if(submitted_.begin(), submitted_.end(), [&](const std::string& id) {
      const auto& state = jobs_.at(id).state;
      return state != "pending" && state != "running";
    });
    if (finished == submitted_.end()) {
      reply.error = fmt::format("the head already has {} jobs pending or running (its "
                                "--max-jobs); wait for one to finish or stop one",
                                options_.max_jobs);
      this->reply(message, reply);
      return;
    }
    jobs_.erase(*finished);
    submitted_.erase(finished);
  }
  JobSpec spec;
  try {
    // The head validates again: it must not trust that a client did.
    spec = parse_job_spec(request.toml, request.source_name.empty() ? "job.toml"
                                                                    : request.source_name);
  } catch (const JobSpecError& e) {
    reply.error = e.what();
    this->reply(message, reply);
    return;
  }
  std::random_device device;
  std::string id;
  do {
    id = fmt::format("{:08x}", static_cast<std::uint32_t>(device()));
  } while (jobs_.count(id));
  SchedulerOptions scheduler;
  scheduler.job_id = id;
  scheduler.spec = spec;
  scheduler.job_toml = request.toml;
  scheduler.source_name = request.source_name;
  scheduler.run_dir = request.run_dir.empty() ? options_.runs_root + "/" + id : request.run_dir;
  scheduler.jobs = self();
  scheduler.heartbeat_timeout = options_.heartbeat_timeout;
  JobInfo info;
  info.id = id;
  info.name = spec.name;
  info.state = "pending";
  jobs_[id] = info;
  submitted_.push_back(id);
  system().spawn<SchedulerActor>(scheduler_actor_name(id), scheduler);
  spdlog::info("jobs: accepted job {} ('{}'), {} kept", id, spec.name, jobs_.size());
  reply.accepted = true;
  reply.job_id = id;
  reply.run_dir = scheduler.run_dir;
  this->reply(message, reply);
}

void JobManager::forward_to_job(const runtime::Envelope& message, const std::string& job_id) {
  if (!jobs_.count(job_id)) {
    if (message.correlation) {
      reply(message, runtime::ErrorReply{"no-such-job", "no job with id '" + job_id + "'"});
    }
    return;
  }
  runtime::Envelope forwarded = message;
  forwarded.to = runtime::ActorAddress{system().id(), scheduler_actor_name(job_id)};
  system().send(std::move(forwarded));
}

void JobManager::on_message(const runtime::Envelope& message) {
  switch (message.kind) {
    case MessageKind::kSubmitJob: {
      auto request = runtime::unpack_payload<SubmitJob>(message.payload);
      if (!request) {
        reply(message, SubmitJobReply{false, "", "", "malformed submission"});
        return;
      }
      submit(message, *request);
      return;
    }
    case MessageKind::kStopJob:
      if (auto stop = runtime::unpack_payload<StopJob>(message.payload)) {
        forward_to_job(message, stop->job_id);
      }
      return;
    case MessageKind::kJobStatusRequest:
      if (auto request = runtime::unpack_payload<JobStatusRequest>(message.payload)) {
        forward_to_job(message, request->job_id);
      }
      return;
    case MessageKind::kJobStatusReply:
      // A scheduler publishing its summary.
      if (auto update = runtime::unpack_payload<JobStatusReply>(message.payload)) {
        auto it = jobs_.find(update->job.id);  // a forgotten job stays forgotten
        if (it != jobs_.end()) it->second = update->job;
      }
      return;
    case MessageKind::kStatusRequest: {
      StatusReply status;
      for (const auto& [id, job] : jobs_) status.jobs.push_back(job);
      reply(message, status);
      return;
    }
    case MessageKind::kNodeEvent:
      if (auto event = runtime::unpack_payload<NodeEvent>(message.payload)) {
        if (event->event != "heartbeat") nodes_[event->node.id] = event->node;
      }
      return;
    case MessageKind::kDrainNode: {
      auto drain = runtime::unpack_payload<DrainNode>(message.payload);
      if (!drain) return;
      const NodeInfo* node = find_node(drain->node);
      if (!node) {
        reply(message, SimpleReply{false, "no live node named '" + drain->node + "'"});
        return;
      }
      int jobs = 0;
      for (const auto& [id, job] : jobs_) {
        if (job.state != "pending" && job.state != "running") continue;
        tell(runtime::ActorAddress{"", scheduler_actor_name(id)}, DrainNode{node->id});
        ++jobs;
      }
      spdlog::info("jobs: draining node {} ({}) from {} jobs", node->name, node->id, jobs);
      reply(message, SimpleReply{true, fmt::format("draining node {} ({}) from {} running jobs",
                                                   node->name, node->id, jobs)});
      return;
    }
    case MessageKind::kSetNodeResources: {
      auto request = runtime::unpack_payload<SetNodeResources>(message.payload);
      if (!request) return;
      const NodeInfo* node = find_node(request->node);
      if (!node) {
        reply(message, SimpleReply{false, "no live node named '" + request->node + "'"});
        return;
      }
      // The agent answers; relay its answer (the client has no route to the agent).
      runtime::Envelope original = message;
      ask(runtime::ActorAddress{node->system, kAgentActor}, *request, std::chrono::seconds(3),
          [this, original](runtime::AskResult result) {
            if (auto answer = result.as<SimpleReply>()) {
              reply(original, *answer);
            } else {
              reply(original, SimpleReply{false, "the node did not answer: " + result.error});
            }
          });
      return;
    }
    default:
      if (message.correlation != 0) {
        reply(message, runtime::ErrorReply{"bad-request", "jobs does not handle " +
                                                              std::string(runtime::kind_name(message.kind))});
      }
  }
}

}  // namespace omnilearn::actors
