// One replica on its own: argument checks, slowdown emulation bookkeeping, LR schedule position,
// evaluation, and a rendezvous that nobody else attends.
#include <ATen/Parallel.h>

#include "tests/training/test_support.hpp"

namespace omnilearn::training {
namespace {

using namespace std::chrono_literals;

TEST(TrainerLocal, RejectsBadArguments) {
  Trainer t(testing::synthetic_config(100, 12));
  EXPECT_THROW(t.step({}), std::invalid_argument);
  EXPECT_THROW(t.step({0}), std::invalid_argument);
  EXPECT_THROW(t.step({-3}), std::invalid_argument);
  EXPECT_THROW(t.step({4, 4}), std::invalid_argument);  // world is 1 without a group
  EXPECT_THROW(t.set_slowdown(0.5), std::invalid_argument);
  testing::LoopbackStore store;
  EXPECT_THROW(t.join_group(store.client(), 0, 2, 2, 1s), std::invalid_argument);
  EXPECT_THROW(t.join_group(store.client(), 0, 0, 1, 0ms), std::invalid_argument);
  TrainerConfig bad = testing::synthetic_config(100, 12);
  bad.optimizer.lr = 0;
  EXPECT_THROW(Trainer{bad}, std::invalid_argument);
  bad = testing::synthetic_config(100, 12);
  bad.model.kind = "cnn";
  bad.data.synthetic.height = 4;
  EXPECT_THROW(Trainer{bad}, std::invalid_argument);
}

TEST(TrainerLocal, SlowdownSleepsInProportionToCompute) {
  at::set_num_threads(1);
  Trainer t(testing::synthetic_config(2000));
  const StepResult plain = t.step({512});
  ASSERT_TRUE(plain.committed);
  EXPECT_EQ(plain.slowdown_time_s, 0.0);
  EXPECT_GT(plain.compute_time_s, 0.0);
  t.set_slowdown(3.0);
  EXPECT_EQ(t.slowdown(), 3.0);
  const StepResult slow = t.step({512});
  ASSERT_TRUE(slow.committed);
  // compute_time_s includes the sleep, which is (F - 1) x the measured compute.
  const double measured = slow.compute_time_s - slow.slowdown_time_s;
  EXPECT_NEAR(slow.slowdown_time_s, 2.0 * measured, 1e-9);
  EXPECT_GT(slow.slowdown_time_s, 0.0);
}

// Spinning keeps the bookkeeping sleeping has: the compute time the controller sees includes
// the emulation, reported apart. The CPU it burns (factor x the compute's) is a measurement:
// `training_bench --only slowdown`.
TEST(TrainerLocal, SlowdownSpinKeepsTheSlowdownBookkeeping) {
  at::set_num_threads(1);
  Trainer t(testing::synthetic_config(2000));
  t.set_slowdown(3.0);
  t.set_slowdown_spins(true);
  const StepResult slow = t.step({512});
  ASSERT_TRUE(slow.committed);
  EXPECT_GT(slow.slowdown_time_s, 0.0);
  EXPECT_GT(slow.compute_time_s, slow.slowdown_time_s);
  t.set_slowdown_spins(false);
  const StepResult sleeping = t.step({512});
  ASSERT_TRUE(sleeping.committed);
  const double measured = sleeping.compute_time_s - sleeping.slowdown_time_s;
  EXPECT_NEAR(sleeping.slowdown_time_s, 2.0 * measured, 1e-9) << "back to sleeping";
}

TEST(TrainerLocal, ScheduleFollowsCommittedSteps) {
  TrainerConfig c = testing::synthetic_config(200, 12);
  c.optimizer.lr = 0.2;
  c.optimizer.schedule.kind = "step";
  c.optimizer.schedule.warmup_steps = 2;
  c.optimizer.schedule.step_size = 3;
  c.optimizer.schedule.gamma = 0.5;
  Trainer t(c);
  const std::vector<double> expected = {0.1, 0.2, 0.2, 0.2, 0.2, 0.1, 0.1};
  for (double lr : expected) {
    EXPECT_DOUBLE_EQ(t.current_lr(), lr) << "step " << t.step_count();
    ASSERT_TRUE(t.step({16}).committed);
  }
  EXPECT_EQ(t.step_count(), 7);
  EXPECT_EQ(t.cursor(), (Cursor{0, 112}));
}

TEST(TrainerLocal, EvaluateImprovesWithTraining) {
  at::set_num_threads(1);
  TrainerConfig c = testing::synthetic_config(2000);
  Trainer t(c);
  const EvalResult before = t.evaluate();
  EXPECT_EQ(before.samples, 500);
  EXPECT_EQ(t.evaluate(100).samples, 100);
  for (int s = 0; s < 60; ++s) ASSERT_TRUE(t.step({100}).committed);
  const EvalResult after = t.evaluate();
  EXPECT_LT(after.loss, before.loss);
  EXPECT_GT(after.accuracy, before.accuracy + 0.2);
}

TEST(TrainerLocal, RendezvousWithoutPeersFailsWithinTheTimeout) {
  Trainer t(testing::synthetic_config(100, 12));
  testing::LoopbackStore store;
  const auto start = std::chrono::steady_clock::now();
  const CollectiveStatus st = t.join_group(store.client(), 0, 0, 2, 1s, testing::loopback());
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.error.find("generation 0"), std::string::npos) << st.error;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  EXPECT_FALSE(t.in_group());
  EXPECT_TRUE(t.step({8}).committed);  // still trains alone
}

}  // namespace
}  // namespace omnilearn::training
