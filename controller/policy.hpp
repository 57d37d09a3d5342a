#pragma once
// The batch-size policies as pure functions: what each worker should get, given what is known
// about it now. BatchController keeps the state (estimators, fits, the plan in force) and calls
// these; tests call them directly with thousands of random clusters.

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "controller/allocation.hpp"
#include "controller/cost_model.hpp"

namespace omnilearn::scheduler {

// How per-worker batches are chosen.
enum class Policy {
  kUniform,       // B / n each: what PyTorch DDP does, the baseline
  kProportional,  // the OmniLearn rule: batch in proportion to measured throughput
  kAffine,        // equalize step time under a fitted alpha + beta * b cost per worker
};

// "uniform", "proportional" or "affine".
std::string_view to_string(Policy policy);

// Parses the names to_string returns; nullopt for anything else.
std::optional<Policy> parse_policy(std::string_view name);

// What a policy knows about one worker at planning time.
struct WorkerView {
  std::optional<int> batch;        // batch of the plan in force; nullopt for a newcomer
  double throughput = 1.0;         // samples/s: measured (robust), the hint, or the others' mean
  std::optional<CostModel> model;  // affine fit, when the worker has one (used by kAffine only)
  Bounds bounds;                   // [min_batch, min(max_batch, memory cap)]
  // Relative standard error of this worker's cost estimate (its predicted step time may be off
  // by about this fraction); 0: known exactly. Used by the noise gate of decide_plan.
  double rel_error = 0.0;
};

// Knobs shared by every policy.
struct PolicyParams {
  Policy policy = Policy::kProportional;
  int global_batch = 0;   // B: the plan sums to exactly this
  double deadband = 0.0;  // keep the plan unless a new one ends steps this much sooner
  double gain = 1.0;      // fraction of the computed correction applied per round, in (0, 1]
  // Noise gate: keep the plan in force unless the predicted gain exceeds noise_z standard
  // errors of that prediction (see decide_plan); 0 turns the gate off.
  double noise_z = 0.0;
};

// The cost model a policy plans with: the fit under kAffine when there is one, otherwise the
// linear model through the throughput estimate (alpha = 0, beta = 1 / throughput).
CostModel planning_model(const WorkerView& worker, Policy policy);

// Real-valued targets, summing to B within bounds, before the deadband. Where a bound binds, the
// excess goes to the other workers in proportion to throughput. All throw InfeasibleBatchError
// when B cannot fit the bounds.
//
// uniform: B / n each.
std::vector<double> uniform_targets(std::span<const WorkerView> workers, int global_batch);
// proportional: t_i = b_i / X_i, t_avg = mean t over workers with a batch, candidate
// c_i = b_i + gain * X_i * (t_avg - t_i) (a newcomer: X_i * t_avg), scaled to sum to B. With
// gain 1 and a cost linear in the batch this lands on b_i proportional to X_i in one round.
std::vector<double> proportional_targets(std::span<const WorkerView> workers, int global_batch,
                                         double gain);
// affine: the batches e with alpha_i + beta_i * e_i equal for every unbounded worker and sum B
// (workers without a fit use their linear model, which is the proportional rule); then
// c_i = b_i + gain * (e_i - b_i).
std::vector<double> affine_targets(std::span<const WorkerView> workers, int global_batch,
                                   double gain);
// Dispatches on params.policy.
std::vector<double> policy_targets(std::span<const WorkerView> workers, const PolicyParams& params);

// A decided plan.
struct PlanDecision {
  std::vector<int> batches;     // one per worker, same order as the input; sums to B
  std::vector<double> targets;  // the real-valued targets of the policy
  bool changed = false;         // batches differ from the plan in force (or it no longer applies)
  double predicted_step_time = 0.0;  // max over workers of planning_model(b_i).time(batch), s
  double target_step_time = 0.0;     // the same for the integer plan of the targets
  double noise_gain = 0.0;  // the relative gain the estimates' noise could explain (the gate)
  double current_step_time = 0.0;    // the plan in force under the models; 0 when it no longer
                                     // applies (a join or leave)
};

// Targets, then integers, then the deadband. Integers come from round_largest_remainder under
// kUniform and round_min_step_time under the planning models otherwise. The deadband acts on
// the step time the models predict: the plan in force is kept unless the targets' plan would
// end the step more than `deadband` (relative) sooner. Under the linear model of the
// proportional rule this is the paper's per-worker test |c_i - b_i| / c_i < deadband, applied to
// the workers that set the step time: an underloaded worker costs nothing until it is the
// slowest, and a small batch whose target noise moves across a rounding boundary (7 vs 8
// samples is 14%) is not worth a new plan unless it makes the step slower. The threshold is
// the larger of the deadband and the noise gate: noise_z x sqrt(e_s^2 + sum(e_i^2) / n^2),
// e_s the relative error of the worker that sets the current step time, e_i every worker's
// (the error of the predicted current step time and of the target's, which averages over all
// workers): a gain that large is unlikely to be the estimates' noise. When the plan
// changes, every worker moves to its target; after a join or leave (the batches no longer sum
// to B) it always changes, the departed share going to the others by throughput. Every result
// is integral, sums to B and respects the bounds; throws InfeasibleBatchError when that is
// impossible.
PlanDecision decide_plan(std::span<const WorkerView> workers, const PolicyParams& params);

// Whether a plan predicted to end steps at `target` s is worth leaving one predicted at
// `current` s for: more than `threshold` (relative) sooner. The relative 1e-9 keeps float noise
// between two fits of the same line from counting as an improvement when the threshold is 0.
// decide_plan's test, and the smoothing across rounds' (BatchController::plan).
bool gain_exceeds(double current, double target, double threshold);

}  // namespace omnilearn::scheduler
