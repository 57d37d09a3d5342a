#pragma once
// A deterministic cluster simulator for the controller: worker i takes
// overhead + b_i / speed_i milliseconds per step (times a seeded multiplicative noise), the
// controller plans once per round from the steps it observed, and events change speeds or
// membership at given rounds. What `omnilearn simulate` and the scheduler benchmarks run.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "controller/allocation.hpp"
#include "controller/batch_controller.hpp"
#include "controller/cost_model.hpp"
#include "controller/policy.hpp"

namespace omnilearn::scheduler {

// A change to the simulated cluster, applied at the start of `round` (before that round's plan).
struct ClusterEvent {
  enum class Kind { kSpeed, kLeave, kJoin };
  int round = 0;
  Kind kind = Kind::kSpeed;
  int worker = -1;     // kSpeed, kLeave: the worker's id (0-based over --speeds, then joiners)
  double speed = 0.0;  // kSpeed: the new speed; kJoin: the newcomer's speed (samples per ms)

  // The event in the syntax parse_events reads, e.g. "5:speed:3=0.5".
  std::string to_string() const;
};

// Parses comma-separated events: "ROUND:speed:WORKER=SPEED", "ROUND:leave:WORKER" or
// "ROUND:join:SPEED", e.g. "5:speed:3=0.5,8:leave:1,10:join:2.0". Joiners get ids n, n+1, ...
// in the order their events apply. An empty string is no events. Throws std::invalid_argument
// naming the malformed event and the expected forms.
std::vector<ClusterEvent> parse_events(std::string_view text);

// Parameters of one simulation.
struct SimulationConfig {
  std::vector<double> speeds;  // samples per millisecond, one per initial worker; ids 0..n-1
  int global_batch = 256;
  int min_batch = 1;
  int max_batch = 1 << 20;
  Policy policy = Policy::kProportional;
  double deadband = 0.05;
  double gain = 1.0;
  int rounds = 12;
  int steps_per_round = 5;   // steps observed between two plans
  double noise = 0.0;        // step time is multiplied by 1 + noise * u, u uniform in [-1, 1]
  double overhead_ms = 0.0;  // fixed cost of every step on every worker
  std::vector<ClusterEvent> events;
  std::uint64_t seed = 1;
  bool speed_hints = false;  // tell the controller each worker's true speed when it joins
  std::size_t throughput_window = ControllerConfig{}.throughput_window;
  CostFitConfig affine;
  double noise_z = ControllerConfig{}.noise_z;  // the controller's noise gate (0: off)
  std::size_t persist_rounds = ControllerConfig{}.persist_rounds;  // smoothing across rounds

  // Throws std::invalid_argument with a one-line reason: speeds not positive, B below
  // n * min_batch or above n * max_batch at some round, an event naming an absent worker or a
  // round outside [0, rounds), the last worker leaving, a parameter out of range.
  void validate() const;
};

// What happened in one round.
struct RoundRecord {
  int round = 0;
  std::vector<int> workers;         // ids present, in the controller's order
  std::vector<int> batches;         // the plan this round ran with
  std::vector<double> times;        // per worker, mean compute time per step over the round (ms)
  double step_time = 0.0;           // mean over the round's steps of the slowest worker (ms)
  double ideal_step_time = 0.0;     // the best any integer split of B within the bounds can do
                                    // under the noise-free costs (ms)
  double efficiency = 0.0;          // ideal_step_time / step_time
  double plan_efficiency = 0.0;     // ideal_step_time / the plan's noise-free step time: what the
                                    // controller chose, without the luck of the noise
  bool changed = false;             // the plan differs from the previous round's
  std::vector<std::string> events;  // applied at the start of this round
};

struct SimulationResult {
  std::vector<RoundRecord> rounds;
};

// The controller configuration a simulation runs with.
ControllerConfig controller_config(const SimulationConfig& config);

// Runs the simulation. Deterministic for a given config (seeded, platform-independent noise).
// Throws std::invalid_argument like SimulationConfig::validate.
SimulationResult simulate(const SimulationConfig& config);

// The best integer split of `total` within `bounds`: minimizes the largest costs[i].time(b_i).
// Exact: the real-valued optimum floored, then each remaining unit to the worker it costs least.
struct Split {
  std::vector<int> batches;
  double step_time = 0.0;
};
Split best_integer_split(std::span<const CostModel> costs, std::span<const Bounds> bounds,
                         long long total);

}  // namespace omnilearn::scheduler
