#pragma once
// Per-worker step-cost model t(b) = alpha + beta * b (alpha: fixed per-step overhead such as
// kernel launches or the optimizer step; beta: seconds per sample), fitted by weighted least
// squares from the (batch, time) pairs a worker reported, old pairs forgotten geometrically.

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace omnilearn::scheduler {

// One step's measurement: `batch` samples took `seconds` of compute.
struct StepObservation {
  int batch = 0;
  double seconds = 0.0;
};

// Affine step cost; alpha >= 0, beta > 0 for every model fit_cost_model returns.
struct CostModel {
  double alpha = 0.0;  // seconds per step, whatever the batch
  double beta = 0.0;   // seconds per sample

  // Predicted compute time of one step at `batch` samples.
  double time(double batch) const { return alpha + beta * batch; }
};

// How much history the fit keeps and when it trusts it.
struct CostFitConfig {
  std::size_t history = 32;             // most recent steps kept per worker
  double forgetting = 0.9;              // a step k steps old weighs forgetting^k, in (0, 1]
  std::size_t min_steps_per_batch = 3;  // a batch value is used once it has this many steps, so
                                        // its median time ignores one outlier
  double min_spread = 0.02;             // (max b - min b) / max b over the used batch values;
                                        // closer values make the slope mostly rounding (noise
                                        // is judged by max_slope_error)
  double max_slope_error = 0.1;         // the fit is used only when the slope's standard error,
                                        // estimated from the step times' own spread, is at most
                                        // this fraction of the slope: noise must not pass for
                                        // overhead
  double change_tolerance = 0.25;       // relative miss of the model that counts as a change
  std::size_t change_run = 3;           // this many misses in a row, same sign: speed changed

  // Throws std::invalid_argument naming the first field out of range.
  void validate() const;
};

// Fits a CostModel to `oldest_first` (the last entry is the newest). Each distinct batch value
// with at least min_steps_per_batch steps contributes one point (its median time) weighted by
// the forgetting weights of its steps. Needs two such values at least min_spread apart, and a
// slope whose standard error (from the pooled standard deviation of the steps around their
// batch's median) is within max_slope_error of it; a fit with a negative intercept is
// refit through the origin (alpha = 0). nullopt when the data do not pin the line down or the
// slope is not positive, in which case callers use a linear model.
std::optional<CostModel> fit_cost_model(std::span<const StepObservation> oldest_first,
                                        const CostFitConfig& config);

// The bounded step history of one worker plus change detection: when change_run consecutive
// steps miss the last fitted model by more than change_tolerance in the same direction (the
// worker got slower or faster, not noisier), everything before those steps is dropped so the
// fit is rebuilt from the new regime. Not thread-safe; one owner.
class CostHistory {
 public:
  // Throws std::invalid_argument when config is out of range.
  explicit CostHistory(CostFitConfig config = {});

  // Records one step. Throws std::invalid_argument unless batch >= 1 and seconds > 0, finite.
  void observe(int batch, double seconds);

  // The fit over the current history (cached until the next observe); nullopt as above.
  std::optional<CostModel> model() const;

  // Makes what is known now the reference later steps are checked against for a change of
  // regime: the fit, or before there is one the median time at the newest batch. Call it when a
  // plan is made from this history.
  void checkpoint();

  // Steps kept, oldest first (a copy).
  std::vector<StepObservation> steps() const;

  // How many times a change of regime dropped the older history.
  std::size_t regime_changes() const { return regime_changes_; }

 private:
  // The steps in the ring at one batch value: their times ascending (medians in O(1)) and the
  // sum of their forgetting weights, kept up to date step by step.
  struct BatchTimes {
    int batch;
    std::vector<double> sorted;
    double weight;
  };
  void add_to_group(const StepObservation& step);
  void remove_from_group(const StepObservation& step, double weight);

  CostFitConfig config_;
  std::vector<StepObservation> ring_;  // at most config_.history steps, oldest at oldest_
  std::size_t oldest_ = 0;
  std::vector<BatchTimes> groups_;  // the ring's steps by batch value, ascending batch
  double evicted_weight_;
  mutable std::optional<CostModel> cached_;
  mutable bool dirty_ = true;
  // The newest step's batch value: its median time and step count (cached with the fit).
  mutable int newest_batch_ = 0;
  mutable double newest_seconds_ = 0.0;
  mutable std::size_t newest_steps_ = 0;
  // What new steps are checked against: the fit the last plan used or,
  // before there is a fit, the median time at the newest batch (checked at that batch only, since
  // a linear extrapolation would flag the fixed overhead as a change).
  struct Reference {
    std::optional<CostModel> model;
    int batch = 0;
    double seconds = 0.0;
  };
  std::optional<Reference> reference_;
  std::size_t miss_run_ = 0;
  int miss_sign_ = 0;
  std::size_t regime_changes_ = 0;
};

}  // namespace omnilearn::scheduler
