#pragma once
// SchedulerActor: one per job, on the head. Places trainers on nodes, forms generations (rank
// order + batch plan) as trainers join, leave or die, feeds the batch controller with the
// throughput that heartbeats carry, publishes plans through the rank-0 leader, and writes the
// job's run directory (events.jsonl, summary.json).

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/job_protocol.hpp"
#include "actors/job_spec.hpp"
#include "runtime/actor_system.hpp"
#include "scheduler/batch_controller.hpp"

namespace omnilearn::actors {

struct SchedulerOptions {
  std::string job_id;
  JobSpec spec;
  std::string job_toml;     // passed on to trainers, which parse it with the same parser
  std::string source_name;
  std::string run_dir;
  runtime::ActorAddress jobs;  // the JobManager, told about state changes
  std::chrono::milliseconds heartbeat_timeout{3000};
  std::chrono::milliseconds spawn_timeout{60000};   // trainer process start (LibTorch load)
  std::chrono::milliseconds form_timeout{30000};    // a generation must form within this
};

class SchedulerActor : public runtime::Actor {
 public:
  explicit SchedulerActor(SchedulerOptions options);

  void on_start() override;
  void on_message(const runtime::Envelope& message) override;
  void on_stop() override;

 private:
  using Clock = std::chrono::steady_clock;

  enum class Phase { kSpawning, kReady, kMember, kLeaving, kGone };
  struct Trainer {
    std::string name;
    std::string node_id;
    std::string system;  // the trainer process's actor system, once it said hello
    Phase phase = Phase::kSpawning;
    Clock::time_point spawned_at;
    std::int32_t rank = -1;
    std::int64_t committed_step = 0;
    // Latest counters from heartbeats.
    std::int64_t counter_steps = 0;
    std::int32_t counter_batch = 0;
    double samples_per_s = 0;
    double step_time_s = 0;
    double compute_time_s = 0;
    std::int64_t observed_steps = 0;  // counter_steps when last fed to the controller
  };
  struct Node {
    std::string id;
    std::string name;
    std::string system;
    bool alive = true;
    bool draining = false;
  };

  // Membership.
  void on_node_event(const NodeEvent& event);
  void add_or_update_node(const NodeInfo& info);
  void place_trainers();
  void trainer_gone(const std::string& trainer, const std::string& reason);
  void maybe_regroup(const std::string& reason);
  void form_generation(std::vector<std::string> members, const std::string& reason);
  void probe_members();
  void check_timeouts();

  // Progress.
  void on_report(const runtime::Envelope& message, const TrainerReport& report);
  void on_heartbeat_counters(const NodeInfo& node);
  bool interval_due() const;
  void maybe_replan();
  void on_done(const TrainerDone& done);

  // Job lifecycle.
  void finish(const std::string& state, const std::string& reason);
  void emit(const std::string& json_line);
  JobInfo info() const;
  void publish_info();
  std::string summary_json() const;

  SchedulerOptions options_;
  std::string state_ = "pending";
  std::string reason_;
  Clock::time_point started_at_;
  std::optional<Clock::time_point> first_step_at_;

  std::map<std::string, Node> nodes_;
  std::map<std::string, Trainer> trainers_;
  int trainer_counter_ = 0;

  scheduler::BatchController controller_;
  std::int64_t generation_ = 0;
  std::vector<std::string> members_;        // by rank, of generation_
  std::vector<std::int32_t> batches_;       // the plan in force, by rank
  std::uint64_t plan_version_ = 0;
  bool forming_ = false;                    // generation_ has not reported a step yet
  Clock::time_point formed_requested_at_;
  std::int64_t plan_effective_step_ = 0;    // first step run with the current plan
  std::int64_t last_replan_step_ = 0;
  Clock::time_point last_replan_time_;
  std::optional<Clock::time_point> below_min_since_;

  // Progress as reported by the rank-0 leader.
  std::int64_t step_ = 0;
  std::int64_t total_steps_ = 0;
  std::int64_t epoch_ = 0;
  double loss_ = 0;
  double last_eval_accuracy_ = -1;
  double last_eval_loss_ = -1;
  double final_accuracy_ = -1;
  double final_loss_ = -1;
  std::string final_checkpoint_;

  // Elasticity accounting.
  std::optional<Clock::time_point> disruption_at_;  // a member died; waiting to train again
  std::int64_t step_at_disruption_ = 0;
  std::vector<double> recovery_s_;
  std::int64_t lost_steps_ = 0;          // committed steps that had to be redone
  std::int64_t abandoned_steps_ = 0;     // in-flight steps abandoned by a failure
  std::vector<std::string> membership_log_;

  std::vector<std::string> events_;      // events.jsonl, also served to --follow
  std::ofstream events_file_;
  bool finished_ = false;
};

}  // namespace omnilearn::actors
