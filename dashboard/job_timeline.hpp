#pragma once
// What the dashboard, /metrics and `omnilearn report` know about one job: its events.jsonl
// folded into chart series, a timeline of membership events, and counters. Pure: events in,
// numbers out (no clock, no I/O), so the live page and the offline report draw the same thing.
//
// Threads: not thread-safe; the dashboard guards each timeline with its feed's mutex.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dashboard/histogram.hpp"

namespace omnilearn::dashboard {

// One worker's share of a committed step.
struct WorkerSample {
  std::string trainer;
  std::string node;
  std::int32_t rank = -1;
  std::int32_t batch = 0;
  double samples_per_s = 0;
  double compute_time_s = 0;
  // ASP only: the server updates this worker's pushes made in the interval, per second (-1 in
  // a BSP step, where every worker takes part in every step).
  double updates_per_s = -1;
};

// ASP only: the staleness of the pushes weighed in one interval (server version at apply -
// version pulled).
struct StalenessPoint {
  double mean = 0;
  std::int64_t p95 = 0;
  std::int64_t max = 0;
};

// One committed step, as its "step" event reported it.
struct StepPoint {
  std::int64_t step = 0;
  double time = 0;  // unix seconds
  double loss = 0;
  double step_time_s = 0;
  double allreduce_time_s = 0;
  std::int64_t generation = 0;
  std::vector<WorkerSample> workers;
  std::optional<StalenessPoint> staleness;  // an ASP interval's; none in a BSP step
};

// An evaluation on the test set.
struct EvalPoint {
  std::int64_t step = 0;
  double accuracy = 0;
  double loss = 0;
};

// A membership or control event, for the timeline.
struct TimelineEntry {
  double time = 0;
  std::int64_t step = -1;  // -1: the event names no step
  std::string kind;        // the event's "event" field
  std::string category;    // join | generation | plan | leave | death | recovery | problem | job
  std::string text;        // one human line
};

// Keeps at most `max_points` of a growing series by dropping every other point when full, and
// from then on keeping only every stride-th new point: a long job's chart stays small and still
// spans the whole run.
template <class T>
class ThinnedSeries {
 public:
  explicit ThinnedSeries(std::size_t max_points) : max_points_(max_points < 2 ? 2 : max_points) {}
  void add(T point) {
    if (offered_++ % stride_ != 0) return;
    if (points_.size() >= max_points_) {
      std::size_t kept = 0;
      for (std::size_t i = 0; i < points_.size(); i += 2) points_[kept++] = std::move(points_[i]);
      points_.resize(kept);
      stride_ *= 2;
      // The point just offered belongs to the new stride only if it falls on it.
      if ((offered_ - 1) % stride_ != 0) return;
    }
    points_.push_back(std::move(point));
  }
  const std::vector<T>& points() const { return points_; }
  std::uint64_t stride() const { return stride_; }
  std::uint64_t offered() const { return offered_; }

 private:
  std::size_t max_points_;
  std::uint64_t stride_ = 1;
  std::uint64_t offered_ = 0;
  std::vector<T> points_;
};

struct TimelineLimits {
  std::size_t max_step_points = 2000;
  std::size_t max_eval_points = 500;
  std::size_t max_timeline_entries = 2000;  // beyond it the oldest are dropped (and counted)
};

class JobTimeline {
 public:
  explicit JobTimeline(std::string job_id, TimelineLimits limits = {});

  // Folds one events.jsonl line in. Returns false (and counts it) when it is not a JSON object
  // with an "event" field; fields an event lacks are taken as absent, never an error.
  bool add_line(const std::string& line);
  void add(const nlohmann::json& event);

  const std::string& job_id() const { return job_id_; }
  std::uint64_t events_seen() const { return events_seen_; }
  std::uint64_t malformed_lines() const { return malformed_; }
  bool finished() const { return !status_.empty(); }
  const std::string& status() const { return status_; }  // "" while running

  // Counters over the whole run (not thinned).
  std::uint64_t steps_committed() const { return steps_committed_; }
  std::int64_t last_step() const { return last_step_; }
  std::uint64_t plan_changes() const { return plan_changes_; }
  std::uint64_t generations() const { return generations_; }
  std::uint64_t recoveries() const { return recoveries_; }
  std::uint64_t lost_steps() const { return lost_steps_; }
  std::uint64_t trainer_failures() const { return trainer_failures_; }
  const Histogram& step_seconds() const { return step_seconds_; }
  const Histogram& allreduce_seconds() const { return allreduce_seconds_; }

  const std::vector<StepPoint>& steps() const { return steps_.points(); }
  const std::vector<EvalPoint>& evals() const { return evals_.points(); }
  const std::vector<TimelineEntry>& timeline() const { return timeline_; }

  // Everything the charts draw, as the dashboard's /api/jobs/<id>/charts serves it and the
  // report embeds it: steps, loss, step time against the ideal, per-worker batches and
  // samples/s (null where a worker had no part in a step), evaluations, timeline, counters;
  // for an ASP job (`asp`: true) also the staleness per interval and each worker's updates/s.
  nlohmann::json chart_data() const;

 private:
  void add_step(const nlohmann::json& e);
  void add_asp_interval(const nlohmann::json& e);
  void add_timeline(const nlohmann::json& e, const std::string& kind);

  std::string job_id_;
  TimelineLimits limits_;
  std::uint64_t events_seen_ = 0;
  std::uint64_t malformed_ = 0;
  std::string status_;
  std::string name_;
  std::string policy_;
  bool asp_ = false;
  std::int64_t global_batch_ = 0;
  double started_ = 0;
  std::uint64_t steps_committed_ = 0;
  std::int64_t last_step_ = 0;
  std::uint64_t plan_changes_ = 0;
  std::uint64_t generations_ = 0;
  std::uint64_t recoveries_ = 0;
  std::uint64_t lost_steps_ = 0;
  std::uint64_t trainer_failures_ = 0;
  std::uint64_t timeline_dropped_ = 0;
  Histogram step_seconds_;
  Histogram allreduce_seconds_;
  ThinnedSeries<StepPoint> steps_;
  ThinnedSeries<EvalPoint> evals_;
  std::vector<TimelineEntry> timeline_;
};

// The compute time of one step had the batch been split in proportion to each worker's
// measured throughput (b_i / compute_i): B / sum of throughputs. 0 when a worker's compute
// time is unknown.
double ideal_compute_seconds(const std::vector<WorkerSample>& workers);

}  // namespace omnilearn::dashboard
