#include "asp/asp_job.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <stdexcept>

namespace omnilearn::asp {
namespace {

using Json = nlohmann::json;

double seconds(Millis from, Millis to) { return static_cast<double>(to - from) / 1000.0; }

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", s);
  return buf;
}

// As a person writes it: 30, 2.5.
std::string shortest(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

}  // namespace

const char* to_string(AspMutation mutation) {
  switch (mutation) {
    case AspMutation::kNone:
      return "none";
    case AspMutation::kNoFence:
      return "no_fence";
    case AspMutation::kSilenceIsNotTaken:
      return "silence_is_not_taken";
    case AspMutation::kDeadSilenceIsNotTaken:
      return "dead_silence_is_not_taken";
    case AspMutation::kStopBeforeHandOver:
      return "stop_before_hand_over";
    case AspMutation::kRestoreForgetsAsks:
      return "restore_forgets_asks";
    case AspMutation::kUndeliveredStaysDealt:
      return "undelivered_stays_dealt";
  }
  return "?";
}

AspJob::AspJob(AspJobOptions options)
    : options_(std::move(options)), controller_(options_.controller) {
  if (options_.servers < 1 || options_.min_workers < 1 ||
      options_.max_workers < options_.min_workers || options_.slots < 1) {
    throw std::invalid_argument(
        "AspJob: needs servers >= 1, 1 <= min_workers <= max_workers and slots >= 1");
  }
  shards_.resize(static_cast<std::size_t>(options_.servers));
}

std::vector<AspCommand> AspJob::take_commands() {
  std::vector<AspCommand> out;
  if (persist_due_ && !commands_.empty() && started_) {
    out.reserve(commands_.size() + 1);
    out.push_back(PersistCommand{});
    out.insert(out.end(), std::make_move_iterator(commands_.begin()),
               std::make_move_iterator(commands_.end()));
    commands_.clear();
  } else if (persist_due_ && started_) {
    out.push_back(PersistCommand{});
  } else {
    out.swap(commands_);
  }
  persist_due_ = false;
  return out;
}

std::string AspJob::node_name(const std::string& node) const {
  const auto it = nodes_.find(node);
  return it == nodes_.end() ? std::string() : it->second.name;
}

std::string AspJob::head_copy_path(std::int32_t shard) const {
  return (std::filesystem::path(options_.run_dir) / "checkpoints" /
          ("server-shard" + std::to_string(shard) + ".head-copy.pt"))
      .string();
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

void AspJob::start(Millis now, bool first) {
  if (started_) return;
  started_ = true;
  started_at_ = now;
  last_progress_ = now;
  interval_started_ = now;
  next_eval_ = options_.eval_every;
  commands_.push_back(PublishCommand{});
  if (!first) return;
  emit(Json{{"event", "submitted"},
            {"job_id", options_.job_id},
            {"name", options_.name},
            {"mode", "asp"},
            {"policy", std::string(scheduler::to_string(options_.controller.policy))},
            {"global_batch", options_.global_batch},
            {"min_workers", options_.min_workers},
            {"max_workers", options_.max_workers},
            {"servers", options_.servers},
            {"staleness", options_.staleness},
            {"max_staleness", options_.max_staleness},
            {"lr_scaling", options_.lr_scaling},
            {"scale_lr_by_workers", options_.scale_lr_by_workers}});
}

void AspJob::nodes(const std::vector<NodeView>& nodes, Millis now) {
  changed();
  if (finished_) return;
  for (const auto& node : nodes) nodes_[node.id] = Node{node.name, true, node.drained};
  place(now);
}

void AspJob::stop(const std::string& reason, Millis now) {
  finish("stopped", reason.empty() ? "stopped by user" : reason, now);
}

void AspJob::fail(const std::string& reason, Millis now) { finish("failed", reason, now); }

void AspJob::finish(const std::string& state, const std::string& reason, Millis now) {
  if (finished_) return;
  changed();
  write_interval(false, now);
  finished_ = true;
  state_ = state;
  std::string why = reason;
  if (state == "failed" && !last_trainer_error_.empty() &&
      why.find(last_trainer_error_) == std::string::npos) {
    why += " (last trainer error: " + last_trainer_error_ + ")";
  }
  reason_ = why;
  // Every trainer goes: the job's resources are its processes.
  for (const auto& [name, t] : trainers_) {
    if (t.said_hello && !t.gone) commands_.push_back(StopCommand{name, "job " + state});
  }
  emit(Json{{"event", "finished"}, {"status", state}, {"reason", why}, {"step", updates_}});
  commands_.push_back(FinishCommand{state, why});
  commands_.push_back(PublishCommand{});
}

// ---------------------------------------------------------------------------------------------
// Placement

std::int64_t AspJob::live_workers() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : trainers_) n += (!t.server && !t.gone) ? 1 : 0;
  return n;
}

bool AspJob::servers_ready() const {
  return std::all_of(shards_.begin(), shards_.end(),
                     [](const Shard& s) { return s.ready && !s.handing_over; });
}

void AspJob::spawn(const std::string& node_id, bool server, std::int32_t shard, Millis now) {
  const auto& node = nodes_.at(node_id);
  const std::string name = options_.job_id + "-" + node.name + "-" + (server ? "s" : "t") +
                           std::to_string(next_trainer_++);
  changed();
  Trainer t;
  t.node = node_id;
  t.server = server;
  t.shard = shard;
  t.spawned_at = now;
  if (server) {
    auto& s = shards_[static_cast<std::size_t>(shard)];
    t.incarnation = s.trainer.empty() && s.restarts == 0 ? 0 : s.incarnation;
    s.trainer = name;
    s.ready = false;
  }
  trainers_[name] = t;
  emit(Json{{"event", "spawn"},
            {"trainer", name},
            {"node", node.name},
            {"role", server ? "server" : "worker"},
            {"shard", server ? Json(shard) : Json()}});
  commands_.push_back(SpawnCommand{node_id, name});
}

