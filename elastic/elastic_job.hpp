#pragma once
// ElasticJob: the scheduler's side of the elastic protocol as a pure state machine. Membership
// (nodes, trainers) -> generations (rank order, plan) -> leases -> the end of the job. Time and
// messages go in; commands come out (take_commands()). No sockets, threads or clocks: the
// SchedulerActor is a thin adapter around it, and tests/elastic/elastic_simulation_test.cpp
// drives it with simulated trainers through thousands of seeded fault schedules.
//
// Safety rules it enforces (docs/ARCHITECTURE.md "The elastic protocol"):
// - One authority: only this machine forms generations and ends the job. A trainer's report or
//   done is evidence, never a decision, and is ignored when its generation is superseded.
// - Fencing: the generation number fences every report; a leader commits steps only under a
//   lease for its generation, and a lease for a newer generation is granted only once the older
//   one has run out (plus a margin for clock rates) or its holder is known to have let go or to
//   be gone (its agent reported its exit, or a probe found its connection closed).
// - Bounded liveness: spawning, forming and training all have deadlines; formation failures back
//   off; a job that cannot train for its grace period fails with the reason.
// - A generation never starts from nothing: it includes a survivor of the last one, or a trainer
//   that holds the job's committed step. When every trainer that may hold it is gone, the job
//   goes back to its newest checkpoint that a new trainer can read (resume_from_checkpoint):
//   the steps after it are recorded as lost and trained again under a new, fenced generation.
//   Without such a checkpoint it waits (and the job fails after its grace, saying why).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "elastic/elastic_protocol.hpp"

