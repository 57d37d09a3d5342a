#include <gtest/gtest.h>

#include <stdexcept>

#include "asp/staleness.hpp"

namespace omnilearn::asp {
namespace {

StalenessConfig config(StalenessMode mode, LrScaling scaling, std::int64_t max = 0) {
  return StalenessConfig{mode, max, scaling};
}

TEST(StalenessPolicy, NoneAppliesAsIs) {
  const auto c = config(StalenessMode::kNone, LrScaling::kNone);
  for (std::int64_t s : {0, 1, 50}) {
    const auto d = decide_step(c, s, 8, 16.0);
    EXPECT_TRUE(d.apply);
    EXPECT_DOUBLE_EQ(d.scale, 1.0);
  }
}

TEST(StalenessPolicy, InverseScalesByOneOverOnePlusStaleness) {
  const auto c = config(StalenessMode::kInverse, LrScaling::kNone);
  EXPECT_DOUBLE_EQ(decide_step(c, 0, 8, 16.0).scale, 1.0);
  EXPECT_DOUBLE_EQ(decide_step(c, 3, 8, 16.0).scale, 0.25);
  EXPECT_TRUE(decide_step(c, 1000, 8, 16.0).apply);
}

TEST(StalenessPolicy, BoundDropsOnlyPushesOlderThanTheBound) {
  const auto c = config(StalenessMode::kBound, LrScaling::kNone, 2);
  EXPECT_TRUE(decide_step(c, 2, 8, 16.0).apply);
  EXPECT_DOUBLE_EQ(decide_step(c, 2, 8, 16.0).scale, 1.0);
  const auto dropped = decide_step(c, 3, 8, 16.0);
  EXPECT_FALSE(dropped.apply);
  EXPECT_DOUBLE_EQ(dropped.scale, 0.0);
}

TEST(StalenessPolicy, LinearScalingIsBatchOverTheMeanBatchAndComposes) {
  EXPECT_DOUBLE_EQ(decide_step(config(StalenessMode::kNone, LrScaling::kLinear), 5, 24, 16.0).scale, 1.5);
  EXPECT_DOUBLE_EQ(decide_step(config(StalenessMode::kInverse, LrScaling::kLinear), 1, 8, 16.0).scale, 0.25);
  EXPECT_DOUBLE_EQ(decide_step(config(StalenessMode::kBound, LrScaling::kLinear, 4), 4, 32, 16.0).scale, 2.0);
  EXPECT_EQ(StalenessConfig{}.lr_scaling, LrScaling::kLinear);  // the documented default
}

TEST(StalenessPolicy, RejectsBadInputs) {
  const auto c = config(StalenessMode::kNone, LrScaling::kLinear);
  EXPECT_THROW(decide_step(c, -1, 8, 16.0), std::invalid_argument);
  EXPECT_THROW(decide_step(c, 0, 0, 16.0), std::invalid_argument);
  EXPECT_THROW(decide_step(c, 0, 8, 0.0), std::invalid_argument);
  EXPECT_NO_THROW(decide_step(config(StalenessMode::kNone, LrScaling::kNone), 0, 8, 0.0));
  EXPECT_THROW(validate(config(StalenessMode::kBound, LrScaling::kNone, 0)), std::invalid_argument);
  EXPECT_THROW(validate(config(StalenessMode::kInverse, LrScaling::kNone, 3)), std::invalid_argument);
  EXPECT_NO_THROW(validate(config(StalenessMode::kBound, LrScaling::kNone, 1)));
}

TEST(StalenessPolicy, NamesRoundTrip) {
  for (auto m : {StalenessMode::kNone, StalenessMode::kInverse, StalenessMode::kBound}) {
    EXPECT_EQ(parse_staleness_mode(to_string(m)), m);
  }
  for (auto s : {LrScaling::kNone, LrScaling::kLinear}) EXPECT_EQ(parse_lr_scaling(to_string(s)), s);
  EXPECT_FALSE(parse_staleness_mode("bounded"));
  EXPECT_FALSE(parse_lr_scaling("sqrt"));
}

TEST(StalenessStats, MeanP95MaxAndUpdatesPerInterval) {
  StalenessStats stats;
  // 20 pushes: staleness 0..19; p95 by nearest rank is the 19th smallest = 18.
  for (int s = 0; s < 20; ++s) stats.record(s % 2, s, /*applied=*/s != 19);
  auto i = stats.interval();
  EXPECT_EQ(i.pushes, 20);
  EXPECT_EQ(i.applied, 19);
  EXPECT_EQ(i.dropped, 1);
  EXPECT_DOUBLE_EQ(i.mean, 9.5);
  EXPECT_EQ(i.p95, 18);
  EXPECT_EQ(i.max, 19);
  EXPECT_EQ(i.updates.at(0), 10);
  EXPECT_EQ(i.updates.at(1), 9);
}

TEST(StalenessStats, TakeIntervalResetsTheIntervalAndKeepsTotals) {
  StalenessStats stats;
  stats.record(0, 7, true);
  stats.record(1, 1, true);
  auto first = stats.take_interval();
  EXPECT_EQ(first.max, 7);
  EXPECT_EQ(stats.interval().pushes, 0);
  EXPECT_EQ(stats.interval().max, 0);
  stats.record(0, 2, false);
  auto second = stats.take_interval();
  EXPECT_EQ(second.pushes, 1);
  EXPECT_EQ(second.max, 2);
  EXPECT_EQ(second.dropped, 1);
  auto total = stats.total();
  EXPECT_EQ(total.pushes, 3);
  EXPECT_EQ(total.max, 7);
  EXPECT_DOUBLE_EQ(total.mean, 10.0 / 3);
  EXPECT_EQ(total.updates.at(0), 1);
  EXPECT_EQ(total.updates.at(1), 1);
  EXPECT_EQ(total.p95, 7);
}

TEST(StalenessStats, P95OfOneHundredIsTheNinetyFifth) {
  StalenessStats stats;
  for (int s = 1; s <= 100; ++s) stats.record(0, s, true);
  EXPECT_EQ(stats.interval().p95, 95);
  EXPECT_THROW(stats.record(0, -1, true), std::invalid_argument);
}

}  // namespace
}  // namespace omnilearn::asp
