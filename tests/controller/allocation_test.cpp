// fill_to_total and the two roundings: exact sums, bounds, redistribution by speed, clear errors.
#include "controller/allocation.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <random>

#include "random_cluster.hpp"
#include "controller/simulator.hpp"

namespace omnilearn::scheduler {
namespace {

using testing::uniform_int;
using testing::uniform_real;

std::vector<Bounds> same_bounds(std::size_t n, int lo, int hi) {
  return std::vector<Bounds>(n, Bounds{lo, hi});
}

TEST(FillToTotal, KeepsUnboundedTargetsThatAlreadySum) {
  const std::vector<double> x{10.5, 20.25, 33.25};
  const std::vector<double> speed{1, 2, 3};
  const auto out = fill_to_total(x, speed, same_bounds(3, 1, 100), 64);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], x[i], 1e-9);
}

TEST(FillToTotal, ExcessOverACapGoesToOthersInProportionToSpeed) {
  // Worker 0 wants 60 but is capped at 20: the 40 left over go 1:3 to workers 1 and 2.
  const std::vector<double> x{60, 20, 20};
  const std::vector<double> speed{5, 1, 3};
  const std::vector<Bounds> b{{1, 20}, {1, 100}, {1, 100}};
  const auto out = fill_to_total(x, speed, b, 100);
  EXPECT_NEAR(out[0], 20.0, 1e-9);
  EXPECT_NEAR(out[1], 30.0, 1e-9);
  EXPECT_NEAR(out[2], 50.0, 1e-9);
}

TEST(FillToTotal, RaisesWorkersToTheirMinimumAndTakesFromTheOthersBySpeed) {
  const std::vector<double> x{0.0, 50.0, 50.0};
  const std::vector<double> speed{1, 1, 3};
  const std::vector<Bounds> b{{8, 100}, {8, 100}, {8, 100}};
  const auto out = fill_to_total(x, speed, b, 100);
  EXPECT_NEAR(out[0], 8.0, 1e-9);
  EXPECT_NEAR(out[1], 48.0, 1e-9);  // the 8 come 1:3 from workers 1 and 2
  EXPECT_NEAR(out[2], 44.0, 1e-9);
}

