#pragma once
// AspSchedulerActor: the job's scheduler when mode = "asp" (issue 13), on the head, in place of
// the BSP SchedulerActor (the JobManager picks one by mode). There are no generations: it
// starts `[asp] servers` parameter-server trainers (one shard of the flat parameter vector
// each) and up to max_workers worker trainers, deals every batch from one EpochDealer (so
// sampling is exactly once per epoch whatever each worker's speed, and survives a server's
// restart), keeps the job's staleness statistics and the batch controller, restarts a dead
// server on a live node from its last checkpoint, and ends the job. Workers come and go with no
// regroup: a worker that goes has its outstanding batch fenced off the servers and then dealt
// again to the shards that did not take it (asp/batch_fences.hpp: a worker declared gone may
// still be pushing); one that joins asks for a batch like any other.
//
// Threads: an actor; every method runs in its turns.

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/asp_protocol.hpp"
#include "actors/job_protocol.hpp"
#include "actors/scheduler_actor.hpp"
#include "asp/batch_fences.hpp"
#include "asp/epoch_dealer.hpp"
#include "asp/restart_ledger.hpp"
#include "asp/staleness.hpp"
#include "runtime/actor_system.hpp"
#include "scheduler/batch_controller.hpp"

namespace omnilearn::actors {

class AspSchedulerActor : public runtime::Actor {
 public:
  explicit AspSchedulerActor(SchedulerOptions options);

  void on_start() override;
  void on_message(const runtime::Envelope& message) override;
  void on_stop() override;

 private:
  using Clock = std::chrono::steady_clock;

  struct Node {
    std::string name;
    std::string system;  // its agent's actor system
    bool alive = false;
    bool drained = false;  // omnilearn node drain: nothing more is placed there
  };
  struct Trainer {
    std::string node;  // node id
    bool server = false;
    std::int32_t shard = -1;
    std::int64_t incarnation = 0;  // servers
    std::int64_t worker_id = 0;    // workers, from their hello
    std::string system;            // after its hello
    bool ready = false;            // said hello (workers) / listens (servers)
    bool gone = false;
    Clock::time_point spawned_at;
    std::optional<Clock::time_point> hello_at;
    std::optional<Clock::time_point> first_push_at;
    std::int64_t updates = 0;   // applied pushes
    std::int32_t batch = 0;     // its last batch
    double compute_time_s = 0;  // of its last push
    double update_time_s = 0;
    std::int64_t since_plan = 0;  // pushes at the plan in force
  };
  struct Shard {
    std::string trainer;  // the live incarnation's trainer ("" while none is spawned)
    std::string endpoint;
    std::int64_t incarnation = 0;
    bool ready = false;
    bool handing_over = false;  // its node drained: deals wait until it serves elsewhere
    // What drained incarnations handed over as taken (in the checkpoint the lineage resumed
    // from), per worker: part of every later answer about the shard's taken batches.
    std::map<asp::WorkerId, std::vector<asp::TakenBatch>> inherited;
    std::string checkpoint;  // the newest checkpoint any incarnation reported
    std::int64_t checkpoint_version = 0;
    // The head's copy of it (head_copy_path), written from the report's bytes: what a restart
    // on another node resumes from. 0: none yet.
    std::int64_t head_copy_version = 0;
    std::int64_t version = 0;    // of the live incarnation, the highest a push reply told
    // What each incarnation's replies told and which pushes got none: the updates restarts
    // lost, between ledger.lost() and ledger.lost_at_most().
    asp::RestartLedger ledger;
    std::int64_t lost_this = 0;  // the live incarnation's own count (ServerCore::updates_lost)
    int restarts = 0;
    std::int64_t pushes_fenced = 0;  // refused by its incarnations so far (their reports)
    std::int64_t fenced_this = 0;    // the live incarnation's count
  };
  // What fencing settled (asp::BatchFences), for the summary.
  struct FenceCounters {
    std::int64_t rounds = 0;
    std::int64_t no_answer = 0;     // asks that got no answer in time (asked again; a dead
                                    // shard's, of its restart) or an error (not taken)
    std::int64_t taken = 0;         // batches every shard had taken: counted as pushed
    std::int64_t dealt_again = 0;   // batches dealt again (to the shards that had not)
  };

