#include "controller/policy.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace omnilearn::scheduler {
namespace {

std::vector<double> throughputs(std::span<const WorkerView> workers) {
  std::vector<double> x;
  x.reserve(workers.size());
  for (const WorkerView& w : workers) x.push_back(w.throughput);
  return x;
}

std::vector<Bounds> bounds_of(std::span<const WorkerView> workers) {
  std::vector<Bounds> b;
  b.reserve(workers.size());
  for (const WorkerView& w : workers) b.push_back(w.bounds);
  return b;
}

void check_workers(std::span<const WorkerView> workers, int global_batch) {
  for (const WorkerView& w : workers) {
    if (!(w.throughput > 0.0) || !std::isfinite(w.throughput)) {
      std::ostringstream msg;
      msg << "worker throughput must be positive and finite (got " << w.throughput << ")";
      throw std::invalid_argument(msg.str());
    }
    if (w.model && (!(w.model->beta > 0.0) || !(w.model->alpha >= 0.0))) {
      throw std::invalid_argument("cost model needs alpha >= 0 and beta > 0");
    }
  }
  const std::vector<Bounds> b = bounds_of(workers);
  if (!infeasibility(b, global_batch).empty()) {
    long long lo = 0, hi = 0;
    for (const Bounds& x : b) {
      lo += x.lo;
      hi += x.hi;
    }
    throw InfeasibleBatchError(global_batch, lo, hi, b.size());
  }
}

}  // namespace

std::string_view to_string(Policy policy) {
  switch (policy) {
    case Policy::kUniform:
      return "uniform";
    case Policy::kProportional:
      return "proportional";
    case Policy::kAffine:
      return "affine";
  }
  return "unknown";
}

std::optional<Policy> parse_policy(std::string_view name) {
  for (Policy p : {Policy::kUniform, Policy::kProportional, Policy::kAffine}) {
    if (name == to_string(p)) return p;
  }
  return std::nullopt;
}

CostModel planning_model(const WorkerView& worker, Policy policy) {
  if (policy == Policy::kAffine && worker.model) return *worker.model;
  return CostModel{0.0, 1.0 / worker.throughput};
}

std::vector<double> uniform_targets(std::span<const WorkerView> workers, int global_batch) {
  check_workers(workers, global_batch);
  const std::vector<double> even(workers.size(),
                                 static_cast<double>(global_batch) / workers.size());
  return fill_to_total(even, throughputs(workers), bounds_of(workers), global_batch);
}

std::vector<double> proportional_targets(std::span<const WorkerView> workers, int global_batch,
                                         double gain) {
  check_workers(workers, global_batch);
  double t_sum = 0.0;
  int timed = 0;
  for (const WorkerView& w : workers) {
    if (w.batch) {
      t_sum += *w.batch / w.throughput;
      ++timed;
    }
  }
  // Before any plan the common time is arbitrary: the scaling to B below removes it.
  const double t_avg = timed > 0 ? t_sum / timed : 1.0;
  std::vector<double> candidate;
  candidate.reserve(workers.size());
  for (const WorkerView& w : workers) {
    if (w.batch) {
      const double t = *w.batch / w.throughput;
      candidate.push_back(*w.batch + gain * w.throughput * (t_avg - t));
    } else {
      candidate.push_back(w.throughput * t_avg);
    }
  }
  // Candidates sum to B only by accident (sum X_i * t_avg != B in general); scale them to B,
  // keeping their ratios, and let fill_to_total place what the bounds refuse.
  double sum = 0.0;
  for (double c : candidate) sum += c;
  for (double& c : candidate) c *= global_batch / sum;
  return fill_to_total(candidate, throughputs(workers), bounds_of(workers), global_batch);
}

std::vector<double> affine_targets(std::span<const WorkerView> workers, int global_batch,
                                   double gain) {
  check_workers(workers, global_batch);
  // alpha_i + beta_i * e_i = T for all i  <=>  e_i = -alpha_i / beta_i + T / beta_i: the same
  // clamped level problem fill_to_total solves, with the level T and weights 1 / beta_i.
  std::vector<double> base, weight;
  base.reserve(workers.size());
  weight.reserve(workers.size());
  for (const WorkerView& w : workers) {
    const CostModel m = planning_model(w, Policy::kAffine);
    base.push_back(-m.alpha / m.beta);
    weight.push_back(1.0 / m.beta);
  }
  const std::vector<Bounds> bounds = bounds_of(workers);
  std::vector<double> equal = fill_to_total(base, weight, bounds, global_batch);
  if (gain >= 1.0) return equal;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (workers[i].batch) equal[i] = *workers[i].batch + gain * (equal[i] - *workers[i].batch);
  }
  return fill_to_total(equal, throughputs(workers), bounds, global_batch);
}