TEST(FillToTotal, InfeasibleTotalsNameTheSumsAndWhatToChange) {
  const std::vector<double> x{1, 1};
  const std::vector<double> speed{1, 1};
  try {
    fill_to_total(x, speed, same_bounds(2, 8, 16), 10);
    FAIL() << "expected InfeasibleBatchError";
  } catch (const InfeasibleBatchError& e) {
    EXPECT_EQ(e.sum_lo(), 16);
    EXPECT_NE(std::string(e.what()).find("lower min_batch"), std::string::npos) << e.what();
  }
  try {
    fill_to_total(x, speed, same_bounds(2, 1, 16), 40);
    FAIL() << "expected InfeasibleBatchError";
  } catch (const InfeasibleBatchError& e) {
    EXPECT_EQ(e.sum_hi(), 32);
    EXPECT_NE(std::string(e.what()).find("add workers"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fill_to_total({}, {}, {}, 1), InfeasibleBatchError);
  const std::vector<double> zero_speed{1, 0};
  EXPECT_THROW(fill_to_total(x, zero_speed, same_bounds(2, 1, 16), 4), std::invalid_argument);
}

TEST(RoundLargestRemainder, ClassicMethodWithStableTies) {
  const std::vector<double> x{10.2, 10.7, 10.1};  // sum 31
  EXPECT_EQ(round_largest_remainder(x, same_bounds(3, 1, 100), 31), (std::vector<int>{10, 11, 10}));
  const std::vector<double> even(3, 100.0 / 3.0);  // equal remainders: lowest index first
  EXPECT_EQ(round_largest_remainder(even, same_bounds(3, 1, 100), 100),
            (std::vector<int>{34, 33, 33}));
}

TEST(RoundMinStepTime, GivesTheLastUnitWhereItEndsTheStepSoonest) {
  // Equal-time split of 132 samples over speeds 1.741, 1.034, 7.177, 14.354 (linear costs):
  // plain largest remainder gives the slow worker 0 its ceiling (10 samples: 5.74 ms); the best
  // split gives the fastest worker a second extra unit instead (79: 5.50 ms).
  const std::vector<double> speed{1.741, 1.034, 7.177, 14.354};
  std::vector<CostModel> cost;
  for (double s : speed) cost.push_back({0.0, 1.0 / s});
  const auto b = same_bounds(4, 1, 132);
  std::vector<double> base(4, 0.0);
  const auto x = fill_to_total(base, speed, b, 132);
  const auto plain = round_largest_remainder(x, b, 132);
  const auto timed = round_min_step_time(x, cost, b, 132);
  auto step = [&](const std::vector<int>& v) {
    double t = 0;
    for (std::size_t i = 0; i < v.size(); ++i) t = std::max(t, cost[i].time(v[i]));
    return t;
  };
  EXPECT_EQ(std::accumulate(timed.begin(), timed.end(), 0), 132);
  EXPECT_LT(step(timed), step(plain));
  EXPECT_DOUBLE_EQ(step(timed), best_integer_split(cost, b, 132).step_time);
}

TEST(RoundMinStepTime, LeavesIntegerEntriesAlone) {
  // Entry 1 sits on an integer (a held batch); the two fractional entries share the rest.
  const std::vector<double> x{10.5, 40.0, 9.5};
  const std::vector<CostModel> cost(3, CostModel{0.0, 1.0});
  const auto out = round_min_step_time(x, cost, same_bounds(3, 1, 100), 60);
  EXPECT_EQ(out[1], 40);
  EXPECT_EQ(out[0] + out[2], 20);
}

// Property: for random targets, bounds and speeds, both roundings give integers within bounds
// summing to B, each the floor or ceiling of its target; round_min_step_time on the equal-time
// split is exactly the best integer split.
TEST(AllocationProperty, ConservationBoundsAndOptimalityOnRandomInputs) {
  std::mt19937_64 rng(20240601);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = uniform_int(rng, 1, 64);
    std::vector<double> desired(n), speed(n);
    std::vector<Bounds> bounds(n);
    std::vector<CostModel> cost(n);
    long long sum_lo = 0, sum_hi = 0;
    for (int i = 0; i < n; ++i) {
      desired[i] = uniform_real(rng, 0.0, 200.0);
      speed[i] = std::exp2(uniform_real(rng, 0.0, 4.0));
      bounds[i].lo = uniform_int(rng, 1, 8);
      bounds[i].hi = bounds[i].lo + uniform_int(rng, 0, 300);
      cost[i] = {uniform_real(rng, 0.0, 5.0), 1.0 / speed[i]};
      sum_lo += bounds[i].lo;
      sum_hi += bounds[i].hi;
    }
    const long long total = sum_lo + static_cast<long long>(rng() % (sum_hi - sum_lo + 1));
    const auto x = fill_to_total(desired, speed, bounds, static_cast<double>(total));
    ASSERT_NEAR(std::accumulate(x.begin(), x.end(), 0.0), static_cast<double>(total), 1e-6);
    for (const auto& out :
         {allocate(desired, speed, bounds, total), round_min_step_time(x, cost, bounds, total)}) {
      ASSERT_EQ(std::accumulate(out.begin(), out.end(), 0LL), total) << "trial " << trial;
      for (int i = 0; i < n; ++i) {
        ASSERT_GE(out[i], bounds[i].lo);
        ASSERT_LE(out[i], bounds[i].hi);
      }
    }
    const auto lr = allocate(desired, speed, bounds, total);
    for (int i = 0; i < n; ++i) {
      ASSERT_GE(lr[i], std::floor(x[i] - 1e-9));
      ASSERT_LE(lr[i], std::ceil(x[i] + 1e-9));
    }
  }
}

// best_integer_split (floors of the real optimum, then round_min_step_time) against exhaustive
// search over every split of small instances.
TEST(AllocationProperty, BestIntegerSplitMatchesExhaustiveSearch) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = uniform_int(rng, 1, 4);
    std::vector<Bounds> bounds(n);
    std::vector<CostModel> cost(n);
    long long sum_lo = 0, sum_hi = 0;
    for (int i = 0; i < n; ++i) {
      bounds[i] = {uniform_int(rng, 1, 4), 0};
      bounds[i].hi = bounds[i].lo + uniform_int(rng, 0, 20);
      cost[i] = {uniform_real(rng, 0.0, 3.0), 1.0 / std::exp2(uniform_real(rng, 0.0, 4.0))};
      sum_lo += bounds[i].lo;
      sum_hi += bounds[i].hi;
    }
    const long long total = sum_lo + static_cast<long long>(rng() % (sum_hi - sum_lo + 1));
    double brute = std::numeric_limits<double>::infinity();
    std::vector<int> b(n);
    // Odometer over every vector within bounds; keep those that sum to total.
    for (int i = 0; i < n; ++i) b[i] = bounds[i].lo;
    while (true) {
      if (std::accumulate(b.begin(), b.end(), 0LL) == total) {
        double t = 0;
        for (int i = 0; i < n; ++i) t = std::max(t, cost[i].time(b[i]));
        brute = std::min(brute, t);
      }
      int k = 0;
      while (k < n && b[k] == bounds[k].hi) b[k] = bounds[k].lo, ++k;
      if (k == n) break;
      ++b[k];
    }
    const Split best = best_integer_split(cost, bounds, total);
    ASSERT_EQ(std::accumulate(best.batches.begin(), best.batches.end(), 0LL), total);
    ASSERT_NEAR(best.step_time, brute, 1e-12) << "trial " << trial;
  }
}

}  // namespace
}  // namespace omnilearn::scheduler