void AspJob::place(Millis now) {
  if (finished_) return;
  std::vector<std::string> live;
  for (const auto& [id, node] : nodes_) {
    if (node.alive && !node.drained) live.push_back(id);
  }
  if (live.empty()) return;
  // Servers first, spread over the nodes (shard s on the s-th live node, round robin).
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    if (!shards_[s].trainer.empty()) continue;
    spawn(live[s % live.size()], true, static_cast<std::int32_t>(s), now);
  }
  // Workers: `slots` per node, up to max_workers.
  std::map<std::string, int> per_node;
  for (const auto& [name, t] : trainers_) {
    if (!t.server && !t.gone) ++per_node[t.node];
  }
  for (const auto& id : live) {
    while (live_workers() < options_.max_workers && per_node[id] < options_.slots) {
      spawn(id, false, -1, now);
      ++per_node[id];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The batch plan

void AspJob::replan(const std::string& why, Millis now) {
  std::vector<std::string> workers;
  for (const auto& [name, t] : trainers_) {
    if (!t.server && !t.gone && t.ready) workers.push_back(name);
  }
  for (const auto& e : controller_.estimates()) {
    if (std::find(workers.begin(), workers.end(), e.key) == workers.end()) {
      controller_.remove_worker(e.key);
    }
  }
  for (const auto& name : workers) {
    if (!controller_.contains(name)) controller_.add_worker(name);
  }
  if (workers.empty()) {
    plan_.clear();
    return;
  }
  scheduler::BatchPlan plan;
  try {
    plan = controller_.plan();
  } catch (const std::exception& e) {
    fail(std::string("no feasible batch plan: ") + e.what(), now);
    return;
  }
  last_plan_update_ = updates_;
  if (!plan.changed && !plan_.empty()) return;
  plan_.clear();
  // As BSP's plan events: arrays in worker order (`workers` names them).
  Json batches = Json::array();
  Json times = Json::array();
  for (const auto& name : workers) {
    plan_[name] = plan.batch_of(name);
    batches.push_back(plan_[name]);
    times.push_back(trainers_[name].compute_time_s);
    trainers_[name].since_plan = 0;
  }
  plan_version_ = static_cast<std::int64_t>(plan.version);
  emit(Json{{"event", "plan"},
            {"step", updates_},
            {"version", plan.version},
            {"reason", why},
            {"workers", workers},
            {"batches", batches},
            {"compute_times", times},
            {"predicted_step_time", plan.predicted_step_time},
            {"persisted", plan.persisted}});
}

// ---------------------------------------------------------------------------------------------
// Membership

void AspJob::node_up(const std::string& id, const std::string& name, bool drained, Millis now) {
  changed();
  if (finished_) return;
  auto& node = nodes_[id];
  const bool was_alive = node.alive;
  node = Node{name, true, node.drained || drained};
  if (!was_alive) place(now);
}

void AspJob::node_drained(const std::string& id, const std::string& name, bool alive, bool drained,
                          Millis now) {
  changed();
  if (finished_) return;
  // `omnilearn node drain` for every job: a running job is also told directly (drain()), which
  // moves its trainers off; this keeps later placements off the node. Undrained: usable again.
  auto& node = nodes_[id];
  node.name = name;
  node.alive = alive;
  node.drained = drained;
  if (!drained) place(now);
}

void AspJob::node_down(const std::string& id, const std::string& why, Millis now) {
  changed();
  if (finished_) return;
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  it->second.alive = false;
  std::vector<std::string> lost;
  for (const auto& [name, t] : trainers_) {
    if (t.node == id && !t.gone) lost.push_back(name);
  }
  for (const auto& name : lost) trainer_gone(name, "node " + it->second.name + " " + why, now);
  place(now);
}

int AspJob::drain(const std::string& node_id, Millis now) {
  changed();
  if (finished_) return 0;
  int leaving = 0;
  // Workers just go (their batches fenced and dealt again); a server first hands its shard over
  // (a checkpoint at its last version), then restarts elsewhere from it.
  std::vector<std::string> names;
  for (const auto& [name, t] : trainers_) {
    if (t.node == node_id && !t.gone) names.push_back(name);
  }
  for (const auto& name : names) {
    const Trainer& t = trainers_[name];
    ++leaving;
    if (t.server && t.ready && t.said_hello &&
        options_.mutation != AspMutation::kStopBeforeHandOver) {
      auto& shard = shards_[static_cast<std::size_t>(t.shard)];
      if (shard.handing_over) continue;  // asked already
      // Deals wait until the shard serves again elsewhere: every push to it would be refused.
      shard.handing_over = true;
      shard.hand_over_asked_at = now;
      commands_.push_back(HandOverCommand{name, t.shard, t.incarnation});
      continue;
    }
    if (t.said_hello) commands_.push_back(StopCommand{name, "drained"});
    trainer_gone(name, "drained", now, true);
    if (finished_) return leaving;
  }
  auto node = nodes_.find(node_id);
  if (node != nodes_.end()) node->second.drained = true;  // place nothing more there
  place(now);
  return leaving;
}

void AspJob::handed_over(const HandOverCommand& asked, const std::optional<HandOverReply>& r,
                         const std::string& error, Millis now) {
  changed();
  if (finished_) return;
  auto& shard = shards_[static_cast<std::size_t>(asked.shard)];
  // Only while it is still the shard's live incarnation: if its node died meanwhile, a
  // successor already resumed from an older checkpoint, and this one's file must not be taken
  // for the shard's newest.
  const bool current = shard.trainer == asked.server && shard.incarnation == asked.incarnation;
  if (r && r->ok) {
    shard.ledger.replied(r->incarnation, r->version);
    if (current && r->incarnation == asked.incarnation) {
      for (const auto& [worker, batches] : r->taken) {
        auto& kept = shard.inherited[worker];
        kept.insert(kept.end(), batches.begin(), batches.end());
      }
      shard.version = std::max(shard.version, r->version);
      if (r->version >= shard.checkpoint_version) {  // its report usually came first
        shard.checkpoint = r->checkpoint;
        shard.checkpoint_version = r->version;
      }
    }
  }
  emit(Json{{"event", "server_handed_over"},
            {"shard", asked.shard},
            {"trainer", asked.server},
            {"ok", r && r->ok},
            {"version", r ? r->version : -1},
            {"error", r ? r->error : error},
            {"seconds", seconds(shard.hand_over_asked_at, now)}});
  const auto t = trainers_.find(asked.server);
  // Gone meanwhile (its node died): trainer_gone already restarted the shard.
  if (t == trainers_.end() || t->second.gone || t->second.incarnation != asked.incarnation) {
    return;
  }
  commands_.push_back(StopCommand{asked.server, "drained"});
  trainer_gone(asked.server, "drained", now, true);
  if (!finished_) place(now);  // its restart, now rather than at its exit
}

// ---------------------------------------------------------------------------------------------
// Trainers

HelloAnswer AspJob::hello(const std::string& trainer, Millis now) {
  HelloAnswer reply;
  auto it = trainers_.find(trainer);
  if (finished_ || it == trainers_.end() || it->second.gone) {
    reply.error = finished_ ? "the job has finished" : "unknown trainer";
    return reply;
  }
  auto& t = it->second;
  changed();
  t.said_hello = true;
  t.hello_at = now;
  reply.accepted = true;
  if (t.server) {
    const auto& shard = shards_[static_cast<std::size_t>(t.shard)];
    reply.server = true;
    reply.shard = t.shard;
    reply.incarnation = t.incarnation;
    reply.resume_checkpoint = t.incarnation > 0 ? shard.checkpoint : "";
    reply.resume_version = reply.resume_checkpoint.empty() ? -1 : shard.checkpoint_version;
    return reply;
  }
  if (t.worker_id == 0) t.worker_id = next_worker_id_++;
  reply.worker = t.worker_id;
  if (!t.ready) {
    t.ready = true;
    membership_log_.push_back("+" + trainer);
    emit(Json{{"event", "worker_joined"},
              {"trainer", trainer},
              {"node", node_name(t.node)},
              {"worker", t.worker_id}});
    replan("worker joined", now);
  }
  return reply;
}

void AspJob::server_ready(const ServerReady& ready, Millis now) {
  changed();
  (void)now;
  auto it = trainers_.find(ready.trainer);
  if (finished_ || it == trainers_.end() || it->second.gone || !it->second.server) return;
  if (ready.shard < 0 || ready.shard >= static_cast<std::int32_t>(shards_.size())) return;
  auto& shard = shards_[static_cast<std::size_t>(ready.shard)];
  if (shard.trainer != ready.trainer) return;
  it->second.ready = true;
  it->second.said_hello = true;
  shard.ready = true;
  shard.endpoint = ready.endpoint;
  shard.incarnation = ready.incarnation;
  shard.version = ready.version;
  if (ready.parameters > 0) parameters_ = ready.parameters;
  if (!dealer_ && ready.dataset_size > 0) {
    const std::int64_t epochs = options_.steps > 0 ? 0 : options_.epochs;
    dealer_.emplace(ready.dataset_size, options_.data_seed, epochs);
    fences_.emplace(static_cast<std::int32_t>(shards_.size()));
  }
  // A restarted server knows no fences: every gone worker is fenced off it again before any
  // worker learns its endpoint (deals name it only after this input).
  for (const WorkerId worker : gone_workers_) {
    commands_.push_back(
        FenceCommand{ready.trainer, ready.shard, ready.incarnation, worker, kWholeWorker, {}});
  }
  // Fence rounds its dead predecessor never answered (or that found the shard down) are asked
  // of it: resumed from a checkpoint, it answers for the batches the checkpoint holds.
  if (fences_ && dealer_) {
    for (const FenceAsk& again : fences_->waiting_on(ready.shard)) {
      fence_shard(again.round, ready.shard, again.worker, again.through);
    }
  }
  emit(Json{{"event", "server_ready"},
            {"trainer", ready.trainer},
            {"node", node_name(it->second.node)},
            {"shard", ready.shard},
            {"endpoint", ready.endpoint},
            {"incarnation", ready.incarnation},
            {"version", ready.version},
            {"parameters", ready.parameters}});
  if (ready.incarnation > 0) {
    // Updates the dead incarnation applied past the checkpoint this one resumed from, as far
    // as the workers' push replies told so far (the summary counts replies that come later,
    // and bounds the pushes that got none).
    shard.ledger.resumed(ready.incarnation, ready.version);
    emit(Json{{"event", "server_recovered"},
              {"updates_lost", shard.ledger.lost_at(ready.incarnation)},
              {"shard", ready.shard},
              {"trainer", ready.trainer},
              {"incarnation", ready.incarnation},
              {"resumed_at", ready.version},
              {"resumed_from", ready.resumed_from},
              {"checkpoint", shard.checkpoint}});
  }
  if (state_ == "pending" && servers_ready()) state_ = "running";
  commands_.push_back(PublishCommand{});
}

bool AspJob::server_report(const ServerReport& report, bool has_bytes, Millis now) {
  changed();
  (void)now;
  if (report.shard < 0 || report.shard >= static_cast<std::int32_t>(shards_.size())) return false;
  auto& shard = shards_[static_cast<std::size_t>(report.shard)];
  if (shard.trainer != report.trainer) return false;
  const bool keep =
      !report.checkpoint.empty() && has_bytes && report.version > shard.head_copy_version;
  shard.version = std::max(shard.version, report.version);
  shard.ledger.replied(shard.incarnation, report.version);
  // The server's own count (pushes computed on its dead predecessor's later versions) is a
  // lower bound of what the scheduler counted at the restart; kept for the summary.
  shard.lost_this = std::max(shard.lost_this, report.updates_lost);
  if (report.fenced > shard.fenced_this) {
    shard.pushes_fenced += report.fenced - shard.fenced_this;
    shard.fenced_this = report.fenced;
  }
  if (!report.checkpoint.empty() && report.version >= shard.checkpoint_version) {
    shard.checkpoint = report.checkpoint;
    shard.checkpoint_version = report.version;
    emit(Json{{"event", "checkpoint"},
              {"shard", report.shard},
              {"trainer", report.trainer},
              {"version", report.version},
              {"step", updates_},
              {"path", report.checkpoint}});
  }
  return keep;
}

void AspJob::head_copy_kept(std::int32_t shard, std::int64_t version) {
  changed();
  if (shard < 0 || shard >= static_cast<std::int32_t>(shards_.size())) return;
  auto& s = shards_[static_cast<std::size_t>(shard)];
  s.head_copy_version = std::max(s.head_copy_version, version);
}

AspJob::HeadCopy AspJob::head_copy(const std::string& trainer, std::int32_t shard) const {
  const auto it = trainers_.find(trainer);
  if (it == trainers_.end() || !it->second.server || it->second.shard != shard || shard < 0 ||
      shard >= static_cast<std::int32_t>(shards_.size())) {
    return HeadCopy{0, "not a server of this job"};
  }
  const auto& s = shards_[static_cast<std::size_t>(shard)];
  if (s.head_copy_version == 0) return HeadCopy{0, "no checkpoint of this shard reached the head"};
  return HeadCopy{s.head_copy_version, ""};
}

std::int64_t AspJob::outstanding_batches() const {
  if (!dealer_) return 0;
  std::int64_t n = 0;
  for (const auto& [name, t] : trainers_) {
    if (!t.server && t.worker_id > 0) n += dealer_->outstanding_batches(t.worker_id);
  }
  return n;
}

std::int64_t AspJob::total_steps() const {
  if (options_.steps > 0) return options_.steps;
  if (!dealer_) return 0;
  // Epochs: an estimate at the mean batch of the plan in force (B / n per update).
  const double n = std::max<double>(1.0, static_cast<double>(plan_.size()));
  const double per_update = static_cast<double>(options_.global_batch) / n;
  return static_cast<std::int64_t>(
      std::ceil(static_cast<double>(options_.epochs * dealer_->dataset_size()) / per_update));
}

bool AspJob::training_done() const {
  if (!dealer_) return false;
  if (options_.steps > 0) return updates_ >= options_.steps;
  return dealer_->finished();
}

// ---------------------------------------------------------------------------------------------
// Dealing

void AspJob::failed_push(Trainer& t, const DealAsk& request, Millis now) {
  // A server did not answer: the batch's samples are dealt again, for the shards that did not
  // take its push (a shard that applied or dropped it answered with its incarnation), so that
  // no shard gets two gradients of the same samples. Counted once: a request sent again (its
  // reply was lost) finds the batch no longer outstanding. A shard that gave no answer may
  // still apply the push late: the live incarnations among them are fenced first, and the
  // batch settles once they answered (on_settled).
  const WorkerId worker = t.worker_id;
  std::vector<std::int32_t> taken, ask;
  bool dropped = request.dropped;
  for (std::size_t s = 0; s < request.incarnations.size() && s < shards_.size(); ++s) {
    if (request.incarnations[s] >= 0) taken.push_back(static_cast<std::int32_t>(s));
  }
  const auto held = dealer_->outstanding_ids(worker);
  const bool first_report = !fences_->fencing(request.failed_batch) &&
                            std::find(held.begin(), held.end(), request.failed_batch) != held.end();
  if (!first_report) return;
  ++failed_batches_;
  if (options_.mutation == AspMutation::kNoFence) {
    dealer_->push_failed(worker, request.failed_batch, taken);
    return;
  }
  for (std::size_t s = 0; s < shards_.size() && s < request.unanswered.size(); ++s) {
    if (request.unanswered[s] < 0) continue;
    if (request.unanswered[s] == shards_[s].incarnation && shards_[s].ready) {
      // Counted even though it lives: if it dies before answering and its restart resumes from
      // a checkpoint without the push, the push may have been an update lost with it (the
      // ledger counts only incarnations since restarted).
      shards_[s].ledger.unanswered(request.unanswered[s]);
      ask.push_back(static_cast<std::int32_t>(s));
      continue;
    }
    // Its incarnation is gone; if it was drained, it handed over what it took. Otherwise the
    // incarnation that resumes the shard is asked (at once, or when it listens): its checkpoint
    // may hold the push.
    bool inherited = false;
    for (const TakenBatch& b : with_inherited(static_cast<std::int32_t>(s), worker, {})) {
      if (b.batch != request.failed_batch) continue;
      inherited = true;
      taken.push_back(static_cast<std::int32_t>(s));
      dropped = dropped || !b.applied;
    }
    if (!inherited) {
      shards_[s].ledger.unanswered(request.unanswered[s]);
      ask.push_back(static_cast<std::int32_t>(s));
    }
  }
  const FenceStart fence =
      fences_->push_failed(*dealer_, worker, request.failed_batch, taken, dropped, ask);
  if (fence.ask) send_fence(*fence.ask);
  on_settled(fence.settled, now);
}

void AspJob::accepted_push(Trainer& t, const DealAsk& request, Millis now) {
  const WorkerId worker = t.worker_id;
  const Receipt receipt = dealer_->push(worker, request.pushed_batch);
  if (receipt != Receipt::kAccepted) {
    ++duplicates_;
    return;
  }
  ++pushes_;
  stats_.record(worker, request.staleness, request.applied);
  if (request.applied) {
    ++updates_;
    ++interval_updates_;
    ++t.updates;
    last_progress_ = now;
    loss_ = request.loss;
  }
  if (request.dropped) ++dropped_stale_;
  t.batch = request.batch;
  t.compute_time_s = request.compute_time_s;
  t.update_time_s = request.update_time_s;
  if (!t.first_push_at) {
    t.first_push_at = now;
    emit(Json{{"event", "first_push"},
              {"trainer", request.trainer},
              {"worker", worker},
              {"step", updates_},
              {"since_hello_s", t.hello_at ? seconds(*t.hello_at, now) : -1.0}});
  }
  // The controller balances time per update (after the plan's cool-down pushes).
  if (++t.since_plan > options_.cooldown_steps && request.compute_time_s > 0 &&
      plan_.count(request.trainer) && request.batch == plan_[request.trainer]) {
    controller_.observe(request.trainer, request.batch, request.compute_time_s);
  }
  if (updates_ - last_plan_update_ >=
      options_.interval_steps *
          std::max<std::int64_t>(1, static_cast<std::int64_t>(plan_.size()))) {
    replan("interval", now);
  }
}

DealAnswer AspJob::deal(const DealAsk& request, Millis now) {
  DealAnswer reply;
  if (finished_) {
    reply.action = DealAnswer::Action::kDone;
    return reply;
  }
  if (request.pushed_batch != 0 || request.failed_batch != 0 || request.evaluated ||
      !request.eval_error.empty()) {
    changed();
  }
  // How far each server got (its push replies), even from a worker declared gone: a restart
  // loses what lies past its checkpoint. A maximum: a request sent again counts once.
  for (std::size_t s = 0;
       s < shards_.size() && s < request.versions.size() && s < request.incarnations.size(); ++s) {
    if (request.incarnations[s] >= 0) {
      shards_[s].ledger.replied(request.incarnations[s], request.versions[s]);
    }
    if (request.incarnations[s] == shards_[s].incarnation) {
      shards_[s].version = std::max(shards_[s].version, request.versions[s]);
    }
  }
  auto it = trainers_.find(request.trainer);
  if (it != trainers_.end() && it->second.gone && !it->second.server && request.failed_batch != 0) {
    // A worker declared gone that still ran (its node's agent froze, or lost the network): its
    // batch is fenced already, but a push of it that got no answer may have been applied by an
    // incarnation that has since died, an update lost at most (counted again if this request
    // is sent again: a bound from above).
    for (std::size_t s = 0; s < shards_.size() && s < request.unanswered.size(); ++s) {
      if (request.unanswered[s] >= 0) shards_[s].ledger.unanswered(request.unanswered[s]);
    }
  }
  if (it == trainers_.end() || it->second.gone || it->second.server || !it->second.ready) {
    reply.action = DealAnswer::Action::kDone;
    reply.error = "unknown worker";
    return reply;
  }
  auto& t = it->second;
  // A pull that got no reply, where no push was out to be fenced: the only word the head gets
  // of a server hung while its agent heartbeats. Its process is pinged (probe_answered); a
  // server merely slow, or restarted since the pull, answers and nothing changes.
  for (const std::int32_t s : request.unreachable) {
    if (s >= 0 && s < static_cast<std::int32_t>(shards_.size()) &&
        shards_[static_cast<std::size_t>(s)].ready) {
      probe_server(s);
    }
  }
  if (dealer_ && options_.mutation != AspMutation::kUndeliveredStaysDealt) {
    // A worker asks again only once it is done with what the last answer gave it, and says what
    // that was (the batch it pushed, or whose push failed). Any other batch it holds, it never
    // received: the answer that carried it was lost (the head died after writing it down, or
    // the ask timed out). No shard can have taken it: dealt again.
    for (const std::uint64_t id : dealer_->outstanding_ids(t.worker_id)) {
      if (id == request.pushed_batch || id == request.failed_batch || fences_->fencing(id))
        continue;
      changed();
      dealer_->push_failed(t.worker_id, id, {});
      emit(Json{{"event", "batch_undelivered"},
                {"trainer", request.trainer},
                {"worker", t.worker_id},
                {"batch", id},
                {"step", updates_}});
    }
    if (request.trainer == evaluator_ && !request.evaluated && request.eval_error.empty()) {
      evaluator_.clear();  // its order to evaluate was lost the same way: the next ask evaluates
    }
  }
  const auto job_ended = [] {
    DealAnswer done;
    done.action = DealAnswer::Action::kDone;
    done.error = "the job has finished";
    return done;
  };
  if (dealer_ && request.failed_batch != 0) {
    failed_push(t, request, now);
    if (finished_) return job_ended();
  }
  if (dealer_ && request.pushed_batch != 0) {
    accepted_push(t, request, now);
    if (finished_) return job_ended();
  }
  if (request.trainer == evaluator_ && (request.evaluated || !request.eval_error.empty())) {
    on_evaluated(request, now);
  }
  const auto endpoints = [&] {
    std::vector<std::string> out;
    for (const auto& s : shards_) out.push_back(s.endpoint);
    return out;
  };
  if (training_done()) {
    const auto finisher = trainers_.find(finisher_);
    if (finisher_.empty() || finisher == trainers_.end() || finisher->second.gone ||
        finisher_ == request.trainer) {
      if (!servers_ready()) {
        // A finishing worker must pull every shard: it asks again once all are back.
        finisher_.clear();
        reply.action = DealAnswer::Action::kWait;
        reply.wait = 200;
        return reply;
      }
      if (finisher_ != request.trainer) changed();
      finisher_ = request.trainer;
      reply.action = DealAnswer::Action::kFinish;
      reply.servers = endpoints();
      if (!finishing_announced_) {
        finishing_announced_ = true;
        last_progress_ = now;  // the finish has as long as an update would
        emit(Json{{"event", "finishing"}, {"trainer", request.trainer}, {"step", updates_}});
      }
      return reply;
    }
    reply.action = DealAnswer::Action::kWait;
    reply.wait = 500;
    return reply;
  }
  if (!dealer_ || !servers_ready() || !plan_.count(request.trainer)) {
    reply.action = DealAnswer::Action::kWait;
    reply.wait = 100;
    return reply;
  }
  if (next_eval_ > 0 && evaluator_.empty() && updates_ >= next_eval_) {
    // The next worker to ask evaluates (in ASP the fast ones ask most often); one at a time,
    // and a count passed while one ran is not made up for.
    const std::int64_t every = options_.eval_every;
    changed();
    evaluator_ = request.trainer;
    eval_dealt_at_ = updates_;
    next_eval_ = (updates_ / every + 1) * every;
    reply.action = DealAnswer::Action::kEvaluate;
    reply.servers = endpoints();
    return reply;
  }
  if (options_.steps > 0 && updates_ + outstanding_batches() >= options_.steps) {
    reply.action = DealAnswer::Action::kWait;  // the last updates are out; wait for their pushes
    reply.wait = 50;
    return reply;
  }
  DealtBatch batch = dealer_->pull(t.worker_id, plan_[request.trainer]);
  if (!batch.empty()) changed();
  if (batch.empty()) {
    reply.action = DealAnswer::Action::kWait;  // the last epoch is dealt; its pushes are out
    reply.wait = 50;
    return reply;
  }
  reply.action = DealAnswer::Action::kBatch;
  reply.batch_id = batch.id;
  reply.epoch = batch.epoch;
  reply.indices = std::move(batch.indices);
  reply.shards_done = std::move(batch.shards_done);
  reply.servers = endpoints();
  reply.global_batch = options_.global_batch;
  reply.workers = static_cast<std::int32_t>(plan_.size());
  return reply;
}

void AspJob::on_evaluated(const DealAsk& request, Millis now) {
  evaluator_.clear();
  if (!request.evaluated) {
    emit(Json{{"event", "eval_skipped"},
              {"trainer", request.trainer},
              {"step", updates_},
              {"reason", request.eval_error}});
    return;
  }
  ++evaluations_;
  last_eval_accuracy_ = request.eval_accuracy;
  write_interval(true, now,
                 Json{{"test_accuracy", request.eval_accuracy},
                      {"test_loss", request.eval_loss},
                      {"eval_version", request.eval_version},
                      {"eval_dealt_at", eval_dealt_at_},
                      {"eval_time_s", request.eval_time_s},
                      {"eval_trainer", request.trainer}});
}

void AspJob::finished(const FinishReport& done, Millis now) {
  changed();
  if (finished_ || done.trainer != finisher_) return;
  if (!done.ok) {
    last_trainer_error_ = done.trainer + ": " + done.error;
    fail("the final evaluation failed: " + done.error, now);
    return;
  }
  final_accuracy_ = done.test_accuracy;
  final_loss_ = done.test_loss;
  final_checkpoint_ = done.checkpoint;
  const auto it = trainers_.find(done.trainer);
  if (it != trainers_.end()) final_checkpoint_node_ = node_name(it->second.node);
  finish("succeeded", "", now);
}

void AspJob::trainer_error(const std::string& trainer, const std::string& error) {
  if (!error.empty()) last_trainer_error_ = trainer + ": " + error;
}

void AspJob::trainer_exited(const std::string& trainer, int exit_code, bool bad_input,
                            const std::string& reason, const std::string& last_error, Millis now) {
  if (finished_) return;
  auto it = trainers_.find(trainer);
  if (it == trainers_.end() || it->second.exited) return;
  it->second.exited = true;
  changed();
  if (exit_code != 0 && !last_error.empty()) last_trainer_error_ = trainer + ": " + last_error;
  emit(Json{{"event", "trainer_exited"},
            {"trainer", trainer},
            {"node", node_name(it->second.node)},
            {"exit_code", exit_code},
            {"reason", reason},
            {"last_error", last_error}});
  if (bad_input) {
    // The job's own files or model are wrong: every retry would fail the same way.
    fail("trainer " + trainer + ": " + (last_error.empty() ? reason : last_error), now);
    return;
  }
  trainer_gone(trainer, reason.empty() ? "exited" : reason, now);
  place(now);
}

void AspJob::trainer_gone(const std::string& name, const std::string& why, Millis now,
                          bool drained) {
  auto it = trainers_.find(name);
  if (it == trainers_.end() || it->second.gone) return;
  changed();
  auto& t = it->second;
  t.gone = true;
  const bool started = t.server ? t.ready : t.first_push_at.has_value();
  // One moved off a drained node before it started did not fail to start.
  if (!started && !finished_ && !drained) {
    // A trainer that cannot start (bad data on its node, a model too big for the shards, ...)
    // would otherwise be restarted forever. Twice the trainers the job can have now: its
    // max_workers may be far above the workers the cluster holds (by default it is all of them).
    int live_nodes = 0;
    for (const auto& [id, node] : nodes_) live_nodes += node.alive && !node.drained;
    const int workers = std::min(options_.max_workers, live_nodes * options_.slots);
    const int limit = std::max<int>(5, 2 * (static_cast<int>(shards_.size()) + workers));
    if (++start_failures_ >= limit) {
      fail("trainers cannot start: " + std::to_string(start_failures_) +
               " ended before they served or pushed (last: " + name + ": " + why + ")",
           now);
      return;
    }
  }
  if (t.server) {
    auto& shard = shards_[static_cast<std::size_t>(t.shard)];
    if (shard.trainer != name) return;
    shard.trainer.clear();
    shard.ready = false;
    shard.handing_over = false;
    shard.endpoint.clear();
    ++shard.restarts;
    if (!drained) ++shard.deaths;
    shard.incarnation = t.incarnation + 1;
    shard.lost_this = 0;
    shard.fenced_this = 0;
    emit(Json{{"event", "server_gone"},
              {"shard", t.shard},
              {"trainer", name},
              {"reason", why},
              {"version", shard.version},
              {"checkpoint_version", shard.checkpoint_version}});
    if (shard.deaths > options_.max_server_restarts) {
      fail("parameter server shard " + std::to_string(t.shard) + " died " +
               std::to_string(shard.deaths) + " times (last: " + why + ")",
           now);
    }
    if (options_.mutation == AspMutation::kDeadSilenceIsNotTaken && fences_ && dealer_) {
      for (const FenceAsk& ask : fences_->waiting_on(t.shard)) {
        on_settled(fences_->answer(*dealer_, ask.round, t.shard, std::nullopt), now);
      }
    }
    // Fences it was asked and did not answer stay open: its restart, resumed from a checkpoint,
    // answers them for what that checkpoint holds (server_ready asks again). Its silence is not
    // "not taken": a batch it took before the checkpoint it resumes from would be dealt to it
    // twice.
    return;
  }
  // Its batches are fenced off the servers before they are dealt again: it may still be running
  // (a frozen agent, a lost network) or have pushed just before it died.
  std::int64_t held = 0;
  FenceStart fence;
  if (dealer_ && t.worker_id > 0) {
    held = dealer_->outstanding_samples(t.worker_id);
    if (options_.mutation == AspMutation::kNoFence) {
      dealer_->worker_gone(t.worker_id);
    } else {
      gone_workers_.insert(t.worker_id);
      fence = fences_->worker_gone(*dealer_, t.worker_id);
    }
  }
  if (t.ready) membership_log_.push_back("-" + name);
  emit(Json{{"event", "trainer_gone"}, {"trainer", name}, {"reason", why}, {"samples_held", held}});
  if (fence.ask) send_fence(*fence.ask);
  on_settled(fence.settled, now);
  if (finished_) return;
  if (finisher_ == name) {
    finisher_.clear();
    finishing_announced_ = false;
  }
  if (evaluator_ == name) evaluator_.clear();  // the next deal request evaluates instead
  if (t.ready) replan("worker left", now);
}

// ---------------------------------------------------------------------------------------------
// Fencing

void AspJob::send_fence(const FenceAsk& fence) {
  ++fence_counters_.rounds;
  for (const std::int32_t s : fence.shards)
    fence_shard(fence.round, s, fence.worker, fence.through);
}

void AspJob::fence_shard(std::uint64_t round, std::int32_t s, WorkerId worker,
                         std::uint64_t through) {
  const auto& shard = shards_[static_cast<std::size_t>(s)];
  const auto server = trainers_.find(shard.trainer);
  if (!shard.ready || server == trainers_.end() || !server->second.said_hello) {
    return;  // down: server_ready asks the incarnation that resumes it
  }
  commands_.push_back(FenceCommand{shard.trainer, s, shard.incarnation, worker, through, round});
}

void AspJob::fence_answered(const FenceCommand& asked, const std::optional<FenceReply>& r,
                            const std::string& error, Millis now) {
  changed();
  if (finished_ || !fences_ || !dealer_ || !asked.round) return;
  const std::int32_t s = asked.shard;
  if (s < 0 || s >= static_cast<std::int32_t>(shards_.size())) return;
  auto& shard = shards_[static_cast<std::size_t>(s)];
  (void)error;
  if (r && r->ok) {
    shard.ledger.replied(r->incarnation, r->version);
    // An incarnation declared gone since (dead, or cut off and still serving) answers for a
    // state the shard no longer serves with: the one that resumes it is asked instead
    // (server_ready), and answers for its checkpoint.
    if (r->incarnation != shard.incarnation) return;
    on_settled(
        fences_->answer(*dealer_, *asked.round, s, with_inherited(s, asked.worker, r->taken)), now);
    return;
  }
  ++fence_counters_.no_answer;
  if (!r) {
    if (options_.mutation == AspMutation::kSilenceIsNotTaken && shard.ready &&
        shard.incarnation == asked.incarnation) {
      on_settled(fences_->answer(*dealer_, *asked.round, s, with_inherited(s, asked.worker, {})),
                 now);
      return;
    }
    // Slow, not gone (a long checkpoint write, a loaded machine): its turns run in order, so a
    // push of the batch it still holds would be applied before the fence and said taken in the
    // answer. Counting it as not taken now could deal the samples twice: ask again. Gone: the
    // incarnation that resumes it is asked when it listens (server_ready), or was asked already
    // if it listens now. Hung (SIGSTOP, a stuck call) while its agent still heartbeats, it
    // would be asked again for as long as it hangs, every worker's pull failing meanwhile: a
    // probe of its process tells slow from hung (probe_answered).
    if (shard.incarnation == asked.incarnation && shard.ready) {
      fence_shard(*asked.round, s, asked.worker, asked.through);
      probe_server(s);
    }
    return;
  }
  // Answered with an error (a misaddressed fence): not taken.
  on_settled(fences_->answer(*dealer_, *asked.round, s, with_inherited(s, asked.worker, {})), now);
}

void AspJob::probe_server(std::int32_t s) {
  const auto& shard = shards_[static_cast<std::size_t>(s)];
  const auto it = trainers_.find(shard.trainer);
  if (it == trainers_.end() || it->second.gone || it->second.probing) return;
  it->second.probing = true;
  commands_.push_back(ProbeCommand{shard.trainer, shard.incarnation});
}

void AspJob::probe_answered(const ProbeCommand& asked, bool reachable, const std::string& error,
                            Millis now) {
  const auto it = trainers_.find(asked.server);
  if (it == trainers_.end()) return;
  Trainer& t = it->second;
  t.probing = false;
  if (finished_ || reachable || t.gone || !t.server) return;
  const auto& shard = shards_[static_cast<std::size_t>(t.shard)];
  if (shard.trainer != asked.server || shard.incarnation != asked.incarnation) return;
  changed();
  // Its process may run again (a SIGSTOP ends): told to stop, it exits then, and until it
  // reads the stop its incarnation is fenced off like a server on a node declared dead.
  const std::string why = "hung: a pull or fence went unanswered, then a ping (" + error + ")";
  commands_.push_back(StopCommand{asked.server, why});
  trainer_gone(asked.server, why, now);
  if (!finished_) place(now);
}

std::vector<TakenBatch> AspJob::with_inherited(std::int32_t s, WorkerId worker,
                                               std::vector<TakenBatch> taken) const {
  const auto& inherited = shards_[static_cast<std::size_t>(s)].inherited;
  if (const auto it = inherited.find(worker); it != inherited.end()) {
    taken.insert(taken.end(), it->second.begin(), it->second.end());
  }
  return taken;
}

AspJob::Trainer* AspJob::worker_trainer(WorkerId worker) {
  for (auto& [name, t] : trainers_) {
    if (!t.server && t.worker_id == worker) return &t;
  }
  return nullptr;
}

void AspJob::on_settled(const std::vector<SettledBatch>& settled, Millis now) {
  for (const auto& b : settled) {
    if (b.outcome == EpochDealer::Settled::kNotOutstanding) continue;
    const bool taken = b.outcome == EpochDealer::Settled::kAccepted;
    if (taken) {
      // Every shard took it before its fence: the push counts, as if its worker had said so.
      if (b.asked) ++fence_counters_.taken;
      ++pushes_;
      if (b.applied) {
        ++updates_;
        ++interval_updates_;
        last_progress_ = now;
        if (Trainer* t = worker_trainer(b.worker)) ++t->updates;
      } else {
        ++dropped_stale_;
      }
    } else if (b.asked) {
      ++fence_counters_.dealt_again;
    }
    if (!b.asked) continue;  // nothing was fenced: every shard had answered, or was gone
    emit(Json{{"event", "batch_fenced"},
              {"worker", b.worker},
              {"batch", b.batch},
              {"samples", b.samples},
              {"outcome", taken ? "taken" : "dealt_again"},
              {"step", updates_}});
  }
}

// ---------------------------------------------------------------------------------------------
// Deadlines

void AspJob::tick(Millis now) {
  if (finished_ || !started_) return;
  // Trainers that never said hello (or servers that never listened) within the spawn timeout.
  std::vector<std::string> late;
  for (const auto& [name, t] : trainers_) {
    if (t.gone) continue;
    const bool started = t.server ? t.ready : t.hello_at.has_value();
    if (!started && now - t.spawned_at > options_.spawn_timeout) late.push_back(name);
  }
  for (const auto& name : late) {
    if (trainers_[name].said_hello) commands_.push_back(StopCommand{name, "too late"});
    trainer_gone(name, "did not start within the spawn timeout", now);
  }
  if (!late.empty()) place(now);
  if (finished_) return;
  // Bounded: too few workers for the grace period, or no update for long, fails the job.
  std::int64_t ready = 0;
  for (const auto& [name, t] : trainers_) ready += (!t.server && !t.gone && t.ready) ? 1 : 0;
  if (state_ == "running" && ready < options_.min_workers) {
    if (!too_few_since_) too_few_since_ = now;
    if (now - *too_few_since_ > options_.grace_period) {
      fail("fewer than min_workers = " + std::to_string(options_.min_workers) +
               " workers for more than " + shortest(seconds(0, options_.grace_period)) + " s",
           now);
      return;
    }
  } else {
    too_few_since_.reset();
  }
  if (finisher_.empty() && now - last_progress_ > options_.spawn_timeout + options_.grace_period) {
    fail("no update for " + format_seconds(seconds(last_progress_, now)) + " s", now);
    return;
  }
  if (now - interval_started_ >= options_.interval) write_interval(false, now);
}

void AspJob::write_interval(bool force, Millis now, const Json& eval) {
  const double s_elapsed = seconds(interval_started_, now);
  StalenessSummary s = stats_.take_interval();
  interval_started_ = now;
  const std::int64_t updates = interval_updates_;
  interval_updates_ = 0;
  if (s.pushes == 0 && !force) return;
  Json workers = Json::object();
  for (const auto& [name, t] : trainers_) {
    if (t.server || t.worker_id == 0) continue;
    auto n = s.updates.find(t.worker_id);
    workers[name] = Json{{"worker", t.worker_id},
                         {"updates", n == s.updates.end() ? 0 : n->second},
                         {"batch", t.batch},
                         {"compute_time_s", t.compute_time_s},
                         {"update_time_s", t.update_time_s},
                         {"live", !t.gone}};
  }
  Json event{{"event", "asp_interval"},
             {"step", updates_},
             {"total", total_steps()},
             {"epoch", dealer_ ? dealer_->epochs_completed() : 0},
             {"loss", loss_},
             {"interval_s", s_elapsed},
             {"updates", updates},
             {"updates_per_s", s_elapsed > 0 ? static_cast<double>(updates) / s_elapsed : 0.0},
             {"staleness", Json{{"mean", s.mean}, {"p95", s.p95}, {"max", s.max}}},
             {"dropped_stale", s.dropped},
             {"workers", workers}};
  if (eval.is_object()) event.update(eval);
  emit(event);
  if (updates_ > 0) commands_.push_back(PublishCommand{});
}

// ---------------------------------------------------------------------------------------------
// Views

std::vector<AspJob::WorkerView> AspJob::workers() const {
  std::vector<WorkerView> out;
  for (const auto& [name, t] : trainers_) {
    if (t.server || t.gone || !t.ready) continue;
    WorkerView w;
    w.trainer = name;
    w.node = node_name(t.node);
    const auto b = plan_.find(name);
    w.batch = b == plan_.end() ? 0 : b->second;
    w.samples_per_s = t.compute_time_s > 0 ? t.batch / t.compute_time_s : 0;
    w.step_time_s = t.update_time_s;
    out.push_back(w);
  }
  return out;
}

std::vector<AspJob::ShardView> AspJob::shards() const {
  std::vector<ShardView> out;
  for (const auto& s : shards_) {
    out.push_back(ShardView{s.trainer, s.incarnation, s.ready, s.handing_over, s.version,
                            s.checkpoint_version, s.restarts, s.endpoint});
  }
  return out;
}

std::vector<std::string> AspJob::live_trainers() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : trainers_) {
    if (t.said_hello && !t.gone) out.push_back(name);
  }
  return out;
}

