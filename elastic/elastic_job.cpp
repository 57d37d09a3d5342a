#include "elastic/elastic_job.hpp"

#include <algorithm>
#include <stdexcept>

namespace omnilearn::scheduler {

const char* to_string(Mutation mutation) {
  switch (mutation) {
    case Mutation::kNone:
      return "none";
    case Mutation::kNoLeaseCheck:
      return "no_lease_check";
    case Mutation::kNoCommitRenewal:
      return "no_commit_renewal";
    case Mutation::kCommitUnconfirmed:
      return "commit_unconfirmed";
    case Mutation::kSyncTieLowestRank:
      return "sync_tie_lowest_rank";
    case Mutation::kGrantOnSilence:
      return "grant_on_silence";
    case Mutation::kRestoreTrustsSnapshot:
      return "restore_trusts_snapshot";
    case Mutation::kRestoreForgetsLease:
      return "restore_forgets_lease";
  }
  return "?";
}

const char* to_string(MemberDone::Outcome outcome) {
  switch (outcome) {
    case MemberDone::Outcome::kFinished: return "finished";
    case MemberDone::Outcome::kDrained: return "drained";
    case MemberDone::Outcome::kError: return "error";
  }
  return "unknown";
}

ElasticJob::ElasticJob(ElasticJobOptions options, Planner planner)
    : options_(std::move(options)), planner_(std::move(planner)) {
  if (options_.min_workers < 1 || options_.max_workers < options_.min_workers ||
      options_.slots < 1 || options_.total_steps < 0) {
    throw std::invalid_argument("ElasticJob: needs 1 <= min_workers <= max_workers, slots >= 1");
  }
  if (!planner_) throw std::invalid_argument("ElasticJob: needs a planner");
  backoff_ = options_.backoff_initial;
}

JobEvent ElasticJob::event_now(const std::string& kind) const {
  JobEvent e;
  e.kind = kind;
  e.step = job_step_;
  e.generation = generation_;
  return e;
}

ElasticJob::Trainer* ElasticJob::find(const std::string& trainer) {
  auto it = trainers_.find(trainer);
  return it == trainers_.end() ? nullptr : &it->second;
}

std::map<std::string, ElasticJob::TrainerView> ElasticJob::trainers() const {
  std::map<std::string, TrainerView> out;
  for (const auto& [name, t] : trainers_) out.emplace(name, t.view);
  return out;
}

std::string ElasticJob::node_name(const std::string& node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? node : it->second.name;
}

std::vector<JobCommand> ElasticJob::take_commands() {
  std::vector<JobCommand> out;
  if (persist_pending_ && !finished_) out.emplace_back(PersistCommand{});
  persist_pending_ = false;
  for (auto& c : commands_) out.push_back(std::move(c));
  commands_.clear();
  return out;
}

ElasticJobSnapshot ElasticJob::snapshot() const {
  ElasticJobSnapshot s;
  s.state = state_;
  s.total_steps = options_.total_steps;
  s.generation = generation_;
  s.members = members_;
  s.last_trained_members = last_trained_members_;
  s.committed_step = job_step_;
  s.lease_generation = lease_generation_;
  s.lease_holder = lease_holder_;
  s.lease_duration = options_.lease_duration;
  s.trainer_counter = trainer_counter_;
  const auto listed = [](const std::vector<std::string>& v, const std::string& name) {
    return std::find(v.begin(), v.end(), name) != v.end();
  };
  for (const auto& [name, t] : trainers_) {
    // A trainer gone for good is forgotten (a long job's churn does not grow the record),
    // unless a generation still names it.
    if (t.view.phase == Phase::kGone && !listed(members_, name) &&
        !listed(last_trained_members_, name)) {
      continue;
    }
    ElasticJobSnapshot::TrainerRecord r;
    r.name = name;
    r.node = t.view.node;
    r.phase = static_cast<std::int32_t>(t.view.phase);
    r.committed_step = t.view.committed_step;
    r.synced_generation = t.synced_generation;
    r.exited = t.exited;
    r.stop_reason = t.stop_reason;
    r.deferred_stop = t.deferred_stop;
    s.trainers.push_back(std::move(r));
  }
  for (const auto& [id, node] : nodes_) {
    if (node.draining) s.draining_nodes.push_back(id);
  }
  s.lost_steps = lost_steps_;
  s.abandoned_steps = abandoned_steps_;
  s.checkpoints = checkpoints_;
  s.resumed_generation = resumed_generation_;
  return s;
}

void ElasticJob::restore(const ElasticJobSnapshot& s, Millis now) {
  if (started_) throw std::logic_error("ElasticJob::restore: the job has started already");
  started_ = true;
  state_ = s.state.empty() ? "pending" : s.state;
  if (s.total_steps > 0) options_.total_steps = s.total_steps;
  generation_ = s.generation;
  members_ = s.members;
  last_trained_members_ = s.last_trained_members;
  job_step_ = s.committed_step;
  trainer_counter_ = s.trainer_counter;
  lost_steps_ = s.lost_steps;
  abandoned_steps_ = s.abandoned_steps;
  checkpoints_ = s.checkpoints;
  resumed_generation_ = s.resumed_generation;
  last_progress_ = now;
  dropped_below_ = std::max<std::int64_t>(1, generation_);
  for (const auto& id : s.draining_nodes) {
    // A node the registry has not reported (node_up) yet is not alive until it does.
    auto [it, added] = nodes_.try_emplace(id);
    if (added) it->second.alive = false;
    it->second.draining = true;
  }
  for (const auto& r : s.trainers) {
    if (r.phase < 0 || r.phase > static_cast<std::int32_t>(Phase::kGone)) {
      throw std::invalid_argument("ElasticJob::restore: trainer " + r.name + " has phase " +
                                  std::to_string(r.phase));
    }
    Trainer t;
    t.view.name = r.name;
    t.view.node = r.node;
    t.view.phase = static_cast<Phase>(r.phase);
    t.synced_generation = r.synced_generation;
    t.exited = r.exited;
    t.stop_reason = r.stop_reason;
    t.deferred_stop = r.deferred_stop;
    t.spawned_at = now;  // a trainer still starting has its spawn timeout again
    t.spawned_by_previous_head = t.view.phase == Phase::kSpawning;
    // Unknown until it reports: it may have committed any number of steps since. Unless no
    // generation ever held a lease (a grant is written before it is sent) and the job was at
    // its first step: then nothing was committed, and every trainer holds the initial state.
    // Counted as unknown, trainers whose reports were lost held up a job that could start
    // afresh until it failed. [fix: elastic simulation seed 124176]
    const bool trust = options_.mutation == Mutation::kRestoreTrustsSnapshot;
    const bool never_committed = s.lease_generation == 0 && s.committed_step == 0;
    t.view.committed_step = t.view.phase == Phase::kGone || trust ? r.committed_step
                            : never_committed                      ? 0
                                                                   : -1;
    if (t.view.phase == Phase::kMember) {
      auto rank = std::find(members_.begin(), members_.end(), r.name);
      t.view.rank =
          rank == members_.end() ? -1 : static_cast<std::int32_t>(rank - members_.begin());
    }
    if (!nodes_.count(r.node)) nodes_[r.node].alive = false;
    trainers_.emplace(r.name, std::move(t));
  }
  for (const auto& name : members_) {
    if (!trainers_.count(name)) {
      throw std::invalid_argument("ElasticJob::restore: member " + name + " is not a trainer");
    }
  }
  // The holder may go on committing under the lease the previous head granted last, for at
  // most a lease duration from now (a renewal that head answered just before it died).
  lease_generation_ = s.lease_generation;
  lease_holder_ = s.lease_holder;
  lease_until_ = now + std::max(options_.lease_duration, s.lease_duration);
  lease_released_ = s.lease_holder.empty();
  if (options_.mutation == Mutation::kRestoreForgetsLease) lease_released_ = true;
  if (state_ != "running") {
    maybe_regroup("the head restarted", now);
    return;
  }
  note_disruption(now);
  if (options_.mutation == Mutation::kRestoreTrustsSnapshot) {
    maybe_regroup("the head restarted", now);
    return;
  }
  restore_wait_until_ = now + options_.form_timeout;
  form_generation({}, "the head restarted (every trainer stops to report its committed step)", now);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

void ElasticJob::start(Millis now) {
  if (started_) return;
  started_ = true;
  last_progress_ = now;
  place_trainers(now);
  maybe_regroup("start", now);
}

void ElasticJob::stop(const std::string& reason, Millis now) {
  finish("stopped", reason.empty() ? "stopped by user" : reason, now);
}

void ElasticJob::fail(const std::string& reason, Millis now) { finish("failed", reason, now); }

void ElasticJob::finish(const std::string& state, const std::string& reason, Millis now) {
  if (finished_) return;
  finished_ = true;
  state_ = state;
  reason_ = reason;
  forming_ = false;
  // Only the scheduler ends a job: every trainer still there is told to exit. So is one
  // written off whose stop was deferred: it would idle on its node until its own timeout.
  // (One loop, not send_deferred_stops(): the stops go out in the trainers' order.)
  for (auto& [name, t] : trainers_) {
    const bool owed = t.view.phase != Phase::kGone || !t.deferred_stop.empty();
    if (owed && !t.exited) emit(StopCommand{name, "job " + state});
    t.view.phase = Phase::kGone;
    t.deferred_stop.clear();
  }
  lease_until_ = 0;
  emit(DropStoreKeysCommand{-1});
  JobEvent e = event_now("finished");
  e.reason = reason;
  event(std::move(e));
  emit(FinishCommand{state, reason});
}

void ElasticJob::tick(Millis now) {
  if (finished_ || !started_) return;
  // Trainers that did not say hello in time.
  std::vector<std::string> late;
  for (const auto& [name, t] : trainers_) {
    if (t.view.phase == Phase::kSpawning && now - t.spawned_at > options_.spawn_timeout) {
      late.push_back(name);
    }
  }
  for (const auto& name : late) trainer_gone(name, "did not start in time", now, true);
  place_trainers(now);  // replaces the late, and places on nodes whose start back-off ended

  // A rendezvous is one message: lost (a connection reset, a partition), its trainer waits
  // for it until the formation times out and is written off, and the job starts a trainer in
  // its stead, whose rendezvous may be lost too. Said again every probe timeout to the
  // members that have not synced in the generation; a member ignores one it has seen.
  // [fix: elastic simulation seed 64580]
  if (forming_ && now - orders_sent_at_ >= options_.probe_timeout) {
    orders_sent_at_ = now;
    for (const auto& name : members_) {
      const Trainer& t = trainers_.at(name);
      auto order = member_orders_.find(name);
      if (t.view.phase == Phase::kMember && t.synced_generation != generation_ &&
          order != member_orders_.end()) {
        emit(RendezvousCommand{name, order->second});
      }
    }
  }
  if (forming_ && now - formed_at_ > options_.form_timeout) {
    // The generation did not train: members that never synced in it are written off (a stuck
    // or zombie process would otherwise make every retry fail the same way); the others retry
    // after a back-off.
    JobEvent e = event_now("formation_failed");
    e.reason = "generation did not commit a step within the formation timeout";
    event(std::move(e));
    forming_ = false;
    for (const auto& name : members_) {
      Trainer& t = trainers_.at(name);
      if (t.view.phase != Phase::kMember) continue;
      // A member holding the job's committed state is kept for the retry: writing off every
      // holder (one lost rendezvous fails the join for all) would lose committed steps for
      // good. A holder that really is stuck makes the job fail after its grace period instead.
      // [fix: elastic simulation seed 28] A holder in the wide sense, as for a missed probe
      // (write_off_unreachable): a survivor of the last generation that trained whose last
      // reports were lost (a partition), or whose heartbeats stopped a step behind its
      // leader's reports (frozen), looks behind the job's step though it holds it. Written off
      // and stopped as a non-holder, it took the job's only copy of the state with it, and the
      // job failed. [fix: elastic simulation seeds 8818504, 8252338]
      const bool holder = holds_state(name) || may_hold_state(name);
      if (t.synced_generation != generation_ && !(lease_generation_ > 0 && holder)) {
        trainer_gone(name, "did not join generation " + std::to_string(generation_) + " in time",
                     now, true);
      } else {
        t.view.phase = Phase::kReady;
        // Kept, but asked whether it is still there: a holder killed while its exit report
        // was lost (a partition) would be retried until the job failed, although a
        // checkpoint could resume it. A probe proving its process gone writes it off.
        // [fix: elastic simulation seed 153957]
        probe(name, now);
      }
    }
    retry_after_ = now + backoff_;
    backoff_ = std::min(options_.backoff_max, backoff_ * 2);
    place_trainers(now);
  }
  // A training generation that went quiet for a formation timeout broke without anyone being
  // told (its members' broken or abandon reports were lost, e.g. to a partition shorter than
  // the heartbeat timeout): probe and re-form it like a reported failure, instead of waiting
  // for the stall limit to fail the job. [fix: elastic simulation seed 2544]
  const bool finishing = job_step_ >= options_.total_steps;
  if (!forming_ && !members_.empty() && !disruption_at_ && !finishing &&
      now - last_progress_ > options_.form_timeout) {
    note_disruption(now);
    probe_members(now);
  }
  // The old lease is over: whoever this generation's rendezvous did not yet allow to give up a
  // wait in the old one is allowed now (form_generation). A lease granted to this generation
  // says so too: it was granted only once the old one was over.
  if (!abandon_told_later_.empty() && (old_lease_over(now) || lease_generation_ >= generation_)) {
    for (const auto& name : abandon_told_later_) {
      const Trainer* t = find(name);
      if (!t || t->view.phase == Phase::kGone) continue;
      RendezvousOrder order;
      if (auto it = member_orders_.find(name); it != member_orders_.end()) {
        it->second.abandon_previous = true;
        order = it->second;
      } else {
        order = RendezvousOrder{generation_, -1, static_cast<std::int32_t>(members_.size()),
                                batches_, plan_version_, false, true, std::string(), -1};
      }
      emit(RendezvousCommand{name, order});
    }
    abandon_told_later_.clear();
  }
  // A hung trainer (SIGSTOP, a stuck call) whose agent still heartbeats holds the rest of its
  // generation in their exchange, or in its formation, until the collective or the formation
  // times out (30 s), and nothing tells the head. So a generation with no progress (no step
  // committed, nobody synced) for two lease lengths, and at least a probe timeout, has its
  // members probed, with no disruption noted: one that misses the probe is written off once
  // another holder answered (write_off_unreachable), and the generation re-forms without it.
  // Members that answer change nothing: a probe is answered by a trainer's runtime, not by its
  // training loop, so a long checkpoint, evaluation or step is no reason to re-form. This
  // holds when the job is finishing too (the last step committed, the leader's final
  // evaluation and checkpoint under way, its done not yet in): a leader that died there, its
  // exit report lost, would otherwise keep the job waiting for a done that never comes until
  // the stall limit failed it; a probe that proves it gone lets another holder finish the job.
  // [fix: elastic simulation seed 125713]
  if (!members_.empty() && (!disruption_at_ || finishing) && state_ == "running" &&
      now - std::max(last_progress_, last_stall_probe_) > stall_probe_after()) {
    last_stall_probe_ = now;
    probe_members(now);
  }
  maybe_regroup("retry", now);

  // Every job ends: too few workers for the grace period, or no progress at all for longer
  // than any healthy phase can take.
  // With how many nodes could take a trainer: "fewer than 5" alone leaves a user guessing
  // whether workers are missing or failing.
  int usable = 0;
  for (const auto& [id, node] : nodes_) usable += node.alive && !node.draining ? 1 : 0;
  const std::string too_few = "fewer than min_workers (" + std::to_string(options_.min_workers) +
                              ") trainers holding the job's state (" + std::to_string(usable) +
                              " usable node" + (usable == 1 ? "" : "s") + " in the cluster)" +
                              (no_resume_reason_.empty() ? "" : "; " + no_resume_reason_);
  if (below_min_since_ && state_ == "running" && now - *below_min_since_ > options_.grace_period) {
    finish("failed", too_few + " for more than " + std::to_string(options_.grace_period / 1000) +
                         " s (at step " + std::to_string(job_step_) + ")",
           now);
    return;
  }
  // Before the first step the trainers may still be starting (spawn_timeout) and forming.
  const Millis stall_limit = options_.grace_period + options_.form_timeout +
                             (job_step_ == 0 ? options_.spawn_timeout : 0);
  if (now - last_progress_ > stall_limit) {
    finish("failed", (below_min_since_ ? too_few : std::string("no step committed")) + " for " +
                         std::to_string(stall_limit / 1000) + " s (generation " +
                         std::to_string(generation_) + ", step " + std::to_string(job_step_) + ")",
           now);
  }
}

// ---------------------------------------------------------------------------------------------
// Membership

void ElasticJob::node_up(const std::string& node, const std::string& name, Millis now,
                         bool draining) {
  Node& n = nodes_[node];
  n.name = name;
  n.alive = true;
  n.draining = n.draining || draining;
  if (finished_ || !started_) return;
  place_trainers(now);
}

void ElasticJob::node_down(const std::string& node, const std::string& reason, Millis now) {
  auto it = nodes_.find(node);
  if (it != nodes_.end()) it->second.alive = false;
  if (finished_) return;
  std::vector<std::string> gone;
  for (const auto& [name, t] : trainers_) {
    if (t.view.node == node && t.view.phase != Phase::kGone) gone.push_back(name);
  }
  for (const auto& name : gone) trainer_gone(name, "node " + node_name(node) + " " + reason, now, false);
  maybe_regroup("node " + node_name(node) + " " + reason, now);
  place_trainers(now);
}

void ElasticJob::undrain(const std::string& node_or_name, Millis now) {
  bool any = false;
  for (auto& [id, node] : nodes_) {
    if (id != node_or_name && node.name != node_or_name) continue;
    any |= node.draining;
    node.draining = false;
    if (any) persist();
  }
  if (any && !finished_ && started_) place_trainers(now);
}

int ElasticJob::drain(const std::string& node_or_name, Millis now) {
  int leaving = 0;
  for (auto& [id, node] : nodes_) {
    if (id != node_or_name && node.name != node_or_name) continue;
    if (!node.draining) persist();
    node.draining = true;
    if (finished_) continue;
    for (auto& [name, t] : trainers_) {
      // An already leaving trainer may be the one keeping the job's state: a second drain of
      // its node must not stop it. [fix: elastic simulation seed 2707]
      if (t.view.node != id || t.view.phase == Phase::kGone || t.view.phase == Phase::kLeaving) {
        continue;
      }
      ++leaving;
      JobEvent e = event_now("drain");
      e.trainer = name;
      event(std::move(e));
      if (t.view.phase == Phase::kMember ||
          (t.view.phase == Phase::kReady && lease_generation_ > 0 && may_hold_state(name))) {
        // It stays in its generation until the next one, which the leader adopts at a step
        // boundary: no committed step is lost. It then idles (rank -1), still holding the
        // state, and is stopped once a generation without it trained (report()). A trainer
        // between generations (its group lost a member, the job waits for min_workers) may
        // hold the only copy of the state too: stopped at once, the job lost every step.
        // [fix: elastic simulation seed 13153] Whether it may, not whether the head knows it
        // does: the head may not have heard of a follower's last steps (its done was lost).
        // [fix: elastic simulation seed 21421]
        t.view.phase = Phase::kLeaving;
      } else {
        // Stopped at once; not a failure (the drain event says why it goes).
        trainer_gone(name, "drained", now, true, false);
      }
    }
  }
  if (leaving > 0 && !finished_) {
    maybe_regroup("drain " + node_or_name, now);
    // Replace the leavers on the other nodes: nothing else would (a job drained below
    // min_workers with free nodes failed after its grace). [fix: elastic simulation seed 89]
    place_trainers(now);
  }
  return leaving;
}

int ElasticJob::trainers_on(const std::string& node) const {
  int count = 0;
  for (const auto& [name, t] : trainers_) count += t.view.node == node && t.view.phase != Phase::kGone;
  return count;
}

int ElasticJob::active_trainers() const {
  int count = 0;
  for (const auto& [name, t] : trainers_) {
    count += t.view.phase != Phase::kGone && t.view.phase != Phase::kLeaving;
  }
  return count;
}

bool ElasticJob::can_spare(const std::string& node) const {
  return active_trainers() - trainers_on(node) >= options_.min_workers;
}

void ElasticJob::note_lost(const std::string& node_id, const std::string& trainer,
                           const std::string& why, Millis now) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || !it->second.alive) return;  // a dead node is not the trainer's fault
  Node& n = it->second;
  std::erase_if(n.lost_at, [&](Millis at) { return now - at >= options_.lost_memory; });
  n.lost_at.push_back(now);
  // One loss says little of the node (a process killed, a transient partition): its
  // replacement goes there at once. Two within lost_memory start the hold.
  if (n.lost_at.size() < 2) return;
  // Nor is a node held back that the job needs to have min_workers: it gets its trainer.
  if (!can_spare(node_id)) return;
  Millis backoff = options_.backoff_initial;
  for (std::size_t i = 2; i < n.lost_at.size() && backoff < options_.lost_backoff_max; ++i) {
    backoff *= 2;
  }
  backoff = std::min(backoff, options_.lost_backoff_max);
  n.held_back_until = std::max(n.held_back_until, now + backoff);
  JobEvent e = event_now("node_held_back");
  e.trainer = trainer;
  e.reason = why;
  e.seconds = static_cast<double>(backoff) / 1000.0;
  e.losses = static_cast<std::int32_t>(n.lost_at.size());
  event(std::move(e));
}

