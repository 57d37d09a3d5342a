// The robust throughput estimate: a single 10x pause moves it by less than 10%.
#include "scheduler/estimator.hpp"

#include <gtest/gtest.h>

#include <random>

namespace omnilearn::scheduler {
namespace {

TEST(Median, OddEvenAndEmpty) {
  EXPECT_EQ(median(std::vector<double>{}), std::nullopt);
  EXPECT_DOUBLE_EQ(*median(std::vector<double>{3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(*median(std::vector<double>{4, 1, 3, 2}), 2.5);
}

TEST(ThroughputEstimator, SamplesPerSecondFromSteps) {
  ThroughputEstimator e(5);
  EXPECT_EQ(e.throughput(), std::nullopt);
  e.observe(64, 0.5);
  EXPECT_DOUBLE_EQ(*e.throughput(), 128.0);
  EXPECT_DOUBLE_EQ(*e.time_at(32), 0.25);
}

// A pause (one step 10x slower) must not swing the estimate by more than 10%, wherever it falls
// in the window and with noisy steps around it.
TEST(ThroughputEstimator, SingleTenfoldPauseMovesItLessThanTenPercent) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    ThroughputEstimator e(5);
    const double base = 0.1 + 0.01 * (rng() % 100);
    auto noisy = [&] { return base * (1.0 + 0.05 * ((rng() % 2001) / 1000.0 - 1.0)); };
    for (int k = 0; k < 3; ++k) e.observe(32, noisy());  // a window with three steps
    const double before = *e.throughput();
    e.observe(32, 10.0 * base);  // the pause
    const double during = *e.throughput();
    EXPECT_LT(std::abs(during / before - 1.0), 0.10) << "trial " << trial;
    for (int k = 0; k < 4; ++k) {
      e.observe(32, noisy());
      EXPECT_LT(std::abs(*e.throughput() / before - 1.0), 0.10) << "trial " << trial;
    }
  }
}

TEST(ThroughputEstimator, FollowsARealSpeedChangeWithinAWindow) {
  ThroughputEstimator e(5);
  for (int k = 0; k < 5; ++k) e.observe(10, 1.0);  // 10 samples/s
  for (int k = 0; k < 3; ++k) e.observe(10, 0.5);  // now 20 samples/s: a majority of the window
  EXPECT_DOUBLE_EQ(*e.throughput(), 20.0);
}

TEST(ThroughputEstimator, StepsAtDifferentBatchesStayComparable) {
  // Linear cost: 100 samples/s whatever the batch, so a plan change does not disturb it.
  ThroughputEstimator e(5);
  e.observe(10, 0.1);
  e.observe(40, 0.4);
  e.observe(25, 0.25);
  EXPECT_DOUBLE_EQ(*e.throughput(), 100.0);
}

TEST(ThroughputEstimator, RejectsNonsense) {
  ThroughputEstimator e(3);
  EXPECT_THROW(e.observe(0, 1.0), std::invalid_argument);
  EXPECT_THROW(e.observe(8, 0.0), std::invalid_argument);
  EXPECT_THROW(e.observe(8, std::numeric_limits<double>::infinity()), std::invalid_argument);
  EXPECT_THROW(e.observe(8, std::nan("")), std::invalid_argument);
  EXPECT_THROW(ThroughputEstimator(0), std::invalid_argument);
  EXPECT_EQ(e.size(), 0u);
}

}  // namespace
}  // namespace omnilearn::scheduler
