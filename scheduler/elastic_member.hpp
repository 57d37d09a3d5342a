#pragma once
// ElasticMember: one trainer's side of the elastic protocol as a pure state machine. The
// trainer's driver loop asks next(now) what to do (join a group, sync, broadcast the control
// words, train a step, finish, wait, exit), does it on its replica (a training::Trainer, or a
// fake in the simulation), and feeds the outcome back; messages from the scheduler go in with
// on_*(); what the trainer must send goes out through take_outbox(). No sockets, threads or
// clocks: actors/trainer/ is the LibTorch adapter, tests/scheduler/ drive it with a fake.
//
// Rules it keeps (docs/ARCHITECTURE.md "The elastic protocol"):
// - The leader (rank 0) commits a step only while its lease for the generation covers the step:
//   lease time counts from when the request was sent, so it ends on the leader's clock no later
//   than on the scheduler's. Without a lease it waits (bounded), then abandons the generation.
// - Only the scheduler ends a job: the leader never tells followers to exit (a superseded or
//   stopped leader broadcasts kAbandon and they wait for the next rendezvous); a trainer exits
//   only when told StopTrainer, when drained, or when no rendezvous comes for `idle_limit`.
// - Done is a report: after its last step a trainer reports and waits for the scheduler's
//   verdict (resending the report, so a lost one cannot hang the job), and still answers a new
//   rendezvous (a survivor may have to finish the job after the leader died).
// - Orders are checked before use: a rendezvous or plan whose batches do not fit its world is
//   refused, not indexed.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "scheduler/elastic_protocol.hpp"

namespace omnilearn::scheduler {

struct ElasticMemberOptions {
  std::int64_t total_steps = 1;
  Millis lease_wait = 2000;     // the leader waits this long at a boundary for a lease
  Millis done_resend = 1000;    // resend Done while waiting for the verdict
  Millis idle_limit = 150000;   // no rendezvous or stop this long -> exit 4 (scheduler gone)
};

// What the driver must do next; it reports the outcome with the matching *_done() call.
struct JoinAction {  // rendezvous generation `generation` as rank/world -> joined()
  std::int64_t generation = 0;
  std::int32_t rank = 0;
  std::int32_t world = 1;
};
struct SyncAction {};  // adopt the most advanced rank's state -> synced()
struct ControlAction {  // broadcast from rank 0 (words empty on followers) -> control_done()
  std::vector<std::int64_t> words;
};
struct StepAction {  // one step with this batch vector -> step_done()
  std::vector<std::int32_t> batches;
};
struct FinishAction {  // rank 0: evaluate, write the final checkpoint -> finish_done()
};
struct WaitAction {  // nothing to do before `until` unless a message arrives
  Millis until = 0;
};
struct ExitAction {
  int code = 0;
  std::string reason;
};
using MemberAction = std::variant<JoinAction, SyncAction, ControlAction, StepAction, FinishAction,
                                  WaitAction, ExitAction>;

// What the trainer sends to the scheduler.
using MemberMessage = std::variant<MemberReport, LeaseAsk, MemberDone>;

// The replica the actions run on: a training::Trainer in omnilearn-trainer (LibTorch), a fake
// in tests. Each call blocks until its collective is done or has failed (bounded by the group's
// timeout); a failure is a value, never an exception.
class Replica {
 public:
  struct Outcome {
    bool ok = true;
    std::string error;
  };
  virtual ~Replica() = default;
  virtual Outcome join(std::int64_t generation, std::int32_t rank, std::int32_t world) = 0;
  // Adopts the most advanced rank's state; *step and *checksum describe the state after it.
  virtual Outcome sync(std::int64_t* step, std::uint64_t* checksum) = 0;
  // Rank 0's words replace the others' (on followers `words` comes in empty).
  virtual Outcome control(std::vector<std::int64_t>& words) = 0;
  // One step; *step is the committed steps after it.
  virtual Outcome step(const std::vector<std::int32_t>& batches, std::int64_t* step) = 0;
  // Rank 0 at the end: evaluation and the final checkpoint.
  virtual Outcome finish() = 0;
};


class ElasticMember {
 public:
  enum class Phase { kIdle, kJoining, kSyncing, kTraining, kFinishing, kFinished, kExited };

  ElasticMember(ElasticMemberOptions options, Millis now);