void ElasticJob::place_trainers(Millis now, const std::string& first_node) {
  if (finished_ || !started_) return;
  // The node named first_node gets the first free place (a checkpoint on its disk waits for a
  // trainer there), then the nodes in order.
  std::vector<std::pair<const std::string, Node>*> order;
  for (auto& entry : nodes_) {
    if (entry.second.name == first_node) order.push_back(&entry);
  }
  for (auto& entry : nodes_) {
    if (entry.second.name != first_node) order.push_back(&entry);
  }
  for (auto* entry : order) {
    const std::string& id = entry->first;
    Node& node = entry->second;
    if (!node.alive || node.draining || now < node.no_spawn_before) continue;
    int on_node = trainers_on(id);
    // A node that keeps losing trainers waits, unless the job needs it to train at all.
    if (now < node.held_back_until && can_spare(id)) continue;
    while (on_node < options_.slots && active_trainers() < options_.max_workers) {
      Trainer t;
      t.view.name = options_.trainer_prefix + node.name + "-t" + std::to_string(++trainer_counter_);
      t.view.node = id;
      t.spawned_at = now;
      emit(SpawnCommand{id, t.view.name});
      JobEvent e;
      e.kind = "spawn";
      e.trainer = t.view.name;
      e.reason = node.name;
      event(std::move(e));
      trainers_.emplace(t.view.name, std::move(t));
      ++on_node;
      persist();
    }
  }
}