namespace omnilearn::scheduler {

struct ElasticJobOptions {
  std::int32_t min_workers = 1;
  std::int32_t max_workers = 4;
  std::int32_t slots = 1;                  // trainers per node
  std::string trainer_prefix;              // trainer names: <prefix><node name>-t<n>; the job id
                                           // keeps them unique in the cluster across jobs
  std::int64_t total_steps = 0;            // the job is done when the leader committed these
                                           // (0: not known yet, see set_total_steps)
  Millis spawn_timeout = 60000;            // SpawnTrainer -> hello (a LibTorch process start)
  Millis form_timeout = 30000;             // Rendezvous -> first committed step (or done)
  Millis grace_period = 30000;             // unable to train this long -> the job fails
  Millis lease_duration = 1000;            // a leader's lease; must be < heartbeat timeout
  Millis lease_margin = 200;               // added before another leader may take over
  Millis probe_timeout = 1000;             // how long a liveness probe may take
  Millis backoff_initial = 500;            // after a generation failed to form
  Millis backoff_max = 8000;
  // A trainer that exits with an error before it ever synced failed to start (a missing model
  // file, a crash while loading): its node gets another after a back-off (backoff_initial,
  // doubling, at most spawn_backoff_max), and after this many such failures in a row, with no
  // trainer starting in between, the job fails with the last one's reason.
  std::int32_t max_start_failures = 6;
  Millis spawn_backoff_max = 30000;
  // Trainers lost while training (written off as hung or unreachable while their node stays
  // alive, or exited with an error after they synced) hold their node back from the job for a
  // while: from the second such loss on that node within lost_memory, backoff_initial, doubling
  // with each further one, at most lost_backoff_max. A node whose every trainer hangs (a broken
  // accelerator, a call that never returns) would otherwise get a new trainer at once, and the
  // whole job would wait on each one until it is found hung. The hold applies only while the job
  // has min_workers trainers elsewhere: it never keeps the job from training.
  Millis lost_backoff_max = 300000;
  Millis lost_memory = 600000;
  Mutation mutation = Mutation::kNone;  // tests only (elastic_mutation_test.cpp)
};

// What the adapter must do. Commands addressed to a trainer carry its name.
struct SpawnCommand {
  std::string node;
  std::string trainer;
};
struct RendezvousCommand {
  std::string trainer;
  RendezvousOrder order;
};
struct PlanCommand {
  std::string trainer;
  PlanOrder order;
};
struct LeaseCommand {
  std::string trainer;
  LeaseAnswer answer;
};
struct StopCommand {  // the trainer must exit (job ended, or written off)
  std::string trainer;
  std::string reason;
};
struct ProbeCommand {  // is the trainer's process still reachable? answer with probe_result()
  std::string trainer;
  std::int64_t generation = 0;
};
// A probe's answer that says the trainer's training thread has computed one step for
// `computing_s` seconds without reaching a wait, where its steps take `expected_s` (its
// measured compute at its batch): hung past kHungComputeFactor times that, and at least
// kHungComputeFloorS, and answered to probe_result() as a missed probe with an error starting
// "hung:". Far beyond noise, a first step's warm-up or a throttled stretch; short of the
// collective's 30 s, so that the generation re-forms before its exchange times out and the
// stall limit fails the job.
inline constexpr double kHungComputeFactor = 20.0;
inline constexpr double kHungComputeFloorS = 10.0;
inline bool hung_in_compute(double computing_s, double expected_s) {
  return computing_s > std::max(kHungComputeFloorS, kHungComputeFactor * expected_s);
}
struct DropStoreKeysCommand {  // delete rendezvous keys of generations < below (all when < 0)
  std::int64_t below = -1;
};
// Something worth a line in events.jsonl. `kind`: spawn, trainer_ready, trainer_gone,
// trainer_back (a holder written off as unreachable that came back when it was the last), drain,
// generation, generation_formed, formation_failed, recovered, lease_refused,
// resumed_from_checkpoint (step: the checkpoint's, reason: its path, trainer: the rank 0 that
// loads it, lost_steps: committed steps given up), finished.
struct JobEvent {
  std::string kind;
  std::string trainer;
  std::string reason;
  std::int64_t generation = 0;
  std::int64_t step = 0;
  std::vector<std::string> members;
  std::vector<std::int32_t> batches;
  double seconds = 0;         // recovered: fault -> next committed step
  std::int64_t lost_steps = 0;
  std::int32_t losses = 0;  // node_held_back: trainers lost on the node within lost_memory
};
struct FinishCommand {
  std::string state;  // "succeeded" | "failed" | "stopped"
  std::string reason;
};
// What a restarted head must know changed (ElasticJob::snapshot()): it comes first in a batch
// of commands, and the adapter writes the snapshot durably before it carries out the others,
// so that no generation number, lease or trainer goes out that a restarted head would not know.
struct PersistCommand {};
using JobCommand =
    std::variant<SpawnCommand, RendezvousCommand, PlanCommand, LeaseCommand, StopCommand,
                 ProbeCommand, DropStoreKeysCommand, JobEvent, FinishCommand, PersistCommand>;

// A checkpoint the job's leader wrote: the committed state at `step`, a file at `path` on the
// node named `node` (by name: a node back with a new incarnation is the same machine and disk).
// `shared`: it lies in a directory that every node sees at the same path ([checkpoint] shared),
// so a trainer on any node can load it; otherwise only a trainer on `node` can.
struct JobCheckpoint {
  std::int64_t step = 0;
  std::string path;
  std::string node;
  bool shared = false;
};

// The part of an ElasticJob a head keeps across its own restart. Written per generation, lease
// and membership change, not per step: the committed step in it is a lower bound, and a
// restored job learns the newest one from its trainers (ElasticJob::restore).
struct ElasticJobSnapshot {
  struct TrainerRecord {
    std::string name;
    std::string node;
    std::int32_t phase = 0;  // ElasticJob::Phase
    std::int64_t committed_step = 0;
    std::int64_t synced_generation = -1;
    bool exited = false;
    std::string stop_reason;  // why the job told it to stop ("" if it did not)
    std::string deferred_stop;  // the stop it is owed once a generation without it trained
  };
  std::string state;  // pending | running
  std::int64_t total_steps = 0;
  std::int64_t generation = 0;
  std::vector<std::string> members;
  std::vector<std::string> last_trained_members;
  std::int64_t committed_step = 0;
  std::int64_t lease_generation = 0;
  std::string lease_holder;
  Millis lease_duration = 0;  // of the leases granted last (the adapter changes it)
  std::int32_t trainer_counter = 0;
  std::vector<TrainerRecord> trainers;
  std::vector<std::string> draining_nodes;  // node ids
  std::int64_t lost_steps = 0;
  std::int64_t abandoned_steps = 0;
  std::vector<JobCheckpoint> checkpoints;  // oldest first
  std::int64_t resumed_generation = 0;     // of the last resume from a checkpoint (0: none)
};

// The batch plan a new generation starts with: the controller's split for these members.
struct GenerationPlan {
  std::vector<std::int32_t> batches;
  std::uint64_t version = 0;
};
using Planner = std::function<GenerationPlan(const std::vector<std::string>& members)>;

class ElasticJob {
 public:
  enum class Phase { kSpawning, kReady, kMember, kLeaving, kGone };
  struct TrainerView {
    std::string name;
    std::string node;
    Phase phase = Phase::kSpawning;
    std::int32_t rank = -1;
    std::int64_t committed_step = 0;  // the most it reported (reports, heartbeats)
  };

