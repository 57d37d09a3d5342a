#pragma once
// The stateful batch-size controller one SchedulerActor owns: workers come and go by a stable
// key, report step times, and plan() turns what is known into integer batches that sum to the
// global batch. The math lives in policy.hpp; this class only keeps per-worker state.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "controller/cost_model.hpp"
#include "controller/estimator.hpp"
#include "controller/policy.hpp"

namespace omnilearn::scheduler {

// Everything the controller needs to know about the job.
struct ControllerConfig {
  int global_batch = 256;   // B: every plan sums to exactly this
  int min_batch = 1;        // no worker gets fewer samples per step
  int max_batch = 1 << 20;  // no worker gets more (a worker's memory cap can lower it further)
  double deadband = 0.05;   // keep the plan unless a new one ends steps this much sooner, [0,1)
  double gain = 1.0;        // fraction of the computed correction applied per plan, in (0, 1]
  Policy policy = Policy::kProportional;
  // Observations in the robust (median) throughput estimate: a long window smooths across
  // rounds; the change detector (`change`) forgets it when a worker's speed really changes.
  std::size_t throughput_window = 24;
  CostFitConfig affine;  // history and forgetting of the affine fit
  // Noise gate (decide_plan): a new plan only when its predicted gain exceeds noise_z standard
  // errors of the prediction; 0 turns the gate off (the deadband alone decides).
  double noise_z = 3.5;
  // Relative spread of one observation assumed until the workers' own spread can be measured
  // (fewer than 5 observations in all).
  double prior_noise = 0.05;
  // Noise that lasts (a shared CPU's bursts of a few steps, a CPU quota's throttling) makes
  // neighbouring observations alike, and the median of n of them varies more than that of n
  // independent ones. With the noise's lag-one autocorrelation rho (lag_one_autocorrelation
  // over every worker's noise_pairs, taken as 0 below 0 and at most 0.9), each estimate's
  // relative error is taken sqrt((1 + rho) / (1 - rho)) times the independent one's: the
  // factor for the mean of a first-order autoregressive process. Off by default, and in
  // for_step_observations too: beside a CPU hog, whose bursts span a few steps, it keeps
  // plans made from bursts out when a change detector restarts windows on bursts, but with the
  // run level off under small noise (ChangeDetection::run_min_spread) the plan holds without
  // it, and the higher gate only costs time (docs/benchmarks.md, "Following speed changes").
  bool correlated_noise = false;
  ChangeDetection change;  // when a worker's speed changed for real
  // A plan made while some worker had fewer observations than this since it joined is
  // provisional: the next round replaces it under the deadband alone, without the noise gate.
  // Otherwise a first plan made from one or two noisy windows (at the start, or for a newcomer)
  // would be held for as long as the gate cannot tell its error from noise (12 rounds at 87% of
  // the ideal in a replay with 20% step noise). A worker's own speed changes do not make a plan
  // provisional: after one the gate weighs the reset window's error as usual.
  std::size_t provisional_observations = 3;
  // Smoothing across rounds. The deadband holds a plan against any one round's gain up to it,
  // which alone would keep a steady imbalance of up to the deadband for the whole job (one
  // vCPU a few percent slower than its neighbour: 5-10% of every step under a deadband of
  // 0.1). A predicted gain above the noise gate's threshold plus `persist_gain`, in
  // `persist_rounds` control rounds in a row (PlanTrigger::kRound), replaces the plan all the
  // same: one plan change costs about one step, a lasting imbalance a share of every step.
  // The sum, not the larger of the two: consecutive rounds share most of their windows, so
  // they are not independent evidence, and the larger alone chased noise in the simulator
  // (tests/controller). The rounds need not name the same slow worker. Off with 0 rounds,
  // with the gate off (noise_z = 0) and under a provisional plan; without effect when the
  // deadband is at most persist_gain (the deadband alone decides then).
  std::size_t persist_rounds = 3;
  double persist_gain = 0.02;
  // A lower bar for a gain that lasts: a predicted gain above persist_gain plus the gate's
  // threshold at persist_z (instead of noise_z) standard errors, in every round while each
  // worker made `throughput_window` fresh observations, replaces the plan all the same. By then
  // the estimates share no observation with those the run began with, so two windows say the
  // same, where one window's 2 standard errors are often noise. Under a gate of 4 standard
  // errors a plan 5% off was held for hundreds of steps in the replays of 20% step noise.
  // 0: off (only the rule above). Needs persist_rounds > 0, like the rule above.
  double persist_z = 0.0;

