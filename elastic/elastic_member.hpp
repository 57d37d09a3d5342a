#pragma once
// ElasticMember: one trainer's side of the elastic protocol as a pure state machine. The
// trainer's driver loop asks next(now) what to do (join a group, sync, broadcast the group's
// first control words, train a step, commit or drop it at the commit gate, finish, wait, exit),
// does it on its replica (a training::Trainer, or a
// fake in the simulation), and feeds the outcome back; messages from the scheduler go in with
// on_*(); what the trainer must send goes out through take_outbox(). No sockets, threads or
// clocks: trainer/ is the LibTorch adapter, tests/elastic/ drive it with a fake.
//
// Rules it keeps (docs/ARCHITECTURE.md "The elastic protocol"):
// - The leader (rank 0) commits a step only while its lease for the generation covers the step:
//   lease time counts from when the request was sent, so it ends on the leader's clock no later
//   than on the scheduler's. Without a lease it waits (bounded), then abandons the generation.
//   A step that outlasted the lease meets the commit gate: committed only once renewed.
// - Every rank commits a step only if rank 0's words, carried in the step's exchange, repeat
//   the plan it was computed with; other words make every rank drop it alike.
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

#include "elastic/elastic_protocol.hpp"

namespace omnilearn::scheduler {

struct ElasticMemberOptions {
  std::int64_t total_steps = 1;
  Millis lease_wait = 2000;     // the leader waits this long at a boundary for a lease
  Millis done_resend = 1000;    // resend Done while waiting for the verdict
  Millis idle_limit = 150000;   // no rendezvous or stop this long -> exit 4 (scheduler gone)
  // The leader asks for a renewal once less than this part of its lease is left, so that a
  // healthy leader never waits at a boundary. Where it renews is a matter of traffic and
  // waiting, not of safety: safety rests on the checks that the lease covers the step at the
  // boundary and still holds at the commit gate. The simulation draws it from [1/4, 3/4].
  double renew_when_left = 0.5;
  Mutation mutation = Mutation::kNone;  // tests only (elastic_mutation_test.cpp)
};

// What the driver must do next; it reports the outcome with the matching call.
//
// The step path. A group's first control round is a broadcast of its own (ControlAction): it
// puts a plan in force. Every later step is one collective (StepAction): every rank computes
// the step with the plan in force, and rank 0's control words for it travel inside the
// gradient exchange. Once the exchange completed (exchanged()), a rank holds an uncommitted
// step: if the words repeat the plan in force (confirms()) it goes to the commit gate, else
// every rank drops the step alike and acts on the words (a new plan, regroup, abandon). At
// the gate next() says CommitAction (followers at once; the leader while its lease holds),
// WaitAction (the leader's lease ran out during the step: it asks for a renewal, which proves
// that no other generation was leased meanwhile) or DropAction (no renewal within
// `lease_wait`: the step is not committed and the group is broken). After the commit,
// step_done().
struct JoinAction {  // rendezvous generation `generation` as rank/world -> joined()
  std::int64_t generation = 0;
  std::int32_t rank = 0;
  std::int32_t world = 1;
};
// Adopt the most advanced rank's state -> synced(). In a generation that resumes from a
// checkpoint (checkpoint_step >= 0), rank 0 first loads `checkpoint` and every rank adopts
// rank 0's state: the others may hold states of the timeline the job gave up.
struct SyncAction {
  std::string checkpoint;
  std::int64_t checkpoint_step = -1;
};
struct ControlAction {  // the group's first round: broadcast from rank 0 -> control_done()
  std::vector<std::int64_t> words;  // empty on followers
};
struct StepAction {  // compute a step, exchange it with rank 0's words -> exchanged()
  std::vector<std::int32_t> batches;  // the plan in force: what the step is computed with
  std::vector<std::int64_t> words;    // rank 0's words for this step; empty on followers
};
struct CommitAction {  // the gate is open: apply the exchanged step -> step_done()
};
struct DropAction {  // the gate refused: drop the exchanged step; the group is broken
  std::string error;
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
using MemberAction = std::variant<JoinAction, SyncAction, ControlAction, StepAction, CommitAction,
                                  DropAction, FinishAction, WaitAction, ExitAction>;

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
    // Not a collective failure but one another generation cannot mend (a checkpoint that
    // cannot be loaded): the member reports an error done, and the scheduler fails the job.
    bool fatal = false;
  };
  using WordsCheck = std::function<bool(const std::vector<std::int64_t>& words)>;
  virtual ~Replica() = default;
  virtual Outcome join(std::int64_t generation, std::int32_t rank, std::int32_t world) = 0;
  // Adopts the most advanced rank's state, or the checkpoint's that rank 0 loads (SyncAction);
  // *step and *checksum describe the state after it.
  virtual Outcome sync(const SyncAction& action, std::int64_t* step, std::uint64_t* checksum) = 0;
  // Rank 0's words replace the others' (on followers `words` comes in empty).
  virtual Outcome control(std::vector<std::int64_t>& words) = 0;
  // One fused step (StepAction): computes with `batches` and exchanges the result with rank 0's
  // `words`, which replace `words` on every rank once the exchange completed. Then, if
  // `confirms(words)` (a pure check, which rank 0 may also ask before computing), asks
  // `gate(words)` and commits only if it returns true (false: nothing changes and the group is
  // broken, an error). A step whose words do not confirm it is dropped: ok, without the gate.
  // *step is the committed steps after it.
  virtual Outcome step(const std::vector<std::int32_t>& batches, std::vector<std::int64_t>& words,
                       const WordsCheck& confirms, const WordsCheck& gate, std::int64_t* step) = 0;
  // Rank 0 at the end: evaluation and the final checkpoint.
  virtual Outcome finish() = 0;
};