bool ElasticJob::hello(const std::string& trainer, Millis now) {
  Trainer* t = find(trainer);
  if (finished_ || !t || t->view.phase != Phase::kSpawning) return false;
  t->view.phase = Phase::kReady;
  persist();
  JobEvent e;
  e.kind = "trainer_ready";
  e.trainer = trainer;
  e.seconds = static_cast<double>(now - t->spawned_at) / 1000.0;
  event(std::move(e));
  maybe_regroup("trainer " + trainer + " joined", now);
  return true;
}

void ElasticJob::trainer_exited(const std::string& trainer, int exit_code,
                                const std::string& reason, Millis now) {
  Trainer* t = find(trainer);
  if (!t) return;
  if (!finished_ && exit_code == kTrainerExitBadInput) {
    // The job's own files or model are wrong: every retry would fail the same way. Also when a
    // probe found the process gone before this report came (a message to it refused at once):
    // otherwise its replacement failed the same way first.
    t->exited = true;
    const std::string why = reason.empty() ? "its input is invalid" : reason;
    trainer_gone(trainer, why, now, false);
    finish("failed", "trainer " + trainer + ": " + why, now);
    return;
  }
  if (t->exited) return;
  t->exited = true;
  if (!finished_ && exit_code != 0 && t->synced_generation < 0 && t->view.phase != Phase::kGone &&
      !(t->spawned_by_previous_head && t->view.phase == Phase::kSpawning)) {
    // It never got as far as training: a failed start. Back off on its node; fail the job
    // once starts keep failing everywhere (a bad model path, data missing on every worker).
    ++start_failures_;
    last_start_failure_ = trainer + ": " + (reason.empty() ? "exited with code " +
                                                                 std::to_string(exit_code)
                                                           : reason);
    auto node = nodes_.find(t->view.node);
    if (node != nodes_.end()) {
      Node& n = node->second;
      ++n.start_failures;
      Millis backoff = options_.backoff_initial;
      for (int i = 1; i < n.start_failures && backoff < options_.spawn_backoff_max; ++i) backoff *= 2;
      n.no_spawn_before = now + std::min(backoff, options_.spawn_backoff_max);
    }
    if (start_failures_ >= options_.max_start_failures) {
      trainer_gone(trainer, reason.empty() ? "exited with code " + std::to_string(exit_code) : reason,
                   now, false);
      finish("failed", "trainers cannot start: " + std::to_string(start_failures_) +
                           " failed in a row; the last: " + last_start_failure_,
             now);
      return;
    }
  }
  // A process that is gone holds no lease: its successor need not wait for it to run out.
  if (trainer == lease_holder_) lease_released_ = true;
  if (finished_ || t->view.phase == Phase::kGone) return;
  // A trainer of a draining node that exits cleanly was told to stop: its drain is over, not a
  // failure (the drain event was written when it began). Normally it is gone before it exits;
  // a head restored from a snapshot written before it was told to stop still holds it, and its
  // exit, sent again by its agent, reaches that head.
  auto node = nodes_.find(t->view.node);
  const bool drained = exit_code == 0 && (t->view.phase == Phase::kLeaving ||
                                          (node != nodes_.end() && node->second.draining));
  const std::string why = reason.empty() ? "exited with code " + std::to_string(exit_code) : reason;
  const bool lost_training = !drained && exit_code != 0 && t->synced_generation >= 0;
  const std::string node_id = t->view.node;
  trainer_gone(trainer, why, now, false, !drained);
  if (lost_training) note_lost(node_id, trainer, why, now);
  maybe_regroup("trainer " + trainer + " exited", now);
  place_trainers(now);
}

void ElasticJob::trainer_gone(const std::string& trainer, const std::string& reason, Millis now,
                              bool stop_it, bool failure) {
  Trainer* t = find(trainer);
  if (!t || t->view.phase == Phase::kGone) return;
  const bool was_member = t->view.phase == Phase::kMember || t->view.phase == Phase::kLeaving;
  t->view.phase = Phase::kGone;
  t->view.rank = -1;
  persist();
  if (stop_it && !t->exited) {
    t->stop_reason = reason;
    emit(StopCommand{trainer, reason});
  }
  if (!failure) {
    if (was_member) note_disruption(now);
    return;
  }
  JobEvent e = event_now("trainer_gone");
  e.trainer = trainer;
  e.reason = reason;
  event(std::move(e));
  if (was_member) note_disruption(now);
}

void ElasticJob::note_disruption(Millis now) {
  if (state_ == "running" && !disruption_at_) {
    disruption_at_ = now;
    step_at_disruption_ = job_step_;
  }
}

