#include "elastic/elastic_member.hpp"

#include <algorithm>
#include <numeric>

namespace omnilearn::scheduler {
namespace {

// How often a leader without an answer asks for its lease again.
constexpr Millis kLeaseRetry = 100;
// Outstanding lease requests remembered (answers to older ones are ignored).
constexpr std::size_t kMaxOutstandingLeases = 16;

}  // namespace

ElasticMember::ElasticMember(ElasticMemberOptions options, Millis now)
    : options_(options), idle_since_(now) {}

bool ElasticMember::fits(const std::vector<std::int32_t>& batches, std::int32_t world) {
  if (world < 1 || batches.size() != static_cast<std::size_t>(world)) return false;
  std::int64_t sum = 0;
  for (std::int32_t b : batches) {
    if (b < 0) return false;
    sum += b;
  }
  return sum > 0;
}

std::vector<MemberMessage> ElasticMember::take_outbox() {
  std::vector<MemberMessage> out;
  out.swap(outbox_);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Messages

void ElasticMember::on_rendezvous(const RendezvousOrder& order, Millis now) {
  const bool repeated = order.generation <= seen_generation_;  // or overtaken by a newer one
  // A member whose part in its generation already ended says so again when the scheduler
  // asks in a way that shows it may not know:
  // - it repeats that generation's rendezvous, which it does only to members it has not seen
  //   sync there: the ending report may have been lost (a partition), and the scheduler would
  //   take the member for one that never joined and stop it, though it may hold the only copy
  //   of the job's state (a newcomer synced from a leader that died since) [fix: elastic
  //   simulation seed 2537370];
  // - a newer generation leaves it out: a restarted head asks every trainer for its committed
  //   step that way, and a report sent while the old head was down is gone with it (a trainer
  //   training in its generation reports when it leaves it). [fix: elastic simulation seed
  //   6556624]
  const bool ask_again = repeated ? order.generation == generation_ && !pending_
                                  : order.rank < 0 && !order.leave;
  if (ask_again && phase_ == Phase::kIdle && ended_report_ &&
      ended_report_->generation == generation_) {
    MemberReport again = *ended_report_;
    again.synced_generation = synced_generation_;
    outbox_.push_back(std::move(again));
  }
  if (repeated) return;
  seen_generation_ = order.generation;
  pending_ = order;
  idle_since_ = now;  // the scheduler is there
}

void ElasticMember::on_plan(const PlanOrder& order) {
  if (order.generation < generation_) return;
  if (plan_ && plan_->generation == order.generation && plan_->version >= order.version) return;
  plan_ = order;
}

void ElasticMember::on_lease(const LeaseAnswer& answer, Millis now) {
  auto it = lease_sent_.find(answer.seq);
  if (it == lease_sent_.end()) return;  // a duplicate, or an answer to a forgotten request
  const Millis sent_at = it->second;
  lease_sent_.erase(lease_sent_.begin(), std::next(it));
  if (answer.generation != generation_ || rank_ != 0 ||
      (phase_ != Phase::kTraining && phase_ != Phase::kCommitting)) {
    return;
  }
  if (!answer.granted) {
    lease_superseded_ = answer.superseded;
    return;
  }
  // Counted from when the request left: the scheduler granted it later, so the lease ends here
  // no later than there (the scheduler adds a margin for clock rates).
  const Millis until = sent_at + answer.duration;
  if (lease_generation_ != generation_ || until > lease_until_) {
    lease_generation_ = generation_;
    lease_until_ = until;
    lease_duration_ = answer.duration;
  }
}

void ElasticMember::on_stop(const std::string& reason) {
  if (stop_) return;
  stop_ = true;
  stop_reason_ = reason;
}

// ---------------------------------------------------------------------------------------------
// What to do

MemberAction ElasticMember::next(Millis now) {
  if (phase_ == Phase::kExited) return ExitAction{exit_code_, stop_reason_};
  // An exchanged step is settled first, whatever arrived meanwhile: the replica holds it.
  if (phase_ == Phase::kCommitting) return commit_gate(now);
  if (stop_) {
    // A leader lets its followers go first (they wait for the next rendezvous; it never tells
    // them to exit: only the scheduler ends a job).
    if (phase_ == Phase::kTraining && rank_ == 0 && world_ > 1 && !abandon_sent_) {
      abandon_sent_ = true;
      sent_words_ = {kAbandon, generation_};
      boundary_at_ = now;
      if (plan_words_.empty()) return ControlAction{sent_words_};
      return StepAction{batches_, sent_words_};
    }
    phase_ = Phase::kExited;
    exit_code_ = 0;
    stop_reason_ = "stopped: " + stop_reason_;
    return ExitAction{exit_code_, stop_reason_};
  }
  switch (phase_) {
    case Phase::kIdle:
    case Phase::kFinished:
      return idle(now);
    case Phase::kJoining:
      return JoinAction{generation_, rank_, world_};
    case Phase::kSyncing:
      return SyncAction{checkpoint_, checkpoint_step_};
    case Phase::kTraining: {
      if (step_ >= options_.total_steps) {
        if (rank_ == 0) {
          phase_ = Phase::kFinishing;
          return FinishAction{};
        }
        send_done(MemberDone::Outcome::kFinished, true, "", now);
        phase_ = Phase::kFinished;
        idle_since_ = now;
        return idle(now);
      }
      boundary_at_ = now;
      if (rank_ == 0) {
        if (auto wait = leader_boundary(now)) return *wait;
      } else {
        sent_words_.clear();
      }
      // The group's first round is a broadcast of its own; afterwards every rank computes the
      // step with the plan in force and rank 0's words ride in its exchange.
      if (plan_words_.empty()) return ControlAction{sent_words_};
      return StepAction{batches_, sent_words_};
    }
    case Phase::kCommitting:
      break;
    case Phase::kFinishing:
      return FinishAction{};
    case Phase::kExited:
      break;
  }
  return ExitAction{exit_code_, stop_reason_};
}

MemberAction ElasticMember::idle(Millis now) {
  if (pending_) {
    const RendezvousOrder order = *pending_;
    pending_.reset();
    idle_since_ = now;
    if (order.rank < 0) {
      if (order.leave) {
        send_done(MemberDone::Outcome::kDrained, true, "", now);
        phase_ = Phase::kExited;
        exit_code_ = 0;
        stop_reason_ = "drained";
        return ExitAction{exit_code_, stop_reason_};
      }
      // Not in this generation: a report of an older one means nothing now. A member that
      // finished its part says where it stopped instead, as a training member leaving its
      // generation does (kLeft): a restarted head asks every trainer for its committed step
      // this way, and the done it sent (which names no sync) may have gone to the dead head.
      // Silent, a follower that synced after the head's snapshot, the last holder of the
      // job's state, was not counted and the job failed. [fix: elastic simulation seed
      // 8979270]
      if (phase_ == Phase::kFinished) report(MemberReport::Kind::kLeft);
      done_.reset();
      phase_ = Phase::kIdle;
    } else if (order.rank >= order.world || !fits(order.batches, order.world)) {
      MemberReport r;
      r.kind = MemberReport::Kind::kBroken;
      r.generation = order.generation;
      r.rank = order.rank;
      r.step = step_;
      r.synced_generation = synced_generation_;
      r.error = "rendezvous of generation " + std::to_string(order.generation) +
                " does not fit: rank " + std::to_string(order.rank) + ", world " +
                std::to_string(order.world) + ", " + std::to_string(order.batches.size()) +
                " batches";
      outbox_.push_back(std::move(r));
    } else {
      done_.reset();
      generation_ = order.generation;
      rank_ = order.rank;
      world_ = order.world;
      batches_ = order.batches;
      plan_version_ = order.plan_version;
      checkpoint_ = order.checkpoint;
      checkpoint_step_ = order.checkpoint_step;
      if (plan_ && plan_->generation < generation_) plan_.reset();
      plan_words_.clear();
      abandon_sent_ = false;
      lease_wait_since_.reset();
      lease_superseded_ = false;
      phase_ = Phase::kJoining;
      return JoinAction{generation_, rank_, world_};
    }
  }
  Millis until = idle_since_ + options_.idle_limit;
  if (now >= until) {
    phase_ = Phase::kExited;
    exit_code_ = 4;
    stop_reason_ = "no new generation and no stop for " +
                   std::to_string(options_.idle_limit / 1000) + " s: the scheduler is gone";
    return ExitAction{exit_code_, stop_reason_};
  }
  if (phase_ == Phase::kFinished && done_) {
    // Until the verdict: a lost report must not hang the job.
    if (now - done_sent_at_ >= options_.done_resend) {
      outbox_.push_back(*done_);
      done_sent_at_ = now;
    }
    until = std::min(until, done_sent_at_ + options_.done_resend);
  }
  return WaitAction{until};
}

void ElasticMember::ask_lease(Millis now) {
  LeaseAsk ask;
  ask.generation = generation_;
  ask.seq = ++lease_seq_;
  ask.step = step_;
  lease_sent_[ask.seq] = now;
  while (lease_sent_.size() > kMaxOutstandingLeases) lease_sent_.erase(lease_sent_.begin());
  lease_asked_at_ = now;
  outbox_.emplace_back(std::move(ask));
}

std::optional<MemberAction> ElasticMember::leader_boundary(Millis now) {
  if (pending_ && pending_->generation > generation_) {
    sent_words_ = {kRegroup, pending_->generation};
    return std::nullopt;
  }
  if (lease_superseded_) {
    // The scheduler has moved on: commit nothing more, even under a lease still running.
    sent_words_ = {kAbandon, generation_};
    return std::nullopt;
  }
  const bool have_lease = lease_generation_ == generation_;
  // Renew ahead of time, so that a healthy leader never waits at a boundary.
  const auto renew_at =
      static_cast<Millis>(options_.renew_when_left * static_cast<double>(lease_duration_));
  const bool renew_due = !have_lease || lease_until_ - now < renew_at;
  if (renew_due && (lease_asked_at_ < 0 || now - lease_asked_at_ >= kLeaseRetry)) ask_lease(now);
  // The step this boundary starts commits about one step later: the lease must cover it. One
  // step that took longer than half a lease (a follower frozen through it) does not predict the
  // next; without the cap no lease ever covers it and the leader abandons every generation it
  // leads. [fix: elastic simulation seed 280] A step that outlasts the lease anyway meets the
  // commit gate.
  const bool covered =
      have_lease && lease_until_ - now > std::min(last_step_ms_, lease_duration_ / 2);
  if (!covered && options_.mutation != Mutation::kNoLeaseCheck) {
    if (!lease_wait_since_) lease_wait_since_ = now;
    const Millis give_up = *lease_wait_since_ + options_.lease_wait;
    if (now < give_up && !lease_superseded_) {
      return WaitAction{std::min(give_up, lease_asked_at_ + kLeaseRetry)};
    }
    // Cut off from the scheduler (or superseded): stop committing, let the followers go, and
    // say so: the scheduler must form the next generation (nothing else tells it the group
    // ended while every member is still reachable). [fix: elastic simulation seed 280]
    lease_wait_since_.reset();
    report(MemberReport::Kind::kBroken, "no lease for generation " + std::to_string(generation_) +
                                            " within " + std::to_string(options_.lease_wait) +
                                            " ms");
    sent_words_ = {kAbandon, generation_};
    return std::nullopt;
  }
  lease_wait_since_.reset();
  std::vector<std::int32_t> batches = batches_;
  std::uint64_t version = plan_version_;
  if (plan_ && plan_->generation == generation_ && plan_->version > plan_version_ &&
      fits(plan_->batches, world_)) {
    batches = plan_->batches;
    version = plan_->version;
  }
  sent_words_ = {kContinue, generation_, static_cast<std::int64_t>(version)};
  sent_words_.insert(sent_words_.end(), batches.begin(), batches.end());
  return std::nullopt;
}

// The leader commits an exchanged step only while its lease holds: the step may have outlasted
// it (a leader frozen mid-step, whose followers may have gone on to a newer generation). A
// renewal granted after the exchange proves that no other generation was leased meanwhile
// (the scheduler renews only the current generation's leader). Followers commit what the
// leader's words confirmed: the leader's exchange was the same collective.
MemberAction ElasticMember::commit_gate(Millis now) {
  if (rank_ != 0 || lease_valid(now) || options_.mutation == Mutation::kNoLeaseCheck ||
      options_.mutation == Mutation::kNoCommitRenewal) {
    return CommitAction{};
  }
  const Millis give_up = gate_since_ + options_.lease_wait;
  if (!lease_superseded_ && now < give_up) {
    if (lease_asked_at_ < gate_since_ || now - lease_asked_at_ >= kLeaseRetry) ask_lease(now);
    return WaitAction{std::min(give_up, lease_asked_at_ + kLeaseRetry)};
  }
  const std::string error = "commit refused in generation " + std::to_string(generation_) +
                            ": the step outlasted the lease and no renewal came";
  broken(error, now);
  return DropAction{error};
}

// ---------------------------------------------------------------------------------------------
// Outcomes

void ElasticMember::report(MemberReport::Kind kind, const std::string& error,
                           std::uint64_t checksum) {
  MemberReport r;
  r.kind = kind;
  r.generation = generation_;
  r.rank = rank_;
  r.step = step_;
  r.error = error;
  r.checksum = checksum;
  r.synced_generation = synced_generation_;
  if (kind == MemberReport::Kind::kBroken || kind == MemberReport::Kind::kLeft) ended_report_ = r;
  outbox_.push_back(std::move(r));
}

void ElasticMember::broken(const std::string& error, Millis now) {
  report(MemberReport::Kind::kBroken, error);
  phase_ = Phase::kIdle;
  plan_words_.clear();
  idle_since_ = now;
}

void ElasticMember::joined(bool ok, const std::string& error, Millis now) {
  if (phase_ != Phase::kJoining) return;
  if (!ok) return broken(error, now);
  phase_ = Phase::kSyncing;
}

void ElasticMember::synced(bool ok, const std::string& error, std::int64_t step,
                           std::uint64_t checksum, Millis now, bool fatal) {
  if (phase_ != Phase::kSyncing) return;
  if (!ok && fatal) {
    // The scheduler decides: an error done fails the job with the reason.
    send_done(MemberDone::Outcome::kError, false, error, now);
    phase_ = Phase::kFinished;
    plan_words_.clear();
    idle_since_ = now;
    return;
  }
  if (!ok) return broken(error, now);
  step_ = step;
  synced_generation_ = generation_;
  phase_ = Phase::kTraining;
  last_step_ms_ = 0;
  report(MemberReport::Kind::kSynced, "", checksum);
  if (rank_ == 0 && step_ < options_.total_steps) ask_lease(now);
}

void ElasticMember::control_done(bool ok, const std::string& error,
                                 const std::vector<std::int64_t>& words, Millis now) {
  if (phase_ != Phase::kTraining) return;
  if (!ok) return broken(error, now);
  act_on(rank_ == 0 ? sent_words_ : words, now);
}

bool ElasticMember::confirms(const std::vector<std::int64_t>& words) const {
  if (options_.mutation == Mutation::kCommitUnconfirmed && rank_ != 0) return true;
  return !plan_words_.empty() && words == plan_words_;
}

void ElasticMember::exchanged(bool ok, const std::string& error,
                              const std::vector<std::int64_t>& words, Millis now) {
  if (phase_ != Phase::kTraining || plan_words_.empty()) return;
  if (!ok) return broken(error, now);
  const std::vector<std::int64_t>& w = rank_ == 0 ? sent_words_ : words;
  if (confirms(w)) {
    phase_ = Phase::kCommitting;
    gate_since_ = now;
    return;
  }
  // Not confirmed: every rank dropped the step alike.
  act_on(w, now);
}

void ElasticMember::act_on(const std::vector<std::int64_t>& w, Millis now) {
  if (w.size() < 2) return broken("control words: " + std::to_string(w.size()) + " words", now);
  switch (w[0]) {
    case kContinue: {
      if (w[1] != generation_ || w.size() != 3 + static_cast<std::size_t>(world_)) {
        return broken("control words do not fit generation " + std::to_string(generation_), now);
      }
      // Each entry is checked before it becomes an index or a slice size.
      for (auto it = w.begin() + 3; it != w.end(); ++it) {
        if (*it < 0 || *it > (std::int64_t{1} << 30)) {
          return broken("control words carry a bad batch", now);
        }
      }
      std::vector<std::int32_t> batches(w.begin() + 3, w.end());
      if (!fits(batches, world_)) return broken("control words carry an empty plan", now);
      batches_ = std::move(batches);
      plan_version_ = static_cast<std::uint64_t>(w[2]);
      plan_words_ = w;
      return;
    }
    case kRegroup:
    case kAbandon:
      // Every rank says where it stopped: the leader so that its lease may pass on at once,
      // a follower so that the scheduler knows its committed step exactly (it hears a
      // follower's steps otherwise only from heartbeats) and may hand a drained leader's
      // state over to it.
      report(MemberReport::Kind::kLeft);
      // This group ends here. A leader that was stopped exits on the next call; the others
      // wait for (or already hold) the next rendezvous.
      phase_ = Phase::kIdle;
      plan_words_.clear();
      idle_since_ = now;
      return;
    default:
      return broken("unknown control command " + std::to_string(w[0]), now);
  }
}

void ElasticMember::step_done(bool ok, const std::string& error, std::int64_t step, Millis now) {
  if (phase_ != Phase::kCommitting) return;
  phase_ = Phase::kTraining;
  if (!ok) return broken(error, now);
  step_ = step;
  last_step_ms_ = std::max<Millis>(0, now - boundary_at_);
  report(MemberReport::Kind::kStep);
}

void ElasticMember::finish_done(bool ok, const std::string& error, Millis now) {
  if (phase_ != Phase::kFinishing) return;
  send_done(MemberDone::Outcome::kFinished, ok, error, now);
  phase_ = Phase::kFinished;
  idle_since_ = now;
}

void ElasticMember::send_done(MemberDone::Outcome outcome, bool ok, const std::string& error,
                              Millis now) {
  MemberDone d;
  d.outcome = outcome;
  d.generation = generation_;
  d.rank = rank_;
  d.step = step_;
  d.ok = ok;
  d.error = error;
  done_ = d;
  done_sent_at_ = now;
  outbox_.push_back(d);
}

bool carry_out(const MemberAction& action, Replica& replica, ElasticMember& member,
               const std::function<Millis()>& clock, const std::function<void(Millis)>& wait) {
  if (const auto* join = std::get_if<JoinAction>(&action)) {
    const auto r = replica.join(join->generation, join->rank, join->world);
    member.joined(r.ok, r.error, clock());
  } else if (const auto* sync = std::get_if<SyncAction>(&action)) {
    std::int64_t step = 0;
    std::uint64_t checksum = 0;
    const auto r = replica.sync(*sync, &step, &checksum);
    member.synced(r.ok, r.error, step, checksum, clock(), r.fatal);
  } else if (const auto* control = std::get_if<ControlAction>(&action)) {
    std::vector<std::int64_t> words = control->words;
    const auto r = replica.control(words);
    member.control_done(r.ok, r.error, words, clock());
  } else if (const auto* step_action = std::get_if<StepAction>(&action)) {
    std::vector<std::int64_t> words = step_action->words;
    bool gated = false;
    const Replica::WordsCheck confirms = [&member](const std::vector<std::int64_t>& w) {
      return member.confirms(w);
    };
    // The commit gate: settled by the member, waited out by the driver.
    const Replica::WordsCheck gate = [&](const std::vector<std::int64_t>& w) {
      gated = true;
      member.exchanged(true, "", w, clock());
      while (true) {
        const MemberAction a = member.next(clock());
        if (std::holds_alternative<CommitAction>(a)) return true;
        const auto* w8 = std::get_if<WaitAction>(&a);
        if (!w8) return false;  // DropAction (or the gate was never opened)
        wait(w8->until);
      }
    };
    std::int64_t step = member.step();
    const auto r = replica.step(step_action->batches, words, confirms, gate, &step);
    if (gated) {
      member.step_done(r.ok, r.error, step, clock());  // a no-op after a refused commit
    } else {
      member.exchanged(r.ok, r.error, words, clock());  // failed, or words that did not confirm
    }
  } else if (std::holds_alternative<FinishAction>(action)) {
    const auto r = replica.finish();
    member.finish_done(r.ok, r.error, clock());
  } else {
    return false;
  }
  return true;
}

}  // namespace omnilearn::scheduler
