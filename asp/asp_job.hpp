#pragma once
// AspJob: the scheduler of an asynchronous (parameter-server) job as a pure state machine.
// Placement of servers and workers, dealing every batch of the epoch's permutation once, fencing
// a batch off the shards before it is dealt again (asked again while a live shard is silent, of
// the restart when it dies), the hand-over of a drained server, the server restart and its
// failure bound, the batch plan, the choice of the worker that evaluates and the one that
// finishes, and the stall and start-failure rules. Time and the adapter's inputs go in; commands
// come out (take_commands()), answers to asks come back as values (hello, deal). No sockets,
// threads, clocks or files: jobs/asp_scheduler_actor.cpp turns messages into these inputs and
// the commands into messages, and tests/asp/asp_job_sim.cpp drives this same machine
// with simulated servers, workers and faults over thousands of seeded schedules.
//
// Not thread-safe: one owner (an actor, or a simulation) calls it.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "asp/batch_fences.hpp"
#include "asp/epoch_dealer.hpp"
#include "asp/restart_ledger.hpp"
#include "asp/staleness.hpp"
#include "asp/worker_id.hpp"
#include "controller/batch_controller.hpp"

namespace omnilearn::asp {

using Millis = std::int64_t;

// Rules broken on purpose, so that the simulation shows it checks them (tests only).
enum class AspMutation {
  kNone,
  // A batch given up on (its worker gone, its push unanswered) is dealt again at once, as if no
  // shard had taken it: no fence.
  kNoFence,
  // A live shard silent past the fence's bound counts as "not taken" instead of being asked
  // again.
  kSilenceIsNotTaken,
  // A shard that dies counts as "not taken" in every fence round still waiting for it, instead
  // of the round being asked of the incarnation that resumes it.
  kDeadSilenceIsNotTaken,
  // A drained server is stopped at once, as a worker is, without handing its shard over first:
  // its restart resumes from its last periodic checkpoint.
  kStopBeforeHandOver,
  // A restored machine does not ask again the fence rounds and hand-overs its predecessor was
  // waiting for (their answers went to the dead head).
  kRestoreForgetsAsks,
  // A batch dealt to a worker whose deal request comes again without it (the answer that
  // carried it was lost, e.g. with a head that died after writing it down) stays the worker's.
  kUndeliveredStaysDealt,
};
const char* to_string(AspMutation mutation);

struct AspJobOptions {
  std::string job_id;   // trainer names: <job id>-<node name>-{s,t}<n>
  std::string name;     // the job's name, for events and the summary
  std::string run_dir;  // where the head keeps shard checkpoints' copies (summary paths)
  std::int32_t servers = 1;
  std::int32_t min_workers = 1;
  std::int32_t max_workers = 1;
  std::int32_t slots = 1;  // workers per node
  std::int64_t steps = 0;  // exactly one of steps / epochs is > 0
  std::int64_t epochs = 0;
  std::int64_t global_batch = 1;     // B
  std::int64_t eval_every = 0;       // updates between evaluations (0: only the final one)
  std::uint64_t data_seed = 0;       // the epochs' permutation
  std::int64_t cooldown_steps = 5;   // pushes at a new plan before their timings count
  std::int64_t interval_steps = 10;  // a controller round every this many updates per worker
  Millis grace_period = 30000;
  Millis spawn_timeout = 60000;
  Millis interval = 1000;  // staleness statistics per interval
  // Asks the adapter makes: a fence's answer, a drained server's hand-over.
  Millis fence_timeout = 5000;
  Millis hand_over_timeout = 20000;
  // Per shard: a server that dies more often than this fails the job. A drained server's move
  // to another node is asked for, not a death, and does not count: a job that runs for months
  // on a cluster drained for maintenance now and then must not fail for it.
  int max_server_restarts = 8;
  scheduler::ControllerConfig controller;
  // For events and the summary only.
  std::string staleness = "none";
  std::int64_t max_staleness = 0;
  std::string lr_scaling = "linear";
  bool scale_lr_by_workers = true;
  AspMutation mutation = AspMutation::kNone;
};

// Commands: what the adapter must do. Trainers are named; the adapter knows their addresses.
struct SpawnCommand {
  std::string node;  // node id
  std::string trainer;
};
struct StopCommand {
  std::string trainer;
  std::string reason;
};
// Fence `worker`'s batches with id <= `through` (kWholeWorker: all) on shard `shard`, served by
// `server` in `incarnation`. With a round: ask (bound: fence_timeout) and hand the answer, or
// its absence, to fence_answered(). Without: tell, no answer wanted (a gone worker fenced off a
// restarted server).
struct FenceCommand {
  std::string server;
  std::int32_t shard = 0;
  std::int64_t incarnation = 0;
  WorkerId worker = 0;
  std::uint64_t through = 0;
  std::optional<std::uint64_t> round;
};
// Ask `server` to hand shard `shard` over (bound: hand_over_timeout), then call handed_over().
struct HandOverCommand {
  std::string server;
  std::int32_t shard = 0;
  std::int64_t incarnation = 0;
};
// Ask whether `server`'s process still answers (a ping its runtime answers, not its training
// loop; bound: a probe timeout, 1 s), then call probe_answered(). Sent when a fence of the
// shard's live incarnation went unanswered.
struct ProbeCommand {
  std::string server;
  std::int64_t incarnation = 0;
};
// A line for events.jsonl (the adapter adds the time).
struct EventCommand {
  nlohmann::json event;
};
// The job's status changed: tell whoever follows it.
struct PublishCommand {};
// Write the machine's snapshot (snapshot()) to the store before carrying out anything after it,
// and before answering the input that asked for it: first in its batch when present.
struct PersistCommand {};
// The job ended: write its summary, release what it holds. Stop commands come before it.
struct FinishCommand {
  std::string state;  // succeeded | failed | stopped
  std::string reason;
};
using AspCommand = std::variant<PersistCommand, SpawnCommand, StopCommand, FenceCommand,
                                HandOverCommand, ProbeCommand, EventCommand, PublishCommand,
                                FinishCommand>;

// A trainer's hello, answered.
struct HelloAnswer {
  bool accepted = false;
  std::string error;
  bool server = false;
  std::int32_t shard = -1;
  std::int64_t incarnation = 0;
  std::string resume_checkpoint;     // servers restarted: the newest checkpoint reported
  std::int64_t resume_version = -1;  // ... at this version (-1: none)
  WorkerId worker = 0;               // workers
};

// A server listens (AspServerReady).
struct ServerReady {
  std::string trainer;
  std::int32_t shard = 0;
  std::string endpoint;
  std::int64_t incarnation = 0;
  std::int64_t version = 0;  // resumed at
  std::int64_t parameters = 0;
  std::int64_t dataset_size = 0;
  std::string resumed_from;
};

// A server's report (AspServerReport).
struct ServerReport {
  std::string trainer;
  std::int32_t shard = 0;
  std::int64_t version = 0;
  std::int64_t updates_lost = 0;
  std::string checkpoint;  // written at `version`; "" if none
  std::int64_t fenced = 0;
};

// A worker's deal request (AspDealRequest: its last batch's outcome, an evaluation's figures).
struct DealAsk {
  std::string trainer;
  std::uint64_t pushed_batch = 0;
  std::uint64_t failed_batch = 0;
  std::int64_t staleness = 0;
  bool applied = false;
  bool dropped = false;
  std::int32_t batch = 0;
  double compute_time_s = 0;
  double update_time_s = 0;
  double loss = 0;
  std::vector<std::int64_t> incarnations;  // per shard: the push reply's (-1: none)
  std::vector<std::int64_t> versions;
  std::vector<std::int64_t> unanswered;  // per shard: the incarnation that did not answer
  std::vector<std::int32_t> unreachable;  // shards whose pull got no reply: their servers probed
  bool evaluated = false;
  std::string eval_error;
  double eval_accuracy = -1;
  double eval_loss = -1;
  std::int64_t eval_version = 0;
  double eval_time_s = 0;
};

struct DealAnswer {
  enum class Action { kBatch, kWait, kFinish, kDone, kEvaluate };
  Action action = Action::kWait;
  std::string error;
  Millis wait = 0;  // kWait: ask again after this long
  std::uint64_t batch_id = 0;
  std::int64_t epoch = 0;
  std::vector<std::int64_t> indices;
  std::vector<std::int32_t> shards_done;
  std::vector<std::string> servers;  // endpoints in shard order (kBatch, kFinish, kEvaluate)
  std::int64_t global_batch = 0;
  std::int32_t workers = 0;
};

// A shard's answer to a fence (AspFenceReply).
struct FenceReply {
  bool ok = false;
  std::string error;
  std::int64_t incarnation = 0;
  std::int64_t version = 0;
  std::vector<TakenBatch> taken;
};

// A drained server's answer (AspHandOverReply).
struct HandOverReply {
  bool ok = false;
  std::string error;
  std::int64_t incarnation = 0;
  std::int64_t version = 0;
  std::string checkpoint;
  std::map<WorkerId, std::vector<TakenBatch>> taken;
};

// The finishing worker's report (AspFinished).
struct FinishReport {
  std::string trainer;
  bool ok = false;
  std::string error;
  double test_accuracy = -1;
  double test_loss = -1;
  std::string checkpoint;
};

class AspJob {
 public:
  struct NodeView {
    std::string id;
    std::string name;
    bool drained = false;
  };
  struct WorkerView {  // a ready worker, for status pages
    std::string trainer;
    std::string node;  // its name
    std::int32_t batch = 0;
    double samples_per_s = 0;
    double step_time_s = 0;
  };
  struct ShardView {
    std::string trainer;
    std::int64_t incarnation = 0;
    bool ready = false;
    bool handing_over = false;
    std::int64_t version = 0;
    std::int64_t checkpoint_version = 0;
    int restarts = 0;
    std::string endpoint;  // where it listens ("" while it does not)
  };

