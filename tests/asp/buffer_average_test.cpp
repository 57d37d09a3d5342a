// How a push's change to the model's buffers is added (asp/buffer_average): a statistic's
// difference damped by 1 / (1 + staleness), a counter's whole; and, in a round-robin of n
// workers each pushing m (b - what it pulled) with n - 1 pushes between its pull and its push,
// the damped rule settles on the batches' statistic for every n tried while the undamped one
// oscillates and grows (the control: the rule this replaced must fail it).
#include "asp/buffer_average.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace omnilearn::asp {
namespace {

TEST(BufferAverage, AStatisticIsDampedByStalenessACounterIsNot) {
  std::vector<float> buffers{1, 2, 3, 4};
  const std::vector<float> difference{1, 1, 1, 1};
  add_buffer_difference(buffers, difference, {false, false, false, true}, 0);
  EXPECT_EQ(buffers, (std::vector<float>{2, 3, 4, 5}));
  add_buffer_difference(buffers, difference, {false, false, false, true}, 3);
  EXPECT_EQ(buffers, (std::vector<float>{2.25f, 3.25f, 4.25f, 6}));
  add_buffer_difference(buffers, difference, {}, 1);  // no flags: every element a statistic
  EXPECT_EQ(buffers, (std::vector<float>{2.75f, 3.75f, 4.75f, 6.5f}));
  add_buffer_difference(buffers, difference, {}, -2);  // taken as 0
  EXPECT_EQ(buffers, (std::vector<float>{3.75f, 4.75f, 5.75f, 7.5f}));
  EXPECT_THROW(add_buffer_difference(buffers, std::vector<float>{1, 1}, {}, 0),
               std::invalid_argument);
  EXPECT_THROW(add_buffer_difference(buffers, difference, {true}, 0), std::invalid_argument);
  EXPECT_EQ(buffers, (std::vector<float>{3.75f, 4.75f, 5.75f, 7.5f})) << "nothing changed";
}

struct Trajectory {
  double final_value = 0;
  double lowest = 0;
  double largest = 0;
};

// A running variance (BatchNorm's momentum m = 0.1) kept by the server; each batch's variance
// is 1 +- 20% (seeded). Worker t mod n pushes at step t what its forward made of what it pulled
// n pushes ago (at version 0 in the first round), weighed at that staleness or, when `damped`
// is false, at 0 (the undamped rule).
Trajectory round_robin(int workers, bool damped, int pushes, unsigned seed) {
  constexpr float m = 0.1F;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> batch(0.8F, 1.2F);
  std::vector<float> server{0.5F};
  std::vector<float> pulled(static_cast<std::size_t>(workers), server[0]);
  Trajectory run{server[0], server[0], server[0]};
  for (int t = 0; t < pushes; ++t) {
    const auto w = static_cast<std::size_t>(t % workers);
    const std::vector<float> difference{m * (batch(rng) - pulled[w])};
    // Every worker pulled at version 0, so the first round's pushes are t stale, then n - 1.
    const int staleness = t < workers ? t : workers - 1;
    add_buffer_difference(server, difference, {}, damped ? staleness : 0);
    pulled[w] = server[0];
    run.lowest = std::min(run.lowest, double(server[0]));
    run.largest = std::max(run.largest, double(server[0]));
  }
  run.final_value = server[0];
  return run;
}

TEST(BufferAverage, ManyPushesInFlightSettleOnTheBatchesStatistic) {
  for (int workers : {1, 2, 4, 8, 16, 32, 64}) {
    for (unsigned seed = 1; seed <= 5; ++seed) {
      const Trajectory run = round_robin(workers, /*damped=*/true, 200 * workers + 2000, seed);
      EXPECT_GT(run.lowest, 0.0) << workers << " workers, seed " << seed;
      EXPECT_LT(run.largest, 1.3) << workers << " workers, seed " << seed;
      EXPECT_NEAR(run.final_value, 1.0, 0.1) << workers << " workers, seed " << seed;
    }
  }
}

TEST(BufferAverage, UndampedTheSameScheduleDivergesPastSixteenInFlight) {
  // The control: without the damping the recurrence is stable with few pushes in flight and
  // not with many (m (2s + 1) past about pi).
  const Trajectory few = round_robin(4, /*damped=*/false, 3000, 1);
  EXPECT_NEAR(few.final_value, 1.0, 0.1);
  const Trajectory many = round_robin(32, /*damped=*/false, 3000, 1);
  EXPECT_TRUE(many.lowest < 0.0 || many.largest > 10.0 || !std::isfinite(many.final_value))
      << "lowest " << many.lowest << ", largest " << many.largest;
}

}  // namespace
}  // namespace omnilearn::asp
