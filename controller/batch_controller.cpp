#include "controller/batch_controller.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace omnilearn::scheduler {

ControllerConfig for_step_observations(ControllerConfig config) {
  config.throughput_window = 48;
  config.noise_z = 4.0;
  config.provisional_observations = 12;
  config.change.quick_run = 3;
  config.change.quick_spread_z = 3.0;
  config.change.quick_max_change = 1.2;
  config.change.run_min_spread = 0.2;
  config.change.slow_run = 8;
  config.change.slow_min_change = 0.3;
  config.change.slow_min_spread = 0.2;
  config.change.remembered_regimes = 3;
  config.change.recall_within = 12;
  config.change.recall_max_change = 0.15;
  config.change.switch_llr = 8.0;
  config.persist_z = 1.5;
  return config;
}

void ControllerConfig::validate() const {
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("controller config: " + what);
  };
  if (global_batch < 1) fail("global_batch must be at least 1");
  if (min_batch < 1) fail("min_batch must be at least 1");
  if (max_batch < min_batch) {
    fail("max_batch (" + std::to_string(max_batch) + ") is below min_batch (" +
         std::to_string(min_batch) + ")");
  }
  if (global_batch < min_batch) {
    fail("global_batch (" + std::to_string(global_batch) + ") is below min_batch (" +
         std::to_string(min_batch) + "): not even one worker could run");
  }
  if (!(deadband >= 0.0 && deadband < 1.0)) fail("deadband must be in [0, 1)");
  if (!(gain > 0.0 && gain <= 1.0)) fail("gain must be in (0, 1]");
  if (throughput_window < 1) fail("throughput_window must be at least 1 step");
  if (!(noise_z >= 0.0) || !std::isfinite(noise_z)) fail("noise_z must be >= 0");
  if (!(prior_noise >= 0.0 && prior_noise < 1.0)) fail("prior_noise must be in [0, 1)");
  if (!(persist_gain >= 0.0 && persist_gain < 1.0)) fail("persist_gain must be in [0, 1)");
  if (!(persist_z >= 0.0) || !std::isfinite(persist_z)) fail("persist_z must be >= 0");
  affine.validate();
  try {
    change.validate();
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
}

int BatchPlan::batch_of(const std::string& key) const {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return batches[i];
  }
  throw std::out_of_range("no worker '" + key + "' in this plan");
}

BatchController::BatchController(ControllerConfig config) : config_(std::move(config)) {
  config_.validate();
}

void BatchController::add_worker(const std::string& key, std::optional<double> speed_hint,
                                 std::optional<int> memory_cap) {
  if (index_.contains(key)) {
    throw std::invalid_argument("worker '" + key + "' is already in the controller");
  }
  if (speed_hint && (!(*speed_hint > 0.0) || !std::isfinite(*speed_hint))) {
    std::ostringstream msg;
    msg << "worker '" << key << "': speed hint must be positive and finite (got " << *speed_hint
        << ")";
    throw std::invalid_argument(msg.str());
  }
  if (memory_cap && *memory_cap < config_.min_batch) {
    throw std::invalid_argument("worker '" + key + "': memory cap " + std::to_string(*memory_cap) +
                                " is below min_batch " + std::to_string(config_.min_batch));
  }
  workers_.push_back(Worker{key, speed_hint, memory_cap, std::nullopt,
                            ThroughputEstimator(config_.throughput_window, config_.change),
                            CostHistory(config_.affine)});
  index_.emplace(key, workers_.size() - 1);
  membership_changed_ = true;
}

