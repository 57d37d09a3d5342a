#pragma once
// SchedulerActor: one per job, on the head. A thin adapter around scheduler::ElasticJob, the
// protocol's state machine (placement, generations, leases, the end of the job): it turns
// registry events and trainer messages into the machine's inputs and its commands into
// messages. Beside it, the actor feeds the batch controller with the throughput that
// heartbeats carry; the job's run directory (events.jsonl, summary.json) and the status pages
// are its JobRecorder's, shared with the asynchronous scheduler.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/job_protocol.hpp"
#include "jobs/job_recorder.hpp"
#include "jobs/job_spec.hpp"
#include "cluster/head_state.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/running_clock.hpp"
#include "controller/batch_controller.hpp"
#include "controller/control_rounds.hpp"
#include "elastic/elastic_job.hpp"
#include "state/state_store.hpp"

namespace omnilearn::actors {

struct SchedulerOptions {
  std::string job_id;
  JobSpec spec;
  std::string job_toml;     // passed on to trainers, which parse it with the same parser
  std::string source_name;
  std::string run_dir;
  // Lines events.jsonl held before the job's first event (a reused run directory).
  std::uint64_t events_skipped = 0;
  runtime::ActorAddress jobs;  // the JobManager, told about state changes
  std::chrono::milliseconds heartbeat_timeout{3000};
  std::chrono::milliseconds spawn_timeout{60000};   // trainer process start (LibTorch load)
  std::chrono::milliseconds form_timeout{30000};    // a generation must form within this
  // A leader's lease; below the heartbeat timeout, after which the job forms a generation
  // without the leader's node (0: a third of the heartbeat timeout, at most 1 s).
  std::chrono::milliseconds lease_duration{0};
  // Where the job's protocol state is written (run_key), before what depends on it goes out;
  // null: nowhere (unit tests).
  std::shared_ptr<state::StateStore> store;
  // A restarted head's: the state the previous head wrote last (StoredJob::run_state). The
  // job goes on from it (ElasticJob::restore) instead of starting.
  std::string restore_state;
  std::uint64_t head_epoch = 0;
  double head_outage_s = -1;
  // Read when the scheduler stops before its job ended: set, the head is stopping and leaves
  // the job to the next head, so its trainers are told nothing; otherwise they are stopped.
  std::shared_ptr<const HeadStop> head_stop;
};

// What both schedulers tell a trainer of the job they accept: the job file, where checkpoints
// go (the job file's [checkpoint] dir, else the run directory's checkpoints/) and the
// collective timeout. The asynchronous scheduler adds the trainer's role.
TrainerHelloReply accepted_hello(const SchedulerOptions& options);

// The JSON kept under run_key(job): the protocol machine's snapshot and what the adapter needs
// to reach the trainers and write the job's record.
std::string encode_run_state(const scheduler::ElasticJobSnapshot& machine,
                             const std::map<std::string, std::string>& trainer_systems,
                             std::int64_t step, std::int64_t epoch,
                             const nlohmann::json& checkpoints);
struct RunState {
  scheduler::ElasticJobSnapshot machine;
  std::map<std::string, std::string> trainer_systems;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  nlohmann::json checkpoints = nlohmann::json::array();
};
// Throws std::invalid_argument naming what is wrong.
RunState decode_run_state(const std::string& json);

class SchedulerActor : public runtime::Actor {
 public:
  explicit SchedulerActor(SchedulerOptions options);

  void on_start() override;
  void on_message(const runtime::Envelope& message) override;
  void on_stop() override;

 private:
  using Clock = std::chrono::steady_clock;

  // What the adapter keeps beside the protocol machine, per trainer.
  struct TrainerIo {
    std::string system;  // the trainer process's actor system, once it said hello
    // Latest counters from heartbeats.
    std::int32_t counter_batch = 0;
    double samples_per_s = 0;
    double step_time_s = 0;
    double compute_time_s = 0;
    // The committed step the counters' window ended at; the window of the next heartbeat
    // starts after it (or where the batch changed). Recorded in step events as timing_steps.
    std::int64_t counter_steps = 0;
    // The last rendezvous meant for it, sent again when it says hello from a new place (after
    // a head restart or takeover, when the first one had no route to it).
    std::optional<Rendezvous> last_rendezvous;
    // Its exit was written to events.jsonl (an agent reports exits again to a restarted head).
    bool exit_reported = false;
  };