  // Throws std::invalid_argument naming the first impossible setting (B < min_batch,
  // min_batch > max_batch, deadband or gain out of range, ...).
  void validate() const;
};

// `config` for one observation per worker and step (the compute of every rank that the
// leader's step report carries), where the defaults above suit heartbeat windows of several
// steps each: a step's time is noisier than a window's mean, and every observation a window
// waited for is one step now. So twice the observations in the throughput window (48), a noise
// gate at 4 standard errors instead of 3.5, a first plan provisional until every worker has 12
// observations instead of 3, and a large change caught after three observations beyond 3
// spreads instead of two beyond 4, and a gain held across a fresh window of 48 observations
// replacing the plan at 1.5 standard errors (persist_z). The change detector's smaller levels
// only where a step's noise spreads 20% or more (run_min_spread, slow_min_spread: where the
// quick level cannot see a halved speed), the slow level only for changes of 30% or more:
// beside a bursty CPU hog both fired on bursts under small noise, each time dropping the
// window, and the plan followed them. Three regimes remembered (remembered_regimes), so that a
// speed that comes back within 15% is estimated from its old window at once, and a switch
// back to one tested directly (switch_llr 8). Chosen by
// replaying recordings that hold both (the same runs' windows and steps): docs/benchmarks.md,
// "Following speed changes".
ControllerConfig for_step_observations(ControllerConfig config);

// What a plan() call is for. A periodic control round is one round of the smoothing across
// rounds (ControllerConfig::persist_rounds); a plan for a new generation is not (it may come
// with the same members and no new timings, after a broken group re-forms), and it restarts
// the count.
enum class PlanTrigger { kRound, kGeneration };

// One plan: what every worker runs with until the next plan.
struct BatchPlan {
  std::vector<std::string> keys;     // workers in the controller's order (see BatchController)
  std::vector<int> batches;          // batches[i] belongs to keys[i]; sums to B, within bounds
  bool changed = false;              // differs from the previous plan (batches or membership)
  std::uint64_t version = 0;         // increases by one with every changed plan; 0 before any
  double predicted_step_time = 0.0;  // seconds, under the models the plan was made with
  double target_step_time = 0.0;     // the policy's best plan under the same models
  double noise_gain = 0.0;           // the relative gain the noise could explain (the gate)
  bool provisional = false;          // made from too few observations (see ControllerConfig)
  bool persisted = false;            // changed by the smoothing across rounds (persist_rounds),
                                     // the deadband alone would have kept the plan

  // The batch of `key`; std::out_of_range when the plan does not contain it.
  int batch_of(const std::string& key) const;
};

// What the controller currently believes about one worker (for status displays and logs).
struct WorkerEstimate {
  std::string key;
  std::optional<int> batch;          // in the plan in force
  std::optional<double> throughput;  // measured samples/s (median of the window)
  std::optional<double> speed_hint;  // samples/s given at add_worker
  std::optional<CostModel> model;    // the affine fit, when there is one (kAffine only)
  std::size_t regime_changes = 0;    // times a detected speed change reset its throughput window
  std::size_t observations = 0;      // in the throughput window
  std::optional<double> spread;      // relative spread of one observation (own, or pooled)
  std::optional<double> rel_error;   // relative standard error of `throughput`
};

// Plans per-worker batches. Workers are ordered by when they were added; removing one keeps the
// others' relative order, so survivors keep their positions and newcomers go last (the order a
// new generation's ranks can follow). Not thread-safe: the owning actor's thread calls every
// method.
class BatchController {
 public:
  // Throws std::invalid_argument when config is impossible (see ControllerConfig::validate).
  explicit BatchController(ControllerConfig config);

