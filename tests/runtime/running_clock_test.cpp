// RunningClock leaves out of the gaps between readings what exceeds max_gap, and nothing else.

#include "runtime/running_clock.hpp"

#include <gtest/gtest.h>

namespace omnilearn::runtime {
namespace {

using namespace std::chrono_literals;
using TimePoint = RunningClock::Clock::time_point;

TEST(RunningClock, FollowsTheMonotonicClockWhileReadingsComeWithinTheGap) {
  RunningClock clock(500ms);
  const TimePoint start{100s};
  EXPECT_EQ(clock.at(start), start);
  for (int i = 1; i <= 50; ++i) {
    EXPECT_EQ(clock.at(start + i * 500ms), start + i * 500ms) << i;  // exactly max_gap apart
    EXPECT_EQ(clock.found_gap(), 0ms);
  }
  EXPECT_EQ(clock.left_out(), 0ms);
  EXPECT_EQ(clock.gaps(), 0u);
}

TEST(RunningClock, LeavesOutWhatAGapExceedsAndKeepsCountingAfterIt) {
  RunningClock clock(500ms);
  const TimePoint start{100s};
  clock.at(start);
  clock.at(start + 100ms);
  // Stopped for ten seconds: the next reading finds the gap; 500 ms of it count.
  EXPECT_EQ(clock.at(start + 10100ms), start + 600ms);
  EXPECT_EQ(clock.found_gap(), 10000ms);
  EXPECT_EQ(clock.left_out(), 9500ms);
  // Afterwards time runs at the monotonic clock's pace again, offset by what was left out.
  EXPECT_EQ(clock.at(start + 10200ms), start + 700ms);
  EXPECT_EQ(clock.found_gap(), 0ms);
  // A second gap adds to the first.
  EXPECT_EQ(clock.at(start + 12200ms), start + 1200ms);
  EXPECT_EQ(clock.found_gap(), 2000ms);
  EXPECT_EQ(clock.left_out(), 11000ms);
  EXPECT_EQ(clock.gaps(), 2u);
}

TEST(RunningClock, NeverRunsBackwards) {
  RunningClock clock(500ms);
  const TimePoint start{100s};
  TimePoint last = clock.at(start);
  for (auto raw : {start + 200ms, start + 200ms, start + 5s, start + 5s, start + 5100ms, start + 9s,
                   start + 9001ms}) {
    const TimePoint now = clock.at(raw);
    EXPECT_GE(now, last);
    last = now;
  }
}

TEST(RunningClock, ReadsTheMonotonicClock) {
  RunningClock clock(1h);
  const auto before = RunningClock::Clock::now();
  const auto now = clock.now();
  EXPECT_GE(now, before);
  EXPECT_LE(now, RunningClock::Clock::now());
}

}  // namespace
}  // namespace omnilearn::runtime
