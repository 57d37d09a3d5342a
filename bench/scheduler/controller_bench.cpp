// Controller cost per control round for up to 1,024 workers (target: under 1 ms per round).
// A round is what the SchedulerActor does between two plans: one step report per worker
// (observe) and plan(). Workers have speeds 1..16x and affine costs with noise, so estimates,
// fits and targets change every round, as they would in a job. Two regimes:
//   steady: 5% noise, deadband 0.1 -- converged, plans rarely change;
//   churn:  10% noise, deadband 0  -- a new plan every round, so every worker's history holds
//           many batch values (the worst case for the affine fit).
//
//   scheduler_controller_bench [--benchmark_filter=...] [--benchmark_repetitions=N]
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "controller/batch_controller.hpp"
#include "controller/policy.hpp"

namespace {

using omnilearn::scheduler::BatchController;
using omnilearn::scheduler::BatchPlan;
using omnilearn::scheduler::ControllerConfig;
using omnilearn::scheduler::Policy;

struct Cluster {
  std::vector<std::string> keys;
  std::vector<double> seconds_per_sample;
  double overhead_s = 0.002;
  double noise_level;
  std::mt19937_64 rng{42};

  Cluster(int n, double noise) : noise_level(noise) {
    for (int i = 0; i < n; ++i) {
      keys.push_back("worker-" + std::to_string(i));
      const double speed = 1000.0 * std::exp2(4.0 * (rng() >> 11) * 0x1.0p-53);  // samples/s
      seconds_per_sample.push_back(1.0 / speed);
    }
  }
  double noise() { return 1.0 + noise_level * (2.0 * ((rng() >> 11) * 0x1.0p-53) - 1.0); }
};

struct Regime {
  double noise;
  double deadband;
};
constexpr Regime kRegimes[] = {{0.05, 0.1}, {0.10, 0.0}};
constexpr const char* kRegimeNames[] = {"steady", "churn"};

ControllerConfig config_for(int n, Policy policy, const Regime& regime) {
  ControllerConfig c;
  c.global_batch = 64 * n;
  c.min_batch = 1;
  c.max_batch = 1024;
  c.deadband = regime.deadband;
  c.policy = policy;
  return c;
}

void feed(BatchController& controller, Cluster& cluster, const BatchPlan& plan, int steps) {
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < plan.keys.size(); ++i) {
      const double t =
          (cluster.overhead_s + plan.batches[i] * cluster.seconds_per_sample[i]) * cluster.noise();
      controller.observe(plan.keys[i], plan.batches[i], t);
    }
  }
}

// One round: a step report from every worker, then plan().
void BM_ControllerRound(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto policy = static_cast<Policy>(state.range(1));
  const Regime& regime = kRegimes[state.range(2)];
  Cluster cluster(n, regime.noise);
  BatchController controller(config_for(n, policy, regime));
  for (const auto& k : cluster.keys) controller.add_worker(k);
  BatchPlan plan = controller.plan();
  for (int warm = 0; warm < 8; ++warm) {  // past the first rounds: fits exist, history is full
    feed(controller, cluster, plan, 5);
    plan = controller.plan();
  }
  std::int64_t changed = 0;
  for (auto _ : state) {
    feed(controller, cluster, plan, 1);
    plan = controller.plan();
    changed += plan.changed ? 1 : 0;
    benchmark::DoNotOptimize(plan.batches.data());
  }
  state.SetLabel(std::string(omnilearn::scheduler::to_string(policy)) + "/" +
                 kRegimeNames[state.range(2)]);
  state.counters["changed_fraction"] =
      benchmark::Counter(static_cast<double>(changed) / static_cast<double>(state.iterations()));
}

// plan() alone, with fresh reports before every call (not timed), so the fits are recomputed.
void BM_PlanOnly(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto policy = static_cast<Policy>(state.range(1));
  const Regime& regime = kRegimes[state.range(2)];
  Cluster cluster(n, regime.noise);
  BatchController controller(config_for(n, policy, regime));
  for (const auto& k : cluster.keys) controller.add_worker(k);
  BatchPlan plan = controller.plan();
  for (int warm = 0; warm < 8; ++warm) {
    feed(controller, cluster, plan, 5);
    plan = controller.plan();
  }
  for (auto _ : state) {
    state.PauseTiming();
    feed(controller, cluster, plan, 1);
    state.ResumeTiming();
    plan = controller.plan();
    benchmark::DoNotOptimize(plan.batches.data());
  }
  state.SetLabel(std::string(omnilearn::scheduler::to_string(policy)) + "/" +
                 kRegimeNames[state.range(2)]);
}

// policy: 0 uniform, 1 proportional, 2 affine; regime: 0 steady, 1 churn.
void Args(benchmark::internal::Benchmark* b) {
  for (int regime : {0, 1}) {
    for (int policy : {0, 1, 2}) {
      for (int n : {64, 256, 1024}) b->Args({n, policy, regime});
    }
  }
  b->ArgNames({"workers", "policy", "regime"})
      ->Unit(benchmark::kMicrosecond)
      ->MeasureProcessCPUTime();
}

BENCHMARK(BM_ControllerRound)->Apply(Args);
BENCHMARK(BM_PlanOnly)->Apply(Args);

}  // namespace

BENCHMARK_MAIN();