  // Adds a worker with no measurements. It starts from `speed_hint` (samples/s) or, without
  // one, the mean measured throughput of the others. `memory_cap` is the largest batch that fits
  // its memory. Throws std::invalid_argument on a duplicate key, a hint that is not positive
  // and finite, or a cap below min_batch (that worker could never take a batch).
  void add_worker(const std::string& key, std::optional<double> speed_hint = std::nullopt,
                  std::optional<int> memory_cap = std::nullopt);

  // Removes a worker; its share goes to the others by speed at the next plan(). Returns false
  // (and does nothing) for an unknown key, so a late or repeated Down is harmless.
  bool remove_worker(const std::string& key);

  // Records one step of `key`: `batch` samples took `compute_time_s` seconds of compute (not
  // waiting). Returns false for an unknown key (a report that raced with remove_worker). Throws
  // std::invalid_argument unless batch >= 1 and the time is positive and finite.
  bool observe(const std::string& key, int batch, double compute_time_s);

  // Plans from what is known now: integers, one per worker in the order above, summing to B and
  // within [min_batch, min(max_batch, memory cap)]. Calling it again without new information
  // returns the same batches with changed == false. Throws InfeasibleBatchError (with what to
  // change) when the current workers cannot hold B; infeasibility() says so without throwing.
  BatchPlan plan(PlanTrigger trigger = PlanTrigger::kRound);

  // Whether a worker's change detector found a large change of its speed (its quick level,
  // ChangeDetection::quick_run), or a worker's speed came back to a remembered regime
  // (ChangeDetection::remembered_regimes), since the last plan(): the control rounds then run a
  // round without waiting for the interval (ControlRounds::due), so that a plan follows the
  // change a few steps sooner; every step until then runs at the old plan, the changed worker
  // setting the step time. A change the other levels catch waits for the next round: at most
  // a few tens of percent for a few steps, where extra rounds on every detection (a real drift
  // of a shared machine, a noisy run) made plans from two or three observations and then
  // changed them again: in the replays of tests/controller, more plan changes than the speeds
  // justified. A recalled regime is a whole window, not two or three observations.
  bool speed_changed() const { return speed_changed_; }

  // Why the current workers cannot hold B, or nullopt when they can.
  std::optional<std::string> infeasibility() const;

  // The last plan returned (version 0 and empty before the first).
  const BatchPlan& last_plan() const { return last_; }

  // Per-worker state in the controller's order.
  std::vector<WorkerEstimate> estimates() const;

  bool contains(const std::string& key) const { return index_.contains(key); }
  std::size_t size() const { return workers_.size(); }
  const ControllerConfig& config() const { return config_; }

 private:
  struct Worker {
    std::string key;
    std::optional<double> speed_hint;
    std::optional<int> memory_cap;
    std::optional<int> batch;  // in the plan in force
    ThroughputEstimator throughput;
    CostHistory history;
    std::size_t seen = 0;  // observations since it was added (a regime change keeps them)
  };

  Bounds bounds_of(const Worker& w) const;
  std::vector<WorkerView> views() const;
  // Per worker: the relative spread of one observation (its own with 8 or more observations,
  // else pooled over the workers, else prior_noise) and the relative error of its estimate
  // (nullopt without observations).
  std::vector<std::pair<double, std::optional<double>>> noise() const;

  ControllerConfig config_;
  std::vector<Worker> workers_;
  std::unordered_map<std::string, std::size_t> index_;  // key -> position in workers_
  BatchPlan last_;
  bool membership_changed_ = false;
  bool speed_changed_ = false;   // a quick-level change of speed since the last plan()
  std::size_t held_rounds_ = 0;  // rounds in a row the deadband held a real gain (persist_*)
  // Each worker's `seen` when the rounds in a row with a gain at persist_z began; empty when
  // the last round had none.
  std::vector<std::size_t> held_seen_;
};

}  // namespace omnilearn::scheduler
