#pragma once
// Seeded random clusters for the scheduler's property tests: 2..64 workers, speeds up to 16:1.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "controller/simulator.hpp"

namespace omnilearn::scheduler::testing {

struct RandomCluster {
  std::vector<double> speeds;  // samples per ms, max / min <= 16
  int global_batch = 0;
  int min_batch = 1;
  int max_batch = 0;
};

// Integers from the top bits of the generator, so every standard library draws the same cases.
inline int uniform_int(std::mt19937_64& rng, int lo, int hi) {
  return lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}
inline double uniform_real(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// n in [2, 64]; log2 of each speed uniform in [0, 4] with the extremes pinned to one worker each
// so that every cluster spans the full 16:1 range when n allows; min batch 1..8; B = n x 16..64
// per worker; max batch either loose (B) or binding (1.5x to 3x the mean share).
inline RandomCluster random_cluster(std::mt19937_64& rng, bool binding_max_allowed = false) {
  RandomCluster c;
  const int n = uniform_int(rng, 2, 64);
  for (int i = 0; i < n; ++i) c.speeds.push_back(std::exp2(uniform_real(rng, 0.0, 4.0)));
  c.speeds[0] = 1.0;
  if (n > 2) c.speeds[1] = 16.0;
  std::shuffle(c.speeds.begin(), c.speeds.end(), rng);
  c.min_batch = uniform_int(rng, 1, 8);
  c.global_batch = n * std::max(uniform_int(rng, 16, 64), c.min_batch);
  c.max_batch = c.global_batch;
  if (binding_max_allowed && uniform_int(rng, 0, 1) == 1) {
    const double share = static_cast<double>(c.global_batch) / n;
    c.max_batch = std::max(c.min_batch + 1, static_cast<int>(share * uniform_real(rng, 1.5, 3.0)));
  }
  return c;
}

// A simulation of `c` with the given policy; overhead_share is the fixed cost's fraction of the
// ideal balanced step (0.2: the overhead is 20% of the step time).
inline SimulationConfig simulation_of(const RandomCluster& c, Policy policy, double overhead_share,
                                      double noise, std::uint64_t seed) {
  SimulationConfig s;
  s.speeds = c.speeds;
  s.global_batch = c.global_batch;
  s.min_batch = c.min_batch;
  s.max_batch = c.max_batch;
  s.policy = policy;
  s.noise = noise;
  s.seed = seed;
  double total_speed = 0.0;
  for (double v : c.speeds) total_speed += v;
  // Balanced linear step B / sum(speed) ms; overhead a with a / (a + that) = overhead_share.
  s.overhead_ms = overhead_share / (1.0 - overhead_share) * c.global_batch / total_speed;
  return s;
}

}  // namespace omnilearn::scheduler::testing

namespace omnilearn::scheduler::testing {

// One random event at `round` for a cluster of the given initial size: a speed change of a
// present worker by 1/4x..4x, a leave, or a join at 1..16 samples/ms. Worker 0 never leaves, so
// the cluster keeps at least one worker.
inline ClusterEvent random_event(std::mt19937_64& rng, int round, int workers,
                                 const std::vector<double>& speeds) {
  ClusterEvent e;
  e.round = round;
  switch (uniform_int(rng, 0, 2)) {
    case 0:
      e.kind = ClusterEvent::Kind::kSpeed;
      e.worker = uniform_int(rng, 0, workers - 1);
      e.speed =
          speeds[static_cast<std::size_t>(e.worker)] * std::exp2(uniform_real(rng, -2.0, 2.0));
      break;
    case 1:
      e.kind = workers > 1 ? ClusterEvent::Kind::kLeave : ClusterEvent::Kind::kJoin;
      e.worker = workers > 1 ? uniform_int(rng, 1, workers - 1) : -1;
      e.speed = 4.0;
      break;
    default:
      e.kind = ClusterEvent::Kind::kJoin;
      e.speed = std::exp2(uniform_real(rng, 0.0, 4.0));
      break;
  }
  return e;
}

}  // namespace omnilearn::scheduler::testing