bool ElasticJob::holds_state(const std::string& trainer) const {
  const Trainer& t = trainers_.at(trainer);
  // A survivor of the last generation that trained holds its commits: every rank commits a
  // step whose exchange completed. Not always all of them: a leader may commit a step whose
  // exchange its followers gave up waiting for (it completes in the background) under a
  // renewed lease. A survivor that reported fewer steps than the job's known committed step
  // therefore does not count as a holder; anyone else must have reported the job's committed
  // step itself.
  if (std::find(last_trained_members_.begin(), last_trained_members_.end(), trainer) !=
      last_trained_members_.end()) {
    return t.view.committed_step >= job_step_;
  }
  // Once a generation held a lease it may have committed steps that no report told of (a
  // leader cut off right after its commits): job_step_ is then only a lower bound, and only a
  // trainer that synced (with a holder as rank 0) in a later generation is sure to hold them.
  // Trusting committed_step >= job_step_ let a fresh trainer restart training from step 0 and
  // commit steps 1.. again. [fix: elastic simulation seed 2939]
  if (lease_generation_ > 0) {
    return t.synced_generation > lease_generation_ && t.view.committed_step >= job_step_;
  }
  return t.view.committed_step >= job_step_;
}

bool ElasticJob::may_hold_state(const std::string& trainer) const {
  const Trainer& t = trainers_.at(trainer);
  if (t.view.phase == Phase::kGone || t.exited) return false;
  // Restored and silent past the restore wait (its exit report lost with the old head, or its
  // answers lost): it has had form_timeout to say where it stopped. Should it still be alive,
  // it is told to stop when the job resumes from a checkpoint, and what it reports later about
  // its generation no longer counts (resumed_generation_).
  if (t.view.committed_step < 0 && !restore_wait_until_) return false;
  if (std::find(last_trained_members_.begin(), last_trained_members_.end(), trainer) !=
      last_trained_members_.end()) {
    // Unless it stopped in the last generation that trained (or a later one it had not
    // synced in), leaving it or breaking in it, with fewer steps than the job's: it commits
    // nothing more there, so it does not hold them. Counted as a holder, such a drained
    // leader kept the job waiting for it instead of resuming from its checkpoint, until the
    // job failed. [fix: elastic simulation seed 516776]
    const bool left_for_good =
        t.left_generation >= lease_generation_ && t.left_generation >= t.synced_generation;
    return !(left_for_good && t.view.committed_step < job_step_);
  }
  if (lease_generation_ > 0) return t.synced_generation > lease_generation_;
  return true;
}

bool ElasticJob::readable_by(const JobCheckpoint& c, const std::string& trainer) const {
  return c.shared || node_name(trainers_.at(trainer).view.node) == c.node;
}

void ElasticJob::checkpoint_written(const JobCheckpoint& c, Millis now) {
  (void)now;
  if (finished_ || c.path.empty() || c.step <= 0) return;
  auto it = std::find_if(checkpoints_.begin(), checkpoints_.end(),
                         [&](const JobCheckpoint& o) { return o.step >= c.step; });
  if (it != checkpoints_.end() && it->step == c.step) {
    *it = c;
  } else {
    checkpoints_.insert(it, c);
  }
  while (checkpoints_.size() > kKeptCheckpoints) checkpoints_.erase(checkpoints_.begin());
  persist();  // a restarted head resumes from it too
}

bool ElasticJob::resume_from_checkpoint(const std::vector<std::string>& candidates,
                                        const std::string& reason, Millis now) {
  no_resume_reason_.clear();
  // A trainer that may still hold the committed state is waited for, as before: going back to
  // a checkpoint loses steps, which only the loss of every holder justifies.
  std::vector<std::string> awaited;
  for (const auto& [name, t] : trainers_) {
    if (may_hold_state(name)) awaited.push_back(name);
  }
  if (!awaited.empty()) {
    // A holder that died unseen (its agent's exit report lost, say to a partition) would keep
    // the job waiting until it fails, although a checkpoint could resume it: a probe finds out
    // whether its process is gone (its connection closed), and then it is written off
    // (probe_result). A frozen or cut-off one does not answer, and is waited for.
    if (!checkpoints_.empty() && now >= next_exit_probe_) {
      next_exit_probe_ = now + 2 * options_.probe_timeout;
      for (const auto& name : awaited) {
        exit_probes_.insert(name);
        emit(ProbeCommand{name, generation_});
      }
    }
    return false;
  }
  if (checkpoints_.empty()) {
    no_resume_reason_ = "no live trainer holds step " + std::to_string(job_step_) +
                        " and the job wrote no checkpoint to resume from ([checkpoint] every)";
    return false;
  }
  // The newest checkpoint that a trainer can read: on a shared disk, or on a live node (by
  // name) where one can be placed. Older ones lose more steps but are as good a committed state.
  const auto readable_somewhere = [&](const JobCheckpoint& c) {
    if (c.shared) return true;
    return std::any_of(nodes_.begin(), nodes_.end(), [&](const auto& entry) {
      return entry.second.alive && !entry.second.draining && entry.second.name == c.node;
    });
  };
  const JobCheckpoint* chosen = nullptr;
  for (auto it = checkpoints_.rbegin(); it != checkpoints_.rend() && !chosen; ++it) {
    if (readable_somewhere(*it)) chosen = &*it;
  }
  if (!chosen) {
    const JobCheckpoint& newest = checkpoints_.back();
    no_resume_reason_ = "no live trainer holds step " + std::to_string(job_step_) +
                        " and no trainer can read a checkpoint: the newest (step " +
                        std::to_string(newest.step) + ", " + newest.path + ") lies on node " +
                        newest.node + "'s disk, which is not in the cluster (set [checkpoint] " +
                        "shared = true if its dir is shared by every node)";
    return false;
  }
  const JobCheckpoint checkpoint = *chosen;
  const auto wait = [&](const std::string& why) {
    no_resume_reason_ = "no live trainer holds step " + std::to_string(job_step_) + "; " + why;
    if (!below_min_since_) below_min_since_ = now;
    if (!members_.empty()) form_generation({}, reason + " (" + why + ")", now);
    return true;
  };
  // Only trainers that never synced take part: one that did holds a state of some generation
  // of the timeline given up, which a heartbeat may still report, and outside the new
  // generation it could later win a sync with it. They are stopped, and replaced.
  std::vector<std::string> stale;
  for (const auto& [name, t] : trainers_) {
    if (t.view.phase != Phase::kGone && t.synced_generation >= 0) stale.push_back(name);
  }
  const std::string given_up = "holds a state of the timeline given up for the checkpoint at step " +
                               std::to_string(checkpoint.step);
  for (const auto& name : stale) trainer_gone(name, given_up, now, true);
  // So does a holder written off as unreachable whose stop was deferred: told now, it is not
  // taken back into the new timeline (revive_written_off) with the old one's state.
  send_deferred_stops(given_up);
  if (!stale.empty()) place_trainers(now);
  std::vector<std::string> fresh;
  for (const auto& name : candidates) {
    if (trainers_.at(name).view.phase != Phase::kGone) fresh.push_back(name);
  }
  // At the first start a job waits for every trainer still starting; so does a resume (one
  // formation instead of two), and it needs one that can read the checkpoint.
  const auto spawning = std::any_of(trainers_.begin(), trainers_.end(), [&](const auto& entry) {
    const Trainer& t = entry.second;
    return t.view.phase == Phase::kSpawning && now - t.spawned_at < options_.spawn_timeout;
  });
  if (spawning && static_cast<int>(fresh.size()) < options_.max_workers) {
    return wait("resuming from the checkpoint at step " + std::to_string(checkpoint.step) +
                " once the trainers starting have joined");
  }
  if (static_cast<int>(fresh.size()) < options_.min_workers) {
    return wait("fewer than min_workers trainers to resume from the checkpoint at step " +
                std::to_string(checkpoint.step));
  }
  auto source = std::find_if(fresh.begin(), fresh.end(), [&](const std::string& name) {
    return readable_by(checkpoint, name);
  });
  if (source == fresh.end()) {
    make_room_for_checkpoint(checkpoint, fresh, now);
    return wait("waiting for a trainer on node " + checkpoint.node + ", whose disk holds the " +
                "checkpoint at step " + std::to_string(checkpoint.step));
  }
  std::vector<std::string> members{*source};
  for (const auto& name : fresh) {
    if (name != members.front()) members.push_back(name);
  }
  if (static_cast<int>(members.size()) > options_.max_workers) members.resize(options_.max_workers);
  const std::int64_t lost = std::max<std::int64_t>(0, job_step_ - checkpoint.step);
  lost_steps_ += lost;
  JobEvent e = event_now("resumed_from_checkpoint");
  e.step = checkpoint.step;
  e.generation = generation_ + 1;
  e.trainer = members.front();
  e.reason = checkpoint.path;
  e.lost_steps = lost;
  event(std::move(e));
  job_step_ = checkpoint.step;
  // The disruption's recovery counts the steps lost from here: those before are counted above.
  step_at_disruption_ = checkpoint.step;
  resumed_generation_ = generation_ + 1;
  // Checkpoints of the timeline given up (newer ones no trainer could read) are dropped: the
  // job trains those steps again and writes its own.
  checkpoints_.erase(
      std::remove_if(checkpoints_.begin(), checkpoints_.end(),
                     [&](const JobCheckpoint& c) { return c.step > checkpoint.step; }),
      checkpoints_.end());
  below_min_since_.reset();
  form_generation(std::move(members),
                  reason + " (no live trainer holds the committed state: resuming from the " +
                      "checkpoint at step " + std::to_string(checkpoint.step) + ")",
                  now, &checkpoint);
  return true;
}