  // The job's time: the head's running time (runtime/running_clock.hpp), so that a head that
  // was stopped or starved holds no trainer to what it could not hear meanwhile.
  scheduler::Millis now() const;
  // Runs one input through the machine and carries out what it says; a protocol error (an
  // infeasible plan, say) fails the job with the reason instead of killing the actor silently.
  template <class F>
  void drive(F&& input);
  void carry_out(std::vector<scheduler::JobCommand> commands);
  // Writes the machine's snapshot (PersistCommand); false when the store refused it.
  bool persist_run();
  void restore_run(const RunState& run);
  void write_event(const scheduler::JobEvent& event);
  scheduler::GenerationPlan plan_for(const std::vector<std::string>& members);

  void on_node_event(const NodeEvent& event);
  void on_heartbeat_counters(const NodeInfo& node);
  void on_report(const TrainerReport& report);
  // Feeds the controller the compute of every rank in the leader's report of one step.
  void observe_step(const TrainerReport& report);
  bool interval_due() const;
  void fit_lease_to_steps(double step_time_s);
  void maybe_replan();
  void tick();

  void finished(const std::string& state, const std::string& reason);
  JobInfo info() const;
  void publish_info();
  nlohmann::json summary() const;
  // summary.json's measured_speeds and speedup_estimate (null without timings).
  nlohmann::json speed_summary() const;

  SchedulerOptions options_;
  scheduler::ElasticJob job_;
  Clock::time_point started_at_;
  std::map<std::string, TrainerIo> io_;
  std::map<std::string, std::string> node_systems_;  // node id -> its agent's system

  scheduler::BatchController controller_;
  // The leader's step reports carry every rank's compute of every step: the controller observes
  // each step (observe_step) instead of the agents' heartbeat windows.
  bool step_timings_ = false;
  scheduler::ControlRounds rounds_;  // when the controller runs, which timings it sees
  Clock::time_point last_replan_time_;
  std::int64_t seen_generation_ = 0;

  // Progress as reported by the rank-0 leader.
  std::int64_t step_ = 0;
  std::int64_t epoch_ = 0;
  double loss_ = 0;
  double final_accuracy_ = -1;
  double final_loss_ = -1;
  std::string final_checkpoint_;
  std::string final_checkpoint_node_;
  // Every checkpoint the job wrote: where it is (a trainer writes on its own node's disk).
  struct CheckpointRecord {
    std::int64_t step = 0;
    std::string path;
    std::string node;
  };
  std::vector<CheckpointRecord> checkpoints_;
  std::string node_of(const std::string& trainer) const;
  nlohmann::json checkpoints_json() const;
  std::string last_trainer_error_;       // the last training error a trainer reported
  std::string reason_;                   // the job's end, as written in the summary
  std::int64_t superseded_steps_ = 0;    // steps a superseded leader reported (see on_report)
  // Generation -> the last step written for it (`step` or `superseded_step`; see on_report).
  std::map<std::int64_t, std::int64_t> last_step_written_;
  std::string last_lease_refusal_;       // trainer/generation/reason of the last one written
  std::vector<std::string> membership_log_;

  JobRecorder recorder_;  // events.jsonl, summary.json, the pages --follow and logs read
  bool finished_ = false;
  runtime::TimerId tick_timer_ = 0;
  scheduler::Millis base_lease_ms_ = 0;  // the lease for fast steps (job_options)
  static constexpr scheduler::Millis kMaxLeaseMs = 30000;  // the trainers' group timeout
  mutable runtime::RunningClock clock_;  // what now() reads
  const std::string clock_subject_;      // who did not run, in the log of a gap
};

}  // namespace omnilearn::actors
