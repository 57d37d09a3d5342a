#include "dashboard/histogram.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace omnilearn::dashboard {
namespace {

TEST(Histogram, CountsEachValueInTheFirstBucketThatHoldsIt) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 1.0, 3.0, 100.0}) h.observe(v);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<std::uint64_t>{2, 4, 5}));
  EXPECT_EQ(h.count(), 6u);  // the +Inf bucket holds everything
  EXPECT_DOUBLE_EQ(h.sum(), 0.05 + 0.1 + 0.5 + 1.0 + 3.0 + 100.0);
}

TEST(Histogram, IgnoresNaN) {
  Histogram h({1});
  h.observe(std::nan(""));
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.sum(), 0);
}

TEST(Histogram, RejectsBoundsThatDoNotIncrease) {
  EXPECT_THROW(Histogram({1, 1}), std::invalid_argument);
  EXPECT_THROW(Histogram({2, 1}), std::invalid_argument);
  EXPECT_THROW(Histogram({1, INFINITY}), std::invalid_argument);
  // Braces: with parentheses the statement declares a function named seconds_buckets.
  EXPECT_NO_THROW(Histogram{seconds_buckets()});
}

}  // namespace
}  // namespace omnilearn::dashboard