void ElasticJob::send_deferred_stops(const std::string& reason) {
  for (auto& [name, t] : trainers_) {
    if (t.deferred_stop.empty() || t.view.phase != Phase::kGone) continue;
    if (!t.exited) {
      t.stop_reason = reason.empty() ? t.deferred_stop : reason;
      emit(StopCommand{name, t.stop_reason});
    }
    t.deferred_stop.clear();
    persist();
  }
}

bool ElasticJob::revive_written_off(Millis now) {
  const auto live_holder = std::any_of(trainers_.begin(), trainers_.end(), [&](const auto& e) {
    const Trainer& t = e.second;
    return t.view.phase != Phase::kGone && t.view.phase != Phase::kSpawning && !t.exited &&
           holds_state(e.first);
  });
  if (live_holder) return false;
  const bool probe_due = now >= next_revive_probe_;
  for (auto& [name, t] : trainers_) {
    if (t.deferred_stop.empty() || t.exited || t.view.phase != Phase::kGone || !holds_state(name)) {
      continue;
    }
    auto node = nodes_.find(t.view.node);
    if (node == nodes_.end() || !node->second.alive) continue;
    if (!t.heard_since_write_off) {
      // Idle since its group broke, it says nothing on its own: is it there? A lost probe
      // answer is what wrote it off, so it is asked again (probe_result).
      if (probe_due) {
        next_revive_probe_ = now + 2 * options_.probe_timeout;
        probe(name, now);
      }
      continue;
    }
    // Back as a trainer that joined: the next generation forms with it as rank 0 and it hands
    // the state on. A replacement placed on its node meanwhile, holding nothing, makes room.
    t.view.phase = Phase::kReady;
    t.deferred_stop.clear();
    t.heard_since_write_off = false;
    t.unreachable_in = -1;
    persist();
    JobEvent e = event_now("trainer_back");
    e.trainer = name;
    e.reason = "the last trainer holding step " + std::to_string(job_step_) +
               ", written off as unreachable, answered again";
    event(std::move(e));
    int on_node = trainers_on(t.view.node);
    for (auto& [other, o] : trainers_) {
      if (on_node <= options_.slots) break;
      if (other == name || o.view.node != t.view.node || o.synced_generation >= 0 ||
          (o.view.phase != Phase::kReady && o.view.phase != Phase::kSpawning)) {
        continue;
      }
      trainer_gone(other, "stopped to make room for " + name + ", which holds the job's state",
                   now, true);
      --on_node;
    }
    return true;
  }
  return false;
}

void ElasticJob::make_room_for_checkpoint(const JobCheckpoint& checkpoint,
                                          const std::vector<std::string>& fresh, Millis now) {
  // The job has its most trainers, and none on the node whose disk holds the checkpoint: one of
  // them (it never synced, so it holds nothing) makes room for one there. Waited for instead,
  // that trainer was never placed, and the job failed with the checkpoint's node up and idle.
  // [fix: elastic simulation seed 690397]
  if (active_trainers() < options_.max_workers) return;  // place_trainers has room for it
  const bool placeable = std::any_of(nodes_.begin(), nodes_.end(), [&](const auto& entry) {
    const Node& n = entry.second;
    if (n.name != checkpoint.node || !n.alive || n.draining || now < n.no_spawn_before) {
      return false;
    }
    return trainers_on(entry.first) < options_.slots;
  });
  if (!placeable) return;
  for (auto it = fresh.rbegin(); it != fresh.rend(); ++it) {
    const Trainer& t = trainers_.at(*it);
    if (t.view.phase != Phase::kReady || t.synced_generation >= 0) continue;
    trainer_gone(*it,
                 "stopped to make room on node " + checkpoint.node + ", whose disk holds the " +
                     "checkpoint at step " + std::to_string(checkpoint.step),
                 now, true);
    place_trainers(now, checkpoint.node);
    return;
  }
}

void ElasticJob::maybe_regroup(const std::string& reason, Millis now) {
  if (finished_ || !started_) return;
  // One generation at a time: a new one is issued only once the last one trained a step, broke
  // (a member left it), or timed out forming (a trainer blocked joining an abandoned group
  // would otherwise wait for its collective timeout).
  if (forming_) {
    bool broken = false;
    for (const auto& name : members_) broken |= trainers_.at(name).view.phase != Phase::kMember;
    if (!broken) return;
  }
  if (now < retry_after_) return;
  if (restore_wait_until_) {
    // Restored: the newest committed state is the one its holders report. Wait for everyone
    // who trained in the last generations (or the deadline: a dead one never reports).
    bool all_heard = true;
    for (const auto& [name, t] : trainers_) {
      const bool trained = t.synced_generation >= 0 ||
                           std::find(last_trained_members_.begin(), last_trained_members_.end(),
                                     name) != last_trained_members_.end();
      auto node = nodes_.find(t.view.node);
      const bool node_alive = node != nodes_.end() && node->second.alive;
      if (trained && node_alive && t.view.phase != Phase::kGone && !t.exited &&
          t.view.committed_step < 0) {
        all_heard = false;
      }
    }
    if (!all_heard && now < *restore_wait_until_) return;
    restore_wait_until_.reset();
  }
  revive_written_off(now);
  std::vector<std::string> survivors, joiners;
  bool leavers = false;
  for (const auto& name : members_) {
    const Phase p = trainers_.at(name).view.phase;
    if (p == Phase::kMember) survivors.push_back(name);
    leavers |= p == Phase::kLeaving;
  }
  for (const auto& [name, t] : trainers_) {
    if (t.view.phase == Phase::kReady) joiners.push_back(name);
  }
  // A drained member leaves only once someone else holds the job's state: while no survivor
  // or joiner does (it was alone, or all were drained), it stays for one more generation, with
  // its successors, and hands the state over; report() lets it go once that generation
  // trained. Releasing it at once lost every committed step. [fix: elastic simulation seed 190]
  const auto holds = [&](const std::string& name) { return holds_state(name); };
  if (std::none_of(survivors.begin(), survivors.end(), holds) &&
      std::none_of(joiners.begin(), joiners.end(), holds)) {
    std::vector<std::string> leaving_holders;
    for (const auto& [name, t] : trainers_) {
      if (t.view.phase == Phase::kLeaving && holds(name)) leaving_holders.push_back(name);
    }
    // Those who trained with it in the last generation hold its state too, but the job hears
    // a follower's steps only from heartbeats and so always a step or two behind its leader's
    // reports: re-forming with the drained leader as rank 0 again handed nothing over, every
    // generation, to the end of the job. Instead every member stops at a step boundary (a
    // generation without members) and says where (MemberReport::kLeft); then one of them holds
    // the job's step and leads. Should none say so in a probe timeout, the drained member
    // hands the state over as above.
    const auto trained_with = [&](const std::string& name) {
      return std::find(last_trained_members_.begin(), last_trained_members_.end(), name) !=
             last_trained_members_.end();
    };
    const bool successors_trained = std::any_of(survivors.begin(), survivors.end(), trained_with) ||
                                    std::any_of(joiners.begin(), joiners.end(), trained_with);
    const bool leaver_training = std::any_of(
        leaving_holders.begin(), leaving_holders.end(), [&](const std::string& name) {
          return std::find(members_.begin(), members_.end(), name) != members_.end();
        });
    if (successors_trained && leaver_training) {
      handover_wait_until_ = now + options_.probe_timeout;
      form_generation({}, reason + " (every member stops to report its committed step)", now);
      return;
    }
    if (successors_trained && handover_wait_until_ && now < *handover_wait_until_) return;
    survivors.insert(survivors.end(), leaving_holders.begin(), leaving_holders.end());
  }
  // A generation that broke (a member reported a failed collective or an abandoned group, and
  // the probes have had their time) is re-formed even when every member is still reachable (a
  // node<->node partition, a leader that lost its lease): its members sit idle waiting for the
  // next rendezvous, and nothing else would ever send one. [fix: elastic simulation seed 277]
  const bool broke = disruption_at_ && now - *disruption_at_ >= options_.probe_timeout;
  const bool unchanged =
      joiners.empty() && !leavers && survivors.size() == members_.size() && !broke;
  if (generation_ > 0 && !members_.empty() && unchanged) {
    below_min_since_.reset();
    return;
  }
  const int available = static_cast<int>(survivors.size() + joiners.size());
  if (available < options_.min_workers) {
    if (!below_min_since_) below_min_since_ = now;
    if (!members_.empty()) {
      // Survivors stop at their next boundary and wait, idle, for enough workers.
      form_generation({}, reason + " (fewer than min_workers: waiting)", now);
    }
    return;
  }
  // At the first start, give every trainer that is still starting a chance to join, so the job
  // does not re-form right after it began.
  if (generation_ == 0 || last_trained_members_.empty()) {
    bool still_spawning = false;
    for (const auto& [name, t] : trainers_) {
      still_spawning |= t.view.phase == Phase::kSpawning && now - t.spawned_at < options_.spawn_timeout;
    }
    if (still_spawning && available < options_.max_workers) return;
  }
  // Survivors keep their order, then joiners; those holding the most committed steps first, so
  // that rank 0 (the leader) is one of them.
  std::vector<std::string> members = survivors;
  members.insert(members.end(), joiners.begin(), joiners.end());
  std::stable_sort(members.begin(), members.end(), [&](const auto& a, const auto& b) {
    const bool ha = holds_state(a), hb = holds_state(b);
    if (ha != hb) return ha;
    return trainers_.at(a).view.committed_step > trainers_.at(b).view.committed_step;
  });
  if (static_cast<int>(members.size()) > options_.max_workers) members.resize(options_.max_workers);
  if (!holds_state(members.front())) {
    // Nobody here has the committed state: starting would silently restart training. Unless
    // every trainer that may hold it is gone and a checkpoint can be read: then the job goes
    // back to it. Otherwise wait for a holder to come back (a frozen or partitioned one may),
    // and fail after the grace period.
    if (resume_from_checkpoint(members, reason, now)) return;
    if (!below_min_since_) below_min_since_ = now;
    if (!members_.empty()) {
      form_generation({}, reason + " (no live trainer holds step " + std::to_string(job_step_) +
                              ": waiting)",
                      now);
    }
    return;
  }
  below_min_since_.reset();
  form_generation(std::move(members), reason, now);
}