  void on_node_event(const NodeEvent& event);
  void on_hello(const runtime::Envelope& message, const TrainerHello& hello);
  void on_deal(const runtime::Envelope& message, const AspDealRequest& request);
  void on_server_ready(const runtime::Envelope& message, const AspServerReady& ready);
  void on_server_report(const runtime::Envelope& message, const AspServerReport& report);
  void on_fetch_checkpoint(const runtime::Envelope& message, const AspFetchCheckpoint& fetch);
  std::string head_copy_path(std::int32_t shard) const;
  void on_finished(const runtime::Envelope& message, const AspFinished& finished);
  void on_trainer_exited(const TrainerExited& exited);
  // A drained server: AspHandOver (it checkpoints at its last version and refuses every later
  // push), then it is stopped and restarts elsewhere from that checkpoint: nothing is lost.
  void hand_over(const std::string& name);
  // Fencing: one round's asks (a shard that is down is asked when it listens again).
  void send_fence(const asp::FenceAsk& ask);
  // `taken` (a fence's answer, or nothing) with what `shard` inherited from drained
  // incarnations for `worker`.
  std::vector<asp::TakenBatch> with_inherited(std::int32_t shard, asp::WorkerId worker,
                                              std::vector<asp::TakenBatch> taken) const;
  // One shard's part of fence round `round`; asked again while the shard stays live and silent,
  // and of the incarnation that resumes it if it dies (on_server_ready).
  void fence_shard(std::uint64_t round, std::int32_t shard, asp::WorkerId worker,
                   std::uint64_t through);
  void on_settled(const std::vector<asp::SettledBatch>& settled);
  Trainer* worker_trainer(asp::WorkerId worker);
  void trainer_gone(const std::string& name, const std::string& why);
  void tick();

  void place();  // spawns missing servers and workers on live nodes
  void spawn(const std::string& node_id, bool server, std::int32_t shard);
  void replan(const std::string& why);
  bool servers_ready() const;
  std::int64_t live_workers() const;
  std::int64_t outstanding_batches() const;
  bool training_done() const;
  // `eval`: an evaluation's figures, written into the interval's event (the follow view and
  // the dashboard show test accuracy from it, as from BSP's step events).
  void write_interval(bool force, const nlohmann::json& eval = nullptr);
  void on_evaluated(const AspDealRequest& request);

  void fail(const std::string& reason) { finish("failed", reason); }
  void finish(const std::string& state, const std::string& reason);
  void emit(const nlohmann::json& event);
  JobInfo info() const;
  void publish_info();
  std::string summary_json() const;
  std::int64_t total_steps() const;

  SchedulerOptions options_;
  std::string state_ = "pending";
  std::string reason_;
  bool finished_ = false;
  Clock::time_point started_at_;
  Clock::time_point last_progress_;
  std::optional<Clock::time_point> too_few_since_;
  runtime::TimerId tick_timer_ = 0;

  std::map<std::string, Node> nodes_;
  std::map<std::string, Trainer> trainers_;
  std::vector<Shard> shards_;
  int next_trainer_ = 0;
  std::int64_t next_worker_id_ = 1;
  std::int64_t parameters_ = 0;  // the flat vector's size, from the first server

  std::optional<asp::EpochDealer> dealer_;  // once a server said how many samples there are
  std::optional<asp::BatchFences> fences_;  // with the dealer
  std::set<asp::WorkerId> gone_workers_;    // fenced whole on every server, restarted ones too
  FenceCounters fence_counters_;
  asp::StalenessStats stats_;
  scheduler::BatchController controller_;
  std::map<std::string, std::int32_t> plan_;  // worker trainer -> batch
  std::int64_t plan_version_ = 0;
  std::int64_t updates_ = 0;  // pushes every shard applied: the job's steps
  std::int64_t dropped_stale_ = 0;
  std::int64_t pushes_ = 0;  // every push weighed
  std::int64_t duplicates_ = 0;
  std::int64_t failed_batches_ = 0;
  std::int64_t last_plan_update_ = 0;
  double loss_ = 0;
  Clock::time_point interval_started_;
  std::int64_t interval_updates_ = 0;

  // Evaluation every `[train] eval_every` updates: the worker evaluating (one at a time), the
  // update count it was dealt at, and the next count that deals one.
  std::string evaluator_;
  std::int64_t eval_dealt_at_ = 0;
  std::int64_t next_eval_ = 0;
  std::int64_t evaluations_ = 0;
  double last_eval_accuracy_ = -1;

  std::string finisher_;  // the worker told to write the final model
  bool finishing_announced_ = false;
  int start_failures_ = 0;  // trainers gone before they served (servers) or pushed (workers)
  double final_accuracy_ = -1;
  double final_loss_ = -1;
  std::string final_checkpoint_;
  std::string final_checkpoint_node_;
  std::string last_trainer_error_;
  std::vector<std::string> membership_log_;

  std::vector<std::string> events_;
  std::ofstream events_file_;
};

}  // namespace omnilearn::actors