  // Throws std::invalid_argument on servers < 1, 1 <= min_workers <= max_workers not held, or
  // slots < 1.
  explicit AspJob(AspJobOptions options);

  // Lifecycle. start() emits the job's first event (`submitted`; not when `first` is false: a
  // restarted head starting a job it had not placed yet); nodes() then places the first
  // trainers.
  void start(Millis now, bool first = true);
  // The nodes known when the job starts (alive or suspect ones): servers go round robin.
  void nodes(const std::vector<NodeView>& nodes, Millis now);
  void stop(const std::string& reason, Millis now);  // "stopped"
  void fail(const std::string& reason, Millis now);  // "failed"
  void tick(Millis now);  // deadlines and the statistics' intervals; every ~100 ms

  // Membership (the node registry's events).
  void node_up(const std::string& node, const std::string& name, bool drained, Millis now);
  void node_drained(const std::string& node, const std::string& name, bool alive, bool drained,
                    Millis now);
  void node_down(const std::string& node, const std::string& why, Millis now);
  // `omnilearn drain`: workers go, servers hand their shards over first. Returns the trainers
  // leaving.
  int drain(const std::string& node, Millis now);

  // From trainers and their agents.
  HelloAnswer hello(const std::string& trainer, Millis now);
  void server_ready(const ServerReady& ready, Millis now);
  // Returns whether the report's checkpoint bytes should be kept on the head (then the adapter
  // writes them and calls head_copy_kept).
  bool server_report(const ServerReport& report, bool has_bytes, Millis now);
  void head_copy_kept(std::int32_t shard, std::int64_t version);
  // The head's copy a restarted server may fetch: its version, or why there is none.
  struct HeadCopy {
    std::int64_t version = 0;
    std::string error;
  };
  HeadCopy head_copy(const std::string& trainer, std::int32_t shard) const;
  DealAnswer deal(const DealAsk& ask, Millis now);
  void fence_answered(const FenceCommand& asked, const std::optional<FenceReply>& reply,
                      const std::string& error, Millis now);
  void handed_over(const HandOverCommand& asked, const std::optional<HandOverReply>& reply,
                   const std::string& error, Millis now);
  // The answer to a ProbeCommand: `reachable` (it answered) or not (timed out, or `error` says
  // its connection was closed). A server of the shard's live incarnation that does not answer
  // is hung (SIGSTOP, a stuck call) while its agent still sends heartbeats: it is told to stop
  // (it may run again) and the shard restarts elsewhere, as if its node had died.
  void probe_answered(const ProbeCommand& asked, bool reachable, const std::string& error,
                      Millis now);
  void finished(const FinishReport& report, Millis now);
  void trainer_exited(const std::string& trainer, int exit_code, bool bad_input,
                      const std::string& reason, const std::string& last_error, Millis now);
  void trainer_error(const std::string& trainer, const std::string& error);

