#pragma once
// Speeds that change while a job runs, as traces the replay (trace_replay.hpp) scores: a
// recorded trace of a steady cluster is repeated to the scenario's length (keeping the noise the
// machine really had) and one worker's speed, or the membership, is changed in one of five ways:
// a step change, a slow drift, a periodic noisy neighbour, a join, a leave. Every speed change
// is a `change` record, so the replay's oracle knows each speed from the step it changes (a
// drift is a staircase: its speed holds for a few steps between changes). Pure: no clock, no I/O.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "controller/trace_replay.hpp"

namespace omnilearn::scheduler {

enum class SpeedScenario {
  kSteady,     // nothing changes: what the steady cluster alone loses against the oracle
  kStep,       // `worker` becomes `factor` times slower at `at` and stays so
  kDrift,      // `worker` slows gradually from `at` to `at` + `length`, to `factor` times slower
  kNeighbour,  // `worker` is `factor` times slower for `length` steps every `period` steps
  kJoin,       // `worker` is absent until `at`, then joins
  kLeave,      // `worker` leaves at `at`
};

// "steady", "step", "drift", "neighbour", "join", "leave".
std::string_view to_string(SpeedScenario s);

struct ScenarioConfig {
  SpeedScenario kind = SpeedScenario::kStep;
  std::int64_t steps = 1200;      // the scenario's length
  std::int64_t skip = 30;         // the base trace's first steps left out (its controller's start)
  // Where in the repeated base the scenario starts: its observations after `skip` are rotated
  // by this many steps (a window across the cut is split in two, each part keeping its mean).
  // Replays from several offsets meet the recording's own noise at different places; one
  // replay says little where that noise is bursty. Must be below the repeated part's length.
  std::int64_t offset = 0;
  std::string worker;             // whose speed or membership changes; the base's first if empty
  std::int64_t at = 400;          // the first change: in effect from at + 1
  double factor = 3.0;            // how many times slower (step, drift, neighbour)
  std::int64_t length = 300;      // drift: steps to reach `factor`; neighbour: steps it stays
  std::int64_t period = 300;      // neighbour: steps from one arrival to the next
  std::int64_t drift_every = 30;  // drift: steps between two changes of the staircase

  // Throws std::invalid_argument naming the first field out of range.
  void validate() const;
};

// The scenario built from `base` (a trace with one generation: a steady cluster). Its
// observations after `skip`, rotated by `offset`, are repeated end to end up to `steps`,
// windows that straddle a
// change are cut at it, and the changed worker's compute times are multiplied by its factor.
// Throws std::invalid_argument when the base has more than one generation or no observations
// after `skip`, an offset not below their length, or a worker not in it.
Trace make_scenario(const Trace& base, const ScenarioConfig& config);

}  // namespace omnilearn::scheduler
