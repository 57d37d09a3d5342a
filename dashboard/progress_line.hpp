#pragma once
// The one live line `submit --follow` and `run` redraw on a terminal: step/total, percent, ETA,
// samples/s, loss and the batch plan, from the job's step events; for an asynchronous job
// (asp_interval events) updates/total, updates/s and staleness (mean, p95, max) instead. Pure: the times come from the
// events, so the same events always give the same line.

#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace omnilearn::dashboard {

class ProgressLine {
 public:
  // `total_steps` 0: unknown (no percent or ETA until set_total_steps).
  explicit ProgressLine(std::int64_t total_steps = 0) : total_(total_steps) {}
  void set_total_steps(std::int64_t total) { total_ = total; }

  // Takes a "step" or "asp_interval" event (others are ignored). Steps that go back (a recovery redoing steps)
  // restart the rate window.
  void observe(const nlohmann::json& event);
  bool has_step() const { return step_ > 0; }

  // Steps per second over the recent window (0 until two steps are known).
  double steps_per_second() const;
  // Seconds to the last step at that rate; negative when unknown.
  double eta_seconds() const;

  // The line, cut to `width` columns (0: no limit), without a newline.
  std::string render(std::size_t width = 0) const;

 private:
  std::int64_t total_ = 0;
  std::int64_t step_ = 0;
  double loss_ = 0;
  double test_accuracy_ = -1;
  std::vector<std::int32_t> batches_;
  std::int64_t global_batch_ = 0;
  std::deque<std::pair<double, std::int64_t>> window_;  // (time, step), the recent steps
  // Asynchronous training: the last interval's figures.
  bool asp_ = false;
  double updates_per_s_ = 0;
  double staleness_mean_ = 0;
  std::int64_t staleness_p95_ = 0;
  std::int64_t staleness_max_ = 0;
};

// "1h02m", "3m05s", "42s".
std::string format_duration(double seconds);

}  // namespace omnilearn::dashboard