  ElasticJob(ElasticJobOptions options, Planner planner);

  // Lifecycle. start() places the first trainers on the nodes known so far.
  void start(Millis now);
  // Instead of start(), on a restarted head: the job as the snapshot left it. Every trainer's
  // committed step is unknown until it reports again; the lease in force may still be used by
  // its holder for a lease duration. The job's members are told to stop (a generation without
  // members) and report where they stopped; the next generation, a new fenced number, forms
  // from the newest state they report, once all have or form_timeout passed. The adapter
  // feeds node_up() for the nodes the registry knows, as after start(). A trainer the
  // snapshot left out (gone, in neither generation it keeps) that speaks is told to stop.
  void restore(const ElasticJobSnapshot& snapshot, Millis now);
  ElasticJobSnapshot snapshot() const;
  void stop(const std::string& reason, Millis now);  // by the user: "stopped"
  void fail(const std::string& reason, Millis now);  // the adapter could not go on: "failed"
  // The job's length when only the trainers can compute it (epochs over a dataset they load).
  void set_total_steps(std::int64_t total_steps) { options_.total_steps = total_steps; }
  std::int64_t total_steps() const { return options_.total_steps; }
  // Leases granted from now on last this long (a leader must hold one across a whole step, so
  // the adapter lengthens them for slow steps); the margin before another leader follows.
  void set_lease_duration(Millis duration) {
    options_.lease_duration = duration;
    options_.lease_margin = std::max<Millis>(50, duration / 5);
  }
  Millis lease_duration() const { return options_.lease_duration; }
  // How long a generation may go without progress before its members are probed (tick): two
  // lease lengths (a lease outlasts several steps), at least a probe timeout.
  Millis stall_probe_after() const {
    return std::max(2 * options_.lease_duration, options_.probe_timeout);
  }
  void tick(Millis now);                              // deadlines; call every ~100-200 ms

  // Membership (from the node registry).
  // `draining`: the node is drained for every job (omnilearn node drain): nothing is placed
  // there until undrain().
  void node_up(const std::string& node, const std::string& name, Millis now, bool draining = false);
  void node_down(const std::string& node, const std::string& reason, Millis now);
  int drain(const std::string& node_or_name, Millis now);  // returns trainers leaving
  // A drained node is usable again: trainers are placed there as on any node.
  void undrain(const std::string& node_or_name, Millis now);