bool BatchController::remove_worker(const std::string& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return false;
  workers_.erase(workers_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (std::size_t i = 0; i < workers_.size(); ++i) index_.emplace(workers_[i].key, i);
  membership_changed_ = true;
  return true;
}

bool BatchController::observe(const std::string& key, int batch, double compute_time_s) {
  const auto it = index_.find(key);
  if (it == index_.end()) return false;
  Worker& w = workers_[it->second];
  const std::size_t quick = w.throughput.quick_changes();
  const std::size_t recalls = w.throughput.recalls();
  w.throughput.observe(batch, compute_time_s);  // validates batch and time
  ++w.seen;
  speed_changed_ =
      speed_changed_ || w.throughput.quick_changes() != quick || w.throughput.recalls() != recalls;
  // Only the affine policy plans with the fit; the others skip its upkeep.
  if (config_.policy == Policy::kAffine) w.history.observe(batch, compute_time_s);
  return true;
}

Bounds BatchController::bounds_of(const Worker& w) const {
  return Bounds{config_.min_batch,
                std::min(config_.max_batch, w.memory_cap.value_or(config_.max_batch))};
}

std::vector<WorkerView> BatchController::views() const {
  // A worker without measurements starts from its hint, else the mean measured throughput,
  // else (nobody measured yet) the mean hint, else 1: equal shares.
  double measured_sum = 0.0, hint_sum = 0.0;
  int measured = 0, hinted = 0;
  std::vector<std::optional<double>> throughput;
  throughput.reserve(workers_.size());
  for (const Worker& w : workers_) {
    throughput.push_back(w.throughput.throughput());
    if (const auto x = throughput.back()) {
      measured_sum += *x;
      ++measured;
    }
    if (w.speed_hint) {
      hint_sum += *w.speed_hint;
      ++hinted;
    }
  }
  const double fallback = measured > 0 ? measured_sum / measured
                          : hinted > 0 ? hint_sum / hinted
                                       : 1.0;
  const auto errors = noise();
  std::vector<WorkerView> out;
  out.reserve(workers_.size());
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = workers_[i];
    WorkerView v;
    v.batch = w.batch;
    v.throughput = throughput[i].value_or(w.speed_hint.value_or(fallback));
    if (config_.policy == Policy::kAffine) v.model = w.history.model();
    v.bounds = bounds_of(w);
    // A worker known only from a hint or the others' mean is a guess: a plan is not changed on
    // its account (a membership change replans regardless of the gate).
    v.rel_error = errors[i].second.value_or(1.0);
    out.push_back(v);
  }
  return out;
}

std::vector<std::pair<double, std::optional<double>>> BatchController::noise() const {
  constexpr std::size_t kOwnSpread = 8;  // deviations for a worker's own spread
  std::vector<double> pooled_dev;
  std::vector<std::vector<double>> own;
  own.reserve(workers_.size());
  for (const Worker& w : workers_) {
    own.push_back(w.throughput.deviations());
    pooled_dev.insert(pooled_dev.end(), own.back().begin(), own.back().end());
  }
  const double pooled =
      pooled_dev.size() >= 5 ? 1.4826 * *median(pooled_dev) : config_.prior_noise;
  // Correlated noise (ControllerConfig::correlated_noise): each estimate's error grows by the
  // factor of a first-order autoregressive process's mean.
  double correlation = 1.0;
  if (config_.correlated_noise) {
    std::vector<NoisePair> pairs;
    for (const Worker& w : workers_) w.throughput.noise_pairs(pairs);
    const double rho = std::clamp(lag_one_autocorrelation(pairs).value_or(0.0), 0.0, 0.9);
    correlation = std::sqrt((1.0 + rho) / (1.0 - rho));
  }
  std::vector<std::pair<double, std::optional<double>>> out;
  out.reserve(workers_.size());
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const double spread = own[i].size() >= kOwnSpread ? 1.4826 * *median(own[i]) : pooled;
    const std::size_t n = workers_[i].throughput.size();
    out.emplace_back(
        spread, n == 0 ? std::nullopt
                       : std::optional<double>(correlation * median_relative_error(spread, n)));
  }
  return out;
}

std::optional<std::string> BatchController::infeasibility() const {
  std::vector<Bounds> bounds;
  bounds.reserve(workers_.size());
  for (const Worker& w : workers_) bounds.push_back(bounds_of(w));
  std::string why = scheduler::infeasibility(bounds, config_.global_batch);
  if (why.empty()) return std::nullopt;
  return why;
}

