#pragma once
// Turning real-valued batch targets into a plan: clamp to per-worker bounds with the excess
// redistributed in proportion to speed, then round to integers that sum exactly to the global
// batch. Pure functions over numbers: no state, no I/O.

#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "controller/cost_model.hpp"

namespace omnilearn::scheduler {

// Inclusive per-worker batch bounds: [min_batch, min(max_batch, memory cap)].
struct Bounds {
  int lo = 1;
  int hi = 1;
};

// Thrown when the global batch cannot be split within the bounds (sum of lo > B or sum of hi < B).
// It names both sums so the operator can see whether to lower B, lower min_batch or add workers.
class InfeasibleBatchError : public std::invalid_argument {
 public:
  InfeasibleBatchError(long long total, long long sum_lo, long long sum_hi, std::size_t workers);
  long long total() const { return total_; }
  long long sum_lo() const { return sum_lo_; }
  long long sum_hi() const { return sum_hi_; }

 private:
  long long total_;
  long long sum_lo_;
  long long sum_hi_;
};

// Returns a description of why `total` cannot be split within `bounds`, or an empty string when it
// can (sum of lo <= total <= sum of hi, and every lo <= hi).
std::string infeasibility(std::span<const Bounds> bounds, long long total);

// Returns x with x_i = clamp(base_i + level * weight_i, lo_i, hi_i) and sum(x) == total, for the
// one level that achieves it: what one worker cannot take (a bound binds) goes to the others in
// proportion to weight. weight_i > 0 (use speeds). Exact (piecewise-linear solve), O(n log n).
// Throws InfeasibleBatchError when the bounds cannot hold total, std::invalid_argument when the
// spans differ in length or a weight is not positive and finite.
std::vector<double> fill_to_total(std::span<const double> base, std::span<const double> weight,
                                  std::span<const Bounds> bounds, double total);

// Rounds x (within bounds, summing to total up to float error) to integers that sum exactly to
// total within bounds, each floor(x_i) or ceil(x_i): the classic largest-remainder method, the
// units left after flooring going to the largest fractional parts (ties to the lower index, so
// equal inputs give equal outputs round after round). Throws like fill_to_total.
std::vector<int> round_largest_remainder(std::span<const double> x, std::span<const Bounds> bounds,
                                         long long total);

// Largest remainder measured in step time rather than samples: after flooring, the units left go
// one at a time to the entry whose predicted step time (costs[i].time(b + 1)) is smallest with
// the unit, ties to the larger remainder, then the lower index. Only entries with a fractional
// part take units (an integer entry, such as a batch held by the deadband, stays put) unless
// nothing else can. When x is the real-valued equal-time split under `costs`, this is the best
// integer split: where plain largest remainder may give a slow worker its ceiling, this gives a
// fast worker a second unit if that ends the step sooner. Throws like fill_to_total.
std::vector<int> round_min_step_time(std::span<const double> x, std::span<const CostModel> costs,
                                     std::span<const Bounds> bounds, long long total);

// fill_to_total followed by round_largest_remainder: the integer plan closest to `desired`, the
// excess over a bound going to the others in proportion to speed.
std::vector<int> allocate(std::span<const double> desired, std::span<const double> speed,
                          std::span<const Bounds> bounds, long long total);

}  // namespace omnilearn::scheduler
