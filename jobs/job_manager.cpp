#include "jobs/job_manager.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "jobs/asp_scheduler_actor.hpp"
#include "jobs/job_spec.hpp"
#include "jobs/scheduler_actor.hpp"
#include "runtime/atomic_file.hpp"

namespace omnilearn::actors {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

fs::path events_path(const std::string& run_dir) { return fs::path(run_dir) / "events.jsonl"; }

// Complete lines in `path` (0 if it does not exist).
std::uint64_t count_lines(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  std::uint64_t lines = 0;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    lines += static_cast<std::uint64_t>(std::count(buffer, buffer + in.gcount(), '\n'));
  }
  return lines;
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

bool job_resumable(const StoredJob& job) {
  // Synchronous and asynchronous jobs alike: each scheduler goes on from its own snapshot.
  try {
    parse_job_spec(job.toml, job.source_name.empty() ? "job.toml" : job.source_name);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

JobManager::JobManager(JobManagerOptions options) : options_(std::move(options)) {}

void JobManager::on_start() {
  restore_jobs();
  ask(runtime::ActorAddress{"", kRegistryActor}, SubscribeNodes{}, std::chrono::seconds(5),
      [this](runtime::AskResult result) {
        if (auto snapshot = result.as<StatusReply>()) {
          for (const auto& node : snapshot->nodes) nodes_[node.id] = node;
        } else {
          spdlog::error("jobs: cannot subscribe to the node registry: {}", result.error);
        }
      });
}

bool JobManager::persist(const Job& job) {
  if (!options_.store) return true;
  StoredJob stored;
  stored.info = job.info;
  stored.info.workers.clear();
  stored.run_dir = job.run_dir;
  stored.events_skipped = job.events_skipped;
  stored.finished = job.finished;
  stored.summary_json = job.summary_json;
  stored.toml = job.toml;
  stored.source_name = job.source_name;
  stored.submitted_at = job.submitted_at;
  try {
    std::vector<state::Write> writes{{job_key(job.info.id), encode_job(stored)}};
    // A finished job's protocol state has served its purpose.
    if (job.finished) writes.push_back({run_key(job.info.id), std::nullopt});
    options_.store->commit(writes);
    return true;
  } catch (const state::StateStoreError& e) {
    spdlog::error("jobs: cannot record job {}: {}", job.info.id, e.what());
    return false;
  }
}

void JobManager::restore_jobs() {
  const auto& head = options_.head;
  for (auto& stored : options_.restored) {
    Job job;
    job.info = stored.info;
    job.run_dir = stored.run_dir;
    job.events_skipped = stored.events_skipped;
    job.finished = stored.finished;
    job.summary_json = stored.summary_json;
    job.toml = stored.toml;
    job.source_name = stored.source_name;
    job.submitted_at = stored.submitted_at;
    const std::string id = job.info.id;
    submitted_.push_back(id);
    auto& kept = jobs_[id] = std::move(job);
    if (kept.finished) continue;
    if (job_resumable(stored)) {
      // Its trainers kept running through the outage: its scheduler takes them back.
      SchedulerOptions scheduler;
      scheduler.job_id = id;
      scheduler.spec =
          parse_job_spec(kept.toml, kept.source_name.empty() ? "job.toml" : kept.source_name);
      scheduler.job_toml = kept.toml;
      scheduler.source_name = kept.source_name;
      scheduler.run_dir = kept.run_dir;
      scheduler.events_skipped = kept.events_skipped;
      scheduler.jobs = self();
      scheduler.heartbeat_timeout = options_.heartbeat_timeout;
      scheduler.store = options_.store;
      scheduler.restore_state = stored.run_state;
      scheduler.head_epoch = head.epoch;
      scheduler.head_outage_s = head.outage_s;
      scheduler.head_stop = options_.head_stop;
      if (scheduler.spec.mode == "asp") {
        // Its servers and workers kept running too: its scheduler restores asp::AspJob.
        monitor(system().spawn<AspSchedulerActor>(scheduler_actor_name(id), scheduler));
      } else {
        monitor(system().spawn<SchedulerActor>(scheduler_actor_name(id), scheduler));
      }
      spdlog::info("jobs: resuming job {} ('{}') at step {}", id, kept.info.name, kept.info.step);
      continue;
    }
    // Its job file does not parse any more (a newer head's rules): it cannot be scheduled.
    const std::string outage =
        head.outage_s >= 0 ? fmt::format(" after an outage of {:.1f} s", head.outage_s) : "";
    const std::string reason = fmt::format(
        "the head restarted{} while the job was {} at step {} and cannot read its job file: "
        "submit it again",
        outage, kept.info.state, kept.info.step);
    end_job_here(kept, "failed", reason,
                 {head_restarted_event(head.epoch, head.outage_s, kept.info.step)});
  }
  options_.restored.clear();
  // Beyond max_jobs (a head restarted with a smaller --max-jobs): the oldest finished go.
  std::string error;
  while (jobs_.size() > options_.max_jobs && forget_oldest_finished(&error)) {
  }
  if (!error.empty()) spdlog::error("jobs: {}", error);
}

bool JobManager::forget_oldest_finished(std::string* error) {
  auto finished = std::find_if(submitted_.begin(), submitted_.end(),
                               [&](const std::string& id) { return jobs_.at(id).finished; });
  if (finished == submitted_.end()) return false;
  if (options_.store) {
    try {
      options_.store->commit(
          {{job_key(*finished), std::nullopt}, {run_key(*finished), std::nullopt}});
    } catch (const state::StateStoreError& e) {
      *error = "the head cannot write to its state store: " + std::string(e.what());
      return false;
    }
  }
  // Normally gone already (stopped once its job finished); a forgotten job keeps nothing.
  stop_scheduler(*finished, "job forgotten (--max-jobs)");
  jobs_.erase(*finished);
  submitted_.erase(finished);
  return true;
}

void JobManager::end_job_here(Job& job, const std::string& state, const std::string& reason,
                              std::vector<RunEvent> events) {
  job.info.state = state;
  job.info.reason = reason;
  job.info.workers.clear();
  job.finished = true;
  spdlog::error("jobs: job {} {}: {}", job.info.id, state, reason);
  // The same record the scheduler keeps: its events after the job's, then the summary.
  JobRecorder recorder(
      recorder_options(job.info.id, job.run_dir, job.events_skipped, options_.store));
  recorder.open();
  for (auto& event : events) recorder.record(std::move(event));
  recorder.record(finished_event(job.info.state, job.info.reason, job.info.step));
  recorder.finish(Json{{"job_id", job.info.id},
                       {"name", job.info.name},
                       {"status", job.info.state},
                       {"reason", job.info.reason},
                       {"steps", job.info.step},
                       {"total_steps", job.info.total_steps},
                       {"generations", job.info.generation},
                       {"workers", Json::array()}});
  job.summary_json = recorder.summary();
  persist(job);
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
    std::string error;
    if (!forget_oldest_finished(&error)) {
      reply.error = !error.empty() ? error
                                   : fmt::format(
                                         "the head already has {} jobs pending or "
                                         "running (its --max-jobs); wait for one to "
                                         "finish or stop one",
                                         options_.max_jobs);
      this->reply(message, reply);
      return;
    }
  }
  JobSpec spec;
  try {
    // The head validates again: it must not trust that a client did.
    spec = parse_job_spec(request.toml,
                          request.source_name.empty() ? "job.toml" : request.source_name);
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
  scheduler.store = options_.store;
  scheduler.head_stop = options_.head_stop;
  Job job;
  job.info.id = id;
  job.info.name = spec.name;
  job.info.state = "pending";
  job.run_dir = scheduler.run_dir;
  // The scheduler appends to events.jsonl; in a reused run directory the job's events start
  // after what is already there.
  job.events_skipped = count_lines(events_path(job.run_dir));
  scheduler.events_skipped = job.events_skipped;
  job.toml = request.toml;
  job.source_name = request.source_name;
  job.submitted_at = unix_time();
  // Recorded before it is acknowledged or started: a head that restarts knows every job it
  // accepted.
  if (!persist(job)) {
    reply.error =
        "the head cannot write to its state store (see its log); the job was not "
        "accepted";
    this->reply(message, reply);
    return;
  }
  jobs_[id] = std::move(job);
  submitted_.push_back(id);
  // Asynchronous training has no generations: its own scheduler (parameter servers, dealer).
  auto address = spec.mode == "asp"
                     ? system().spawn<AspSchedulerActor>(scheduler_actor_name(id), scheduler)
                     : system().spawn<SchedulerActor>(scheduler_actor_name(id), scheduler);
  // If it crashes before its job finishes, Down is how the job still ends (on_scheduler_down).
  monitor(address);
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

void JobManager::on_job_update(const runtime::Envelope& message, const JobStatusReply& update) {
  // Only the job's own scheduler speaks for it (a client could send this message too).
  if (message.from.system != system().id() ||
      message.from.actor != scheduler_actor_name(update.job.id)) {
    return;
  }
  auto it = jobs_.find(update.job.id);  // a forgotten job stays forgotten
  if (it == jobs_.end() || it->second.finished) return;
  auto& job = it->second;
  job.info = update.job;
  if (!update.finished) return;
  job.finished = true;
  job.summary_json = update.summary_json;
  if (job.summary_json.empty()) {
    job.summary_json = read_file(fs::path(job.run_dir) / "summary.json").value_or("");
  }
  persist(job);
  on_job_finished(job.info.id);
}

void JobManager::on_job_finished(const std::string& job_id) {
  // The scheduler is stopped a moment later rather than from inside this handler: its last
  // letters (a trainer's TrainerDone or TrainerExited racing the end, the answers to what it
  // asked while finishing) are then still handled by it instead of dead-lettered, and stop(),
  // which blocks until the scheduler's on_stop ran, does not wait on a scheduler that is still
  // busy finishing. Clients are answered from here meanwhile, from the same files.
  after(options_.finished_scheduler_grace,
        [this, job_id] { stop_scheduler(job_id, "job finished"); });
}

void JobManager::stop_scheduler(const std::string& job_id, const std::string& reason) {
  auto name = scheduler_actor_name(job_id);
  if (system().has_actor(name)) system().stop(name, reason);
}

void JobManager::release_store_keys(const std::string& job_id) {
  // The trainers' c10d stores are PrefixStore("job/<id>") over the head's store. A scheduler
  // may clear them itself; doing it here too covers one that crashed.
  StoreRequest request;
  request.op = StoreRequest::kDeletePrefix;
  request.keys = {"job/" + job_id + "/"};
  tell(runtime::ActorAddress{"", kStoreActor}, request);
}

void JobManager::on_scheduler_down(const runtime::Down& down) {
  const std::string prefix = scheduler_actor_name("");
  if (down.system != system().id() || down.actor.rfind(prefix, 0) != 0) return;
  const std::string job_id = down.actor.substr(prefix.size());
  if (options_.head_stop && options_.head_stop->jobs_outlive_head) {
    // The head is stopping and leaves the job, as its store has it, to the next head.
    return;
  }
  release_store_keys(job_id);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.finished) return;  // stopped as it should be

  // The scheduler is gone before its job finished: nothing else will ever end the job, so end
  // it here, the way the scheduler would have: a "finished" event and summary.json.
  auto& job = it->second;
  std::string cause = down.reason;
  if (cause.rfind("crashed: ", 0) == 0) cause = cause.substr(9);
  const bool crashed = down.reason.rfind("crashed: ", 0) == 0 ||
                       down.reason.rfind("failed to start", 0) == 0 ||
                       down.reason == "no such actor";
  end_job_here(job, "failed",
               crashed ? "the job's scheduler crashed: " + cause
                       : "the job's scheduler stopped before the job finished: " + cause);
}

JobStatusReply JobManager::finished_job_status(Job& job, std::uint64_t since) {
  JobStatusReply status;
  status.found = true;
  status.job = job.info;
  status.summary_json = job.summary_json;
  status.next = since;
  status.finished = true;
  const std::uint64_t first = job.events_skipped + since;
  // From where the last reply ended when the reader reads on, else from the start.
  const EventFilePosition from =
      job.cursor.line > 0 && job.cursor.line <= first ? job.cursor : EventFilePosition{};
  auto read = read_event_lines(events_path(job.run_dir), from, first, kMaxEventsPerPage);
  if (!read.readable) return status;
  job.cursor = read.end;
  status.events = std::move(read.lines);
  status.next = since + status.events.size();
  status.finished = read.at_end;
  return status;
}

void JobManager::on_message(const runtime::Envelope& message) {
  switch (message.kind) {
    case MessageKind::kSubmitJob: {
      auto request = decode_or_count<SubmitJob>(message);
      if (!request) {
        reply(message, SubmitJobReply{false, "", "", "malformed submission"});
        return;
      }
      submit(message, *request);
      return;
    }
    case MessageKind::kStopJob: {
      auto stop = decode<StopJob>(message);
      if (!stop) return;
      auto it = jobs_.find(stop->job_id);
      if (it != jobs_.end() && it->second.finished) {
        // As before the scheduler went away: stopping a finished job is no error.
        if (message.correlation != 0) {
          reply(message, SimpleReply{true, fmt::format("job {} already finished ({})", stop->job_id,
                                                       it->second.info.state)});
        }
        return;
      }
      forward_to_job(message, stop->job_id);
      return;
    }
    case MessageKind::kJobStatusRequest: {
      auto request = decode<JobStatusRequest>(message);
      if (!request) return;
      auto it = jobs_.find(request->job_id);
      if (it != jobs_.end() && it->second.finished) {
        if (message.correlation != 0) {
          reply(message, finished_job_status(it->second, request->since));
        }
        return;
      }
      forward_to_job(message, request->job_id);
      return;
    }
    case MessageKind::kJobStatusReply:
      // A scheduler publishing its job's state.
      if (auto update = decode<JobStatusReply>(message)) {
        on_job_update(message, *update);
      }
      return;
    case MessageKind::kDown:
      if (auto down = decode<runtime::Down>(message)) {
        on_scheduler_down(*down);
      }
      return;
    case MessageKind::kStatusRequest: {
      StatusReply status;
      for (const auto& [id, job] : jobs_) status.jobs.push_back(job.info);
      reply(message, status);
      return;
    }
    case MessageKind::kNodeEvent:
      if (auto event = decode<NodeEvent>(message)) {
        if (event->event != "heartbeat") nodes_[event->node.id] = event->node;
      }
      return;
    case MessageKind::kDrainNode: {
      auto drain = decode<DrainNode>(message);
      if (!drain) return;
      const NodeInfo* node = find_node(drain->node);
      if (!node) {
        reply(message, SimpleReply{false, "no live node named '" + drain->node + "'"});
        return;
      }
      // For every job, later ones included: the registry marks the node, and schedulers
      // (running ones here, and every one from its node snapshot) place nothing there.
      drained_.insert(node->name);
      int jobs = 0;
      for (const auto& [id, job] : jobs_) {
        if (job.finished || (job.info.state != "pending" && job.info.state != "running")) continue;
        tell(runtime::ActorAddress{"", scheduler_actor_name(id)}, DrainNode{node->id});
        ++jobs;
      }
      spdlog::info("jobs: draining node {} ({}) from {} jobs", node->name, node->id, jobs);
      // Answered once the registry has the drain in the head's store: a head killed right
      // after the answer restarts with the node drained, and its restored jobs carry the
      // drain through even if their schedulers had not written it yet.
      const runtime::Envelope original = message;
      const std::string text = fmt::format(
          "draining node {} ({}) from {} running jobs; no job places trainers there until "
          "`omnilearn node undrain {}`",
          node->name, node->id, jobs, node->name);
      ask(runtime::ActorAddress{"", kRegistryActor}, SetNodeDrained{node->name, true},
          std::chrono::seconds(10), [this, original, text](runtime::AskResult result) {
            auto written = result.as<SimpleReply>();
            if (written && written->ok) {
              reply(original, SimpleReply{true, text});
              return;
            }
            reply(original,
                  SimpleReply{false,
                              "the running jobs were told to drain the node, but the head "
                              "could not record the drain in its state store (" +
                                  (written ? written->message : result.error) +
                                  "): after a restart of the head the node would take "
                                  "trainers again; see the head's log and drain it again"});
          });
      return;
    }
    case MessageKind::kUndrainNode: {
      auto undrain = runtime::unpack_payload<UndrainNode>(message.payload);
      if (!undrain) return;
      const NodeInfo* node = find_node(undrain->node);
      const std::string name = node ? node->name : undrain->node;
      if (drained_.erase(name) == 0) {
        reply(message, SimpleReply{false, "node '" + undrain->node +
                                              "' is not drained (omnilearn node list shows "
                                              "which are)"});
        return;
      }
      spdlog::info("jobs: node {} usable again", name);
      // Answered once the registry has it in the head's store, as a drain is.
      const runtime::Envelope original = message;
      ask(runtime::ActorAddress{"", kRegistryActor}, SetNodeDrained{name, false},
          std::chrono::seconds(10), [this, original, name](runtime::AskResult result) {
            auto written = result.as<SimpleReply>();
            if (written && written->ok) {
              reply(original,
                    SimpleReply{true, fmt::format("node {} is usable again by every job", name)});
              return;
            }
            reply(original, SimpleReply{false, "the head could not record that node " + name +
                                                   " is usable again in its state store (" +
                                                   (written ? written->message : result.error) +
                                                   "); see the head's log and undrain it again"});
          });
      return;
    }
    case MessageKind::kSetNodeResources: {
      auto request = decode<SetNodeResources>(message);
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
        reply(message, runtime::ErrorReply{"bad-request",
                                           "jobs does not handle " +
                                               std::string(runtime::kind_name(message.kind))});
      }
  }
}

}  // namespace omnilearn::actors