BatchPlan BatchController::plan(PlanTrigger trigger) {
  if (config_.policy == Policy::kAffine) {
    for (Worker& w : workers_) w.history.checkpoint();
  }
  const std::vector<WorkerView> v = views();
  std::size_t fewest = std::numeric_limits<std::size_t>::max();
  for (const Worker& w : workers_) fewest = std::min(fewest, w.seen);
  const double z = last_.provisional ? 0.0 : config_.noise_z;
  PolicyParams params{config_.policy, config_.global_batch, config_.deadband, config_.gain, z};
  PlanDecision d = decide_plan(v, params);
  // Smoothing across rounds (ControllerConfig::persist_rounds): the deadband held a plan whose
  // gain clears the gate by persist_gain; after enough such rounds in a row the plan goes to
  // the target. Not under a provisional plan (the gate is off then: nothing says the gain is
  // real). The test is decide_plan's (gain_exceeds) with a higher threshold, so the
  // re-decision below, with the deadband lowered to persist_gain, changes the plan.
  bool persisted = false;
  if (trigger == PlanTrigger::kRound && !d.changed && !membership_changed_ &&
      last_.version > 0 && z > 0.0 && config_.persist_rounds > 0 &&
      config_.persist_gain < config_.deadband && d.current_step_time > 0.0 &&
      d.target_step_time > 0.0) {
    const bool real = gain_exceeds(d.current_step_time, d.target_step_time,
                                   config_.persist_gain + d.noise_gain);
    held_rounds_ = real ? held_rounds_ + 1 : 0;
    // The same gain at the lower persist_z, held while every worker made a whole throughput
    // window of fresh observations (ControllerConfig::persist_z): the rounds' estimates then
    // no longer share the observations the run began with.
    const double z_held = std::min(config_.persist_z, z);
    const bool likely =
        z_held > 0.0 && gain_exceeds(d.current_step_time, d.target_step_time,
                                     config_.persist_gain + d.noise_gain * z_held / z);
    if (!likely) {
      held_seen_.clear();
    } else if (held_seen_.empty()) {
      for (const Worker& w : workers_) held_seen_.push_back(w.seen);
    }
    bool held_a_window = !held_seen_.empty();
    for (std::size_t i = 0; i < held_seen_.size(); ++i) {
      held_a_window =
          held_a_window && workers_[i].seen - held_seen_[i] >= config_.throughput_window;
    }
    if (held_rounds_ >= config_.persist_rounds || held_a_window) {
      params.deadband = config_.persist_gain;
      if (held_rounds_ < config_.persist_rounds) params.noise_z = z_held;
      d = decide_plan(v, params);
      persisted = d.changed;
    }
  } else {
    held_rounds_ = 0;
    held_seen_.clear();
  }
  if (d.changed) {
    held_rounds_ = 0;
    held_seen_.clear();
  }

  BatchPlan p;
  p.keys.reserve(workers_.size());
  for (const Worker& w : workers_) p.keys.push_back(w.key);
  p.batches = d.batches;
  p.changed = d.changed || membership_changed_ || last_.version == 0;
  p.version = last_.version + (p.changed ? 1 : 0);
  p.predicted_step_time = d.predicted_step_time;
  p.target_step_time = d.target_step_time;
  p.noise_gain = d.noise_gain;
  p.persisted = persisted;
  p.provisional = p.changed ? fewest < config_.provisional_observations
                            : last_.provisional && fewest < config_.provisional_observations;
  for (std::size_t i = 0; i < workers_.size(); ++i) workers_[i].batch = p.batches[i];
  membership_changed_ = false;
  speed_changed_ = false;
  last_ = p;
  return p;
}

std::vector<WorkerEstimate> BatchController::estimates() const {
  std::vector<WorkerEstimate> out;
  out.reserve(workers_.size());
  const auto errors = noise();
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = workers_[i];
    WorkerEstimate e;
    e.key = w.key;
    e.batch = w.batch;
    e.throughput = w.throughput.throughput();
    e.speed_hint = w.speed_hint;
    e.model = w.history.model();
    e.regime_changes = w.throughput.regime_changes();
    e.observations = w.throughput.size();
    if (e.observations > 0) e.spread = errors[i].first;
    e.rel_error = errors[i].second;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace omnilearn::scheduler
