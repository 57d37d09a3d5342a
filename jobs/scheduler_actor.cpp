#include "jobs/scheduler_actor.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cluster/head_state.hpp"
#include "runtime/system_messages.hpp"
#include "controller/simulator.hpp"

namespace omnilearn::actors {
namespace {

using Json = nlohmann::json;
namespace proto = scheduler;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

constexpr std::chrono::milliseconds kTick{100};
// A gap between two readings of the clock longer than this (five ticks) means the scheduler did
// not run: what exceeds it is left out of the job's deadlines (runtime/running_clock.hpp).
constexpr std::chrono::milliseconds kMaxRunGap{500};

scheduler::ControlRoundsConfig control_rounds(const ControllerSection& c) {
  scheduler::ControlRoundsConfig r;
  r.interval_steps = c.interval_steps;
  r.cooldown_steps = c.cooldown_steps;
  // A generation's first steps run cold (a trainer just started or synced, a neighbour may
  // still be loading LibTorch): twice the plan cool-down.
  r.warmup_steps = 2 * c.cooldown_steps;
  return r;
}

proto::ElasticJobOptions job_options(const SchedulerOptions& o) {
  proto::ElasticJobOptions j;
  j.min_workers = o.spec.elastic.min_workers;
  j.max_workers = o.spec.elastic.max_workers;
  j.slots = o.spec.elastic.slots;
  j.trainer_prefix = o.job_id + "-";
  j.total_steps = o.spec.train.steps;  // 0 for epochs: the trainers tell (set_total_steps)
  j.spawn_timeout = o.spawn_timeout.count();
  j.form_timeout = o.form_timeout.count();
  j.grace_period = static_cast<proto::Millis>(o.spec.elastic.grace_period_s * 1000);
  const auto hb = o.heartbeat_timeout.count();
  // Below the heartbeat timeout (after which a generation forms without the leader's node),
  // so that a cut-off leader has stopped committing by then.
  j.lease_duration = o.lease_duration.count() > 0
                         ? o.lease_duration.count()
                         : std::clamp<proto::Millis>(hb / 3, 200, 1000);
  j.lease_margin = std::max<proto::Millis>(50, j.lease_duration / 5);
  return j;
}

}  // namespace

std::string encode_run_state(const scheduler::ElasticJobSnapshot& m,
                             const std::map<std::string, std::string>& trainer_systems,
                             std::int64_t step, std::int64_t epoch, const Json& checkpoints) {
  Json trainers = Json::array();
  for (const auto& t : m.trainers) {
    trainers.push_back({{"name", t.name},
                        {"node", t.node},
                        {"phase", t.phase},
                        {"committed_step", t.committed_step},
                        {"synced_generation", t.synced_generation},
                        {"exited", t.exited},
                        {"stop_reason", t.stop_reason},
                        {"deferred_stop", t.deferred_stop}});
  }
  Json checkpoint_records = Json::array();
  for (const auto& c : m.checkpoints) {
    checkpoint_records.push_back(
        {{"step", c.step}, {"path", c.path}, {"node", c.node}, {"shared", c.shared}});
  }
  Json machine{{"state", m.state},
               {"total_steps", m.total_steps},
               {"generation", m.generation},
               {"members", m.members},
               {"last_trained_members", m.last_trained_members},
               {"committed_step", m.committed_step},
               {"lease_generation", m.lease_generation},
               {"lease_holder", m.lease_holder},
               {"lease_duration_ms", m.lease_duration},
               {"trainer_counter", m.trainer_counter},
               {"trainers", trainers},
               {"draining_nodes", m.draining_nodes},
               {"lost_steps", m.lost_steps},
               {"abandoned_steps", m.abandoned_steps},
               {"checkpoints", checkpoint_records},
               {"resumed_generation", m.resumed_generation}};
  return Json{{"version", 1}, {"machine", machine}, {"trainer_systems", trainer_systems},
              {"step", step}, {"epoch", epoch},     {"checkpoints", checkpoints}}
      .dump();
}

TrainerHelloReply accepted_hello(const SchedulerOptions& options) {
  TrainerHelloReply reply;
  reply.accepted = true;
  reply.job_toml = options.job_toml;
  reply.source_name = options.source_name;
  reply.checkpoint_dir = options.spec.checkpoint.dir.empty()
                             ? (std::filesystem::path(options.run_dir) / "checkpoints").string()
                             : options.spec.checkpoint.dir;
  reply.collective_timeout_ms = static_cast<std::int32_t>(options.heartbeat_timeout.count());
  return reply;
}

RunState decode_run_state(const std::string& text) {
  RunState run;
  try {
    const Json json = Json::parse(text);
    if (json.at("version").get<int>() != 1) {
      throw std::invalid_argument("version " + json.at("version").dump() + " is not 1");
    }
    const Json& m = json.at("machine");
    auto& s = run.machine;
    s.state = m.at("state").get<std::string>();
    s.total_steps = m.at("total_steps").get<std::int64_t>();
    s.generation = m.at("generation").get<std::int64_t>();
    s.members = m.at("members").get<std::vector<std::string>>();
    s.last_trained_members = m.at("last_trained_members").get<std::vector<std::string>>();
    s.committed_step = m.at("committed_step").get<std::int64_t>();
    s.lease_generation = m.at("lease_generation").get<std::int64_t>();
    s.lease_holder = m.at("lease_holder").get<std::string>();
    s.lease_duration = m.at("lease_duration_ms").get<scheduler::Millis>();
    s.trainer_counter = m.at("trainer_counter").get<std::int32_t>();
    for (const auto& t : m.at("trainers")) {
      scheduler::ElasticJobSnapshot::TrainerRecord r;
      r.name = t.at("name").get<std::string>();
      r.node = t.at("node").get<std::string>();
      r.phase = t.at("phase").get<std::int32_t>();
      r.committed_step = t.at("committed_step").get<std::int64_t>();
      r.synced_generation = t.at("synced_generation").get<std::int64_t>();
      r.exited = t.at("exited").get<bool>();
      r.stop_reason = t.value("stop_reason", "");  // absent from older heads' records
      r.deferred_stop = t.value("deferred_stop", "");
      s.trainers.push_back(std::move(r));
    }
    s.draining_nodes = m.at("draining_nodes").get<std::vector<std::string>>();
    s.lost_steps = m.at("lost_steps").get<std::int64_t>();
    s.abandoned_steps = m.at("abandoned_steps").get<std::int64_t>();
    // Written by heads that resume jobs from checkpoints; absent: none recorded.
    if (m.contains("checkpoints")) {
      for (const auto& c : m.at("checkpoints")) {
        s.checkpoints.push_back({c.at("step").get<std::int64_t>(), c.at("path").get<std::string>(),
                                 c.at("node").get<std::string>(), c.at("shared").get<bool>()});
      }
    }
    if (m.contains("resumed_generation")) {
      s.resumed_generation = m.at("resumed_generation").get<std::int64_t>();
    }
    run.trainer_systems = json.at("trainer_systems").get<std::map<std::string, std::string>>();
    run.step = json.at("step").get<std::int64_t>();
    run.epoch = json.at("epoch").get<std::int64_t>();
    run.checkpoints = json.at("checkpoints");
  } catch (const Json::exception& e) {
    throw std::invalid_argument(e.what());
  }
  return run;
}

SchedulerActor::SchedulerActor(SchedulerOptions options)
    : options_(std::move(options)),
      job_(job_options(options_),
           [this](const std::vector<std::string>& members) { return plan_for(members); }),
      // The trainers of a group report every rank's compute of every step (observe_step).
      controller_(scheduler::for_step_observations(options_.spec.controller.config)),
      rounds_(control_rounds(options_.spec.controller)),
      recorder_(recorder_options(options_.job_id, options_.run_dir, options_.events_skipped,
                                 options_.store)),
      base_lease_ms_(job_.lease_duration()),
      clock_(kMaxRunGap),
      clock_subject_("job " + options_.job_id + ": the scheduler") {}

scheduler::Millis SchedulerActor::now() const {
  const auto running = clock_.now();
  runtime::log_found_gap(clock_, clock_subject_,
                         "no trainer is held to what it could not hear meanwhile");
  return std::chrono::duration_cast<std::chrono::milliseconds>(running.time_since_epoch()).count();
}

template <class F>
void SchedulerActor::drive(F&& input) {
  try {
    input();
  } catch (const std::exception& e) {
    // The machine is left consistent by its own finish(); what it said so far is carried out.
    spdlog::error("job {}: {}", options_.job_id, e.what());
    carry_out(job_.take_commands());
    job_.fail(e.what(), now());
  }
  carry_out(job_.take_commands());
}

scheduler::GenerationPlan SchedulerActor::plan_for(const std::vector<std::string>& members) {
  // The controller follows membership: leavers' shares go to the others by speed, newcomers
  // start from the mean measured throughput.
  for (const auto& old : controller_.estimates()) {
    if (std::find(members.begin(), members.end(), old.key) == members.end()) {
      controller_.remove_worker(old.key);
    }
  }
  for (const auto& name : members) {
    if (!controller_.contains(name)) controller_.add_worker(name);
  }
  // Throws InfeasibleBatchError with what to change.
  auto plan = controller_.plan(scheduler::PlanTrigger::kGeneration);
  scheduler::GenerationPlan out;
  for (const auto& name : members) out.batches.push_back(plan.batch_of(name));
  out.version = plan.version;
  return out;
}

void SchedulerActor::on_start() {
  started_at_ = Clock::now();
  last_replan_time_ = started_at_;
  recorder_.open();
  if (options_.head_epoch > 0 && options_.restore_state.empty()) {
    // Resumed by a restarted head before it had placed a trainer: it starts now.
    auto restarted = head_restarted_event(options_.head_epoch, options_.head_outage_s, 0);
    restarted.fields["resumed"] = true;
    recorder_.record(std::move(restarted));
  }
  if (options_.head_epoch == 0) {
    recorder_.record(RunEvent(
        EventKind::kSubmitted,
        Json{{"job_id", options_.job_id},
             {"name", options_.spec.name},
             {"policy", std::string(scheduler::to_string(options_.spec.controller.config.policy))},
             {"global_batch", options_.spec.train.global_batch},
             {"min_workers", options_.spec.elastic.min_workers},
             {"max_workers", options_.spec.elastic.max_workers}}));
  }
  ask(runtime::ActorAddress{"", kRegistryActor}, SubscribeNodes{}, std::chrono::seconds(5),
      [this](runtime::AskResult result) {
        auto snapshot = result.as<StatusReply>();
        drive([&] {
          if (!snapshot) {
            job_.fail("cannot subscribe to the node registry: " + result.error, now());
            return;
          }
          for (const auto& node : snapshot->nodes) {
            if (node.state == "alive" || node.state == "suspect") {
              node_systems_[node.id] = node.system;
              job_.node_up(node.id, node.name, now(), node.drained);
            }
          }
          if (!options_.restore_state.empty()) {
            try {
              restore_run(decode_run_state(options_.restore_state));
            } catch (const std::exception& e) {
              // Nothing the previous head did not write is guessed.
              job_.fail(std::string("the head restarted and cannot read the job's saved "
                                    "state: ") +
                            e.what() + "; submit it again",
                        now());
            }
            return;
          }
          job_.start(now());
        });
      });
  tick_timer_ = after(kTick, [this] { tick(); });
  publish_info();
}

void SchedulerActor::on_stop() {
  if (!finished_ && options_.head_stop && options_.head_stop->jobs_outlive_head) {
    // The head stops with the job's state in its store: the trainers keep their models and go
    // on under the next head, as through a kill -9 (restore_run).
    spdlog::info("job {}: left running for the next head", options_.job_id);
  } else if (!finished_) {
    // The head is going away for good: the trainers cannot continue without their scheduler.
    for (const auto& [name, io] : io_) {
      if (!io.system.empty()) {
        tell(runtime::ActorAddress{io.system, "trainer"},
             StopTrainer{options_.job_id, "head shutting down"});
      }
    }
  }
  tell(runtime::ActorAddress{"", kRegistryActor}, UnsubscribeNodes{});
}

void SchedulerActor::tick() {
  if (finished_) return;
  drive([&] { job_.tick(now()); });
  if (finished_) return;
  if (interval_due()) maybe_replan();
  tick_timer_ = after(kTick, [this] { tick(); });
}

// ---------------------------------------------------------------------------------------------
// The machine's commands

void SchedulerActor::carry_out(std::vector<scheduler::JobCommand> commands) {
  auto trainer_address = [&](const std::string& trainer) -> std::optional<runtime::ActorAddress> {
    auto it = io_.find(trainer);
    if (it == io_.end() || it->second.system.empty()) return std::nullopt;
    return runtime::ActorAddress{it->second.system, "trainer"};
  };
  for (auto& command : commands) {
    if (std::holds_alternative<proto::PersistCommand>(command)) {
      // First in its batch: nothing after it goes out unless the store has it.
      if (persist_run()) continue;
      job_.fail(
          "the head cannot write the job's state to its store (see the head's log): a "
          "restarted head could not resume it safely",
          now());
      carry_out(job_.take_commands());
      return;
    }
    if (auto* spawn = std::get_if<proto::SpawnCommand>(&command)) {
      auto node = node_systems_.find(spawn->node);
      if (node == node_systems_.end()) continue;  // the deadline will write it off
      io_[spawn->trainer];
      spdlog::info("job {}: starting trainer {} on node {}", options_.job_id, spawn->trainer,
                   job_.node_name(spawn->node));
      tell(runtime::ActorAddress{node->second, kAgentActor},
           SpawnTrainer{options_.job_id, spawn->trainer, scheduler_actor_name(options_.job_id),
                        spawn->node});
    } else if (auto* rv = std::get_if<proto::RendezvousCommand>(&command)) {
      const auto& o = rv->order;
      Rendezvous order{options_.job_id, o.generation,     o.rank,  o.world,
                       o.batches,       o.plan_version,   o.leave, o.abandon_previous,
                       o.checkpoint,    o.checkpoint_step};
      io_[rv->trainer].last_rendezvous = order;
      if (auto to = trainer_address(rv->trainer)) tell(*to, order);
    } else if (auto* plan = std::get_if<proto::PlanCommand>(&command)) {
      if (auto to = trainer_address(plan->trainer)) {
        tell(*to, PlanUpdate{plan->order.generation, plan->order.version, plan->order.batches});
      }
    } else if (auto* lease = std::get_if<proto::LeaseCommand>(&command)) {
      if (auto to = trainer_address(lease->trainer)) {
        const auto& a = lease->answer;
        tell(*to, LeaseGrant{a.generation, a.seq, a.granted, a.duration, a.reason, a.superseded});
      }
    } else if (auto* stop = std::get_if<proto::StopCommand>(&command)) {
      if (auto to = trainer_address(stop->trainer)) {
        tell(*to, StopTrainer{options_.job_id, stop->reason});
      }
    } else if (auto* probe = std::get_if<proto::ProbeCommand>(&command)) {
      // A dead process's route is gone, so its probe fails at once; a frozen one times out. The
      // trainer's actor answers, not its training thread, so a long step is no reason to
      // re-form; but a step computed far longer than this trainer's steps take (a call stuck in
      // its device, a node slowed a thousandfold) holds its generation as a frozen process does,
      // and is answered as one: missed (proto::hung_in_compute).
      auto to = trainer_address(probe->trainer);
      if (!to) continue;
      const std::string name = probe->trainer;
      const std::int64_t generation = probe->generation;
      // Its step's compute at its batch, as measured; for a trainer not yet measured (a
      // newcomer, whose first step may be the one that hangs), at the others' mean speed.
      std::optional<double> expected_s;
      double others_sum = 0;
      int others = 0;
      std::optional<int> batch;
      for (const auto& e : controller_.estimates()) {
        if (e.key == name) {
          batch = e.batch;
          if (e.batch && e.throughput && *e.throughput > 0) expected_s = *e.batch / *e.throughput;
        } else if (e.throughput && *e.throughput > 0) {
          others_sum += *e.throughput;
          ++others;
        }
      }
      if (!expected_s && batch && others > 0) expected_s = *batch / (others_sum / others);
      ask(*to, TrainerActivity{options_.job_id}, std::chrono::milliseconds(1000),
          [this, name, generation, expected_s](runtime::AskResult result) {
            // "peer ... is unreachable": the trainer's connection to the head is closed (its
            // process exited, the kernel reset it), which proves it gone; a timeout does not.
            const bool gone = result.status == runtime::AskResult::Status::kUnreachable &&
                              result.error.rfind("peer ", 0) == 0;
            bool reachable = result.ok();
            std::string error = result.error;
            if (const auto activity = result.as<TrainerActivityReply>();
                activity && expected_s &&
                proto::hung_in_compute(activity->computing_ms / 1000.0, *expected_s)) {
              reachable = false;
              error = fmt::format(
                  "hung: its training thread has computed one step for {:.1f} s, where its "
                  "steps take {:.3f} s",
                  activity->computing_ms / 1000.0, *expected_s);
            }
            drive([&] {
              job_.probe_result(name, generation, reachable, error, now(), gone);
            });
          });
    } else if (auto* drop = std::get_if<proto::DropStoreKeysCommand>(&command)) {
      // The trainers' store prefix is job/<id>/gen/<g>/ (trainer/trainer_process.cpp).
      const std::string job_prefix = "job/" + options_.job_id + "/";
      if (drop->below < 0) {
        tell(runtime::ActorAddress{"", kStoreActor},
             StoreRequest{StoreRequest::kDeletePrefix, {job_prefix}, "", "", 0, 0});
      } else {
        for (std::int64_t g = std::max<std::int64_t>(1, seen_generation_); g < drop->below; ++g) {
          tell(runtime::ActorAddress{"", kStoreActor},
               StoreRequest{StoreRequest::kDeletePrefix,
                            {job_prefix + "gen/" + std::to_string(g) + "/"}, "", "", 0, 0});
        }
        seen_generation_ = std::max(seen_generation_, drop->below);
      }
    } else if (auto* event = std::get_if<proto::JobEvent>(&command)) {
      write_event(*event);
    } else if (auto* finish = std::get_if<proto::FinishCommand>(&command)) {
      finished(finish->state, finish->reason);
    }
  }
}

bool SchedulerActor::persist_run() {
  if (!options_.store) return true;
  std::map<std::string, std::string> systems;
  for (const auto& [name, io] : io_) {
    if (!io.system.empty()) systems[name] = io.system;
  }
  try {
    options_.store->put(run_key(options_.job_id), encode_run_state(job_.snapshot(), systems, step_,
                                                                   epoch_, checkpoints_json()));
    return true;
  } catch (const state::StateStoreError& e) {
    spdlog::error("job {}: cannot write its state: {}", options_.job_id, e.what());
    return false;
  }
}

void SchedulerActor::restore_run(const RunState& run) {
  for (const auto& [name, system] : run.trainer_systems) io_[name].system = system;
  for (const auto& t : run.machine.trainers) io_[t.name];
  step_ = run.step;
  epoch_ = run.epoch;
  for (const auto& c : run.checkpoints) {
    checkpoints_.push_back({c.at("step").get<std::int64_t>(), c.at("path").get<std::string>(),
                            c.at("node").get<std::string>()});
  }
  seen_generation_ = run.machine.generation;
  auto restarted = head_restarted_event(options_.head_epoch, options_.head_outage_s, run.step);
  restarted.fields["generation"] = run.machine.generation;
  restarted.fields["resumed"] = true;
  recorder_.record(std::move(restarted));
  spdlog::info("job {}: resuming at generation {} (step {} or later) after a head restart",
               options_.job_id, run.machine.generation, run.step);
  job_.restore(run.machine, now());
}

void SchedulerActor::write_event(const scheduler::JobEvent& e) {
  const auto kind = event_kind(e.kind);
  if (!kind) throw std::logic_error("the protocol machine wrote an event of no kind: " + e.kind);
  Json line = Json::object();
  if (!e.trainer.empty()) line["trainer"] = e.trainer;
  if (!e.reason.empty()) line["reason"] = e.reason;
  if (e.kind == "spawn") {
    line["node"] = e.reason;
    line.erase("reason");
  } else if (e.kind == "trainer_ready") {
    line["startup_s"] = e.seconds;
  } else {
    // The node a drain was asked for, by name: what `--follow` prints beside the trainer.
    if (e.kind == "drain") line["node"] = node_of(e.trainer);
    line["generation"] = e.generation;
    line["step"] = e.step;
  }
  if (e.kind == "generation") {
    line["members"] = e.members;
    line["batches"] = e.batches;
    spdlog::info("job {}: generation {} with {} trainers ({}), batches {}", options_.job_id,
                 e.generation, e.members.size(), e.reason, Json(e.batches).dump());
    membership_log_.push_back(fmt::format("step {}: generation {} = {} ({})", e.step,
                                          e.generation, Json(e.members).dump(), e.reason));
    rounds_.generation_started(step_, e.members);
    last_replan_time_ = Clock::now();
    publish_info();
  } else if (e.kind == "trainer_gone") {
    spdlog::warn("job {}: trainer {} is gone ({})", options_.job_id, e.trainer, e.reason);
    membership_log_.push_back(fmt::format("step {}: {} gone ({})", e.step, e.trainer, e.reason));
  } else if (e.kind == "node_held_back") {
    const std::string node = node_of(e.trainer);
    line["node"] = node;
    line["held_back_s"] = e.seconds;
    line["losses"] = e.losses;
    spdlog::warn(
        "job {}: node {} gets no trainer for {:.1f} s: {} trainer(s) lost there lately, "
        "the last {} ({})",
        options_.job_id, node, e.seconds, e.losses, e.trainer, e.reason);
  } else if (e.kind == "recovered") {
    line["recovery_s"] = e.seconds;
    line["lost_steps"] = e.lost_steps;
  } else if (e.kind == "resumed_from_checkpoint") {
    line["checkpoint"] = e.reason;
    line.erase("reason");
    line["checkpoint_node"] = node_of(e.trainer);
    line["lost_steps"] = e.lost_steps;
    spdlog::warn(
        "job {}: no live trainer holds its committed state; resuming from checkpoint {} "
        "(step {}; {} committed steps lost) in generation {}",
        options_.job_id, e.reason, e.step, e.lost_steps, e.generation);
    membership_log_.push_back(fmt::format("step {}: resumed from checkpoint {} ({} steps lost)",
                                          e.step, e.reason, e.lost_steps));
    // The job's progress goes back to the checkpoint: the steps after it are trained again.
    step_ = e.step;
  } else if (e.kind == "trainer_ready") {
    spdlog::info("job {}: trainer {} ready ({:.1f} s after spawn)", options_.job_id, e.trainer,
                 e.seconds);
  } else if (e.kind == "formation_failed" || e.kind == "lease_refused") {
    spdlog::warn("job {}: {} (generation {}): {}", options_.job_id, e.kind, e.generation,
                 e.reason);
  }
  if (e.kind == "finished") return;  // finished() writes the line with the status
  if (e.kind == "lease_refused") {
    // A leader retries every 100 ms while it waits: one line per refusal that says something new.
    const std::string key = e.trainer + "/" + std::to_string(e.generation) + "/" + e.reason;
    if (key == last_lease_refusal_) return;
    last_lease_refusal_ = key;
  }
  recorder_.record(RunEvent(*kind, std::move(line)));
}

// ---------------------------------------------------------------------------------------------
// Inputs

void SchedulerActor::on_node_event(const NodeEvent& event) {
  if (finished_) return;
  const auto& info = event.node;
  if (event.event == "heartbeat") {
    on_heartbeat_counters(info);
    return;
  }
  if (event.event == "joined" || event.event == "alive") {
    node_systems_[info.id] = info.system;
    drive([&] { job_.node_up(info.id, info.name, now(), info.drained); });
    return;
  }
  // `omnilearn node drain` / `undrain`, for every job (a running one is also told directly).
  if (event.event == "drained") {
    drive([&] { job_.drain(info.id, now()); });
    return;
  }
  if (event.event == "undrained") {
    drive([&] { job_.undrain(info.id, now()); });
    return;
  }
  if (event.event == "dead" || event.event == "left") {
    drive([&] { job_.node_down(info.id, event.event, now()); });
  }
}

void SchedulerActor::on_heartbeat_counters(const NodeInfo& node) {
  const auto trainers = job_.trainers();
  const auto& batches = job_.batches();
  for (const auto& counters : node.actors) {
    if (counters.job_id != options_.job_id) continue;
    auto it = io_.find(counters.actor);
    auto view = trainers.find(counters.actor);
    if (it == io_.end() || view == trainers.end()) continue;
    auto& io = it->second;
    // A heartbeat repeats the last counters when no step ended since: nothing new.
    const bool fresh = counters.steps > io.counter_steps;
    // The agent's window holds the steps since its previous heartbeat, restarted where the
    // batch changed (the new plan's first step, or later).
    std::int64_t first_step = io.counter_steps + 1;
    if (counters.batch != io.counter_batch) {
      first_step = std::max(first_step, rounds_.plan_effective_step());
    }
    io.counter_batch = counters.batch;
    io.counter_steps = std::max(io.counter_steps, counters.steps);
    io.samples_per_s = counters.samples_per_s;
    io.step_time_s = counters.step_time_s;
    io.compute_time_s = counters.compute_time_s;
    job_.progress(counters.actor, counters.steps);
    fit_lease_to_steps(counters.step_time_s);
    // Feed the controller only with fresh timings of the plan in force whose steps all lie
    // after the warm-up or cool-down (ControlRounds).
    const auto rank = view->second.rank;
    if (!fresh || view->second.phase != proto::ElasticJob::Phase::kMember || rank < 0 ||
        rank >= static_cast<int>(batches.size())) {
      continue;
    }
    if (counters.batch != batches[rank] || counters.compute_time_s <= 0) continue;
    // The leader's reports carry every rank's compute of every step (observe_step): windows
    // would count the same steps twice, later and averaged.
    if (step_timings_) continue;
    if (!rounds_.accept(counters.actor, first_step, counters.steps)) continue;
    controller_.observe(counters.actor, counters.batch, counters.compute_time_s);
  }
}

void SchedulerActor::observe_step(const TrainerReport& report) {
  step_timings_ = true;
  const auto& members = job_.members();
  for (std::size_t rank = 0; rank < members.size(); ++rank) {
    const int batch = report.batches[rank];
    const double seconds = report.rank_compute_times_s[rank];
    if (batch <= 0 || !(seconds > 0) || !std::isfinite(seconds)) continue;
    // Every step is attributed to the batch it ran at; the cool-down after a plan still
    // applies (ControlRounds), as a step right after a change runs colder.
    if (!rounds_.accept(members[rank], report.step, report.step)) continue;
    controller_.observe(members[rank], batch, seconds);
  }
}

void SchedulerActor::fit_lease_to_steps(double step_time_s) {
  // A leader commits a step only if its lease still holds when the step ends (the commit gate),
  // so a lease must outlast a step several times over: slow steps (a slowed or big worker)
  // would otherwise have every commit refused. Longer leases only delay a new leader after the
  // old one vanished with its agent; they never let two commit.
  const auto wanted = static_cast<scheduler::Millis>(4000.0 * step_time_s);
  const scheduler::Millis duration = std::clamp<scheduler::Millis>(
      std::max(base_lease_ms_, wanted), base_lease_ms_, kMaxLeaseMs);
  if (duration > job_.lease_duration() || duration < job_.lease_duration() / 2) {
    job_.set_lease_duration(duration);
  }
}

bool SchedulerActor::interval_due() const {
  if (job_.state() != "running" || job_.forming() || job_.members().empty()) return false;
  const auto& c = options_.spec.controller;
  // A detected change of a worker's speed waits for no interval (ControlRounds::due).
  if (c.interval_s > 0) {
    return (controller_.speed_changed() || seconds_since(last_replan_time_) >= c.interval_s) &&
           rounds_.fresh();
  }
  return rounds_.due(step_, controller_.speed_changed());
}

void SchedulerActor::maybe_replan() {
  // Called when interval_due(): every member has fresh timings at the plan in force.
  const auto& members = job_.members();
  last_replan_time_ = Clock::now();
  scheduler::BatchPlan plan;
  try {
    plan = controller_.plan();
  } catch (const std::exception& e) {
    spdlog::warn("job {}: no new plan: {}", options_.job_id, e.what());
    rounds_.round_ran(step_, false, step_);
    return;
  }
  bool sent = false;
  std::vector<std::int32_t> batches;
  if (plan.changed) {
    for (const auto& name : members) batches.push_back(plan.batch_of(name));
    drive([&] { sent = job_.propose_plan(batches, plan.version, now()); });
  }
  // The leader applies a plan at its next boundary: two steps after the one reported.
  rounds_.round_ran(step_, sent, step_ + 2);
  if (!sent) return;
  Json times = Json::array();
  for (const auto& name : members) times.push_back(io_[name].compute_time_s);
  recorder_.record(RunEvent(
      EventKind::kPlan,
      Json{{"step", step_}, {"generation", job_.generation()}, {"version", plan.version},
           {"batches", batches}, {"compute_times", times},
           {"predicted_step_time", plan.predicted_step_time},
           {"target_step_time", plan.target_step_time}, {"noise_gain", plan.noise_gain},
           {"persisted", plan.persisted}}));
  spdlog::info("job {}: plan v{} at step {}: {}", options_.job_id, plan.version, step_,
               Json(batches).dump());
}

void SchedulerActor::on_report(const TrainerReport& report) {
  proto::MemberReport r;
  r.generation = report.generation;
  r.rank = report.rank;
  r.step = report.step;
  r.error = report.error;
  r.synced_generation = report.synced_generation;
  r.kind = report.synced             ? proto::MemberReport::Kind::kSynced
           : report.collective_failed ? proto::MemberReport::Kind::kBroken
           : report.left              ? proto::MemberReport::Kind::kLeft
                                      : proto::MemberReport::Kind::kStep;
  if (report.total_steps > 0 && job_.total_steps() == 0) job_.set_total_steps(report.total_steps);
  drive([&] { job_.report(report.trainer, r, now()); });
  if (report.synced) {
    recorder_.record(RunEvent(
        EventKind::kSynced,
        Json{{"trainer", report.trainer}, {"generation", report.generation}, {"rank", report.rank},
             {"step", report.step}, {"parameter_checksum", report.parameter_checksum}}));
    return;
  }
  if (r.kind != proto::MemberReport::Kind::kStep) return;
  if (report.rank == 0 && report.generation != job_.generation()) {
    // A superseded generation's leader committed this step before its lease ran out. It counts
    // for nothing here, but it is written down: tests check that no step number is committed by
    // two generations (no split brain). A leader's reports come in order, so one at or below
    // the last written for its generation, as either kind, is a copy (a leader whose done went
    // unanswered sends its last report again).
    auto [last, fresh] = last_step_written_.try_emplace(report.generation, report.step);
    if (!fresh && report.step <= last->second) return;
    last->second = report.step;
    ++superseded_steps_;
    recorder_.record(RunEvent(EventKind::kSupersededStep, Json{{"trainer", report.trainer},
                                                              {"generation", report.generation},
                                                              {"step", report.step}}));
    return;
  }
  // The current generation's leader's steps make the job's progress (a follower's done may
  // already have told the machine about the last one: the machine's committed step is a
  // bound, not the log).
  const auto& leaders = job_.members();
  if (report.generation != job_.generation() || leaders.empty() ||
      leaders[0] != report.trainer || report.step <= step_) {
    return;
  }
  step_ = report.step;
  last_step_written_[report.generation] = report.step;
  epoch_ = report.epoch;
  loss_ = report.loss;
  const auto& members = job_.members();
  Json workers = Json::array();
  for (std::size_t rank = 0; rank < members.size(); ++rank) {
    const auto& io = io_[members[rank]];
    const auto trainers = job_.trainers();
    auto view = trainers.find(members[rank]);
    workers.push_back({{"trainer", members[rank]},
                       {"node", view != trainers.end() ? job_.node_name(view->second.node) : ""},
                       {"rank", rank},
                       {"batch", rank < report.batches.size() ? report.batches[rank] : 0},
                       {"step_time_s", io.step_time_s},
                       {"compute_time_s", io.compute_time_s},
                       {"samples_per_s", io.samples_per_s},
                       // The heartbeat window the timings belong to (it ended at committed
                       // step timing_steps, at batch timing_batch): what the controller saw.
                       {"timing_steps", io.counter_steps},
                       {"timing_batch", io.counter_batch}});
  }
  Json event{{"step", report.step},
             {"epoch", report.epoch},
             {"loss", report.loss},
             {"generation", report.generation},
             {"batches", report.batches},
             {"step_time_s", report.step_time_s},
             {"allreduce_time_s", report.allreduce_time_s},
             {"workers", workers}};
  // Every rank's compute of this very step, as the gradient exchange carried it to the leader:
  // the controller's observations from now on (observe_step), in place of the heartbeats'.
  if (report.rank_compute_times_s.size() == members.size() &&
      report.batches.size() == members.size()) {
    event["compute_times_s"] = report.rank_compute_times_s;
    observe_step(report);
  }
  if (report.eval_accuracy >= 0) {
    event["test_accuracy"] = report.eval_accuracy;
    event["test_loss"] = report.eval_loss;
  }
  if (!report.checkpoint.empty()) {
    checkpoints_.push_back({report.step, report.checkpoint, node_of(report.trainer)});
    event["checkpoint"] = report.checkpoint;
    event["checkpoint_node"] = checkpoints_.back().node;
    // Persisted (the machine asks for it) before the step's line is written: a checkpoint in
    // events.jsonl is one a restarted head can resume from.
    const proto::JobCheckpoint written{report.step, report.checkpoint, checkpoints_.back().node,
                                       options_.spec.checkpoint.shared};
    drive([&] { job_.checkpoint_written(written, now()); });
  }
  recorder_.record(RunEvent(EventKind::kStep, std::move(event)));
  if (interval_due()) maybe_replan();
  if (step_ % 20 == 0) publish_info();
}

// ---------------------------------------------------------------------------------------------
// The end

void SchedulerActor::finished(const std::string& state, const std::string& reason) {
  if (finished_) return;
  finished_ = true;
  cancel_timer(tick_timer_);
  std::string why = reason;
  if (state == "failed" && !last_trainer_error_.empty() && why.find(last_trainer_error_) == std::string::npos) {
    why += " (last trainer error: " + last_trainer_error_ + ")";
  }
  if (state == "failed") {
    spdlog::error("job {} failed: {}", options_.job_id, why);
  } else {
    spdlog::info("job {} {} {}", options_.job_id, state, why);
  }
  reason_ = why;
  recorder_.record(finished_event(state, why, std::max(step_, job_.committed_step())));
  recorder_.finish(summary());
  // Nothing more to hear about nodes; the JobManager keeps the summary and stops this actor.
  tell(runtime::ActorAddress{"", kRegistryActor}, UnsubscribeNodes{});
  publish_info();
}

std::string SchedulerActor::node_of(const std::string& trainer) const {
  const auto trainers = job_.trainers();
  auto it = trainers.find(trainer);
  return it == trainers.end() ? "" : job_.node_name(it->second.node);
}

nlohmann::json SchedulerActor::checkpoints_json() const {
  Json out = Json::array();
  for (const auto& c : checkpoints_) {
    out.push_back({{"step", c.step}, {"path", c.path}, {"node", c.node}});
  }
  if (!final_checkpoint_.empty()) {
    out.push_back({{"step", std::max(step_, job_.committed_step())},
                   {"path", final_checkpoint_},
                   {"node", final_checkpoint_node_}});
  }
  return out;
}

JobInfo SchedulerActor::info() const {
  JobInfo info;
  info.id = options_.job_id;
  info.name = options_.spec.name;
  info.state = job_.state();
  info.reason = finished_ ? reason_ : job_.reason();
  info.step = std::max(step_, job_.committed_step());
  info.total_steps = job_.total_steps();
  info.generation = job_.generation();
  info.loss = loss_;
  if (!final_checkpoint_.empty()) {
    info.checkpoint = final_checkpoint_;
    info.checkpoint_node = final_checkpoint_node_;
  } else if (!checkpoints_.empty()) {
    info.checkpoint = checkpoints_.back().path;
    info.checkpoint_node = checkpoints_.back().node;
  }
  const auto trainers = job_.trainers();
  const auto& members = job_.members();
  const auto& batches = job_.batches();
  for (std::size_t rank = 0; rank < members.size(); ++rank) {
    JobWorkerInfo w;
    auto view = trainers.find(members[rank]);
    w.node = view != trainers.end() ? job_.node_name(view->second.node) : "";
    w.actor = members[rank];
    w.rank = static_cast<std::int32_t>(rank);
    w.batch = rank < batches.size() ? batches[rank] : 0;
    auto io = io_.find(members[rank]);
    if (io != io_.end()) {
      w.samples_per_s = io->second.samples_per_s;
      w.step_time_s = io->second.step_time_s;
    }
    info.workers.push_back(w);
  }
  return info;
}

void SchedulerActor::publish_info() {
  if (options_.jobs.empty()) return;
  // The final message carries the summary: the JobManager keeps it and answers for the job
  // once this actor is gone.
  tell(options_.jobs, recorder_.update(info()));
}

nlohmann::json SchedulerActor::speed_summary() const {
  // Measured: each member's compute speed (samples/s of forward + backward + emulated slowdown,
  // the controller's median over its recent heartbeat windows in this run) and the ideal
  // speed-up over uniform batches those speeds imply, sum(speed) / (n x slowest), as the
  // heterogeneity benchmarks define it. Not measured: a speed-up over uniform batches, since
  // this run never trained with them; it is predicted from the same speeds (with each
  // worker's affine fit t = alpha + beta b where it has one, so a fixed per-step cost is not
  // taken for slowness) and labelled an estimate.
  const auto& members = job_.members();
  const auto& batches = job_.batches();
  const auto estimates = controller_.estimates();
  std::vector<scheduler::CostModel> models;
  std::vector<double> speeds;
  Json workers = Json::array();
  bool affine = true;
  for (const auto& name : members) {
    auto e = std::find_if(estimates.begin(), estimates.end(),
                          [&](const scheduler::WorkerEstimate& x) { return x.key == name; });
    if (e == estimates.end() || !e->throughput) return Json{{"measured_speeds", nullptr},
                                                           {"speedup_estimate", nullptr}};
    speeds.push_back(*e->throughput);
    affine = affine && e->model.has_value();
    models.push_back(e->model ? *e->model : scheduler::CostModel{0.0, 1.0 / *e->throughput});
    workers.push_back({{"name", name},
                       {"samples_per_s", *e->throughput},
                       {"relative_error", e->rel_error.value_or(0.0)},
                       {"observations", e->observations}});
  }
  if (speeds.empty() || batches.size() != speeds.size()) {
    return Json{{"measured_speeds", nullptr}, {"speedup_estimate", nullptr}};
  }
  const double n = static_cast<double>(speeds.size());
  const double slowest = *std::min_element(speeds.begin(), speeds.end());
  const double ideal_linear = std::accumulate(speeds.begin(), speeds.end(), 0.0) / (n * slowest);
  Json measured{{"source",
                 "compute speed per worker measured in this run (median of the controller's "
                 "recent heartbeat windows)"},
                {"workers", workers},
                {"ideal_speedup_over_uniform", ideal_linear}};

  const int B = options_.spec.train.global_batch;
  double uniform = 0, planned = 0;
  for (std::size_t i = 0; i < models.size(); ++i) {
    uniform = std::max(uniform, models[i].time(static_cast<double>(B) / n));
    planned = std::max(planned, models[i].time(batches[i]));
  }
  const std::vector<scheduler::Bounds> bounds(
      models.size(), scheduler::Bounds{1, std::max(1, B)});
  const double ideal = scheduler::best_integer_split(models, bounds, B).step_time;
  Json estimate{{"estimate", true},
                {"basis", std::string("not measured: this run did not train with uniform batches; "
                                      "predicted from the measured speeds with ") +
                              (affine ? "each worker's affine cost fit"
                                      : "cost assumed linear in the batch (it overstates when "
                                        "steps have a fixed cost)")},
                {"uniform_compute_s", uniform},
                {"planned_compute_s", planned},
                {"ideal_compute_s", ideal},
                {"speedup_over_uniform", uniform / planned},
                {"ideal_speedup", uniform / ideal}};
  return Json{{"measured_speeds", measured}, {"speedup_estimate", estimate}};
}

nlohmann::json SchedulerActor::summary() const {
  Json workers = Json::array();
  const auto trainers = job_.trainers();
  const auto& members = job_.members();
  const auto& batches = job_.batches();
  for (std::size_t rank = 0; rank < members.size(); ++rank) {
    auto view = trainers.find(members[rank]);
    auto io_it = io_.find(members[rank]);
    const TrainerIo io = io_it != io_.end() ? io_it->second : TrainerIo{};
    workers.push_back({{"name", members[rank]},
                       {"node", view != trainers.end() ? job_.node_name(view->second.node) : ""},
                       {"rank", rank},
                       {"final_batch", rank < batches.size() ? batches[rank] : 0},
                       {"samples_per_s", io.samples_per_s},
                       {"step_time_s", io.step_time_s},
                       {"compute_time_s", io.compute_time_s}});
  }
  const Json speed = speed_summary();
  return Json{{"job_id", options_.job_id},
              {"name", options_.spec.name},
              {"status", job_.state()},
              {"reason", finished_ ? reason_ : job_.reason()},
              {"steps", std::max(step_, job_.committed_step())},
              {"total_steps", job_.total_steps()},
              {"epochs", epoch_},
              {"wall_time_s", seconds_since(started_at_)},
              {"final_test_accuracy", final_accuracy_ >= 0 ? Json(final_accuracy_) : Json()},
              {"final_test_loss", final_loss_ >= 0 ? Json(final_loss_) : Json()},
              {"final_train_loss", loss_},
              {"checkpoint", final_checkpoint_},
              {"checkpoint_node", final_checkpoint_node_},
              {"checkpoints", checkpoints_json()},
              {"policy", std::string(scheduler::to_string(options_.spec.controller.config.policy))},
              {"global_batch", options_.spec.train.global_batch},
              {"workers", workers},
              {"generations", job_.generation()},
              {"membership", membership_log_},
              {"lost_steps", job_.lost_steps()},
              {"abandoned_in_flight_steps", job_.abandoned_steps()},
              {"recovery_s", job_.recovery_seconds()},
              {"superseded_steps", superseded_steps_},
              {"measured_speeds", speed.at("measured_speeds")},
              {"speedup_estimate", speed.at("speedup_estimate")}};
}

void SchedulerActor::on_message(const runtime::Envelope& message) {
  switch (message.kind) {
    case MessageKind::kNodeEvent:
      if (auto event = decode<NodeEvent>(message)) on_node_event(*event);
      return;
    case MessageKind::kTrainerHello: {
      auto hello = decode_or_count<TrainerHello>(message);
      TrainerHelloReply reply;
      bool accepted = false;
      if (hello) {
        // Its address first: the machine may answer the hello with a rendezvous at once.
        auto io = io_.find(hello->trainer);
        if (io != io_.end()) io->second.system = message.from.system;
        drive([&] { accepted = job_.hello(hello->trainer, now()); });
        if (!accepted && !finished_ && io != io_.end() && io->second.last_rendezvous) {
          // A trainer of the job attaching again (its agent told it this head took over):
          // what it was last told may not have reached it.
          tell(runtime::ActorAddress{io->second.system, "trainer"}, *io->second.last_rendezvous);
          return;
        }
      }
      if (!accepted) {
        reply.error = finished_ ? "the job has finished" : "unknown trainer";
        this->reply(message, reply);
        return;
      }
      this->reply(message, accepted_hello(options_));
      return;
    }
    case MessageKind::kTrainerReport:
      if (auto report = decode<TrainerReport>(message)) on_report(*report);
      return;
    case MessageKind::kLeaseRequest:
      if (auto ask = decode<LeaseRequest>(message)) {
        drive([&] {
          job_.lease_request(ask->trainer, proto::LeaseAsk{ask->generation, ask->seq, ask->step},
                             now());
        });
      }
      return;
    case MessageKind::kTrainerDone: {
      auto done = decode_or_count<TrainerDone>(message);
      if (message.correlation) reply(message, SimpleReply{true, ""});
      if (!done) return;
      proto::MemberDone d;
      d.outcome = done->outcome == "drained" ? proto::MemberDone::Outcome::kDrained
                  : done->outcome == "error" ? proto::MemberDone::Outcome::kError
                                             : proto::MemberDone::Outcome::kFinished;
      d.generation = done->generation;
      d.rank = done->rank;
      d.step = done->step;
      d.ok = done->ok;
      d.error = done->error;
      if (!done->ok && !done->error.empty()) last_trainer_error_ = done->trainer + ": " + done->error;
      if (d.outcome == proto::MemberDone::Outcome::kFinished && done->rank == 0 && done->ok) {
        // Kept aside; they count only if the machine takes this done as the job's end.
        final_accuracy_ = done->test_accuracy;
        final_loss_ = done->test_loss;
        final_checkpoint_ = done->checkpoint;
        final_checkpoint_node_ = node_of(done->trainer);
      }
      drive([&] { job_.done(done->trainer, d, now()); });
      return;
    }
    case MessageKind::kTrainerExited:
      if (auto exited = decode<TrainerExited>(message)) {
        if (exited->exit_code != 0 && !exited->last_error.empty()) {
          last_trainer_error_ = exited->trainer + ": " + exited->last_error;
        }
        // Why a trainer went, for events.jsonl and --follow/logs; before drive(), which may end
        // the job because of it. Exits after the end (trainers told to stop) are no news.
        auto& io = io_[exited->trainer];
        if (!finished_ && !io.exit_reported) {
          io.exit_reported = true;
          recorder_.record(RunEvent(EventKind::kTrainerExited,
                                    Json{{"trainer", exited->trainer},
                                         {"node", job_.node_name(exited->node_id)},
                                         {"exit_code", exited->exit_code},
                                         {"reason", exited->reason},
                                         {"last_error", exited->last_error}}));
        }
        // The reason the job may fail with: what ended the process and what it last said.
        std::string why = exited->reason;
        if (exited->exit_code != 0 && !exited->last_error.empty()) {
          why += (why.empty() ? "" : ": ") + exited->last_error;
        }
        drive([&] { job_.trainer_exited(exited->trainer, exited->exit_code, why, now()); });
      }
      return;
    case MessageKind::kDrainNode: {
      auto drain = decode<DrainNode>(message);
      if (!drain) return;
      int leaving = 0;
      drive([&] { leaving = job_.drain(drain->node, now()); });
      if (message.correlation) {
        reply(message, SimpleReply{true, fmt::format("{} trainers leaving", leaving)});
      }
      return;
    }
    case MessageKind::kStopJob: {
      auto stop = decode_or_count<StopJob>(message);
      drive([&] {
        job_.stop(stop && !stop->reason.empty() ? stop->reason : "stopped by user", now());
      });
      if (message.correlation) reply(message, SimpleReply{true, "stopped"});
      return;
    }
    case MessageKind::kJobStatusRequest: {
      auto request = decode_or_count<JobStatusRequest>(message);
      reply(message, recorder_.page(info(), request ? request->since : 0));
      return;
    }
    default:
      if (message.correlation != 0) {
        reply(message, runtime::ErrorReply{"bad-request", "scheduler does not handle " +
                                                              std::string(runtime::kind_name(message.kind))});
      }
  }
}

}  // namespace omnilearn::actors