std::int64_t AspJob::updates_lost() const {
  std::int64_t n = 0;
  for (const auto& s : shards_) n += s.ledger.lost();
  return n;
}

std::int64_t AspJob::updates_lost_at_most() const {
  std::int64_t n = 0;
  for (const auto& s : shards_) n += s.ledger.lost_at_most();
  return n;
}

std::string AspJob::summary_json(Millis now) const {
  const StalenessSummary total = stats_.total();
  Json workers = Json::array();
  for (const auto& [name, t] : trainers_) {
    if (t.server || t.worker_id == 0) continue;
    const auto b = plan_.find(name);
    workers.push_back({{"name", name},
                       {"node", node_name(t.node)},
                       {"worker", t.worker_id},
                       {"updates", t.updates},
                       {"final_batch", b == plan_.end() ? t.batch : b->second},
                       {"compute_time_s", t.compute_time_s},
                       {"update_time_s", t.update_time_s},
                       {"samples_per_s", t.compute_time_s > 0 ? t.batch / t.compute_time_s : 0.0},
                       {"live", !t.gone}});
  }
  Json servers = Json::array();
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    const auto& shard = shards_[s];
    servers.push_back({{"shard", s},
                       {"trainer", shard.trainer},
                       {"incarnation", shard.incarnation},
                       {"version", shard.version},
                       {"restarts", shard.restarts},
                       {"updates_lost", shard.ledger.lost()},
                       {"updates_lost_at_most", shard.ledger.lost_at_most()},
                       {"pushes_unanswered", shard.ledger.unanswered_before_restarts()},
                       {"pushes_fenced", shard.pushes_fenced},
                       {"checkpoint", shard.checkpoint},
                       {"checkpoint_version", shard.checkpoint_version},
                       {"head_copy", shard.head_copy_version > 0
                                         ? Json(head_copy_path(static_cast<std::int32_t>(s)))
                                         : Json()},
                       {"head_copy_version", shard.head_copy_version}});
  }
  Json dealer = nullptr;
  if (dealer_) {
    const auto& c = dealer_->counters();
    dealer = {{"dataset_size", dealer_->dataset_size()},
              {"epochs_completed", dealer_->epochs_completed()},
              {"batches_dealt", c.batches_dealt},
              {"samples_dealt", c.samples_dealt},
              {"samples_reissued", c.samples_reissued},
              {"batches_accepted", c.batches_accepted},
              {"samples_accepted", c.samples_accepted},
              {"duplicates", c.duplicates},
              {"unknown", c.unknown},
              {"partial_pushes", c.partial_pushes}};
  }
  Json checkpoints = Json::array();
  if (!final_checkpoint_.empty()) {
    checkpoints.push_back(
        {{"step", updates_}, {"path", final_checkpoint_}, {"node", final_checkpoint_node_}});
  }
  return Json{{"job_id", options_.job_id},
              {"name", options_.name},
              {"mode", "asp"},
              {"status", state_},
              {"reason", reason_},
              {"steps", updates_},
              {"updates", updates_},
              {"total_steps", total_steps()},
              {"epochs", dealer_ ? dealer_->epochs_completed() : 0},
              {"wall_time_s", seconds(started_at_, now)},
              {"final_test_accuracy", final_accuracy_ >= 0 ? Json(final_accuracy_) : Json()},
              {"final_test_loss", final_loss_ >= 0 ? Json(final_loss_) : Json()},
              {"final_train_loss", loss_},
              {"checkpoint", final_checkpoint_},
              {"checkpoint_node", final_checkpoint_node_},
              {"checkpoints", checkpoints},
              {"policy", std::string(scheduler::to_string(options_.controller.policy))},
              {"global_batch", options_.global_batch},
              {"staleness", Json{{"mean", total.mean},
                                 {"p95", total.p95},
                                 {"max", total.max},
                                 {"mode", options_.staleness},
                                 {"max_staleness", options_.max_staleness},
                                 {"lr_scaling", options_.lr_scaling}}},
              {"pushes", pushes_},
              {"dropped_stale", dropped_stale_},
              {"duplicate_pushes", duplicates_},
              {"failed_batches", failed_batches_},
              {"fences", Json{{"rounds", fence_counters_.rounds},
                              {"no_answer", fence_counters_.no_answer},
                              {"batches_taken", fence_counters_.taken},
                              {"batches_dealt_again", fence_counters_.dealt_again}}},
              {"evaluations", evaluations_},
              {"last_eval_accuracy", last_eval_accuracy_ >= 0 ? Json(last_eval_accuracy_) : Json()},
              {"updates_lost", updates_lost()},
              {"updates_lost_at_most", updates_lost_at_most()},
              {"parameters", parameters_},
              {"servers", servers},
              {"sampling", dealer},
              {"workers", workers},
              {"membership", membership_log_},
              {"plan_version", plan_version_}}
      .dump(2);
}

