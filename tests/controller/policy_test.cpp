// The pure policies and decide_plan: the formulas of the issue, bounds, deadband, gain.
#include "controller/policy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "random_cluster.hpp"

namespace omnilearn::scheduler {
namespace {

using testing::uniform_int;
using testing::uniform_real;

WorkerView view(std::optional<int> batch, double throughput, int lo = 1, int hi = 1 << 20) {
  WorkerView v;
  v.batch = batch;
  v.throughput = throughput;
  v.bounds = {lo, hi};
  return v;
}

int sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

TEST(Policy, NamesRoundTrip) {
  for (Policy p : {Policy::kUniform, Policy::kProportional, Policy::kAffine}) {
    EXPECT_EQ(parse_policy(to_string(p)), p);
  }
  EXPECT_EQ(parse_policy("fastest"), std::nullopt);
}

TEST(UniformTargets, EqualSharesWhateverTheSpeed) {
  const std::vector<WorkerView> w{view(10, 1), view(50, 8), view(40, 2)};
  for (double x : uniform_targets(w, 99)) EXPECT_DOUBLE_EQ(x, 33.0);
}

TEST(ProportionalTargets, ImplementsTheFormulaOfThePaper) {
  // b = (64, 64), X = (64, 192) samples/s: t = (1, 1/3), t_avg = 2/3.
  // gain 0.5: c = b + 0.5 X (t_avg - t) = (64 - 10.67, 64 + 32) = (53.33, 96): scaled to 128.
  const std::vector<WorkerView> w{view(64, 64.0), view(64, 192.0)};
  const auto x = proportional_targets(w, 128, 0.5);
  const double c0 = 64 + 0.5 * 64 * (2.0 / 3 - 1), c1 = 64 + 0.5 * 192 * (2.0 / 3 - 1.0 / 3);
  EXPECT_NEAR(x[0], 128 * c0 / (c0 + c1), 1e-9);
  EXPECT_NEAR(x[1], 128 * c1 / (c0 + c1), 1e-9);
  // gain 1 lands on b proportional to X in one step.
  const auto full = proportional_targets(w, 128, 1.0);
  EXPECT_NEAR(full[0], 32.0, 1e-9);
  EXPECT_NEAR(full[1], 96.0, 1e-9);
}

TEST(ProportionalTargets, NewcomerStartsAtTheCommonStepTime) {
  // Two workers at t = 0.5 s; a newcomer with throughput 100 gets 100 * 0.5 = 50 before scaling.
  const std::vector<WorkerView> w{view(50, 100.0), view(100, 200.0), view(std::nullopt, 100.0)};
  const auto x = proportional_targets(w, 200, 1.0);
  EXPECT_NEAR(x[0], 50.0, 1e-9);
  EXPECT_NEAR(x[1], 100.0, 1e-9);
  EXPECT_NEAR(x[2], 50.0, 1e-9);
}

TEST(AffineTargets, EqualizesStepTimeUnderTheFittedModels) {
  std::vector<WorkerView> w{view(64, 1), view(64, 1), view(64, 1)};
  w[0].model = CostModel{0.010, 0.001};
  w[1].model = CostModel{0.030, 0.0005};
  w[2].model = CostModel{0.000, 0.002};
  const auto x = affine_targets(w, 192, 1.0);
  EXPECT_NEAR(std::accumulate(x.begin(), x.end(), 0.0), 192.0, 1e-9);
  const double t0 = w[0].model->time(x[0]);
  EXPECT_NEAR(w[1].model->time(x[1]), t0, 1e-12);
  EXPECT_NEAR(w[2].model->time(x[2]), t0, 1e-12);
}

TEST(AffineTargets, WithoutFitsItIsTheProportionalRule) {
  const std::vector<WorkerView> w{view(64, 50.0), view(64, 150.0), view(64, 100.0)};
  const auto a = affine_targets(w, 192, 1.0);
  const auto p = proportional_targets(w, 192, 1.0);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(a[i], p[i], 1e-9);
}

TEST(AffineTargets, BoundsBindAndTheRestStillEqualize) {
  std::vector<WorkerView> w{view(64, 1, 1, 40), view(64, 1), view(64, 1)};
  for (auto& v : w) v.model = CostModel{0.01, 0.0005};  // worker 0 would want 64 but holds 40
  const auto x = affine_targets(w, 192, 1.0);
  EXPECT_NEAR(x[0], 40.0, 1e-9);
  EXPECT_NEAR(x[1], 76.0, 1e-9);
  EXPECT_NEAR(x[2], 76.0, 1e-9);
}

TEST(DecidePlan, DeadbandKeepsAPlanWhoseStepIsCloseEnough) {
  // Targets (32, 96); the plan in force (34, 94) makes worker 0 6% slower than the target
  // step. Deadband 0.1 keeps it; deadband 0.05 moves to the target.
  const std::vector<WorkerView> w{view(34, 64.0), view(94, 192.0)};
  PolicyParams p{Policy::kProportional, 128, 0.1, 1.0};
  auto d = decide_plan(w, p);
  EXPECT_FALSE(d.changed);
  EXPECT_EQ(d.batches, (std::vector<int>{34, 94}));
  p.deadband = 0.05;
  d = decide_plan(w, p);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.batches, (std::vector<int>{32, 96}));
}

// The noise gate keeps a plan whose predicted gain the estimates' errors could
// explain, and lets through one they cannot.
TEST(DecidePlan, NoiseGateKeepsAPlanUnlessTheGainExceedsTheNoise) {
  auto views = [](double error) {
    std::vector<WorkerView> v(2);
    v[0].batch = 50;
    v[0].throughput = 110.0;  // 10% faster than its share says
    v[1].batch = 50;
    v[1].throughput = 100.0;
    for (auto& w : v) {
      w.bounds = Bounds{1, 100};
      w.rel_error = error;
    }
    return v;
  };
  PolicyParams p{Policy::kProportional, 100, 0.01, 1.0, 2.5};
  const PlanDecision noisy = decide_plan(views(0.05), p);  // gate 2.5 x 5.6% = 14% > 5% gain
  EXPECT_FALSE(noisy.changed);
  EXPECT_NEAR(noisy.noise_gain, 2.5 * std::sqrt(0.05 * 0.05 + 2 * 0.05 * 0.05 / 4), 1e-12);
  const PlanDecision precise = decide_plan(views(0.01), p);  // gate 2.8% < 5% gain
  EXPECT_TRUE(precise.changed);
  p.noise_z = 0.0;  // no gate: the deadband alone decides
  EXPECT_TRUE(decide_plan(views(0.05), p).changed);
}

TEST(DecidePlan, AfterALeaveTheShareGoesToTheOthersBySpeed) {
  // Three equal-time workers held 40/40/48 of 128; the third left. The survivors, speeds 1:3,
  // split all 128 1:3 even though each was within any deadband of its old batch.
  const std::vector<WorkerView> w{view(40, 40.0), view(40, 120.0)};
  const auto d = decide_plan(w, {Policy::kProportional, 128, 0.5, 1.0});
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.batches, (std::vector<int>{32, 96}));
}