std::vector<double> policy_targets(std::span<const WorkerView> workers,
                                   const PolicyParams& params) {
  switch (params.policy) {
    case Policy::kUniform:
      return uniform_targets(workers, params.global_batch);
    case Policy::kProportional:
      return proportional_targets(workers, params.global_batch, params.gain);
    case Policy::kAffine:
      return affine_targets(workers, params.global_batch, params.gain);
  }
  throw std::invalid_argument("unknown policy");
}

bool gain_exceeds(double current, double target, double threshold) {
  return current > (1.0 + threshold) * (1.0 + 1e-9) * target;
}

PlanDecision decide_plan(std::span<const WorkerView> workers, const PolicyParams& params) {
  if (!(params.deadband >= 0.0 && params.deadband < 1.0)) {
    throw std::invalid_argument("deadband must be in [0, 1)");
  }
  if (!(params.gain > 0.0 && params.gain <= 1.0)) {
    throw std::invalid_argument("gain must be in (0, 1]");
  }
  if (!(params.noise_z >= 0.0) || !std::isfinite(params.noise_z)) {
    throw std::invalid_argument("noise_z must be >= 0");
  }
  const std::size_t n = workers.size();
  PlanDecision out;
  out.targets = policy_targets(workers, params);
  const std::vector<double>& x = out.targets;
  const std::vector<double> speed = throughputs(workers);
  const std::vector<Bounds> bounds = bounds_of(workers);
  std::vector<CostModel> models;
  models.reserve(n);
  for (const WorkerView& w : workers) models.push_back(planning_model(w, params.policy));
  auto to_integers = [&](std::span<const double> real) {
    // The DDP baseline knows no speeds: plain largest remainder. The others round in time.
    return params.policy == Policy::kUniform
               ? round_largest_remainder(real, bounds, params.global_batch)
               : round_min_step_time(real, models, bounds, params.global_batch);
  };

  // The integer plan for "everyone to target", and the step time the models predict for it.
  const std::vector<int> full = to_integers(x);
  auto step_time = [&](auto&& batch_of) {
    double t = 0.0;
    for (std::size_t i = 0; i < n; ++i) t = std::max(t, models[i].time(batch_of(i)));
    return t;
  };
  out.target_step_time = step_time([&](std::size_t i) { return full[i]; });

  // The plan in force still applies when every worker has a batch within its bounds and the
  // batches sum to B (no join, no leave since it was made).
  bool current_valid = true;
  long long sum = 0;
  for (const WorkerView& w : workers) {
    current_valid = current_valid && w.batch && *w.batch >= w.bounds.lo && *w.batch <= w.bounds.hi;
    if (w.batch) sum += *w.batch;
  }
  current_valid = current_valid && sum == params.global_batch;

  out.batches = full;
  if (current_valid) {
    const double current = step_time([&](std::size_t i) { return *workers[i].batch; });
    out.current_step_time = current;
    if (params.noise_z > 0.0 && n > 0) {
      std::size_t setter = 0;
      double sum_sq = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        if (models[i].time(*workers[i].batch) > models[setter].time(*workers[setter].batch)) {
          setter = i;
        }
        sum_sq += workers[i].rel_error * workers[i].rel_error;
      }
      const double e = workers[setter].rel_error;
      out.noise_gain = params.noise_z *
                       std::sqrt(e * e + sum_sq / (static_cast<double>(n) * static_cast<double>(n)));
    }
    if (!gain_exceeds(current, out.target_step_time, std::max(params.deadband, out.noise_gain))) {
      out.batches.clear();
      for (const WorkerView& w : workers) out.batches.push_back(*w.batch);
    }
  }

  out.changed = !current_valid;
  for (std::size_t i = 0; i < n && !out.changed; ++i) {
    out.changed = *workers[i].batch != out.batches[i];
  }
  out.predicted_step_time = step_time([&](std::size_t i) { return out.batches[i]; });
  return out;
}

}  // namespace omnilearn::scheduler