  std::vector<AspCommand> take_commands();

  // What a restarted head must know to go on with the job, as JSON: placement, trainers and
  // their roles, worker ids, every shard's incarnation, endpoint, versions, checkpoint
  // locations and restart ledger, the dealer's position with its outstanding and reissued
  // batches, the open fence rounds, the fenced-off workers, the plan and the job's counts.
  // Asked for by PersistCommand whenever one of these changes. Times are kept as durations.
  nlohmann::json snapshot(Millis now) const;
  // In place of start() and nodes(), on a machine constructed with the same options: goes on
  // from `snapshot`. What its predecessor asked and never heard back from is asked again: every
  // open fence round of a listening shard, every hand-over under way; every fenced-off worker is
  // fenced again on every listening shard. Trainers it lists as live must be checked by the
  // adapter (those gone during the outage reported with trainer_exited). Throws
  // std::invalid_argument on a snapshot it cannot read (nothing is changed then).
  void restore(const nlohmann::json& snapshot, Millis now);

  // Views.
  bool finished() const { return finished_; }
  const std::string& state() const { return state_; }
  const std::string& reason() const { return reason_; }
  std::int64_t updates() const { return updates_; }
  std::int64_t total_steps() const;
  double loss() const { return loss_; }
  const std::string& final_checkpoint() const { return final_checkpoint_; }
  const std::string& final_checkpoint_node() const { return final_checkpoint_node_; }
  std::vector<WorkerView> workers() const;
  std::vector<ShardView> shards() const;
  // The trainers still there (not gone), for a shutdown.
  std::vector<std::string> live_trainers() const;
  const EpochDealer* dealer() const { return dealer_ ? &*dealer_ : nullptr; }
  // Over every shard: updates restarts lost, as replies prove and at most.
  std::int64_t updates_lost() const;
  std::int64_t updates_lost_at_most() const;
  std::string head_copy_path(std::int32_t shard) const;
  std::string summary_json(Millis now) const;
  const AspJobOptions& options() const { return options_; }

