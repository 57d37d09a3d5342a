#pragma once
// What the dashboard knows about the cluster, fetched from the head's actors on demand and
// cached briefly: the nodes and jobs (`status --json`'s data), and one JobTimeline per job,
// fed incrementally with the job's events (the same lines as its events.jsonl).
//
// Threads: every public method may be called from any thread (the HTTP server's); one mutex
// guards the cache, and refreshes run under it, so concurrent requests share one fetch.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "wire/job_protocol.hpp"
#include "dashboard/job_timeline.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::dashboard {

// Where the feed reads from. The head's actors in production (ActorHeadSource); a fake in
// tests. Each call is bounded; nullopt means no answer.
class HeadSource {
 public:
  virtual ~HeadSource() = default;
  // Nodes and counters from the registry, jobs from the job manager.
  virtual std::optional<actors::StatusReply> cluster_status() = 0;
  // One page of a job's events from index `since` (JobStatusRequest).
  virtual std::optional<actors::JobStatusReply> job_status(const std::string& job_id,
                                                           std::uint64_t since) = 0;
};

// Asks the registry and job manager of `system` (the head's own, so no socket is involved).
class ActorHeadSource : public HeadSource {
 public:
  ActorHeadSource(runtime::ActorSystem& system, std::chrono::milliseconds timeout)
      : system_(system), timeout_(timeout) {}
  std::optional<actors::StatusReply> cluster_status() override;
  std::optional<actors::JobStatusReply> job_status(const std::string& job_id,
                                                   std::uint64_t since) override;

 private:
  runtime::ActorSystem& system_;  // outlives the source: the head owns both
  std::chrono::milliseconds timeout_;
};

// A page of one job's events for /api/jobs/<id>/events.
struct EventsPage {
  bool found = false;
  nlohmann::json events = nlohmann::json::array();  // the events.jsonl objects, in order
  std::uint64_t next = 0;
  bool finished = false;
  std::uint64_t dropped = 0;  // events before these that the head no longer holds
};

class ClusterFeed {
 public:
  // `max_age`: how old the cached state may be before a request fetches it again.
  ClusterFeed(std::unique_ptr<HeadSource> source, std::chrono::milliseconds max_age,
              TimelineLimits limits = {});

  // `status --json`'s object; nullopt if the head's actors did not answer.
  std::optional<nlohmann::json> status();
  // The chart data of a job (JobTimeline::chart_data plus its JobInfo as "job"); nullopt if the
  // head does not know the job.
  std::optional<nlohmann::json> job_charts(const std::string& job_id);
  // Events of a job from `since`, straight from the head (not the cache).
  EventsPage events(const std::string& job_id, std::uint64_t since);
  // The Prometheus exposition of everything; nullopt if the head did not answer.
  std::optional<std::string> metrics();

 private:
  struct Job {
    std::unique_ptr<JobTimeline> timeline;
    std::uint64_t next = 0;  // index of the next event to fetch
    bool complete = false;   // every event of a finished job is in the timeline
  };
  // Fetches when the cache is older than max_age. Needs mutex_ held.
  bool refresh_locked(std::unique_lock<std::mutex>& lock);
  void catch_up_locked(const std::string& job_id, Job& job);

  std::unique_ptr<HeadSource> source_;
  std::chrono::milliseconds max_age_;
  TimelineLimits limits_;
  std::mutex mutex_;
  std::optional<actors::StatusReply> status_;        // guarded by mutex_
  std::chrono::steady_clock::time_point fetched_{};  // guarded by mutex_
  std::map<std::string, Job> jobs_;                  // guarded by mutex_
};

}  // namespace omnilearn::dashboard
