#pragma once
// AspSchedulerActor: the job's scheduler when mode = "asp", on the head, in place of the BSP
// SchedulerActor (the JobManager picks one by mode). The rules (placement, dealing, fencing,
// hand-over, restarts, the evaluator and the finisher, stalls) are asp::AspJob's, a pure state
// machine; this actor is its adapter: it turns messages and the clock into the machine's inputs
// and its commands into messages, and does the I/O the machine does not: the head's copies of
// shard checkpoints, the machine's snapshot in the state store under run_key(job) (written
// before anything that depends on it goes out, replies included), and, through the JobRecorder
// it shares with the synchronous scheduler, events.jsonl, summary.json and the status pages.
//
// Threads: an actor; every method runs in its turns.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "wire/asp_protocol.hpp"
#include "wire/job_protocol.hpp"
#include "jobs/job_recorder.hpp"
#include "jobs/scheduler_actor.hpp"
#include "asp/asp_job.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/running_clock.hpp"

namespace omnilearn::actors {

// The machine's options from a job's spec (the timeouts from the scheduler's options).
asp::AspJobOptions asp_job_options(const SchedulerOptions& options);

// The JSON kept under run_key(job) for an asynchronous job: the machine's snapshot
// (asp::AspJob::snapshot) and the trainers' addresses. decode_asp_run_state throws
// std::invalid_argument on text it cannot read.
std::string encode_asp_run_state(const nlohmann::json& machine,
                                 const std::map<std::string, std::string>& trainer_systems);
struct AspRunState {
  nlohmann::json machine;
  std::map<std::string, std::string> trainer_systems;
};
AspRunState decode_asp_run_state(const std::string& text);

class AspSchedulerActor : public runtime::Actor {
 public:
  explicit AspSchedulerActor(SchedulerOptions options);

  void on_start() override;
  void on_message(const runtime::Envelope& message) override;
  void on_stop() override;

 private:
  using Clock = std::chrono::steady_clock;

  // The job's time since its start: the head's running time (runtime/running_clock.hpp), so
  // that a head that was stopped or starved holds no process to what it could not hear.
  asp::Millis now() const;
  // Carries out what the machine decided (after every input), or holds it until flush() has
  // written a snapshot that covers it.
  void run_commands();
  void carry_out(std::vector<asp::AspCommand>& commands);
  // Sends an answer now, or after the write it depends on.
  void respond(std::function<void()> answer);
  void flush();
  // Writes the machine's snapshot (PersistCommand); false when the store refused it.
  bool persist_run();
  // A restarted head's: the machine goes on from the snapshot, and every trainer it lists as
  // live is pinged (an exit during the outage was reported to the dead head).
  void restore_run();
  void on_nodes(const StatusReply& snapshot);
  void probe(const std::string& trainer, Clock::time_point deadline);
  void on_deal(const runtime::Envelope& message, const AspDealRequest& request);
  void on_server_report(const runtime::Envelope& message, const AspServerReport& report);
  void on_fetch_checkpoint(const runtime::Envelope& message, const AspFetchCheckpoint& fetch);
  void on_node_event(const NodeEvent& event);
  void on_drain(const runtime::Envelope& message);
  void fence(const asp::FenceCommand& command);
  void hand_over(const asp::HandOverCommand& command);
  void probe_server(const asp::ProbeCommand& command);
  // Asks the trainer runtime `system` for a ping (answered by its runtime, whatever its
  // training loop does); `done` gets the answer or the reason there is none.
  void ping(const std::string& system, std::chrono::milliseconds timeout,
            std::function<void(runtime::AskResult)> done);
  void tell_trainer(const std::string& trainer, StopTrainer stop);
  void tick();
  void finished(const asp::FinishCommand& command);
  JobInfo info() const;
  void publish_info();

  SchedulerOptions options_;
  asp::AspJob job_;
  Clock::time_point started_at_;
  runtime::TimerId tick_timer_ = 0;
  std::map<std::string, std::string> node_systems_;     // node id -> its agent's system
  std::map<std::string, std::string> trainer_systems_;  // trainer -> its process's system
  bool persist_due_ = false;  // a snapshot must be written before held_ goes out
  bool flush_scheduled_ = false;
  std::vector<std::function<void()>> held_;  // commands and replies waiting for the write
  JobRecorder recorder_;  // events.jsonl, summary.json, the pages --follow and logs read
  mutable runtime::RunningClock clock_;  // what now() reads
  const std::string clock_subject_;      // who did not run, in the log of a gap
};

}  // namespace omnilearn::actors