 private:
  struct Node {
    std::string name;
    bool alive = false;
    bool drained = false;
  };
  struct Trainer {
    std::string node;
    bool server = false;
    std::int32_t shard = -1;
    std::int64_t incarnation = 0;  // servers
    WorkerId worker_id = 0;        // workers, from their hello
    bool said_hello = false;
    bool ready = false;  // said hello (workers) / listens (servers)
    bool gone = false;
    // Its exit was reported: an agent sends the exit again to a head that restarted (it cannot
    // tell whether the old head wrote it down), and the job records each exit once.
    bool exited = false;
    Millis spawned_at = 0;
    std::optional<Millis> hello_at;
    std::optional<Millis> first_push_at;
    std::int64_t updates = 0;
    std::int32_t batch = 0;
    double compute_time_s = 0;
    double update_time_s = 0;
    std::int64_t since_plan = 0;
    bool probing = false;  // servers: a ProbeCommand is out
  };
  struct Shard {
    std::string trainer;  // the live incarnation's ("" while none is spawned)
    std::string endpoint;
    std::int64_t incarnation = 0;
    bool ready = false;
    bool handing_over = false;
    Millis hand_over_asked_at = 0;
    // What drained incarnations handed over as taken (in the checkpoint the lineage resumed
    // from), per worker: part of every later answer about the shard's taken batches.
    std::map<WorkerId, std::vector<TakenBatch>> inherited;
    std::string checkpoint;  // the newest any incarnation reported
    std::int64_t checkpoint_version = 0;
    std::int64_t head_copy_version = 0;  // 0: none yet
    std::int64_t version = 0;
    RestartLedger ledger;
    std::int64_t lost_this = 0;
    int restarts = 0;  // every new incarnation: deaths and drains
    int deaths = 0;    // the restarts a drain did not ask for (max_server_restarts)
    std::int64_t pushes_fenced = 0;
    std::int64_t fenced_this = 0;
  };
  struct FenceCounters {
    std::int64_t rounds = 0;
    std::int64_t no_answer = 0;
    std::int64_t taken = 0;
    std::int64_t dealt_again = 0;
  };

