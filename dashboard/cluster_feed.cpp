#include "dashboard/cluster_feed.hpp"

#include <set>

#include "dashboard/metrics.hpp"
#include "dashboard/status_json.hpp"

namespace omnilearn::dashboard {

std::optional<actors::StatusReply> ActorHeadSource::cluster_status() {
  // Ask both at once: each is bounded by the timeout, and they do not depend on each other.
  auto nodes = system_.ask(runtime::ActorAddress{"", actors::kRegistryActor},
                           actors::StatusRequest{}, timeout_);
  auto jobs =
      system_.ask(runtime::ActorAddress{"", actors::kJobsActor}, actors::StatusRequest{}, timeout_);
  auto status = nodes.get().as<actors::StatusReply>();
  auto job_status = jobs.get().as<actors::StatusReply>();
  if (!status) return std::nullopt;
  if (job_status) status->jobs = std::move(job_status->jobs);
  return status;
}

std::optional<actors::JobStatusReply> ActorHeadSource::job_status(const std::string& job_id,
                                                                  std::uint64_t since) {
  auto answer = system_
                    .ask(runtime::ActorAddress{"", actors::kJobsActor},
                         actors::JobStatusRequest{job_id, since}, timeout_)
                    .get();
  auto reply = answer.as<actors::JobStatusReply>();
  if (!reply || !reply->found) return std::nullopt;
  return reply;
}

ClusterFeed::ClusterFeed(std::unique_ptr<HeadSource> source, std::chrono::milliseconds max_age,
                         TimelineLimits limits)
    : source_(std::move(source)), max_age_(max_age), limits_(limits) {}

void ClusterFeed::catch_up_locked(const std::string& job_id, Job& job) {
  // Pages of up to 2,000 events; a bounded number per refresh so one request never waits for a
  // huge backlog (the next refresh goes on from `next`).
  for (int page = 0; page < 50 && !job.complete; ++page) {
    auto reply = source_->job_status(job_id, job.next);
    if (!reply) return;
    for (const auto& line : reply->events) job.timeline->add_line(line);
    job.next = reply->next;
    if (reply->finished) job.complete = true;
    if (reply->events.empty()) return;
  }
}

bool ClusterFeed::refresh_locked(std::unique_lock<std::mutex>&) {
  auto now = std::chrono::steady_clock::now();
  if (status_ && now - fetched_ < max_age_) return true;
  auto status = source_->cluster_status();
  if (!status) return status_.has_value();  // serve the last state rather than nothing
  status_ = std::move(status);
  fetched_ = now;
  std::set<std::string> known;
  for (const auto& info : status_->jobs) {
    known.insert(info.id);
    auto& job = jobs_[info.id];
    if (!job.timeline) job.timeline = std::make_unique<JobTimeline>(info.id, limits_);
    catch_up_locked(info.id, job);
  }
  // Jobs the head forgot (--max-jobs) go from here too.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    it = known.count(it->first) ? std::next(it) : jobs_.erase(it);
  }
  return true;
}

std::optional<nlohmann::json> ClusterFeed::status() {
  std::unique_lock lock(mutex_);
  if (!refresh_locked(lock)) return std::nullopt;
  return status_json(*status_);
}

std::optional<nlohmann::json> ClusterFeed::job_charts(const std::string& job_id) {
  std::unique_lock lock(mutex_);
  if (!refresh_locked(lock)) return std::nullopt;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::nullopt;
  auto data = it->second.timeline->chart_data();
  for (const auto& info : status_->jobs) {
    if (info.id == job_id) data["job"] = to_json(info);
  }
  return data;
}

EventsPage ClusterFeed::events(const std::string& job_id, std::uint64_t since) {
  EventsPage page;
  auto reply = source_->job_status(job_id, since);
  if (!reply) return page;
  page.found = true;
  for (const auto& line : reply->events) {
    auto event = nlohmann::json::parse(line, nullptr, false);
    // A line that is not JSON is passed on as a string rather than dropped silently.
    page.events.push_back(event.is_discarded() ? nlohmann::json(line) : std::move(event));
  }
  page.next = reply->next;
  page.finished = reply->finished;
  page.dropped = reply->dropped;
  return page;
}

std::optional<std::string> ClusterFeed::metrics() {
  std::unique_lock lock(mutex_);
  if (!refresh_locked(lock)) return std::nullopt;
  std::vector<const JobTimeline*> timelines;
  for (const auto& [id, job] : jobs_) timelines.push_back(job.timeline.get());
  return render_exposition(head_metrics(*status_, timelines));
}

}  // namespace omnilearn::dashboard
