#pragma once
// When the batch controller runs and which timings it may see: the rules the SchedulerActor
// applies, as a pure class (steps in, decisions out; no clock) so that recorded traces replay
// through exactly the same rules (controller/trace_replay.hpp).
//
// - A generation's first `warmup_steps` steps are left out (a trainer's first steps after a
//   start or a state sync run cold: allocations, caches, a neighbour still loading LibTorch),
//   and so are a new plan's first `cooldown_steps` (the old batch's timings may still be in
//   flight, and the agent's window restarts at the new batch).
// - An observation counts only when every step it covers lies after that period.
// - A round runs every `interval_steps` steps once every member has such an observation at the
//   plan in force, and sooner when a worker's speed was found to have changed (the controller's
//   change detector): waiting for the interval would leave up to `interval_steps` more steps at
//   a plan the changed worker slows down.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace omnilearn::scheduler {

struct ControlRoundsConfig {
  std::int64_t interval_steps = 10;  // steps between two rounds
  std::int64_t cooldown_steps = 5;   // steps at a new plan before its timings count
  std::int64_t warmup_steps = 10;    // steps of a new generation before its timings count

  // Throws std::invalid_argument naming the first field out of range.
  void validate() const;
};

// Not thread-safe; the owning actor's thread (or a replay) calls every method.
class ControlRounds {
 public:
  // Throws std::invalid_argument when config is out of range.
  explicit ControlRounds(ControlRoundsConfig config);

  // A generation with `members` trains from step `step` + 1 (its first plan with it).
  void generation_started(std::int64_t step, const std::vector<std::string>& members);

  // A round ran at `step`; when it changed the plan, the new plan applies from `effective_step`.
  void round_ran(std::int64_t step, bool changed, std::int64_t effective_step);

  // Whether an observation of `member` covering steps [first_step, last_step] may be fed to the
  // controller: `member` is in the generation, and every step it covers lies after the warm-up
  // and the plan's cool-down. Marks the member fresh when it returns true.
  bool accept(const std::string& member, std::int64_t first_step, std::int64_t last_step);

  // Every member has an accepted observation of the plan in force.
  bool fresh() const;

  // A round is due at `step`: fresh(), and `interval_steps` since the last one or
  // `speed_changed` (BatchController::speed_changed: a detected change waits for no interval).
  bool due(std::int64_t step, bool speed_changed = false) const;

  // The first step whose timings count (after warm-up or cool-down).
  std::int64_t counted_from() const { return counted_from_; }
  // The first step run with the plan in force.
  std::int64_t plan_effective_step() const { return plan_effective_; }
  const ControlRoundsConfig& config() const { return config_; }

 private:
  ControlRoundsConfig config_;
  std::int64_t plan_effective_ = 0;
  std::int64_t counted_from_ = 0;
  std::int64_t last_round_ = 0;
  std::map<std::string, bool> fresh_;  // member -> has an accepted observation of this plan
};

}  // namespace omnilearn::scheduler