void ElasticJob::form_generation(std::vector<std::string> members, const std::string& reason,
                                 Millis now, const JobCheckpoint* resume) {
  ++generation_;
  persist();  // a generation number is never issued twice, across head restarts too
  std::vector<std::int32_t> batches;
  if (!members.empty()) {
    GenerationPlan plan = planner_(members);
    if (plan.batches.size() != members.size()) {
      throw std::logic_error("ElasticJob: the planner returned a plan for another world size");
    }
    batches = std::move(plan.batches);
    plan_version_ = plan.version;
  }
  const std::vector<std::string> old_members = members_;
  members_ = members;
  member_orders_.clear();
  orders_sent_at_ = now;
  batches_ = batches;
  const auto world = static_cast<std::int32_t>(members.size());
  // Formed because a member was lost: the others may be waiting on it in a collective, and are
  // told they may give that wait up (abandon_previous). Not while the old generation's lease
  // may still be used, even by a leader named in the new generation: a follower that gives up
  // its wait leaves its data in flight, the leader's exchange can still complete with it, and
  // the leader would commit that step alone under its lease, unseen if its report is lost, while
  // the next generation to form syncs from the follower one step behind and commits the same
  // step number again.
  // Once that lease is over (released, or run out plus the margin), a late exchange needs a
  // renewal, which is refused. Those who were not told are told when it is (tick). [fix:
  // elastic simulation seed 69188]
  const bool lost_member = disruption_at_.has_value();
  const bool abandon = lost_member && old_lease_over(now);
  abandon_told_later_.clear();
  for (std::size_t rank = 0; rank < members.size(); ++rank) {
    Trainer& t = trainers_.at(members[rank]);
    t.view.phase = Phase::kMember;
    t.view.rank = static_cast<std::int32_t>(rank);
    // A generation that resumes from a checkpoint names it to every member.
    RendezvousOrder order{generation_,
                          t.view.rank,
                          world,
                          batches,
                          plan_version_,
                          false,
                          abandon,
                          resume ? resume->path : std::string(),
                          resume ? resume->step : -1};
    member_orders_[members[rank]] = order;
    if (lost_member && !abandon) abandon_told_later_.push_back(members[rank]);
    emit(RendezvousCommand{members[rank], std::move(order)});
  }
  // Everyone who was in the old generation but not in the new one stops training in it and
  // waits, idle, for a later generation. The drained too: until a generation without them has
  // trained, they may hold the only copy of the committed state (its survivors can still die
  // before they sync), so they stay kLeaving and are stopped from report(); told to leave right
  // away, a drained leader took the state with it. [fix: elastic simulation seed 2707]
  for (const auto& name : old_members) {
    if (std::find(members.begin(), members.end(), name) != members.end()) continue;
    Trainer& t = trainers_.at(name);
    if (t.view.phase == Phase::kGone) continue;
    emit(RendezvousCommand{name, RendezvousOrder{generation_, -1, world, batches, plan_version_,
                                                 false, abandon, std::string(), -1}});
    if (lost_member && !abandon) abandon_told_later_.push_back(name);
    t.view.rank = -1;
    if (t.view.phase != Phase::kLeaving) t.view.phase = Phase::kReady;
  }
  forming_ = !members.empty();
  if (forming_) handover_wait_until_.reset();
  formed_at_ = now;
  if (state_ == "pending" && !members.empty()) state_ = "running";
  JobEvent e = event_now("generation");
  e.members = members;
  e.batches = batches;
  e.reason = reason;
  event(std::move(e));
}

// ---------------------------------------------------------------------------------------------
// Reports, leases, the end

void ElasticJob::progress(const std::string& trainer, std::int64_t committed_step) {
  if (Trainer* t = find(trainer)) {
    t->view.committed_step = std::max(t->view.committed_step, committed_step);
  }
}

void ElasticJob::probe(const std::string& trainer, Millis now) {
  trainers_.at(trainer).probed_seq = ++evidence_seq_;
  emit(ProbeCommand{trainer, generation_});
}

void ElasticJob::probe_members(Millis now) {
  for (const auto& name : members_) {
    if (trainers_.at(name).view.phase == Phase::kMember) probe(name, now);
  }
}

void ElasticJob::heard_from(Trainer& t, std::int64_t generation, Millis now) {
  // A trainer the job stopped that still speaks did not get its stop: a head killed right after
  // sending it took it along, and the next head restored the trainer as gone. Said again, or it
  // would idle on its node to the job's end. Only a stop the job sent: a trainer written off for
  // its silence was not told, and may hold the only copy of the state.
  if (!finished_ && t.view.phase == Phase::kGone && !t.exited && !t.stop_reason.empty()) {
    emit(StopCommand{t.view.name, t.stop_reason});
  }
  // Written off as unreachable with its stop deferred: it is back, and maybe_regroup takes it
  // back if it is the last holder (report() calls it once the report is recorded).
  if (t.view.phase == Phase::kGone && !t.exited && !t.deferred_stop.empty()) {
    t.heard_since_write_off = true;
  }
  // A message about the current generation answers for it as well as a probe would; it may be
  // what lets a trainer that missed its probe be written off (write_off_unreachable).
  if (finished_ || generation != generation_ || t.view.phase == Phase::kGone) return;
  reprobe_after_silence(t.view.name, now);
  t.heard_seq = ++evidence_seq_;
  t.unreachable_in = -1;
  if (!unreachable_error_.empty()) write_off_unreachable(now);
}

void ElasticJob::reprobe_after_silence(const std::string& heard, Millis now) {
  // Every member of the generation had missed a probe: nobody answered the head, which more
  // likely lost its own network (or its node's) than every trainer at once. The misses say
  // nothing about the others once one is heard again: counted against them, its answer would
  // write off every other trainer of a job whose trainers went on among themselves. So they
  // are asked again; a trainer that misses this probe goes as before.
  std::vector<std::string> silent;
  for (const auto& name : members_) {
    const Trainer& m = trainers_.at(name);
    if (m.view.phase != Phase::kMember && m.view.phase != Phase::kLeaving) continue;
    if (m.unreachable_in != generation_) return;
    if (name != heard) silent.push_back(name);
  }
  for (const auto& name : silent) {
    trainers_.at(name).unreachable_in = -1;
    unreachable_error_.erase(name);
    probe(name, now);
  }
}

void ElasticJob::stranger(const std::string& trainer) {
  // The job never forgets a trainer while it runs, so one it does not know was forgotten by
  // the snapshot this head restored: gone, and in neither the last generation nor the last
  // one that trained, so it holds nothing the job could use. If it was told to stop, the stop
  // went down with the head that sent it. Told now, or it would idle on its node (its memory,
  // its accelerator) to the job's end.
  emit(StopCommand{trainer, finished_ ? "job " + state_
                                      : "the job does not know this trainer (the restarted "
                                        "head's record no longer names it)"});
}