  // From trainers and their agents. Returns whether the hello is accepted.
  bool hello(const std::string& trainer, Millis now);
  void trainer_exited(const std::string& trainer, int exit_code, const std::string& reason,
                      Millis now);
  void report(const std::string& trainer, const MemberReport& report, Millis now);
  void progress(const std::string& trainer, std::int64_t committed_step);  // heartbeat counters
  void lease_request(const std::string& trainer, const LeaseAsk& ask, Millis now);
  void done(const std::string& trainer, const MemberDone& done, Millis now);
  // The leader wrote a checkpoint of committed step `checkpoint.step` (reported with the step).
  // The job keeps the newest kKeptCheckpoints, to resume from when no live trainer holds its
  // state.
  void checkpoint_written(const JobCheckpoint& checkpoint, Millis now);
  static constexpr std::size_t kKeptCheckpoints = 8;
  // `reachable` false with an `error` starting "hung:": the trainer answered, but its training
  // thread has computed one step far longer than its steps take; written off as if it had
  // missed the probe, with that error as the reason.
  // `process_gone`: the probe failed at once because the trainer's connection is closed
  // (refused or reset by its machine), which proves its process has exited; a probe that timed
  // out proves nothing (a frozen process, a partition, a dead machine all look the same).
  void probe_result(const std::string& trainer, std::int64_t generation, bool reachable,
                    const std::string& error, Millis now, bool process_gone = false);

  // The controller's new split for the current generation; sent to its leader. False (and
  // nothing sent) when there is no training generation or the split does not fit it.
  bool propose_plan(const std::vector<std::int32_t>& batches, std::uint64_t version, Millis now);

  std::vector<JobCommand> take_commands();

  // Views for status, summaries and tests.
  bool finished() const { return finished_; }
  const std::string& state() const { return state_; }  // pending | running | succeeded | ...
  const std::string& reason() const { return reason_; }
  std::int64_t generation() const { return generation_; }
  bool forming() const { return forming_; }
  std::int64_t committed_step() const { return job_step_; }  // as the leaders reported
  const std::vector<std::string>& members() const { return members_; }
  const std::vector<std::int32_t>& batches() const { return batches_; }
  std::uint64_t plan_version() const { return plan_version_; }
  std::map<std::string, TrainerView> trainers() const;
  std::string node_name(const std::string& node) const;
  std::int64_t lost_steps() const { return lost_steps_; }
  const std::vector<JobCheckpoint>& checkpoints() const { return checkpoints_; }
  // The generation of the last resume from a checkpoint (0: none): reports of older
  // generations carry steps of the timeline given up there.
  std::int64_t resumed_generation() const { return resumed_generation_; }
  std::int64_t abandoned_steps() const { return abandoned_steps_; }
  const std::vector<double>& recovery_seconds() const { return recovery_s_; }
  // The lease in force, as this side sees it: generation and until when (its clock).
  std::int64_t lease_generation() const { return lease_generation_; }
  Millis lease_until() const { return lease_until_; }

 private:
  struct Node {
    std::string name;
    bool alive = true;
    bool draining = false;
    std::int32_t start_failures = 0;  // trainers that failed to start here, in a row
    Millis no_spawn_before = 0;       // back-off after a failed start
    std::vector<Millis> lost_at;      // trainers lost here while training, within lost_memory
    Millis held_back_until = 0;       // back-off after such a loss (lost_backoff_max)
  };
  struct Trainer {
    TrainerView view;
    Millis spawned_at = 0;
    std::int64_t synced_generation = -1;  // last generation it reported synced in
    std::int64_t left_generation = -1;    // last generation it reported leaving or broken in
    bool exited = false;                  // its process is known to be gone
    // Restored still starting: spawned by a head that died before the trainer said hello. Its
    // hello may have gone to that head; if it gave up on it during the outage, its exit is not
    // a failed start (its node and the job's files are not to blame).
    bool spawned_by_previous_head = false;
    // Why the job told it to stop, "" if it did not: said again if it speaks while gone (the
    // stop may have been lost with a head killed right after sending it).
    std::string stop_reason;
    // Written off as unreachable while it held the job's state (another holder had answered):
    // not told to stop yet, since that other holder may be lost before a generation without
    // this one trains; then this one is the only copy left. The stop it is owed ("" if none)
    // goes out once such a generation trained; heard from meanwhile while no live trainer
    // holds the state, it is taken back (revive_written_off).
    std::string deferred_stop;
    bool heard_since_write_off = false;
    // Liveness evidence, ordered by evidence_seq_ (not by the clock: a probe answer on
    // loopback arrives within the millisecond it was sent): when its last probe went out,
    // when it was last heard from (a probe answer or a message about the current generation),
    // and the generation whose probe it missed (unreachable_in == generation_: written off
    // once safe, write_off_unreachable).
    std::uint64_t probed_seq = 0;
    std::uint64_t heard_seq = 0;
    std::uint64_t answered_seq = 0;  // its last probe answer
    std::int64_t unreachable_in = -1;
  };