  void place(Millis now);
  void spawn(const std::string& node_id, bool server, std::int32_t shard, Millis now);
  void replan(const std::string& why, Millis now);
  bool servers_ready() const;
  std::int64_t live_workers() const;
  std::int64_t outstanding_batches() const;
  bool training_done() const;
  void write_interval(bool force, Millis now, const nlohmann::json& eval = nullptr);
  void on_evaluated(const DealAsk& ask, Millis now);
  void failed_push(Trainer& t, const DealAsk& ask, Millis now);
  void accepted_push(Trainer& t, const DealAsk& ask, Millis now);
  // `drained`: the job moved it off a drained node (not a death: max_server_restarts).
  void trainer_gone(const std::string& name, const std::string& why, Millis now,
                    bool drained = false);
  void send_fence(const FenceAsk& ask);
  void fence_shard(std::uint64_t round, std::int32_t shard, WorkerId worker, std::uint64_t through);
  void probe_server(std::int32_t shard);  // a ProbeCommand for its live incarnation, once
  std::vector<TakenBatch> with_inherited(std::int32_t shard, WorkerId worker,
                                         std::vector<TakenBatch> taken) const;
  void on_settled(const std::vector<SettledBatch>& settled, Millis now);
  Trainer* worker_trainer(WorkerId worker);
  void finish(const std::string& state, const std::string& reason, Millis now);
  void emit(nlohmann::json event) { commands_.push_back(EventCommand{std::move(event)}); }
  // Something a restarted head must know changed: the next take_commands() starts with a
  // PersistCommand.
  void changed() { persist_due_ = true; }
  void ask_again(Millis now);
  std::string node_name(const std::string& node) const;

  AspJobOptions options_;
  std::vector<AspCommand> commands_;
  bool persist_due_ = false;
  std::string state_ = "pending";
  std::string reason_;
  bool started_ = false;
  bool finished_ = false;
  Millis started_at_ = 0;
  Millis last_progress_ = 0;
  std::optional<Millis> too_few_since_;

  std::map<std::string, Node> nodes_;
  std::map<std::string, Trainer> trainers_;
  std::vector<Shard> shards_;
  int next_trainer_ = 0;
  WorkerId next_worker_id_ = 1;
  std::int64_t parameters_ = 0;

  std::optional<EpochDealer> dealer_;
  std::optional<BatchFences> fences_;
  std::set<WorkerId> gone_workers_;  // fenced whole on every server, restarted ones too
  FenceCounters fence_counters_;
  StalenessStats stats_;
  scheduler::BatchController controller_;
  std::map<std::string, std::int32_t> plan_;  // worker trainer -> batch
  std::int64_t plan_version_ = 0;
  std::int64_t updates_ = 0;  // pushes every shard applied: the job's steps
  std::int64_t dropped_stale_ = 0;
  std::int64_t pushes_ = 0;
  std::int64_t duplicates_ = 0;
  std::int64_t failed_batches_ = 0;
  std::int64_t last_plan_update_ = 0;
  double loss_ = 0;
  Millis interval_started_ = 0;
  std::int64_t interval_updates_ = 0;

  std::string evaluator_;
  std::int64_t eval_dealt_at_ = 0;
  std::int64_t next_eval_ = 0;
  std::int64_t evaluations_ = 0;
  double last_eval_accuracy_ = -1;

  std::string finisher_;
  bool finishing_announced_ = false;
  int start_failures_ = 0;
  double final_accuracy_ = -1;
  double final_loss_ = -1;
  std::string final_checkpoint_;
  std::string final_checkpoint_node_;
  std::string last_trainer_error_;
  std::vector<std::string> membership_log_;
};

}  // namespace omnilearn::asp