void ElasticJob::report(const std::string& trainer, const MemberReport& r, Millis now) {
  Trainer* t = find(trainer);
  if (!t) return stranger(trainer);
  heard_from(*t, r.generation, now);
  t->view.committed_step = std::max(t->view.committed_step, r.step);
  // Every leader's report's step is a committed step, even a superseded generation's: a
  // leader drained or cut off right after a commit reports it only then. Ignoring it let a
  // later generation start from an older state and commit the same steps again. [fix: elastic
  // simulation seed 28] Not once a newer generation was leased: that one started from every
  // step committed under older leases, and a generation older than it, which can never be
  // leased, may report a step a follower committed alone and its sync adopted after the leased
  // generation formed without it. [fix: elastic simulation seed 7310887] A follower's is
  // not: it may have committed a step whose exchange completed late (in the background) and
  // that its leader's gate refused; such a step counts once a sync adopts it, and the synced
  // leader reports it (a leader whose group broke before its sync reports the state it joined
  // with, which may hold such a step).
  // Every report says where its sender last synced: a lost kSynced report does not leave a
  // trainer that adopted the job's state counted as holding none. [fix: elastic simulation
  // seed 1301439]
  t->synced_generation = std::max(t->synced_generation, r.synced_generation);
  const bool synced_leader = r.rank == 0 && (r.kind == MemberReport::Kind::kSynced ||
                                             t->synced_generation >= r.generation);
  // Steps of a timeline given up for a checkpoint are not the job's any more.
  const bool given_up = r.generation < resumed_generation_;
  if (synced_leader && !given_up && !superseded_by_lease(r.generation)) {
    job_step_ = std::max(job_step_, r.step);
  }
  // A sync is evidence of holding the state whatever became of the generation since
  // (holds_state). [fix: elastic simulation seed 53]
  if (r.kind == MemberReport::Kind::kSynced) {
    t->synced_generation = std::max(t->synced_generation, r.generation);
    start_failures_ = 0;  // trainers do start
    auto node = nodes_.find(t->view.node);
    if (node != nodes_.end()) node->second.start_failures = 0;
  }
  // The lease holder synced in a newer generation, or left or broke the one it led: it commits
  // nothing more there, so its successor need not wait for the lease to run out.
  if (trainer == lease_holder_ &&
      (r.generation > lease_generation_ ||
       (r.generation == lease_generation_ &&
        (r.kind == MemberReport::Kind::kLeft || r.kind == MemberReport::Kind::kBroken)))) {
    lease_released_ = true;
  }
  // It commits nothing more in a generation it left or whose collective failed for it (a late
  // exchange completes for the rank that posted late, not for the one that gave up).
  if (r.kind == MemberReport::Kind::kLeft || r.kind == MemberReport::Kind::kBroken) {
    t->left_generation = std::max(t->left_generation, r.generation);
  }
  // It synced in a generation before the last resume from a checkpoint, and has synced in
  // none since: it holds a state of the timeline given up. A resume stops every trainer it
  // knows synced; this one's sync it learns only now (a trainer taken for fresh that was
  // still joining an older generation, whose group then formed). Kept, it counted as a holder
  // (synced after the last lease's generation, with at least the checkpoint's step), led the
  // next generation and its sync adopted the given-up steps. [fix: elastic simulation seed
  // 7296869]
  if (!finished_ && t->view.phase != Phase::kGone && t->synced_generation >= 0 &&
      t->synced_generation < resumed_generation_) {
    trainer_gone(trainer,
                 "synced in generation " + std::to_string(t->synced_generation) +
                     ": holds a state of the timeline given up when generation " +
                     std::to_string(resumed_generation_) + " resumed from a checkpoint",
                 now, true);
    maybe_regroup("trainer " + trainer + " holds a state of the timeline given up", now);
    place_trainers(now);
    return;
  }
  if (t->view.phase == Phase::kGone && t->heard_since_write_off && !t->deferred_stop.empty()) {
    maybe_regroup("trainer " + trainer + " answered again", now);
    return;
  }
  if (r.kind == MemberReport::Kind::kLeft) {
    // Waiting for the members' committed steps to hand a drained leader's state over: this
    // may be the report that names a successor (maybe_regroup).
    if (handover_wait_until_ && members_.empty()) {
      maybe_regroup("a drained member's state handed over", now);
    } else if (restore_wait_until_ && members_.empty()) {
      maybe_regroup("the head restarted", now);
    }
    return;
  }
  if (finished_) return;
  if (r.generation != generation_ || t->view.phase != Phase::kMember ||
      t->view.rank != r.rank) {
    return;  // about a superseded generation: handled already
  }
  switch (r.kind) {
    case MemberReport::Kind::kSynced:
      t->synced_generation = r.generation;
      last_progress_ = std::max(last_progress_, now);
      return;
    case MemberReport::Kind::kBroken: {
      note_disruption(now);
      broken_generation_ = generation_;
      // Find out who is still there (a dead process's route is gone: its probe fails at once)
      // instead of waiting for the heartbeat timeout.
      probe_members(now);
      // A forming generation that broke will not train: once the probes had their time, its
      // formation has failed (tick()), instead of a full form_timeout later. One lost rendezvous
      // per attempt otherwise cost form_timeout + back-off each, and a few in a row failed the
      // job. [fix: elastic simulation seed 5850]
      if (forming_) {
        formed_at_ = std::min(formed_at_, now + options_.probe_timeout - options_.form_timeout);
      }
      return;
    }
    case MemberReport::Kind::kLeft:  // handled above
      return;
    case MemberReport::Kind::kStep:
      break;
  }
  if (r.rank != 0) return;  // progress is the leader's to report
  const bool formed = forming_;
  if (forming_) {
    forming_ = false;
    backoff_ = options_.backoff_initial;
    JobEvent e;
    e.kind = "generation_formed";
    e.generation = generation_;
    e.step = r.step;
    event(std::move(e));
  }
  if (last_trained_members_ != members_) persist();
  last_trained_members_ = members_;
  if (dropped_below_ < generation_) {
    // Every member of this generation is past its rendezvous: older keys serve nobody.
    dropped_below_ = generation_;
    emit(DropStoreKeysCommand{generation_});
  }
  if (disruption_at_) {
    ++abandoned_steps_;
    const std::int64_t lost = std::max<std::int64_t>(0, step_at_disruption_ - (r.step - 1));
    lost_steps_ += lost;
    const double seconds = static_cast<double>(now - *disruption_at_) / 1000.0;
    recovery_s_.push_back(seconds);
    JobEvent e;
    e.kind = "recovered";
    e.generation = generation_;
    e.step = r.step;
    e.seconds = seconds;
    e.lost_steps = lost;
    event(std::move(e));
    disruption_at_.reset();
  }
  job_step_ = std::max(job_step_, r.step);
  last_progress_ = now;
  if (formed) {
    // This generation trained: drained trainers outside it are no longer needed for the state.
    // [fix: elastic simulation seed 2707]
    for (auto& [name, t] : trainers_) {
      if (t.view.phase != Phase::kLeaving ||
          std::find(members_.begin(), members_.end(), name) != members_.end()) {
        continue;
      }
      // Not a failure: no trainer_gone event (the drain event was written when it began).
      // Written before it is told to stop (a generation whose members trained before, after a
      // head restart, wrote nothing above): a head restored from an older snapshot would
      // otherwise take its clean exit for a failure.
      t.view.phase = Phase::kGone;
      persist();
      if (!t.exited) {
        t.stop_reason = "drained";
        emit(StopCommand{name, "drained"});
      }
    }
    // Holders written off as unreachable hold an older state than this generation's: the stop
    // they are owed goes out now.
    send_deferred_stops("");
    // Drained members kept to hand the state over (maybe_regroup) leave once a member on a
    // node that is not draining trained with them. [fix: elastic simulation seed 190]
    auto draining = [&](const std::string& name) {
      auto it = nodes_.find(trainers_.at(name).view.node);
      return it != nodes_.end() && it->second.draining;
    };
    if (!std::all_of(members_.begin(), members_.end(), draining)) {
      bool leaving = false;
      for (const auto& name : members_) {
        Trainer& m = trainers_.at(name);
        if (m.view.phase == Phase::kMember && draining(name)) {
          m.view.phase = Phase::kLeaving;
          leaving = true;
        }
      }
      if (leaving) maybe_regroup("drained members handed the state over", now);
    }
  }
}

bool ElasticJob::lease_free_for(const std::string& trainer, Millis now) const {
  if (lease_released_ || lease_holder_ == trainer) return true;
  return now > lease_until_ + options_.lease_margin;
}

bool ElasticJob::old_lease_over(Millis now) const {
  // Its holder being a member of the new generation is not enough: that generation may never
  // form with it (the holder cut off from the head), and the next one synced without the step
  // it committed late. [fix: elastic simulation seed 88408]
  if (lease_released_ || lease_holder_.empty()) return true;
  return now > lease_until_ + options_.lease_margin;
}

bool ElasticJob::superseded_by_lease(std::int64_t generation) const {
  return generation < lease_generation_;
}

void ElasticJob::lease_request(const std::string& trainer, const LeaseAsk& ask, Millis now) {
  LeaseAnswer answer;
  answer.generation = ask.generation;
  answer.seq = ask.seq;
  Trainer* t = find(trainer);
  if (t) {
    t->view.committed_step = std::max(t->view.committed_step, ask.step);
    heard_from(*t, ask.generation, now);
  } else {
    stranger(trainer);
  }
  if (finished_) {
    answer.reason = "the job has ended";
    answer.superseded = true;
  } else if (!t || ask.generation != generation_ || members_.empty() || members_[0] != trainer ||
             t->view.phase != Phase::kMember) {
    answer.reason = "generation " + std::to_string(ask.generation) + " is not the current one (" +
                    std::to_string(generation_) + ") or this trainer does not lead it";
    answer.superseded = ask.generation <= generation_;
  } else if (broken_generation_ == ask.generation && lease_generation_ == ask.generation) {
    // A member's collective failed: the group is broken, so its leader's renewal can only be
    // for a step whose exchange completed late, in the background, after members gave up on
    // it. Committed by the leader alone, the survivors that the next generation starts from
    // would not hold it.
    answer.reason =
        "generation " + std::to_string(ask.generation) + " broke (a member's collective failed)";
    answer.superseded = true;
  } else if (ask.step < job_step_) {
    // The job learnt of a commit this generation does not hold after forming it: an older
    // generation's leader, thawed, completed its last exchange late and committed it under a
    // renewed lease, then died. Leased, this generation would commit that step number again
    // from an older state (a fork). Refused for good: the next generation forms from a holder
    // or from a checkpoint. [fix: elastic simulation seed 777861]
    answer.reason = "generation " + std::to_string(ask.generation) + " holds step " +
                    std::to_string(ask.step) + ", behind the job's committed step " +
                    std::to_string(job_step_);
    answer.superseded = true;
  } else if (!lease_free_for(trainer, now)) {
    answer.reason = "the previous leader's lease has not run out";
  } else {
    if (lease_holder_ != trainer || lease_generation_ != ask.generation) {
      lease_holder_ = trainer;
      lease_generation_ = ask.generation;
      // From now on this generation may commit steps: its members are the ones holding them
      // (holds_state), whether or not a report of a step arrives. [fix: seed 2939]
      last_trained_members_ = members_;
      persist();
    }
    lease_released_ = false;
    lease_until_ = now + options_.lease_duration;
    answer.granted = true;
    answer.duration = options_.lease_duration;
  }
  if (!answer.granted) {
    JobEvent e;
    e.kind = "lease_refused";
    e.trainer = trainer;
    e.generation = ask.generation;
    e.reason = answer.reason;
    event(std::move(e));
  }
  emit(LeaseCommand{trainer, std::move(answer)});
}

