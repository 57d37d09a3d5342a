#include "controller/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <vector>

// A broken invariant of the group index (a step the ring holds but no group does): abort with
// where, never carry on with wrong statistics.
#define OMNI_SCHEDULER_ASSERT(cond)                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (false)

namespace omnilearn::scheduler {

void CostFitConfig::validate() const {
  auto fail = [](const char* what) {
    throw std::invalid_argument(std::string("cost model config: ") + what);
  };
  if (history < 2) fail("history must keep at least 2 steps");
  if (!(forgetting > 0.0 && forgetting <= 1.0)) fail("forgetting must be in (0, 1]");
  if (min_steps_per_batch < 1) fail("min_steps_per_batch must be at least 1");
  if (min_steps_per_batch * 2 > history) fail("history must hold two batches' min_steps_per_batch");
  if (!(min_spread >= 0.0 && min_spread < 1.0)) fail("min_spread must be in [0, 1)");
  if (!(max_slope_error > 0.0) || !std::isfinite(max_slope_error)) {
    fail("max_slope_error must be positive");
  }
  if (!(change_tolerance > 0.0) || !std::isfinite(change_tolerance)) {
    fail("change_tolerance must be positive");
  }
  if (change_run < 1 || change_run > history) fail("change_run must be in [1, history]");
}

namespace {

// One distinct batch value of a history: its median step time and forgetting weight.
struct BatchPoint {
  int batch;
  double seconds;  // median of the batch's steps
  double weight;   // sum of its steps' forgetting weights
  std::size_t steps;
};

// The weighted least-squares line through `points` (ascending batch, each with at least
// min_steps_per_batch steps); sum_sq over used_steps is the steps' relative scatter around
// their batch's median.
std::optional<CostModel> fit_points(std::span<const BatchPoint> points, double sum_sq,
                                    std::size_t used_steps, const CostFitConfig& config) {
  if (points.size() < 2) return std::nullopt;
  const double b_min = points.front().batch;
  const double b_max = points.back().batch;
  if ((b_max - b_min) / b_max < config.min_spread) return std::nullopt;

  double sw = 0.0, sb = 0.0, st = 0.0;
  for (const BatchPoint& p : points) {
    sw += p.weight;
    sb += p.weight * p.batch;
    st += p.weight * p.seconds;
  }
  const double mean_b = sb / sw;
  const double mean_t = st / sw;
  double sbb = 0.0, sbt = 0.0;
  for (const BatchPoint& p : points) {
    sbb += p.weight * (p.batch - mean_b) * (p.batch - mean_b);
    sbt += p.weight * (p.batch - mean_b) * (p.seconds - mean_t);
  }
  if (!(sbb > 0.0)) return std::nullopt;
  CostModel model{0.0, sbt / sbb};
  // Standard error of the slope from the steps' own scatter: the pooled relative standard
  // deviation around each batch's median (an outlier inflates it, which only makes the fit
  // more cautious), a median of m steps then having about 1.2533 sigma / sqrt(m) of error.
  const double dof = static_cast<double>(used_steps) - static_cast<double>(points.size());
  const double sigma = std::sqrt(sum_sq / std::max(1.0, dof));
  double var_num = 0.0;
  for (const BatchPoint& p : points) {
    const double se = 1.2533 * sigma * p.seconds / std::sqrt(static_cast<double>(p.steps));
    var_num += p.weight * p.weight * (p.batch - mean_b) * (p.batch - mean_b) * se * se;
  }
  if (std::sqrt(var_num) / sbb > config.max_slope_error * std::abs(model.beta)) {
    return std::nullopt;
  }
  model.alpha = mean_t - model.beta * mean_b;
  if (model.alpha < 0.0) {
    // A negative overhead is noise around zero: refit the slope through the origin.
    double num = 0.0, den = 0.0;
    for (const BatchPoint& p : points) {
      num += p.weight * p.seconds * p.batch;
      den += p.weight * p.batch * p.batch;
    }
    model = CostModel{0.0, num / den};
  }
  if (!(model.beta > 0.0) || !std::isfinite(model.beta) || !std::isfinite(model.alpha)) {
    return std::nullopt;
  }
  return model;
}

double median_of_sorted(const std::vector<double>& v) {
  const std::size_t m = v.size();
  return m % 2 == 1 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

}  // namespace

std::optional<CostModel> fit_cost_model(std::span<const StepObservation> oldest_first,
                                        const CostFitConfig& config) {
  struct WeightedStep {
    int batch;
    double seconds;
    double weight;  // forgetting^age
  };
  std::vector<WeightedStep> steps;
  steps.reserve(oldest_first.size());
  double w = 1.0;
  for (std::size_t k = oldest_first.size(); k-- > 0;) {  // newest first: weight forgetting^age
    steps.push_back({oldest_first[k].batch, oldest_first[k].seconds, w});
    w *= config.forgetting;
  }
  std::sort(steps.begin(), steps.end(), [](const WeightedStep& a, const WeightedStep& b) {
    return a.batch != b.batch ? a.batch < b.batch : a.seconds < b.seconds;
  });
  std::vector<BatchPoint> points;
  double sum_sq = 0.0;
  std::size_t used = 0;
  for (std::size_t i = 0; i < steps.size();) {
    std::size_t j = i;
    double weight = 0.0;
    for (; j < steps.size() && steps[j].batch == steps[i].batch; ++j) weight += steps[j].weight;
    const std::size_t m = j - i;
    if (m >= config.min_steps_per_batch) {
      const double med = m % 2 == 1
                             ? steps[i + m / 2].seconds
                             : 0.5 * (steps[i + m / 2 - 1].seconds + steps[i + m / 2].seconds);
      for (std::size_t k = i; k < j; ++k) {
        const double d = steps[k].seconds / med - 1.0;
        sum_sq += d * d;
      }
      used += m;
      points.push_back({steps[i].batch, med, weight, m});
    }
    i = j;
  }
  return fit_points(points, sum_sq, used, config);
}

CostHistory::CostHistory(CostFitConfig config)
    : config_(config),
      // A step leaves the ring `history` steps after it arrived, weighing forgetting^history.
      evicted_weight_(std::pow(config.forgetting, static_cast<double>(config.history))) {
  config_.validate();
}

void CostHistory::add_to_group(const StepObservation& s) {
  auto g = std::lower_bound(groups_.begin(), groups_.end(), s.batch,
                            [](const BatchTimes& x, int batch) { return x.batch < batch; });
  if (g == groups_.end() || g->batch != s.batch) {
    g = groups_.insert(g, BatchTimes{s.batch, {}, 0.0});
  }
  g->sorted.insert(std::upper_bound(g->sorted.begin(), g->sorted.end(), s.seconds), s.seconds);
  g->weight += 1.0;  // the newest step weighs forgetting^0
}

void CostHistory::remove_from_group(const StepObservation& s, double weight) {
  auto g = std::lower_bound(groups_.begin(), groups_.end(), s.batch,
                            [](const BatchTimes& x, int batch) { return x.batch < batch; });
  OMNI_SCHEDULER_ASSERT(g != groups_.end() && g->batch == s.batch);
  const auto t = std::lower_bound(g->sorted.begin(), g->sorted.end(), s.seconds);
  OMNI_SCHEDULER_ASSERT(t != g->sorted.end() && *t == s.seconds);
  g->sorted.erase(t);
  g->weight -= weight;
  if (g->sorted.empty()) groups_.erase(g);
}

void CostHistory::observe(int batch, double seconds) {
  if (batch < 1 || !(seconds > 0.0) || !std::isfinite(seconds)) {
    std::ostringstream msg;
    msg << "step report needs batch >= 1 and a positive finite compute time (got batch " << batch
        << ", time " << seconds << ")";
    throw std::invalid_argument(msg.str());
  }
  const StepObservation step{batch, seconds};
  // Every step already kept ages by one.
  for (BatchTimes& g : groups_) g.weight *= config_.forgetting;
  // A ring of `history` slots: the oldest step is overwritten once it is full.
  if (ring_.size() < config_.history) {
    ring_.push_back(step);
  } else {
    remove_from_group(ring_[oldest_], evicted_weight_);
    ring_[oldest_] = step;
    oldest_ = (oldest_ + 1) % ring_.size();
  }
  add_to_group(step);
  dirty_ = true;

  if (!reference_) return;
  double predicted = 0.0;
  if (reference_->model) {
    predicted = reference_->model->time(batch);
  } else if (batch == reference_->batch) {
    predicted = reference_->seconds;
  } else {
    miss_run_ = 0;
    miss_sign_ = 0;
    return;
  }
  const double miss = (seconds - predicted) / predicted;
  const int sign = miss > config_.change_tolerance ? 1 : miss < -config_.change_tolerance ? -1 : 0;
  if (sign == 0 || sign != miss_sign_) {
    miss_run_ = sign == 0 ? 0 : 1;
    miss_sign_ = sign;
  } else {
    ++miss_run_;
  }
  if (miss_run_ >= config_.change_run) {
    // The worker's speed changed: the old points describe a machine that no longer exists.
    std::vector<StepObservation> recent = steps();
    recent.erase(recent.begin(),
                 recent.end() - static_cast<std::ptrdiff_t>(std::min(miss_run_, recent.size())));
    ring_ = std::move(recent);
    oldest_ = 0;
    groups_.clear();
    for (const StepObservation& s : ring_) {
      for (BatchTimes& g : groups_) g.weight *= config_.forgetting;
      add_to_group(s);
    }
    reference_.reset();
    miss_run_ = 0;
    miss_sign_ = 0;
    ++regime_changes_;
  }
}

std::vector<StepObservation> CostHistory::steps() const {
  std::vector<StepObservation> out;
  out.reserve(ring_.size());
  for (std::size_t k = 0; k < ring_.size(); ++k) out.push_back(ring_[(oldest_ + k) % ring_.size()]);
  return out;
}

std::optional<CostModel> CostHistory::model() const {
  if (!dirty_) return cached_;
  dirty_ = false;
  newest_steps_ = 0;
  cached_.reset();
  if (ring_.empty()) return cached_;
  // Reused between calls: a plan over a thousand workers allocates nothing once warm.
  thread_local std::vector<BatchPoint> points;
  const int newest = ring_[(oldest_ + ring_.size() - 1) % ring_.size()].batch;
  points.clear();
  double sum_sq = 0.0;
  std::size_t used = 0;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    const BatchTimes& g = groups_[i];
    const double med = median_of_sorted(g.sorted);
    if (g.batch == newest) {
      newest_batch_ = g.batch;
      newest_seconds_ = med;
      newest_steps_ = g.sorted.size();
    }
    if (g.sorted.size() < config_.min_steps_per_batch) continue;
    for (double t : g.sorted) sum_sq += (t / med - 1.0) * (t / med - 1.0);
    used += g.sorted.size();
    points.push_back({g.batch, med, g.weight, g.sorted.size()});
  }
  cached_ = fit_points(points, sum_sq, used, config_);
  return cached_;
}

void CostHistory::checkpoint() {
  reference_.reset();
  if (const std::optional<CostModel> fit = model()) {
    reference_ = Reference{fit, 0, 0.0};
  } else if (newest_steps_ >= config_.min_steps_per_batch) {
    // Without a fit, a lone step at the newest batch is no reference: one outlier would be it.
    reference_ = Reference{std::nullopt, newest_batch_, newest_seconds_};
  }
}

}  // namespace omnilearn::scheduler