// ---------------------------------------------------------------------------------------------
// Snapshot and restore

namespace {

Json taken_json(const std::map<WorkerId, std::vector<TakenBatch>>& taken) {
  Json out = Json::array();
  for (const auto& [worker, batches] : taken) {
    for (const auto& b : batches) out.push_back(Json{worker, b.batch, b.applied});
  }
  return out;
}

std::map<WorkerId, std::vector<TakenBatch>> taken_from(const Json& json) {
  std::map<WorkerId, std::vector<TakenBatch>> out;
  for (const auto& t : json) {
    out[t.at(0).get<WorkerId>()].push_back(
        TakenBatch{t.at(1).get<std::uint64_t>(), t.at(2).get<bool>()});
  }
  return out;
}

}  // namespace

Json AspJob::snapshot(Millis now) const {
  Json nodes = Json::object();
  for (const auto& [id, n] : nodes_) {
    nodes[id] = Json{{"name", n.name}, {"alive", n.alive}, {"drained", n.drained}};
  }
  Json trainers = Json::object();
  for (const auto& [name, t] : trainers_) {
    trainers[name] = Json{{"node", t.node},
                          {"server", t.server},
                          {"shard", t.shard},
                          {"incarnation", t.incarnation},
                          {"worker", t.worker_id},
                          {"said_hello", t.said_hello},
                          {"ready", t.ready},
                          {"gone", t.gone},
                          {"exited", t.exited},
                          {"pushed", t.first_push_at.has_value()},
                          {"updates", t.updates},
                          {"batch", t.batch},
                          {"compute_time_s", t.compute_time_s},
                          {"update_time_s", t.update_time_s},
                          {"since_plan", t.since_plan}};
  }
  Json shards = Json::array();
  for (const auto& s : shards_) {
    shards.push_back(Json{{"trainer", s.trainer},
                          {"endpoint", s.endpoint},
                          {"incarnation", s.incarnation},
                          {"ready", s.ready},
                          {"handing_over", s.handing_over},
                          {"inherited", taken_json(s.inherited)},
                          {"checkpoint", s.checkpoint},
                          {"checkpoint_version", s.checkpoint_version},
                          {"head_copy_version", s.head_copy_version},
                          {"version", s.version},
                          {"ledger", s.ledger.state()},
                          {"lost_this", s.lost_this},
                          {"restarts", s.restarts},
                          {"deaths", s.deaths},
                          {"pushes_fenced", s.pushes_fenced},
                          {"fenced_this", s.fenced_this}});
  }
  const auto& f = fence_counters_;
  return Json{{"state", state_},
              {"reason", reason_},
              {"finished", finished_},
              {"elapsed_ms", started_ ? now - started_at_ : 0},
              {"nodes", nodes},
              {"trainers", trainers},
              {"shards", shards},
              {"next_trainer", next_trainer_},
              {"next_worker_id", next_worker_id_},
              {"parameters", parameters_},
              {"dataset_size", dealer_ ? dealer_->dataset_size() : 0},
              {"dealer", dealer_ ? dealer_->state() : Json()},
              {"fences", fences_ ? fences_->state() : Json()},
              {"gone_workers", gone_workers_},
              {"fence_counters", {f.rounds, f.no_answer, f.taken, f.dealt_again}},
              {"staleness", stats_.totals_state()},
              {"plan", plan_},
              {"plan_version", plan_version_},
              {"counts",
               {updates_, dropped_stale_, pushes_, duplicates_, failed_batches_, last_plan_update_,
                eval_dealt_at_, next_eval_, evaluations_, start_failures_}},
              {"loss", loss_},
              {"evaluator", evaluator_},
              {"last_eval_accuracy", last_eval_accuracy_},
              {"finisher", finisher_},
              {"finishing_announced", finishing_announced_},
              {"last_trainer_error", last_trainer_error_},
              {"membership", membership_log_}};
}

