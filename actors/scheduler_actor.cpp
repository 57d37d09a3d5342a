#include "actors/scheduler_actor.hpp"

#include <algorithm>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "runtime/system_messages.hpp"

namespace omnilearn::actors {
namespace {

using Json = nlohmann::json;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

constexpr std::chrono::milliseconds kTick{200};

}  // namespace

SchedulerActor::SchedulerActor(SchedulerOptions options)
    : options_(std::move(options)), controller_(options_.spec.controller.config) {}

void SchedulerActor::on_start() {
  started_at_ = Clock::now();
  last_replan_time_ = started_at_;
  std::error_code ec;
  std::filesystem::create_directories(options_.run_dir, ec);
  events_file_.open(std::filesystem::path(options_.run_dir) / "events.jsonl", std::ios::app);
  if (!events_file_) {
    spdlog::warn("job {}: cannot write {}/events.jsonl", options_.job_id, options_.run_dir);
  }
  emit(Json{{"time", unix_time()},
            {"event", "submitted"},
            {"job_id", options_.job_id},
            {"name", options_.spec.name},
            {"policy", std::string(scheduler::to_string(options_.spec.controller.config.policy))},
            {"global_batch", options_.spec.train.global_batch},
            {"min_workers", options_.spec.elastic.min_workers},
            {"max_workers", options_.spec.elastic.max_workers}}
           .dump());
  ask(runtime::ActorAddress{"", kRegistryActor}, SubscribeNodes{}, std::chrono::seconds(5),
      [this](runtime::AskResult result) {
        auto snapshot = result.as<StatusReply>();
        if (!snapshot) {
          finish("failed", "cannot subscribe to the node registry: " + result.error);
          return;
        }
        for (const auto& node : snapshot->nodes) {
          if (node.state == "alive" || node.state == "suspect") add_or_update_node(node);
        }
        place_trainers();
      });
  after(kTick, [this] { check_timeouts(); });
  publish_info();
}

void SchedulerActor::on_stop() {
  if (!finished_) {
    // The head is going away: the trainers cannot continue without their scheduler.
    for (auto& [name, trainer] : trainers_) {
      if (!trainer.system.empty() && trainer.phase != Phase::kGone) {
        tell(runtime::ActorAddress{trainer.system, "trainer"},
             StopTrainer{options_.job_id, "head shutting down"});
      }
    }
  }
}

void SchedulerActor::emit(const std::string& json_line) {
  events_.push_back(json_line);
  if (events_file_) {
    events_file_ << json_line << '\n';
    events_file_.flush();
  }
}

// ---------------------------------------------------------------------------------------------
// Membership

void SchedulerActor::add_or_update_node(const NodeInfo& info) {
  auto& node = nodes_[info.id];
  node.id = info.id;
  node.name = info.name;
  node.system = info.system;
  node.alive = info.state == "alive" || info.state == "suspect";
}

void SchedulerActor::on_node_event(const NodeEvent& event) {
  if (finished_) return;
  const auto& info = event.node;
  if (event.event == "heartbeat") {
    on_heartbeat_counters(info);
    return;
  }
  if (event.event == "joined" || event.event == "alive") {
    add_or_update_node(info);
    place_trainers();
    return;
  }
  if (event.event == "dead" || event.event == "left") {
    auto it = nodes_.find(info.id);
    if (it != nodes_.end()) it->second.alive = false;
    std::vector<std::string> gone;
    for (auto& [name, trainer] : trainers_) {
      if (trainer.node_id == info.id && trainer.phase != Phase::kGone) gone.push_back(name);
    }
    for (const auto& name : gone) trainer_gone(name, "node " + info.name + " " + event.event);
    maybe_regroup("node " + info.name + " " + event.event);
  }
}

void SchedulerActor::place_trainers() {
  if (finished_) return;
  const auto& elastic = options_.spec.elastic;
  auto active = [&] {
    int count = 0;
    for (const auto& [name, t] : trainers_) count += t.phase != Phase::kGone && t.phase != Phase::kLeaving;
    return count;
  };
  for (auto& [id, node] : nodes_) {
    if (!node.alive || node.draining) continue;
    int on_node = 0;
    for (const auto& [name, t] : trainers_) {
      on_node += t.node_id == id && t.phase != Phase::kGone;
    }
    while (on_node < elastic.slots && active() < elastic.max_workers) {
      Trainer trainer;
      trainer.name = fmt::format("{}-t{}", node.name, ++trainer_counter_);
      trainer.node_id = id;
      trainer.spawned_at = Clock::now();
      spdlog::info("job {}: starting trainer {} on node {}", options_.job_id, trainer.name,
                   node.name);
      tell(runtime::ActorAddress{node.system, kAgentActor},
           SpawnTrainer{options_.job_id, trainer.name, scheduler_actor_name(options_.job_id)});
      emit(Json{{"time", unix_time()}, {"event", "spawn"}, {"trainer", trainer.name},
                {"node", node.name}}
               .dump());
      trainers_.emplace(trainer.name, trainer);
      ++on_node;
    }
  }
}

void SchedulerActor::trainer_gone(const std::string& name, const std::string& reason) {
  auto it = trainers_.find(name);
  if (it == trainers_.end() || it->second.phase == Phase::kGone) return;
  auto& trainer = it->second;
  bool was_member = trainer.phase == Phase::kMember;
  trainer.phase = Phase::kGone;
  spdlog::warn("job {}: trainer {} is gone ({})", options_.job_id, name, reason);
  emit(Json{{"time", unix_time()}, {"event", "trainer_gone"}, {"trainer", name},
            {"reason", reason}, {"step", step_}, {"generation", generation_}}
           .dump());
  membership_log_.push_back(fmt::format("step {}: {} gone ({})", step_, name, reason));
  if (was_member && state_ == "running" && !disruption_at_) {
    disruption_at_ = Clock::now();
    step_at_disruption_ = step_;
  }
}

void SchedulerActor::maybe_regroup(const std::string& reason) {
  if (finished_) return;
  // One generation at a time: a new one is only issued once the last one trained a step,
  // failed, or timed out forming (a trainer blocked joining an abandoned group would hang).
  if (forming_ && Clock::now() - formed_requested_at_ < options_.form_timeout) {
    bool broken = false;
    for (const auto& name : members_) broken |= trainers_[name].phase != Phase::kMember;
    if (!broken) return;
  }
  std::vector<std::string> survivors;
  for (const auto& name : members_) {
    if (trainers_[name].phase == Phase::kMember) survivors.push_back(name);
  }
  std::vector<std::string> joiners;
  for (auto& [name, trainer] : trainers_) {
    if (trainer.phase == Phase::kReady) joiners.push_back(name);
  }
  bool leavers = false;
  for (const auto& name : members_) leavers |= trainers_[name].phase == Phase::kLeaving;
  if (generation_ > 0 && joiners.empty() && !leavers && survivors.size() == members_.size() &&
      !members_.empty()) {
    return;  // nothing changed
  }
  int wanted = static_cast<int>(survivors.size() + joiners.size());
  wanted = std::min(wanted, options_.spec.elastic.max_workers);
  if (wanted < options_.spec.elastic.min_workers) {
    if (!below_min_since_) below_min_since_ = Clock::now();
    if (!members_.empty()) {
      // Survivors stop at their next boundary and wait, idle, for enough workers.
      form_generation({}, reason + " (fewer than min_workers: waiting)");
    }
    return;
  }
  // At the first start, give every trainer that is still starting a chance to join, so the job
  // does not re-form the group right after it began.
  if (generation_ == 0) {
    bool still_spawning = false;
    for (const auto& [name, t] : trainers_) {
      still_spawning |= t.phase == Phase::kSpawning &&
                        Clock::now() - t.spawned_at < options_.spawn_timeout;
    }
    if (still_spawning && static_cast<int>(joiners.size()) < options_.spec.elastic.max_workers) {
      return;
    }
  }
  below_min_since_.reset();
  // Survivors first (in their old rank order), then joiners; then rank 0 must hold the
  // committed state: whoever committed the most steps (a joiner that was an idle survivor of an
  // earlier generation counts, a fresh one has 0).
  std::vector<std::string> members = survivors;
  members.insert(members.end(), joiners.begin(), joiners.end());
  std::stable_sort(members.begin(), members.end(), [&](const auto& a, const auto& b) {
    return trainers_[a].committed_step > trainers_[b].committed_step;
  });
  if (static_cast<int>(members.size()) > options_.spec.elastic.max_workers) {
    members.resize(options_.spec.elastic.max_workers);
  }
  form_generation(members, reason);
}

void SchedulerActor::form_generation(std::vector<std::string> members, const std::string& reason) {
  ++generation_;
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
  std::vector<std::int32_t> batches;
  if (!members.empty()) {
    auto plan = controller_.plan();
    for (const auto& name : members) batches.push_back(plan.batch_of(name));
    plan_version_ = plan.version;
  }
  // Everyone who was in the old generation but not in the new one is told to stop training
  // in it; members get their rank.
  std::vector<std::string> old_members = members_;
  members_ = members;
  batches_ = batches;
  for (std::size_t rank = 0; rank < members.size(); ++rank) {
    auto& trainer = trainers_[members[rank]];
    trainer.phase = Phase::kMember;
    trainer.rank = static_cast<std::int32_t>(rank);
    tell(runtime::ActorAddress{trainer.system, "trainer"},
         Rendezvous{options_.job_id, generation_, static_cast<std::int32_t>(rank),
                    static_cast<std::int32_t>(members.size()), batches, plan_version_});
  }
  for (const auto& name : old_members) {
    auto& trainer = trainers_[name];
    if (std::find(members.begin(), members.end(), name) != members.end()) continue;
    if (trainer.phase == Phase::kGone) continue;
    // Not in the new generation but alive: drained (it leaves) or waiting for min_workers.
    bool leave = trainer.phase == Phase::kLeaving;
    tell(runtime::ActorAddress{trainer.system, "trainer"},
         Rendezvous{options_.job_id, generation_, -1, static_cast<std::int32_t>(members.size()),
                    batches, plan_version_, leave});
    trainer.rank = -1;
    trainer.phase = leave ? Phase::kGone : Phase::kReady;
  }
  forming_ = !members.empty();
  formed_requested_at_ = Clock::now();
  plan_effective_step_ = step_ + 1;
  last_replan_step_ = step_;
  if (state_ == "pending" && !members.empty()) state_ = "running";
  Json names = members;
  spdlog::info("job {}: generation {} with {} trainers ({}), batches {}", options_.job_id,
               generation_, members.size(), reason, Json(batches).dump());
  emit(Json{{"time", unix_time()}, {"event", "generation"}, {"generation", generation_},
            {"members", names}, {"batches", batches}, {"reason", reason}, {"step", step_}}
           .dump());
  membership_log_.push_back(fmt::format("step {}: generation {} = {} ({})", step_, generation_,
                                        names.dump(), reason));
  publish_info();
}

void SchedulerActor::probe_members() {
  // A member reported a broken collective: find out who is still there (a dead process's
  // route is gone, so its ask fails at once) instead of waiting for the heartbeat timeout.
  for (const auto& name : members_) {
    auto& trainer = trainers_[name];
    if (trainer.phase != Phase::kMember || trainer.system.empty()) continue;
    std::int64_t generation = generation_;
    system().ask_envelope(
        system().make_envelope(runtime::ActorAddress{trainer.system, "$system"},
                               runtime::MessageKind::kPing,
                               runtime::pack_payload(runtime::Ping{0}), self()),
        std::chrono::milliseconds(1000), [this, name, generation](runtime::AskResult result) {
          if (result.ok() || generation != generation_) return;
          trainer_gone(name, "unreachable after a failed collective (" + result.error + ")");
          maybe_regroup("trainer " + name + " unreachable");
        });
  }
}

void SchedulerActor::check_timeouts() {
  if (finished_) return;
  auto now = Clock::now();
  std::vector<std::string> late;
  for (auto& [name, trainer] : trainers_) {
    if (trainer.phase == Phase::kSpawning && now - trainer.spawned_at > options_.spawn_timeout) {
      late.push_back(name);
    }
  }
  for (const auto& name : late) trainer_gone(name, "did not start in time");
  if (!late.empty()) place_trainers();
  if (forming_ && now - formed_requested_at_ > options_.form_timeout) {
    spdlog::warn("job {}: generation {} did not form in time", options_.job_id, generation_);
    forming_ = false;
    for (const auto& name : members_) trainers_[name].phase = Phase::kReady;
    maybe_regroup("generation did not form in time");
  } else if (generation_ == 0 || below_min_since_) {
    maybe_regroup("waiting for workers");
  }
  if (below_min_since_ && state_ == "running" &&
      seconds_since(*below_min_since_) > options_.spec.elastic.grace_period_s) {
    finish("failed", fmt::format("fewer than min_workers ({}) for more than {} s",
                                 options_.spec.elastic.min_workers,
                                 options_.spec.elastic.grace_period_s));
    return;
  }
  if (interval_due()) maybe_replan();
  after(kTick, [this] { check_timeouts(); });
}

// ---------------------------------------------------------------------------------------------
// Progress and control

void SchedulerActor::on_heartbeat_counters(const NodeInfo& node) {
  for (const auto& counters : node.actors) {
    if (counters.job_id != options_.job_id) continue;
    auto it = trainers_.find(counters.actor);
    if (it == trainers_.end()) continue;
    auto& trainer = it->second;
    trainer.counter_steps = counters.steps;
    trainer.counter_batch = counters.batch;
    trainer.samples_per_s = counters.samples_per_s;
    trainer.step_time_s = counters.step_time_s;
    trainer.compute_time_s = counters.compute_time_s;
    trainer.committed_step = std::max(trainer.committed_step, counters.steps);
    // Feed the controller only with fresh timings of the plan in force, after the cool-down.
    if (trainer.phase != Phase::kMember || trainer.rank < 0 ||
        trainer.rank >= static_cast<int>(batches_.size())) {
      continue;
    }
    if (counters.batch != batches_[trainer.rank] || counters.compute_time_s <= 0) continue;
    if (counters.steps < plan_effective_step_ + options_.spec.controller.cooldown_steps) continue;
    if (counters.steps <= trainer.observed_steps) continue;
    trainer.observed_steps = counters.steps;
    controller_.observe(trainer.name, counters.batch, counters.compute_time_s);
  }
}

bool SchedulerActor::interval_due() const {
  if (state_ != "running" || forming_ || members_.empty()) return false;
  const auto& c = options_.spec.controller;
  if (c.interval_s > 0) return seconds_since(last_replan_time_) >= c.interval_s;
  return step_ - last_replan_step_ >= c.interval_steps;
}

void SchedulerActor::maybe_replan() {
  // Only when every member has fresh timings at the plan in force.
  for (const auto& name : members_) {
    if (trainers_[name].observed_steps < plan_effective_step_) return;
  }
  last_replan_step_ = step_;
  last_replan_time_ = Clock::now();
  auto plan = controller_.plan();
  if (!plan.changed) return;
  std::vector<std::int32_t> batches;
  for (const auto& name : members_) batches.push_back(plan.batch_of(name));
  if (batches == batches_) return;
  batches_ = batches;
  plan_version_ = plan.version;
  plan_effective_step_ = step_ + 2;  // the leader applies it at its next boundary
  auto& leader = trainers_[members_[0]];
  tell(runtime::ActorAddress{leader.system, "trainer"},
       PlanUpdate{generation_, plan_version_, batches});
  Json times = Json::array();
  for (const auto& name : members_) times.push_back(trainers_[name].compute_time_s);
  emit(Json{{"time", unix_time()}, {"event", "plan"}, {"step", step_},
            {"generation", generation_}, {"version", plan_version_}, {"batches", batches},
            {"compute_times", times}, {"predicted_step_time", plan.predicted_step_time}}
           .dump());
  spdlog::info("job {}: plan v{} at step {}: {}", options_.job_id, plan_version_, step_,
               Json(batches).dump());
}

void SchedulerActor::on_report(const runtime::Envelope& message, const TrainerReport& report) {
  auto it = trainers_.find(report.trainer);
  if (it == trainers_.end()) return;
  auto& trainer = it->second;
  trainer.committed_step = std::max(trainer.committed_step, report.step);
  if (report.synced) {
    emit(Json{{"time", unix_time()}, {"event", "synced"}, {"trainer", report.trainer},
              {"generation", report.generation}, {"rank", report.rank}, {"step", report.step},
              {"parameter_checksum", report.parameter_checksum}}
             .dump());
    return;
  }
  if (report.collective_failed) {
    if (report.generation != generation_) return;  // about an older generation: handled
    spdlog::warn("job {}: trainer {} reports a broken generation {}: {}", options_.job_id,
                 report.trainer, report.generation, report.error);
    if (!disruption_at_) {
      disruption_at_ = Clock::now();
      step_at_disruption_ = step_;
    }
    probe_members();
    return;
  }
  if (report.generation != generation_ || report.rank != 0) return;
  if (forming_) {
    forming_ = false;
    emit(Json{{"time", unix_time()}, {"event", "generation_formed"},
              {"generation", generation_}, {"step", report.step}}
             .dump());
  }
  if (!first_step_at_) first_step_at_ = Clock::now();
  if (disruption_at_) {
    double recovery = seconds_since(*disruption_at_);
    recovery_s_.push_back(recovery);
    // A failure abandons the step in flight; committed steps are never rolled back unless the
    // new leader is behind the old one's last report.
    ++abandoned_steps_;
    lost_steps_ += std::max<std::int64_t>(0, step_at_disruption_ - (report.step - 1));
    emit(Json{{"time", unix_time()}, {"event", "recovered"}, {"generation", generation_},
              {"step", report.step}, {"recovery_s", recovery}}
             .dump());
    disruption_at_.reset();
  }
  step_ = report.step;
  total_steps_ = report.total_steps;
  epoch_ = report.epoch;
  loss_ = report.loss;
  if (report.eval_accuracy >= 0) {
    last_eval_accuracy_ = report.eval_accuracy;
    last_eval_loss_ = report.eval_loss;
  }
  Json workers = Json::array();
  for (std::size_t rank = 0; rank < members_.size(); ++rank) {
    const auto& t = trainers_[members_[rank]];
    workers.push_back({{"trainer", t.name},
                       {"node", nodes_.count(t.node_id) ? nodes_[t.node_id].name : t.node_id},
                       {"rank", rank},
                       {"batch", rank < report.batches.size() ? report.batches[rank] : 0},
                       {"step_time_s", t.step_time_s},
                       {"compute_time_s", t.compute_time_s},
                       {"samples_per_s", t.samples_per_s}});
  }
  Json event{{"time", unix_time()},  {"event", "step"},         {"step", report.step},
             {"epoch", report.epoch}, {"loss", report.loss},     {"generation", generation_},
             {"batches", report.batches}, {"step_time_s", report.step_time_s},
             {"allreduce_time_s", report.allreduce_time_s}, {"workers", workers}};
  if (report.eval_accuracy >= 0) {
    event["test_accuracy"] = report.eval_accuracy;
    event["test_loss"] = report.eval_loss;
  }
  emit(event.dump());
  if (interval_due()) maybe_replan();
  if (step_ % 20 == 0) publish_info();
}

void SchedulerActor::on_done(const TrainerDone& done) {
  auto it = trainers_.find(done.trainer);
  if (it != trainers_.end()) it->second.phase = Phase::kGone;
  if (!done.ok) {
    finish("failed", "trainer " + done.trainer + ": " + done.error);
    return;
  }
  if (done.rank == 0) {
    step_ = std::max(step_, done.step);
    final_accuracy_ = done.test_accuracy;
    final_loss_ = done.test_loss;
    final_checkpoint_ = done.checkpoint;
    finish("succeeded", "");
  }
}

// ---------------------------------------------------------------------------------------------
// Lifecycle and reporting

void SchedulerActor::finish(const std::string& state, const std::string& reason) {
  if (finished_) return;
  finished_ = true;
  state_ = state;
  reason_ = reason;
  for (auto& [name, trainer] : trainers_) {
    if (trainer.phase != Phase::kGone && !trainer.system.empty()) {
      tell(runtime::ActorAddress{trainer.system, "trainer"},
           StopTrainer{options_.job_id, "job " + state});
    }
  }
  if (state == "failed") {
    spdlog::error("job {} failed: {}", options_.job_id, reason);
  } else {
    spdlog::info("job {} {} {}", options_.job_id, state, reason);
  }
  emit(Json{{"time", unix_time()}, {"event", "finished"}, {"status", state}, {"reason", reason},
            {"step", step_}}
           .dump());
  auto summary = summary_json();
  auto path = std::filesystem::path(options_.run_dir) / "summary.json";
  auto temp = path;
  temp += ".tmp";
  {
    std::ofstream out(temp);
    out << summary << '\n';
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  publish_info();
}

JobInfo SchedulerActor::info() const {
  JobInfo info;
  info.id = options_.job_id;
  info.name = options_.spec.name;
  info.state = state_;
  info.reason = reason_;
  info.step = step_;
  info.total_steps = total_steps_;
  info.generation = generation_;
  info.loss = loss_;
  for (std::size_t rank = 0; rank < members_.size(); ++rank) {
    const auto& t = trainers_.at(members_[rank]);
    JobWorkerInfo w;
    auto node = nodes_.find(t.node_id);
    w.node = node != nodes_.end() ? node->second.name : t.node_id;
    w.actor = t.name;
    w.rank = static_cast<std::int32_t>(rank);
    w.batch = rank < batches_.size() ? batches_[rank] : 0;
    w.samples_per_s = t.samples_per_s;
    w.step_time_s = t.step_time_s;
    info.workers.push_back(w);
  }
  return info;
}

void SchedulerActor::publish_info() {
  if (!options_.jobs.empty()) tell(options_.jobs, JobStatusReply{true, info(), {}, 0, finished_, ""});
}

std::string SchedulerActor::summary_json() const {
  Json workers = Json::array();
  std::vector<double> speeds;
  for (std::size_t rank = 0; rank < members_.size(); ++rank) {
    const auto& t = trainers_.at(members_[rank]);
    auto node = nodes_.find(t.node_id);
    workers.push_back({{"name", t.name},
                       {"node", node != nodes_.end() ? node->second.name : t.node_id},
                       {"rank", rank},
                       {"final_batch", rank < batches_.size() ? batches_[rank] : 0},
                       {"samples_per_s", t.samples_per_s},
                       {"step_time_s", t.step_time_s},
                       {"compute_time_s", t.compute_time_s}});
    if (t.compute_time_s > 0 && rank < batches_.size()) {
      speeds.push_back(batches_[rank] / t.compute_time_s);  // samples/s of compute
    }
  }
  // Speed-up over uniform batches, from the measured per-worker throughput: a uniform split
  // waits for the slowest worker at B/n; the plan in force waits for its slowest worker.
  Json estimate = nullptr;
  if (!speeds.empty() && speeds.size() == batches_.size()) {
    double n = static_cast<double>(speeds.size());
    double B = options_.spec.train.global_batch;
    double uniform = 0, planned = 0;
    for (std::size_t i = 0; i < speeds.size(); ++i) {
      uniform = std::max(uniform, (B / n) / speeds[i]);
      planned = std::max(planned, batches_[i] / speeds[i]);
    }
    double ideal = B / std::accumulate(speeds.begin(), speeds.end(), 0.0);
    estimate = {{"uniform_compute_s", uniform}, {"planned_compute_s", planned},
                {"ideal_compute_s", ideal}, {"speedup_over_uniform", uniform / planned},
                {"ideal_speedup", uniform / ideal}};
  }
  double wall = seconds_since(started_at_);
  Json recovery = recovery_s_;
  return Json{{"job_id", options_.job_id},
              {"name", options_.spec.name},
              {"status", state_},
              {"reason", reason_},
              {"steps", step_},
              {"total_steps", total_steps_},
              {"epochs", epoch_},
              {"wall_time_s", wall},
              {"final_test_accuracy", final_accuracy_ >= 0 ? Json(final_accuracy_) : Json()},
              {"final_test_loss", final_loss_ >= 0 ? Json(final_loss_) : Json()},
              {"final_train_loss", loss_},
              {"checkpoint", final_checkpoint_},
              {"policy", std::string(scheduler::to_string(options_.spec.controller.config.policy))},
              {"global_batch", options_.spec.train.global_batch},
              {"workers", workers},
              {"generations", generation_},
              {"membership", membership_log_},
              {"lost_steps", lost_steps_},
              {"abandoned_in_flight_steps", abandoned_steps_},
              {"recovery_s", recovery},
              {"speedup_estimate", estimate}}
      .dump(2);
}

void SchedulerActor::on_message(const runtime::Envelope& message) {
  switch (message.kind) {
    case MessageKind::kNodeEvent:
      if (auto event = runtime::unpack_payload<NodeEvent>(message.payload)) on_node_event(*event);
      return;
    case MessageKind::kTrainerHello: {
      auto hello = runtime::unpack_payload<TrainerHello>(message.payload);
      TrainerHelloReply reply;
      auto it = hello ? trainers_.find(hello->trainer) : trainers_.end();
      if (!hello || it == trainers_.end() || it->second.phase != Phase::kSpawning || finished_) {
        reply.error = finished_ ? "the job has finished" : "unknown trainer";
        this->reply(message, reply);
        return;
      }
      auto& trainer = it->second;
      trainer.system = message.from.system;
      trainer.phase = Phase::kReady;
      spdlog::info("job {}: trainer {} ready (pid {}, {:.1f} s after spawn)", options_.job_id,
                   trainer.name, hello->pid, seconds_since(trainer.spawned_at));
      emit(Json{{"time", unix_time()}, {"event", "trainer_ready"}, {"trainer", trainer.name},
                {"startup_s", seconds_since(trainer.spawned_at)}}
               .dump());
      reply.accepted = true;
      reply.job_toml = options_.job_toml;
      reply.source_name = options_.source_name;
      reply.checkpoint_dir = options_.spec.checkpoint.dir.empty()
                                 ? (std::filesystem::path(options_.run_dir) / "checkpoints").string()
                                 : options_.spec.checkpoint.dir;
      reply.collective_timeout_ms = static_cast<std::int32_t>(options_.heartbeat_timeout.count());
      this->reply(message, reply);
      maybe_regroup("trainer " + trainer.name + " joined");
      return;
    }
    case MessageKind::kTrainerReport:
      if (auto report = runtime::unpack_payload<TrainerReport>(message.payload)) {
        on_report(message, *report);
      }
      return;
    case MessageKind::kTrainerDone:
      if (auto done = runtime::unpack_payload<TrainerDone>(message.payload)) on_done(*done);
      if (message.correlation) reply(message, SimpleReply{true, ""});
      return;
    case MessageKind::kTrainerFailed:
      if (auto failed = runtime::unpack_payload<TrainerFailed>(message.payload)) {
        trainer_gone(failed->trainer, failed->reason);
        maybe_regroup("trainer " + failed->trainer + " failed");
        place_trainers();
      }
      return;
    case MessageKind::kDrainNode: {
      auto drain = runtime::unpack_payload<DrainNode>(message.payload);
      if (!drain) return;
      int leaving = 0;
      for (auto& [id, node] : nodes_) {
        if (id != drain->node && node.name != drain->node) continue;
        node.draining = true;
        for (auto& [name, trainer] : trainers_) {
          if (trainer.node_id != id || trainer.phase == Phase::kGone) continue;
          trainer.phase = trainer.phase == Phase::kMember ? Phase::kLeaving : Phase::kGone;
          ++leaving;
          emit(Json{{"time", unix_time()}, {"event", "drain"}, {"trainer", name},
                    {"node", node.name}, {"step", step_}}
                   .dump());
        }
      }
      // Leaving members are not survivors: they get rank -1 (leave) in the next generation,
      // which the leader adopts at a step boundary, so no committed step is lost.
      if (leaving > 0) maybe_regroup("drain " + drain->node);
      if (message.correlation) reply(message, SimpleReply{true, fmt::format("{} trainers leaving", leaving)});
      return;
    }
    case MessageKind::kStopJob: {
      auto stop = runtime::unpack_payload<StopJob>(message.payload);
      finish("stopped", stop && !stop->reason.empty() ? stop->reason : "stopped by user");
      if (message.correlation) reply(message, SimpleReply{true, "stopped"});
      return;
    }
    case MessageKind::kJobStatusRequest: {
      auto request = runtime::unpack_payload<JobStatusRequest>(message.payload);
      JobStatusReply status;
      status.found = true;
      status.job = info();
      std::uint64_t since = request ? request->since : 0;
      for (std::uint64_t i = since; i < events_.size() && status.events.size() < 2000; ++i) {
        status.events.push_back(events_[i]);
      }
      status.next = since + status.events.size();
      status.finished = finished_ && status.next >= events_.size();
      if (finished_) status.summary_json = summary_json();
      reply(message, status);
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
