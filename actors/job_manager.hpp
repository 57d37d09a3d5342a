#pragma once
// JobManager ("jobs" on the head): accepts job submissions, starts one SchedulerActor per job,
// routes client requests about jobs and nodes, and keeps a summary of every job for status.

#include <deque>
#include <map>
#include <string>

#include "actors/job_protocol.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::actors {

struct JobManagerOptions {
  std::string runs_root = "runs";  // run directories default to <runs_root>/<job-id>
  std::size_t max_jobs = 256;  // jobs kept; beyond it the oldest finished one is forgotten, and
                               // a submission fails if all of them are still pending or running
  std::chrono::milliseconds heartbeat_timeout{3000};
};

class JobManager : public runtime::Actor {
 public:
  explicit JobManager(JobManagerOptions options);
  void on_start() override;
  void on_message(const runtime::Envelope& message) override;

 private:
  void submit(const runtime::Envelope& message, const SubmitJob& request);
  // Hands the client's request to the job's scheduler unchanged: it replies to the client.
  void forward_to_job(const runtime::Envelope& message, const std::string& job_id);
  const NodeInfo* find_node(const std::string& name_or_id) const;

  JobManagerOptions options_;
  std::map<std::string, JobInfo> jobs_;    // by id, as last published by its scheduler
  std::deque<std::string> submitted_;      // the ids in jobs_, oldest submission first
  std::map<std::string, NodeInfo> nodes_;  // by id, from the registry's events
};

}  // namespace omnilearn::actors