  // Messages (from the actor thread, via the driver).
  void on_rendezvous(const RendezvousOrder& order, Millis now);
  void on_plan(const PlanOrder& order);
  void on_lease(const LeaseAnswer& answer, Millis now);
  void on_stop(const std::string& reason);  // the scheduler (job ended) or this node's agent

  // What to do now.
  MemberAction next(Millis now);

  // Outcomes of the actions.
  void joined(bool ok, const std::string& error, Millis now);
  void synced(bool ok, const std::string& error, std::int64_t step, std::uint64_t checksum,
              Millis now);
  void control_done(bool ok, const std::string& error, const std::vector<std::int64_t>& words,
                    Millis now);
  void step_done(bool ok, const std::string& error, std::int64_t step, Millis now);
  void finish_done(bool ok, const std::string& error, Millis now);

  std::vector<MemberMessage> take_outbox();

  Phase phase() const { return phase_; }
  std::int64_t generation() const { return generation_; }
  std::int32_t rank() const { return rank_; }
  std::int32_t world() const { return world_; }
  std::int64_t step() const { return step_; }
  const std::vector<std::int32_t>& batches() const { return batches_; }
  std::uint64_t plan_version() const { return plan_version_; }
  bool lease_valid(Millis now) const { return lease_generation_ == generation_ && now < lease_until_; }
  // Whether a step whose all-reduce just completed may be committed: the leader's lease must
  // still hold (it was checked at the boundary, but the step may have outlasted it, e.g. a
  // leader frozen mid-step); followers follow the leader's data.
  bool may_commit(Millis now) const { return rank_ != 0 || lease_valid(now); }
  // The leader's lease ran out while a step ran: ask for it again now. A renewal granted after
  // the step's all-reduce proves that no other generation was leased meanwhile (the scheduler
  // renews only the current generation's leader), so the step may then be committed.
  void renew_lease(Millis now) {
    if (rank_ == 0 && phase_ == Phase::kTraining) ask_lease(now);
  }

 private:
  MemberAction idle(Millis now);
  MemberAction leader_boundary(Millis now);
  // Queues a report about the current generation, rank and step.
  void report(MemberReport::Kind kind, const std::string& error = "", std::uint64_t checksum = 0);
  void broken(const std::string& error, Millis now);
  void ask_lease(Millis now);
  void send_done(MemberDone::Outcome outcome, bool ok, const std::string& error, Millis now);
  static bool fits(const std::vector<std::int32_t>& batches, std::int32_t world);

  ElasticMemberOptions options_;
  std::vector<MemberMessage> outbox_;
  Phase phase_ = Phase::kIdle;

  std::optional<RendezvousOrder> pending_;  // the newest rendezvous not yet acted on
  std::int64_t seen_generation_ = 0;        // newest generation heard of
  std::optional<PlanOrder> plan_;           // newest plan for the current generation

  std::int64_t generation_ = 0;
  std::int32_t rank_ = -1;
  std::int32_t world_ = 0;
  std::vector<std::int32_t> batches_;
  std::uint64_t plan_version_ = 0;
  std::int64_t step_ = 0;
  std::vector<std::int64_t> sent_words_;    // the leader's last control words
  bool step_due_ = false;                   // the control words said: train one step
  bool abandon_sent_ = false;               // a stopped leader released its followers

  // Leader lease.
  std::int64_t lease_generation_ = -1;
  Millis lease_until_ = 0;
  Millis lease_duration_ = 0;               // of the last grant: when to renew
  std::uint64_t lease_seq_ = 0;
  std::map<std::uint64_t, Millis> lease_sent_;  // outstanding requests: seq -> sent at
  Millis lease_asked_at_ = -1;               // last request sent
  std::optional<Millis> lease_wait_since_;   // waiting at a boundary since
  bool lease_superseded_ = false;            // refused for good: abandon without waiting
  Millis last_step_ms_ = 0;                  // duration of the last step, boundary to commit
  Millis boundary_at_ = 0;

  // End.
  bool stop_ = false;
  std::string stop_reason_;
  int exit_code_ = 0;
  std::optional<MemberDone> done_;           // resent until a verdict
  Millis done_sent_at_ = 0;
  Millis idle_since_ = 0;
};

// Carries out one of join, sync, control, step or finish on `replica` and feeds the outcome to
// `member`, reading the clock after the call. Returns false (doing nothing) for wait and exit,
// which the driver handles: they need its inbox and its process.
bool carry_out(const MemberAction& action, Replica& replica, ElasticMember& member,
               const std::function<Millis()>& clock);

}  // namespace omnilearn::scheduler
