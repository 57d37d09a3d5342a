#pragma once
// Robust per-worker throughput from step reports: the median of the last few steps' samples per
// second, so one pause (a step 10x slower than the rest) does not move the estimate at all once
// the window holds three or more steps.

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace omnilearn::scheduler {

// Median of `values` (the mean of the middle two for an even count); nullopt when empty.
std::optional<double> median(std::span<const double> values);

// Windowed median of per-sample throughput (batch / compute time). Throughput, not raw time, is
// averaged so that steps run at different batches (before and after a plan change) stay
// comparable under a cost that grows with the batch. Not thread-safe; one owner.
class ThroughputEstimator {
 public:
  // Window of the most recent steps the median is taken over (>= 1; 5 by default).
  explicit ThroughputEstimator(std::size_t window = 5);

  // Records one step: `batch` samples took `seconds` of compute. Throws std::invalid_argument
  // unless batch >= 1 and seconds is positive and finite.
  void observe(int batch, double seconds);

  // Median samples per second over the window; nullopt before the first step.
  std::optional<double> throughput() const;

  // Step time the worker would take at `batch` under the linear model batch / throughput.
  std::optional<double> time_at(int batch) const;

  // Steps currently in the window.
  std::size_t size() const { return count_; }

  // Forgets every step (a worker whose hardware changed).
  void clear();

 private:
  std::vector<double> ring_;  // samples per second, circular
  std::size_t next_ = 0;
  std::size_t count_ = 0;
};

}  // namespace omnilearn::scheduler