void ElasticJob::done(const std::string& trainer, const MemberDone& d, Millis now) {
  Trainer* t = find(trainer);
  if (!t) return stranger(trainer);
  heard_from(*t, d.generation, now);
  t->view.committed_step = std::max(t->view.committed_step, d.step);
  // A leader's committed step, whatever the generation (as with reports), unless the job gave
  // that generation's timeline up for a checkpoint or leased a newer generation.
  const bool given_up = d.generation < resumed_generation_;
  const bool superseded = superseded_by_lease(d.generation);
  if (d.rank == 0 && !given_up && !superseded) job_step_ = std::max(job_step_, d.step);
  if (finished_) {
    emit(StopCommand{trainer, "job " + state_});  // its verdict was lost: say it again
    return;
  }
  if (d.outcome == MemberDone::Outcome::kDrained) {
    // It left as the drain asked: not a failure (a head restored from a snapshot written
    // before it was told to stop still holds it as leaving).
    if (trainer == lease_holder_) lease_released_ = true;
    trainer_gone(trainer, "drained", now, false, false);
    return;
  }
  // A final checkpoint written at total_steps is a fact, whatever became of its generation
  // since: its leader may have been written off while writing it (cut off from the scheduler;
  // the lease kept any other generation from committing meanwhile). Ignored, the job went on
  // without it and could fail although it was done. [fix: elastic simulation seed 42280]
  if (d.outcome == MemberDone::Outcome::kFinished && d.ok && d.rank == 0 && !given_up &&
      !superseded && d.step >= options_.total_steps && d.step > 0) {
    finish("succeeded", "", now);
    return;
  }
  const bool current = d.generation == generation_ && t->view.phase == Phase::kMember &&
                       t->view.rank == d.rank;
  if (!current) return;  // a superseded generation's report
  if (!d.ok || d.outcome == MemberDone::Outcome::kError) {
    finish("failed", "trainer " + trainer + ": " + (d.error.empty() ? "failed" : d.error), now);
    return;
  }
  if (d.rank == 0 && d.step >= options_.total_steps && d.step > 0) {
    job_step_ = std::max(job_step_, d.step);
    finish("succeeded", "", now);
  } else if (d.rank != 0 && d.outcome == MemberDone::Outcome::kFinished && !members_.empty()) {
    // A follower is done and waits for the leader's final checkpoint; it says so again every
    // done_resend. Is the leader still there? A leader that died in its final checkpoint (its
    // exit report lost) would otherwise leave the job waiting for the stall limit, though a
    // survivor holds every step and can finish it. [fix: elastic simulation seed 2399]
    probe(members_[0], now);
  }
}

void ElasticJob::probe_result(const std::string& trainer, std::int64_t generation, bool reachable,
                              const std::string& error, Millis now, bool process_gone) {
  // A lease holder whose process is gone commits nothing more, whichever generation the probe
  // was for: its successor need not wait for the lease to run out (as after its agent reported
  // its exit). Silence is not that proof: a frozen or cut-off leader may still commit under its
  // lease once it runs again, so a probe that timed out leaves the lease to run out.
  const bool released =
      !reachable && (process_gone || options_.mutation == Mutation::kGrantOnSilence);
  if (released && trainer == lease_holder_ && !finished_) lease_released_ = true;
  exit_probes_.erase(trainer);
  if (Trainer* t = find(trainer);
      t && !finished_ && t->view.phase == Phase::kGone && !t->deferred_stop.empty() && !t->exited) {
    // A holder written off as unreachable, asked again while no live trainer holds the state
    // (revive_written_off): its answer brings it back; a closed connection proves it gone.
    if (reachable) {
      t->heard_since_write_off = true;
      maybe_regroup("trainer " + trainer + " answered again", now);
    } else if (process_gone) {
      t->exited = true;
      t->deferred_stop.clear();
    }
    return;
  }
  if (!reachable && process_gone && !finished_) {
    // Its process is gone, as if its agent had reported the exit (a report that may have been
    // lost): kept as a holder of the job's state, it kept the job waiting for it until the job
    // failed, although a checkpoint could resume it.
    Trainer* t = find(trainer);
    if (t && !t->exited && t->view.phase != Phase::kGone) {
      t->exited = true;
      trainer_gone(trainer, "its process is gone (" + error + ")", now, false);
      maybe_regroup("trainer " + trainer + " is gone", now);
      place_trainers(now);
      return;
    }
  }
  if (finished_ || generation != generation_) return;
  Trainer* t = find(trainer);
  if (!t || t->view.phase == Phase::kGone) return;
  if (reachable) {
    reprobe_after_silence(trainer, now);
    t->heard_seq = ++evidence_seq_;
    t->answered_seq = t->heard_seq;
    t->unreachable_in = -1;  // a missed answer, then an answer: it is there
  } else {
    t->unreachable_in = generation;
    unreachable_error_[trainer] = error;
  }
  write_off_unreachable(now);
}

void ElasticJob::write_off_unreachable(Millis now) {
  // A trainer that missed its probe is written off, unless it may be the last one holding the
  // job's state: a hung or paused process may come back, and maybe_regroup waits for it
  // (bounded by the grace period); a dead one is reported by its agent or its node's
  // heartbeats. Stopped here, it came back only to exit, and the job failed. [fix: elastic
  // simulation seed 1394] So a holder goes only once another holder has been heard from (a
  // probe answer, a report) since the missed probe was sent, or was not probed: with two
  // holders unreachable at once, one dead and one whose answer was lost, the order of the
  // results must not decide which is kept. [fix: elastic simulation seed 27536]
  auto confirmed_holder = [&](const std::string& name, const Trainer& o, std::uint64_t since) {
    if (o.view.phase == Phase::kGone || o.view.phase == Phase::kSpawning || !holds_state(name)) {
      return false;
    }
    const bool probed = o.view.phase == Phase::kMember || o.view.phase == Phase::kLeaving;
    if (o.unreachable_in == generation_) return false;
    if (!probed) return true;
    // Probed itself since: only its answer counts. A message that arrives meanwhile may have
    // been sent long before (a slow link) by a process that has died since; counted, it let a
    // dead holder keep the live one from being waited for. [fix: elastic simulation seed 16335]
    if (o.probed_seq > since) return o.answered_seq > o.probed_seq;
    return o.heard_seq > since;
  };
  // "Holder" in the wide sense: a follower's steps reach the job through heartbeats, a step or
  // two behind its leader's reports, so one cut off from the head looks behind the job's step
  // though it holds it. Written off and stopped as a non-holder while the leader was gone, it
  // took the job's only copy of the state with it. [fix: elastic simulation seed 1914308]
  const auto holder = [&](const std::string& name) {
    return holds_state(name) || may_hold_state(name);
  };
  std::vector<std::string> gone;
  for (const auto& [name, t] : trainers_) {
    if (t.view.phase == Phase::kGone || t.unreachable_in != generation_) continue;
    if (holder(name)) {
      bool other = false;
      for (const auto& [other_name, o] : trainers_) {
        other |= other_name != name && confirmed_holder(other_name, o, t.probed_seq);
      }
      if (!other) continue;
    }
    gone.push_back(name);
  }
  if (gone.empty()) return;
  for (const auto& name : gone) {
    // A holder goes without a stop: should the holder that answered be lost before a
    // generation without this one trains, a frozen process that thaws holds the only copy of
    // the state, and told to stop it took the state with it. [fix: elastic simulation seed
    // 742600]
    // A probe answered with a step computed far too long counts as missed, and says so.
    const std::string& error = unreachable_error_[name];
    const std::string why = error.rfind("hung:", 0) == 0
                                ? error
                                : "unreachable: no answer to a probe (" + error + ")";
    const bool may_hold = holder(name);
    trainer_gone(name, why, now, !may_hold);
    note_lost(trainers_.at(name).view.node, name, why, now);
    if (may_hold) {
      Trainer& t = trainers_.at(name);
      t.deferred_stop = why;
      t.heard_since_write_off = false;
    }
  }
  unreachable_error_.clear();
  maybe_regroup("trainer " + gone.front() + " unreachable", now);
  place_trainers(now);
}

bool ElasticJob::propose_plan(const std::vector<std::int32_t>& batches, std::uint64_t version,
                              Millis now) {
  if (finished_ || forming_ || members_.empty() || batches.size() != members_.size()) return false;
  if (batches == batches_) return false;
  batches_ = batches;
  plan_version_ = version;
  emit(PlanCommand{members_[0], PlanOrder{generation_, version, batches}});
  return true;
}

}  // namespace omnilearn::scheduler
