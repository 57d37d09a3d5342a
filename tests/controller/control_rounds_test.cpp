// ControlRounds: which timings the controller may see, and when a round runs.
#include "controller/control_rounds.hpp"

#include <gtest/gtest.h>

namespace omnilearn::scheduler {
namespace {

ControlRounds rounds() { return ControlRounds(ControlRoundsConfig{10, 3, 6}); }

TEST(ControlRounds, WarmUpOfAGenerationIsLeftOut) {
  ControlRounds r = rounds();
  r.generation_started(20, {"a", "b"});  // trains from step 21; counts from 21 + 6
  EXPECT_EQ(r.counted_from(), 27);
  EXPECT_FALSE(r.accept("a", 21, 26));  // all warm-up
  EXPECT_FALSE(r.accept("a", 26, 30));  // starts inside it
  EXPECT_TRUE(r.accept("a", 27, 30));
  EXPECT_FALSE(r.accept("ghost", 27, 30));  // not a member
  EXPECT_FALSE(r.fresh());
  EXPECT_TRUE(r.accept("b", 28, 29));
  EXPECT_TRUE(r.fresh());
}

TEST(ControlRounds, APlanRestartsFreshnessAndItsCoolDown) {
  ControlRounds r = rounds();
  r.generation_started(0, {"a", "b"});
  ASSERT_TRUE(r.accept("a", 7, 9));
  ASSERT_TRUE(r.accept("b", 7, 10));
  EXPECT_TRUE(r.due(10));
  EXPECT_FALSE(r.due(9));  // interval not over
  r.round_ran(10, /*changed=*/true, 12);
  EXPECT_EQ(r.plan_effective_step(), 12);
  EXPECT_EQ(r.counted_from(), 15);
  EXPECT_FALSE(r.fresh());
  EXPECT_FALSE(r.accept("a", 11, 16));  // old plan's steps inside
  EXPECT_TRUE(r.accept("a", 15, 17));
  EXPECT_TRUE(r.accept("b", 16, 19));
  EXPECT_FALSE(r.due(19));
  EXPECT_TRUE(r.due(20));
}

TEST(ControlRounds, AnUnchangedRoundKeepsTheTimingsFresh) {
  ControlRounds r = rounds();
  r.generation_started(0, {"a"});
  ASSERT_TRUE(r.accept("a", 8, 9));
  r.round_ran(10, /*changed=*/false, 12);
  EXPECT_EQ(r.counted_from(), 7);
  EXPECT_TRUE(r.fresh());
  EXPECT_TRUE(r.due(20));
}

// A detected change of a worker's speed (BatchController::speed_changed) waits for no
// interval, but still for timings of the plan in force from every member.
TEST(ControlRounds, ADetectedSpeedChangeWaitsForNoInterval) {
  ControlRounds r = rounds();
  r.generation_started(0, {"a", "b"});
  ASSERT_TRUE(r.accept("a", 7, 9));
  ASSERT_TRUE(r.accept("b", 7, 10));
  r.round_ran(10, /*changed=*/false, 12);
  EXPECT_FALSE(r.due(13));
  EXPECT_TRUE(r.due(13, /*speed_changed=*/true));
  r.round_ran(13, /*changed=*/true, 15);
  EXPECT_FALSE(r.due(14, true));  // no timings of the new plan yet
  ASSERT_TRUE(r.accept("a", 18, 19));
  EXPECT_FALSE(r.due(19, true));  // b has none
  ASSERT_TRUE(r.accept("b", 18, 20));
  EXPECT_TRUE(r.due(20, true));
  EXPECT_FALSE(r.due(20));  // the interval counts from the round at 13
  EXPECT_TRUE(r.due(23));
}

TEST(ControlRounds, APlanDoesNotShortenTheWarmUp) {
  ControlRounds r(ControlRoundsConfig{1, 1, 20});
  r.generation_started(0, {"a"});
  r.round_ran(2, true, 4);
  EXPECT_EQ(r.counted_from(), 21);
}

TEST(ControlRounds, RejectsBadConfig) {
  EXPECT_THROW(ControlRounds(ControlRoundsConfig{0, 1, 1}), std::invalid_argument);
  EXPECT_THROW(ControlRounds(ControlRoundsConfig{1, -1, 1}), std::invalid_argument);
  EXPECT_THROW(ControlRounds(ControlRoundsConfig{1, 1, -1}), std::invalid_argument);
}

}  // namespace
}  // namespace omnilearn::scheduler
