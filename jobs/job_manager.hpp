#pragma once
// JobManager ("jobs" on the head): accepts job submissions, starts one SchedulerActor per job,
// routes client requests about jobs and nodes, and keeps a summary of every job for status.
// A job's scheduler lives only while the job runs: once it reports the job finished (or it
// crashes), the JobManager stops it and answers for the job itself from what the job left (its
// final JobInfo, summary and events.jsonl), so a head that runs jobs for months keeps no thread,
// file or subscription per finished job.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>
#include <set>
#include <string>

#include "cluster/head_state.hpp"
#include "wire/job_protocol.hpp"
#include "jobs/job_recorder.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/system_messages.hpp"
#include "state/state_store.hpp"

namespace omnilearn::actors {

struct JobManagerOptions {
  std::string runs_root = "runs";  // run directories default to <runs_root>/<job-id>
  std::size_t max_jobs = 256;  // jobs kept; beyond it the oldest finished one is forgotten, and
                               // a submission fails if all of them are still pending or running
  std::chrono::milliseconds heartbeat_timeout{3000};
  // How long a scheduler that reported its job finished may go on before it is stopped (see
  // JobManager::on_job_finished).
  std::chrono::milliseconds finished_scheduler_grace{1000};
  // Where jobs are written before they are acknowledged (null: nowhere, as in unit tests).
  std::shared_ptr<state::StateStore> store;
  // The jobs a previous head over the same store kept, and this head's start. A restored job
  // that had not finished goes on, synchronous or asynchronous: its scheduler restores the
  // protocol state the previous one wrote (or starts it, if it had placed no trainer yet).
  std::vector<StoredJob> restored;
  HeadInfo head;
  // Passed to every scheduler (SchedulerOptions::head_stop); set, a scheduler that stops before
  // its job ended leaves the job to the next head instead of the JobManager ending it as failed.
  std::shared_ptr<const HeadStop> head_stop;
};

// Whether a restarted head resumes this unfinished job (synchronous or asynchronous) or ends it
// (its job file no longer parses).
bool job_resumable(const StoredJob& job);

class JobManager : public runtime::Actor {
 public:
  explicit JobManager(JobManagerOptions options);
  void on_start() override;
  void on_message(const runtime::Envelope& message) override;

 private:
  struct Job {
    JobInfo info;                 // as last published by its scheduler (or set here)
    std::string run_dir;
    std::uint64_t events_skipped = 0;  // lines events.jsonl already had at submission (a reused
                                       // run directory): the job's event i is line skipped + i
    bool finished = false;        // final: info, summary_json and events.jsonl no longer change
    std::string summary_json;     // once finished
    // Where the last reply from events.jsonl ended, so a client following a finished job reads
    // the file once in total rather than from the start for every batch of events.
    EventFilePosition cursor;
    std::string toml;          // the job file as submitted, and its name: kept in the store
    std::string source_name;
    double submitted_at = 0;   // Unix time
  };

  void submit(const runtime::Envelope& message, const SubmitJob& request);
  // Hands the client's request to the job's scheduler unchanged: it replies to the client.
  void forward_to_job(const runtime::Envelope& message, const std::string& job_id);
  // A scheduler's JobStatusReply: its job's state, final when `update.finished`.
  void on_job_update(const runtime::Envelope& message, const JobStatusReply& update);
  void on_job_finished(const std::string& job_id);
  // A scheduler actor stopped: expected once its job finished; otherwise the job failed.
  void on_scheduler_down(const runtime::Down& down);
  // The job's final answer to JobStatusRequest, read from its run directory.
  JobStatusReply finished_job_status(Job& job, std::uint64_t since);
  // Stops the job's scheduler actor if it still runs. Blocks until its on_stop ran.
  void stop_scheduler(const std::string& job_id, const std::string& reason);
  // Deletes the job's rendezvous keys from the store (job/<id>/...).
  void release_store_keys(const std::string& job_id);
  const NodeInfo* find_node(const std::string& name_or_id) const;
  // Forgets the oldest finished job (its run directory stays on disk): its scheduler and its
  // record, in memory and in the store. False when every job is pending or running, or when the
  // store cannot take the change (then `error` says why, and nothing is forgotten).
  bool forget_oldest_finished(std::string* error);
  // Takes over options_.restored (on_start).
  void restore_jobs();
  // Ends a job whose scheduler cannot: state and reason, a "finished" event after `events`, and
  // summary.json, as the scheduler would have written them.
  void end_job_here(Job& job, const std::string& state, const std::string& reason,
                    std::vector<RunEvent> events = {});
  // Writes the job's record to the store; false (logged) when the store cannot take it.
  bool persist(const Job& job);

  JobManagerOptions options_;
  std::map<std::string, Job> jobs_;        // by id
  std::deque<std::string> submitted_;      // the ids in jobs_, oldest submission first
  std::map<std::string, NodeInfo> nodes_;  // by id, from the registry's events
  std::set<std::string> drained_;          // names of the nodes drained for every job
};

}  // namespace omnilearn::actors