void AspJob::restore(const Json& j, Millis now) {
  // Read everything first: a snapshot that cannot be read changes nothing.
  std::map<std::string, Node> nodes;
  std::map<std::string, Trainer> trainers;
  std::vector<Shard> shards;
  std::optional<EpochDealer> dealer;
  std::optional<BatchFences> fences;
  StalenessStats stats;
  std::vector<std::int64_t> counts, fence_counts;
  try {
    for (const auto& [id, n] : j.at("nodes").items()) {
      nodes[id] = Node{n.at("name").get<std::string>(), n.at("alive").get<bool>(),
                       n.at("drained").get<bool>()};
    }
    for (const auto& [name, t] : j.at("trainers").items()) {
      Trainer r;
      r.node = t.at("node").get<std::string>();
      r.server = t.at("server").get<bool>();
      r.shard = t.at("shard").get<std::int32_t>();
      r.incarnation = t.at("incarnation").get<std::int64_t>();
      r.worker_id = t.at("worker").get<WorkerId>();
      r.said_hello = t.at("said_hello").get<bool>();
      r.ready = t.at("ready").get<bool>();
      r.gone = t.at("gone").get<bool>();
      r.exited = t.value("exited", false);  // absent from the snapshots of older heads
      // Times restart with this head: a trainer not started yet has a whole spawn timeout.
      r.spawned_at = now;
      if (r.said_hello) r.hello_at = now;
      if (t.at("pushed").get<bool>()) r.first_push_at = now;
      r.updates = t.at("updates").get<std::int64_t>();
      r.batch = t.at("batch").get<std::int32_t>();
      r.compute_time_s = t.at("compute_time_s").get<double>();
      r.update_time_s = t.at("update_time_s").get<double>();
      r.since_plan = t.at("since_plan").get<std::int64_t>();
      if (r.server && (r.shard < 0 || r.shard >= options_.servers)) {
        throw std::invalid_argument("server " + name + " serves no shard of this job");
      }
      trainers[name] = std::move(r);
    }
    const Json& js = j.at("shards");
    if (js.size() != shards_.size()) {
      throw std::invalid_argument(std::to_string(js.size()) + " shards, the job has " +
                                  std::to_string(shards_.size()));
    }
    for (const auto& s : js) {
      Shard r;
      r.trainer = s.at("trainer").get<std::string>();
      r.endpoint = s.at("endpoint").get<std::string>();
      r.incarnation = s.at("incarnation").get<std::int64_t>();
      r.ready = s.at("ready").get<bool>();
      r.handing_over = s.at("handing_over").get<bool>();
      r.hand_over_asked_at = now;
      r.inherited = taken_from(s.at("inherited"));
      r.checkpoint = s.at("checkpoint").get<std::string>();
      r.checkpoint_version = s.at("checkpoint_version").get<std::int64_t>();
      r.head_copy_version = s.at("head_copy_version").get<std::int64_t>();
      r.version = s.at("version").get<std::int64_t>();
      r.ledger.restore_state(s.at("ledger"));
      r.lost_this = s.at("lost_this").get<std::int64_t>();
      r.restarts = s.at("restarts").get<int>();
      // A snapshot written before deaths were told from drains: every restart counts.
      r.deaths = s.contains("deaths") ? s.at("deaths").get<int>() : r.restarts;
      r.pushes_fenced = s.at("pushes_fenced").get<std::int64_t>();
      r.fenced_this = s.at("fenced_this").get<std::int64_t>();
      shards.push_back(std::move(r));
    }
    const auto dataset = j.at("dataset_size").get<std::int64_t>();
    if (dataset > 0) {
      dealer.emplace(dataset, options_.data_seed, options_.steps > 0 ? 0 : options_.epochs);
      dealer->restore_state(j.at("dealer"));
      fences.emplace(static_cast<std::int32_t>(shards_.size()));
      fences->restore_state(j.at("fences"));
    }
    stats.restore_totals(j.at("staleness"));
    counts = j.at("counts").get<std::vector<std::int64_t>>();
    fence_counts = j.at("fence_counters").get<std::vector<std::int64_t>>();
    if (counts.size() != 10 || fence_counts.size() != 4) {
      throw std::invalid_argument("the job's counts are incomplete");
    }
    state_ = j.at("state").get<std::string>();
    reason_ = j.at("reason").get<std::string>();
    finished_ = j.at("finished").get<bool>();
    next_trainer_ = j.at("next_trainer").get<int>();
    next_worker_id_ = j.at("next_worker_id").get<WorkerId>();
    parameters_ = j.at("parameters").get<std::int64_t>();
    gone_workers_ = j.at("gone_workers").get<std::set<WorkerId>>();
    plan_ = j.at("plan").get<std::map<std::string, std::int32_t>>();
    plan_version_ = j.at("plan_version").get<std::int64_t>();
    loss_ = j.at("loss").get<double>();
    evaluator_ = j.at("evaluator").get<std::string>();
    last_eval_accuracy_ = j.at("last_eval_accuracy").get<double>();
    finisher_ = j.at("finisher").get<std::string>();
    finishing_announced_ = j.at("finishing_announced").get<bool>();
    last_trainer_error_ = j.at("last_trainer_error").get<std::string>();
    membership_log_ = j.at("membership").get<std::vector<std::string>>();
    started_at_ = now - j.at("elapsed_ms").get<Millis>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("the ASP job's snapshot: ") + e.what());
  }
  nodes_ = std::move(nodes);
  trainers_ = std::move(trainers);
  shards_ = std::move(shards);
  dealer_ = std::move(dealer);
  fences_ = std::move(fences);
  stats_ = std::move(stats);
  updates_ = counts[0];
  dropped_stale_ = counts[1];
  pushes_ = counts[2];
  duplicates_ = counts[3];
  failed_batches_ = counts[4];
  last_plan_update_ = counts[5];
  eval_dealt_at_ = counts[6];
  next_eval_ = counts[7];
  evaluations_ = counts[8];
  start_failures_ = static_cast<int>(counts[9]);
  fence_counters_ =
      FenceCounters{fence_counts[0], fence_counts[1], fence_counts[2], fence_counts[3]};
  started_ = true;
  last_progress_ = now;
  interval_started_ = now;
  interval_updates_ = 0;
  too_few_since_.reset();
  if (finished_) {
    // It ended just before the head died: the end is carried out again (its stops, summary and
    // the JobManager's record may not have gone out).
    for (const auto& name : live_trainers())
      commands_.push_back(StopCommand{name, "job " + state_});
    commands_.push_back(FinishCommand{state_, reason_});
    commands_.push_back(PublishCommand{});
    return;
  }
  // The controller's estimates were not kept: it learns them again from the next pushes.
  for (const auto& [name, batch] : plan_) controller_.add_worker(name);
  emit(Json{{"event", "restored"},
            {"step", updates_},
            {"workers", static_cast<std::int64_t>(plan_.size())},
            {"outstanding_batches", outstanding_batches()},
            {"fence_rounds", fences_ ? static_cast<std::int64_t>(fences_->pending()) : 0}});
  ask_again(now);
  changed();
  commands_.push_back(PublishCommand{});
}

void AspJob::ask_again(Millis now) {
  (void)now;
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const auto s = static_cast<std::int32_t>(i);
    auto& shard = shards_[i];
    const auto server = trainers_.find(shard.trainer);
    if (!shard.ready || server == trainers_.end() || server->second.gone) continue;
    // Fences sent with its server_ready may have been lost with the head: a fence is idempotent.
    for (const WorkerId worker : gone_workers_) {
      commands_.push_back(
          FenceCommand{shard.trainer, s, shard.incarnation, worker, kWholeWorker, {}});
    }
    if (options_.mutation == AspMutation::kRestoreForgetsAsks) continue;
    // Answers to the dead head's asks are lost: ask again (both are idempotent on the server).
    if (fences_ && dealer_) {
      for (const FenceAsk& again : fences_->waiting_on(s)) {
        fence_shard(again.round, s, again.worker, again.through);
      }
    }
    if (shard.handing_over) {
      commands_.push_back(HandOverCommand{shard.trainer, s, shard.incarnation});
    }
  }
}

}  // namespace omnilearn::asp