TEST(DecidePlan, InfeasibleBoundsThrowInsteadOfBendingThem) {
  const std::vector<WorkerView> w{view(std::nullopt, 1.0, 8, 16), view(std::nullopt, 1.0, 8, 16)};
  EXPECT_THROW(decide_plan(w, {Policy::kUniform, 40, 0.0, 1.0}), InfeasibleBatchError);
  EXPECT_THROW(decide_plan(w, {Policy::kUniform, 10, 0.0, 1.0}), InfeasibleBatchError);
  EXPECT_THROW(decide_plan(w, {Policy::kUniform, 24, 1.5, 1.0}), std::invalid_argument);
  EXPECT_THROW(decide_plan(w, {Policy::kUniform, 24, 0.1, 0.0}), std::invalid_argument);
}

// Property: whatever the views (plans in force or not, fits or not, bounds, policies, deadbands,
// gains), a decision sums to B, respects every bound, and is a fixed point: deciding again from
// the decided batches with the same estimates changes nothing.
TEST(DecidePlanProperty, ConservationBoundsAndIdempotenceOnRandomViews) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = uniform_int(rng, 1, 64);
    const int lo = uniform_int(rng, 1, 8);
    const int hi = lo + uniform_int(rng, 0, 400);
    const int total = uniform_int(rng, n * lo, n * hi);
    std::vector<WorkerView> w(n);
    for (auto& v : w) {
      v.throughput = std::exp2(uniform_real(rng, 0.0, 4.0)) * 100.0;
      v.bounds = {lo, uniform_int(rng, 0, 3) == 0 ? uniform_int(rng, lo, hi) : hi};
      if (uniform_int(rng, 0, 2) > 0)
        v.model = CostModel{uniform_real(rng, 0, 0.05), 1.0 / v.throughput};
    }
    long long cap = 0;
    for (const auto& v : w) cap += v.bounds.hi;
    if (cap < total) continue;
    const PolicyParams p{static_cast<Policy>(uniform_int(rng, 0, 2)), total,
                         uniform_real(rng, 0.0, 0.3),
                         uniform_int(rng, 0, 1) == 0 ? 1.0 : uniform_real(rng, 0.2, 1.0)};
    const PlanDecision first = decide_plan(w, p);
    ASSERT_EQ(sum(first.batches), total);
    for (int i = 0; i < n; ++i) {
      ASSERT_GE(first.batches[i], w[i].bounds.lo);
      ASSERT_LE(first.batches[i], w[i].bounds.hi);
    }
    if (p.gain == 1.0 || p.policy == Policy::kUniform) {
      for (int i = 0; i < n; ++i) w[i].batch = first.batches[i];
      const PlanDecision again = decide_plan(w, p);
      ASSERT_FALSE(again.changed) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace omnilearn::scheduler
