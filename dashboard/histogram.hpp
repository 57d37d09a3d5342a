#pragma once
// A Prometheus-style histogram: fixed upper bounds, counts per bucket, sum and count.

#include <cstdint>
#include <vector>

namespace omnilearn::dashboard {

class Histogram {
 public:
  // `upper_bounds` strictly increasing and finite; the +Inf bucket is implicit. Throws
  // std::invalid_argument otherwise.
  explicit Histogram(std::vector<double> upper_bounds);

  // Counts `value` in the first bucket whose bound is >= value (+Inf if none). NaN is ignored.
  void observe(double value);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Observations <= upper_bounds()[i], for each i: Prometheus's cumulative `le` buckets.
  std::vector<std::uint64_t> cumulative_counts() const;
  std::uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bucket, not cumulative; last one is +Inf
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

// Bounds for durations of a training step or an all-reduce: 1 ms to 60 s.
std::vector<double> seconds_buckets();

}  // namespace omnilearn::dashboard