class ElasticMember {
 public:
  // kCommitting: a step's exchange completed with words that confirm it; the replica holds the
  // step uncommitted until next() says CommitAction or DropAction.
  enum class Phase {
    kIdle,
    kJoining,
    kSyncing,
    kTraining,
    kCommitting,
    kFinishing,
    kFinished,
    kExited
  };

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
  // `fatal`: the sync failed in a way no other generation mends (Replica::Outcome::fatal).
  void synced(bool ok, const std::string& error, std::int64_t step, std::uint64_t checksum,
              Millis now, bool fatal = false);
  void control_done(bool ok, const std::string& error, const std::vector<std::int64_t>& words,
                    Millis now);
  // A StepAction's exchange completed (ok) with rank 0's `words`, or failed. Words that confirm
  // the step open the commit gate (kCommitting); others end the step uncommitted and are acted
  // on as a control round's would be.
  void exchanged(bool ok, const std::string& error, const std::vector<std::int64_t>& words,
                 Millis now);
  // After CommitAction: the step was applied (*step committed steps), or applying it failed.
  void step_done(bool ok, const std::string& error, std::int64_t step, Millis now);
  void finish_done(bool ok, const std::string& error, Millis now);

  // Whether rank 0's words for the step in progress confirm the plan it is computed with:
  // only then may a rank commit it (the same answer on every rank for the same words).
  bool confirms(const std::vector<std::int64_t>& words) const;

  std::vector<MemberMessage> take_outbox();

  Phase phase() const { return phase_; }
  std::int64_t generation() const { return generation_; }
  std::int32_t rank() const { return rank_; }
  std::int32_t world() const { return world_; }
  std::int64_t step() const { return step_; }
  // The plan in force: the batches of the last words the group accepted.
  const std::vector<std::int32_t>& batches() const { return batches_; }
  std::uint64_t plan_version() const { return plan_version_; }
  bool lease_valid(Millis now) const {
    return lease_generation_ == generation_ && now < lease_until_;
  }

 private:
  MemberAction idle(Millis now);
  // The leader's words at a step boundary, or a wait for its lease.
  std::optional<MemberAction> leader_boundary(Millis now);
  MemberAction commit_gate(Millis now);
  // Acts on the words of a control round or of a step that they did not confirm.
  void act_on(const std::vector<std::int64_t>& words, Millis now);
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
  // The report that ended this member's part in `generation_` (kBroken or kLeft), said again
  // while it idles when the scheduler repeats that generation's rendezvous or announces a newer
  // one that leaves it out (on_rendezvous): either shows the report may have been lost.
  std::optional<MemberReport> ended_report_;
  std::optional<PlanOrder> plan_;           // newest plan for the current generation

  std::int64_t generation_ = 0;
  std::int32_t rank_ = -1;
  std::int32_t world_ = 0;
  std::vector<std::int32_t> batches_;
  std::uint64_t plan_version_ = 0;
  std::string checkpoint_;  // the checkpoint this generation resumes from, if any
  std::int64_t checkpoint_step_ = -1;
  std::int64_t step_ = 0;
  std::int64_t synced_generation_ = -1;     // the newest generation whose sync completed
  std::vector<std::int64_t> sent_words_;    // the leader's last control words
  std::vector<std::int64_t> plan_words_;    // the continue words in force (empty: none yet)
  bool abandon_sent_ = false;               // a stopped leader released its followers
  Millis gate_since_ = 0;                   // kCommitting since

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
// `member`, reading the clock after the call. A step runs the commit gate inside the replica's
// step: `wait(until)` (the driver) sends what the member queued and waits until `until` or a
// message, which it feeds to the member. Returns false (doing nothing) for wait and exit,
// which the driver handles: they need its inbox and its process.
bool carry_out(const MemberAction& action, Replica& replica, ElasticMember& member,
               const std::function<Millis()>& clock, const std::function<void(Millis)>& wait);

}  // namespace omnilearn::scheduler
