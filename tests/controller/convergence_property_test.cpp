// The controller's properties over many random clusters (2..64 workers, speeds up
// to 16:1, noise 0..10%), run through the simulator: conservation and bounds every round, fast
// convergence (proportional on linear cost, affine with 20% overhead), no oscillation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "random_cluster.hpp"
#include "controller/simulator.hpp"

namespace omnilearn::scheduler {
namespace {

using testing::random_cluster;
using testing::random_event;
using testing::simulation_of;
using testing::uniform_int;
using testing::uniform_real;

// OMNILEARN_TEST_CLUSTERS: 100 under the sanitizers (tests/controller/CMakeLists.txt), where the
// point is memory and thread errors and 1,000 clusters take minutes.
#ifndef OMNILEARN_TEST_CLUSTERS
#define OMNILEARN_TEST_CLUSTERS 1000
#endif
constexpr int kClusters = OMNILEARN_TEST_CLUSTERS;

TEST(ConvergenceProperty, ConservationAndBoundsHoldEveryRound) {
  std::mt19937_64 rng(1);
  int rounds_checked = 0;
  for (int k = 0; k < kClusters; ++k) {
    const auto c = random_cluster(rng, /*binding_max_allowed=*/true);
    auto s = simulation_of(c, static_cast<Policy>(uniform_int(rng, 0, 2)),
                           uniform_real(rng, 0.0, 0.5), uniform_real(rng, 0.0, 0.1), k);
    s.deadband = uniform_real(rng, 0.0, 0.2);
    s.gain = uniform_int(rng, 0, 1) ? 1.0 : uniform_real(rng, 0.3, 1.0);
    s.rounds = 10;
    for (int e = 0; e < 3; ++e) {
      s.events.push_back(
          random_event(rng, uniform_int(rng, 1, 9), static_cast<int>(c.speeds.size()), c.speeds));
    }
    try {
      s.validate();
    } catch (const std::invalid_argument&) {
      s.events.clear();  // e.g. a join made n * min_batch exceed B
    }
    const SimulationResult r = simulate(s);
    for (const RoundRecord& rec : r.rounds) {
      ASSERT_EQ(std::accumulate(rec.batches.begin(), rec.batches.end(), 0), s.global_batch)
          << "cluster " << k << " round " << rec.round;
      for (int b : rec.batches) {
        ASSERT_GE(b, s.min_batch) << "cluster " << k << " round " << rec.round;
        ASSERT_LE(b, s.max_batch) << "cluster " << k << " round " << rec.round;
      }
      // No plan beats the best integer split of the same costs.
      ASSERT_LE(rec.plan_efficiency, 1.0 + 1e-12) << "cluster " << k << " round " << rec.round;
      ++rounds_checked;
    }
  }
  EXPECT_EQ(rounds_checked, kClusters * 10);
}

// Per round r: the worst and the mean efficiency over all clusters.
struct Curve {
  std::vector<double> worst, mean;
};

Curve run_all(Policy policy, double overhead_share, double noise, double deadband, int rounds,
              std::uint64_t seed, bool plan_efficiency) {
  std::mt19937_64 rng(seed);
  Curve out{std::vector<double>(rounds, 1.0), std::vector<double>(rounds, 0.0)};
  for (int k = 0; k < kClusters; ++k) {
    auto s = simulation_of(random_cluster(rng), policy, overhead_share, noise, k);
    s.deadband = deadband;
    s.rounds = rounds;
    const SimulationResult r = simulate(s);
    for (int i = 0; i < rounds; ++i) {
      const double e = plan_efficiency ? r.rounds[i].plan_efficiency : r.rounds[i].efficiency;
      out.worst[i] = std::min(out.worst[i], e);
      out.mean[i] += e / kClusters;
    }
  }
  return out;
}

void print(const char* label, const Curve& c) {
  std::printf("%-44s worst/mean by round:", label);
  for (std::size_t i = 0; i < c.worst.size(); ++i) std::printf(" %.3f/%.3f", c.worst[i], c.mean[i]);
  std::printf("\n");
}

// Round 0 has no measurements (equal split); round 1 is the first plan from measurements.
// "Within 3 rounds": from round 2 on, every cluster at >= 0.95, and it stays there.
TEST(ConvergenceProperty, ProportionalOnLinearCostReaches95PercentWithinThreeRounds) {
  const Curve c = run_all(Policy::kProportional, 0.0, 0.0, 0.05, 8, 2, false);
  print("proportional, linear cost, no noise", c);
  for (int r = 2; r < 8; ++r) EXPECT_GE(c.worst[r], 0.95) << "round " << r;
  EXPECT_GE(c.worst[1], 0.95);  // in fact one round is enough without noise
}

// With noise the measured step time carries the noise's own maximum (64 workers at 10% noise
// cannot beat 1 / 1.1 whatever the plan), so the plan is judged on its noise-free step time.
TEST(ConvergenceProperty, ProportionalOnLinearCostWithNoiseReaches95PercentWithinThreeRounds) {
  const Curve c = run_all(Policy::kProportional, 0.0, 0.02, 0.02, 8, 3, true);
  print("proportional, linear cost, 2% noise (plan)", c);
  for (int r = 2; r < 8; ++r) EXPECT_GE(c.worst[r], 0.95) << "round " << r;
}

// A deadband d accepts plans up to (1 + d) slower than the target, so 0.97 needs d < 0.031.
TEST(ConvergenceProperty, AffineWithTwentyPercentOverheadReaches97PercentWithinThreeRounds) {
  const Curve affine = run_all(Policy::kAffine, 0.2, 0.0, 0.02, 8, 4, false);
  const Curve proportional = run_all(Policy::kProportional, 0.2, 0.0, 0.02, 8, 4, false);
  print("affine, 20% overhead, no noise", affine);
  print("proportional, 20% overhead, no noise", proportional);
  for (int r = 2; r < 8; ++r) EXPECT_GE(affine.worst[r], 0.97) << "round " << r;
  // What the issue asks us to show: proportional does worse there, and by how much.
  std::printf("round 2: affine worst %.3f mean %.3f; proportional worst %.3f mean %.3f\n",
              affine.worst[2], affine.mean[2], proportional.worst[2], proportional.mean[2]);
  EXPECT_GT(affine.worst[2], proportional.worst[2]);
  EXPECT_GT(affine.mean[2], proportional.mean[2]);
  ::testing::Test::RecordProperty("affine_round2_worst", std::to_string(affine.worst[2]));
  ::testing::Test::RecordProperty("proportional_round2_worst",
                                  std::to_string(proportional.worst[2]));
}

// Under heavy noise the affine fit must not pass noise off as overhead: its slope gate falls
// back to the proportional rule, so it is never much worse than proportional.
TEST(ConvergenceProperty, AffineUnderTenPercentNoiseIsNoWorseThanProportional) {
  const Curve affine = run_all(Policy::kAffine, 0.2, 0.1, 0.1, 8, 7, true);
  const Curve proportional = run_all(Policy::kProportional, 0.2, 0.1, 0.1, 8, 7, true);
  print("affine, 20% overhead, 10% noise (plan)", affine);
  print("proportional, 20% overhead, 10% noise (plan)", proportional);
  // 0.005 over 1,000 clusters; the sanitizer builds' 100 carry sqrt(10) times the sampling
  // error in each mean (there the two means crossed by 0.001 at round 7 once proportional's
  // small-change detector stopped firing on noise: 0.958 against 0.964), so the same margin
  // in standard errors.
  const double margin = 0.005 * std::sqrt(1000.0 / kClusters);
  for (int r = 2; r < 8; ++r) {
    EXPECT_GE(affine.worst[r], proportional.worst[r] - 0.03) << "round " << r;
    EXPECT_GE(affine.mean[r], proportional.mean[r] - margin) << "round " << r;
  }
}

// With 5% noise and deadband 0.1, once converged (round 5) plans do not go back and forth.
// The deadband alone stops them, holding whatever imbalance under 10% the first plans left;
// the smoothing across rounds (persist_rounds) may still refine such a plan, but only where
// the refinement is real: every later change raises the plan's noise-free efficiency, there
// are few of them, and none at all without the smoothing in 99% of the runs. (Half the
// clusters: four variants of 30 rounds each would take a minute.)
TEST(ConvergenceProperty, NoOscillationWithFivePercentNoiseAndDeadbandTenPercent) {
  const int clusters = kClusters / 2;
  for (Policy policy : {Policy::kProportional, Policy::kAffine}) {
    for (const std::size_t persist : {std::size_t{0}, ControllerConfig{}.persist_rounds}) {
      std::mt19937_64 rng(5);
      int runs_with_change = 0, total_changes = 0;
      double gained = 0.0;
      for (int k = 0; k < clusters; ++k) {
        auto s = simulation_of(random_cluster(rng), policy, 0.0, 0.05, k);
        s.deadband = 0.1;
        s.persist_rounds = persist;
        s.rounds = 30;
        const SimulationResult r = simulate(s);
        int changes = 0;
        for (int i = 5; i < s.rounds; ++i) {
          if (!r.rounds[i].changed) continue;
          ++changes;
          const double before = r.rounds[i - 1].plan_efficiency;
          const double after = r.rounds[i].plan_efficiency;
          EXPECT_GT(after, before) << to_string(policy) << " cluster " << k << " round " << i;
          gained += after - before;
        }
        ASSERT_LE(changes, persist > 0 ? 3 : 1) << to_string(policy) << " cluster " << k;
        runs_with_change += changes > 0 ? 1 : 0;
        total_changes += changes;
      }
      std::printf("%s, persist_rounds %zu: %d of %d runs changed a plan after round 5 (%d "
                  "changes, plan efficiency +%.4f each on average)\n",
                  std::string(to_string(policy)).c_str(), persist, runs_with_change, clusters,
                  total_changes, total_changes > 0 ? gained / total_changes : 0.0);
      if (persist == 0) {
        EXPECT_LE(runs_with_change, clusters / 100) << to_string(policy);
      }
    }
  }
}

// The same clusters with no noise never change after convergence: the deadband is not what
// keeps them still.
TEST(ConvergenceProperty, NoiselessPlansAreFixedPoints) {
  for (Policy policy : {Policy::kProportional, Policy::kAffine}) {
    std::mt19937_64 rng(6);
    for (int k = 0; k < 300; ++k) {
      auto s = simulation_of(random_cluster(rng), policy, 0.0, 0.0, k);
      s.deadband = 0.0;
      s.rounds = 10;
      const SimulationResult r = simulate(s);
      for (int i = 3; i < s.rounds; ++i) {
        ASSERT_FALSE(r.rounds[i].changed) << to_string(policy) << " cluster " << k;
      }
    }
  }
}

}  // namespace
}  // namespace omnilearn::scheduler