  // Spawns trainers where nodes have free slots, up to max_workers; `first_node` (a node's
  // name) is served first.
  void place_trainers(Millis now, const std::string& first_node = std::string());
  int active_trainers() const;  // neither gone nor leaving
  // Whether the job keeps min_workers active trainers without those on the node with this id.
  bool can_spare(const std::string& node) const;
  // A trainer of the node with this id was lost while training: hold the node back
  // (ElasticJobOptions::lost_backoff_max) and say so.
  void note_lost(const std::string& node, const std::string& trainer, const std::string& why,
                 Millis now);
  int trainers_on(const std::string& node) const;  // not gone, on the node (by id)
  // Waiting for a trainer on the node whose disk holds `checkpoint`: when the job already has
  // max_workers elsewhere, one of `fresh` that holds nothing is stopped and one placed there.
  void make_room_for_checkpoint(const JobCheckpoint& checkpoint,
                                const std::vector<std::string>& fresh, Millis now);
  // `failure`: a trainer_gone event says so; false for a drained trainer's clean exit.
  void trainer_gone(const std::string& trainer, const std::string& reason, Millis now,
                    bool stop_it, bool failure = true);
  void maybe_regroup(const std::string& reason, Millis now);
  void form_generation(std::vector<std::string> members, const std::string& reason, Millis now,
                       const JobCheckpoint* resume = nullptr);
  void finish(const std::string& state, const std::string& reason, Millis now);
  void note_disruption(Millis now);
  bool holds_state(const std::string& trainer) const;
  // Whether the trainer may hold the job's committed state once it reports (a member of the
  // last generation that trained, or one that synced after it): while one is there, the job
  // waits for it instead of going back to a checkpoint.
  bool may_hold_state(const std::string& trainer) const;
  // Whether `generation` is older than the newest generation the job leased: it can never be
  // leased, so no step its reports or its done name is the job's (a sync there may have
  // adopted a step a follower committed alone after the leased generation formed without it).
  bool superseded_by_lease(std::int64_t generation) const;
  // Forms the next generation from a checkpoint when no trainer may hold the job's state;
  // false (nothing done) when it cannot, with no_resume_reason_ saying why.
  bool resume_from_checkpoint(const std::vector<std::string>& candidates, const std::string& reason,
                              Millis now);
  bool readable_by(const JobCheckpoint& checkpoint, const std::string& trainer) const;
  void write_off_unreachable(Millis now);
  // `heard` answered or spoke about the current generation while every member of it had missed
  // a probe: the others' misses are forgotten and they are probed again.
  void reprobe_after_silence(const std::string& heard, Millis now);
  // When no live trainer holds the job's state: takes back a holder written off as unreachable
  // that has been heard from since (its deferred_stop), and probes those not heard from; true
  // if it took one back.
  bool revive_written_off(Millis now);
  // Sends the stops held back from written-off holders (deferred_stop), with `reason`, or the
  // one each is owed when it is empty.
  void send_deferred_stops(const std::string& reason);
  void heard_from(Trainer& t, std::int64_t generation, Millis now);
  // A trainer not in trainers_ spoke (a report, a lease ask, a done): told to stop.
  void stranger(const std::string& trainer);
  void probe(const std::string& trainer, Millis now);
  void probe_members(Millis now);  // every member of generation_ still in it
  bool lease_free_for(const std::string& trainer, Millis now) const;
  // Whether the last lease granted can no longer be used to commit a step: released (its holder
  // known gone or moved on) or run out, plus the margin.
  bool old_lease_over(Millis now) const;
  void emit(JobCommand command) { commands_.push_back(std::move(command)); }
  void event(JobEvent e) { commands_.push_back(std::move(e)); }
  JobEvent event_now(const std::string& kind) const;  // with the job's step and generation
  Trainer* find(const std::string& trainer);

  ElasticJobOptions options_;
  Planner planner_;
  std::vector<JobCommand> commands_;

  std::string state_ = "pending";
  std::string reason_;
  bool started_ = false;
  bool finished_ = false;

  std::map<std::string, Node> nodes_;
  std::map<std::string, Trainer> trainers_;
  int trainer_counter_ = 0;

  std::int64_t generation_ = 0;
  std::vector<std::string> members_;     // by rank, of generation_
  std::vector<std::string> last_trained_members_;  // of the newest generation that trained
  std::vector<std::int32_t> batches_;
  std::uint64_t plan_version_ = 0;
  bool forming_ = false;           // generation_ issued, has not committed a step yet
  Millis formed_at_ = 0;
  // What each member of generation_ was told, said again while it forms (tick).
  std::map<std::string, RendezvousOrder> member_orders_;
  // Told of the current generation without abandon_previous while the old lease was not over;
  // told again with it once it is (tick).
  std::vector<std::string> abandon_told_later_;
  Millis orders_sent_at_ = 0;
  Millis retry_after_ = 0;         // no new generation before this (back-off)
  // Members stopped so that a drained leader's state can pass to one of them: wait for their
  // MemberReport::kLeft until then (maybe_regroup).
  std::optional<Millis> handover_wait_until_;
  // Restored on a restarted head: wait until then for the trainers of the last generations to
  // report their committed steps (restore()).
  std::optional<Millis> restore_wait_until_;
  bool persist_pending_ = false;  // a PersistCommand goes first in the next take_commands()
  void persist() { persist_pending_ = true; }
  Millis backoff_ = 0;
  std::int64_t dropped_below_ = 1; // rendezvous keys of generations < this are gone

  std::map<std::string, std::string> unreachable_error_;  // why a probe failed, until acted on
  std::uint64_t evidence_seq_ = 0;  // orders probes sent and trainers heard from
  std::int32_t start_failures_ = 0;  // trainers that failed to start, in a row, job-wide
  std::string last_start_failure_;

  // Lease: one generation at a time may commit.
  std::int64_t lease_generation_ = 0;
  std::string lease_holder_;
  Millis lease_until_ = 0;
  bool lease_released_ = true;

  // Progress and liveness.
  std::int64_t job_step_ = 0;
  Millis last_progress_ = 0;
  Millis last_stall_probe_ = 0;   // when a generation without progress was last probed (tick)
  std::optional<Millis> below_min_since_;

  // Elasticity accounting.
  std::optional<Millis> disruption_at_;
  std::int64_t step_at_disruption_ = 0;
  std::vector<double> recovery_s_;
  std::int64_t lost_steps_ = 0;
  std::int64_t abandoned_steps_ = 0;
  std::int64_t broken_generation_ = -1;  // a member of it reported a failed collective

  // Checkpoints, and going back to one.
  std::vector<JobCheckpoint> checkpoints_;  // oldest first, at most kKeptCheckpoints
  std::int64_t resumed_generation_ = 0;
  std::string no_resume_reason_;  // why the job could not resume from a checkpoint
  // Trainers that may hold the state, probed while a resume waits for them: one whose probe
  // proves its process gone is written off (its exit report may have been lost).
  std::set<std::string> exit_probes_;
  Millis next_exit_probe_ = 0;
  Millis next_revive_probe_ = 0;  // written-off holders asked whether they are there

};

}  // namespace omnilearn::scheduler
