// DESIGN invariant 5: a step whose all-reduce fails (here: one rank never joins it, so the
// others time out) is not committed and leaves parameters, BatchNorm buffers, optimizer state,
// step and cursor exactly as they were; the group then needs a new generation.
#include <ATen/Parallel.h>

#include <atomic>
#include <latch>

#include "tests/training/test_support.hpp"

namespace omnilearn::training {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Snapshot {
  std::vector<NamedTensor> params, buffers, optimizer;
  int64_t step;
  Cursor cursor;
  explicit Snapshot(const Trainer& t)
      : params(t.named_parameters()),
        buffers(t.named_buffers()),
        optimizer(t.named_optimizer_state()),
        step(t.step_count()),
        cursor(t.cursor()) {}
};

void expect_same(const Snapshot& a, const Snapshot& b) {
  testing::expect_equal(a.params, b.params, "parameters");
  testing::expect_equal(a.buffers, b.buffers, "buffers");
  testing::expect_equal(a.optimizer, b.optimizer, "optimizer state");
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.cursor, b.cursor);
}

TEST(FailedCollective, TimedOutAllReduceCommitsNothing) {
  at::set_num_threads(1);
  // A resnet, so BatchNorm statistics (changed by the forward pass) must be rolled back too.
  TrainerConfig config = testing::synthetic_config(600, 12);
  config.model.kind = "resnet";
  config.model.channels = {4, 8};
  const DatasetPair data = load_datasets(config.data);
  testing::LoopbackStore store;
  const std::vector<int> plan = {20, 30, 14};
  constexpr auto kTimeout = 1500ms;
  std::latch failed(2);

  testing::run_ranks(3, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, kTimeout, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(t.step(plan).committed);
    if (rank == 2) {
      // Stays in the group but never enters the third all-reduce.
      failed.wait();
      return;
    }
    const Snapshot before(t);
    const auto start = Clock::now();
    const StepResult r = t.step(plan);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    failed.count_down();
    EXPECT_FALSE(r.committed);
    EXPECT_FALSE(r.error.empty());
    EXPECT_EQ(r.step, 2);
    EXPECT_GE(elapsed, 1.0) << "failed before the timeout: " << r.error;
    EXPECT_LT(elapsed, 15.0) << "the collective timeout did not bound the step";
    expect_same(Snapshot(t), before);

    // The group is broken: collectives fail at once instead of hanging again.
    const auto again = Clock::now();
    EXPECT_FALSE(t.step(plan).committed);
    std::vector<int64_t> words = {1};
    EXPECT_FALSE(t.broadcast_control(words).ok);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - again).count(), 0.5);
    expect_same(Snapshot(t), before);

    // The survivors re-form without rank 2 and redo the step.
    ASSERT_TRUE(t.join_group(store.client(), 1, rank, 2, 20s, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    const StepResult redo = t.step({32, 32});
    EXPECT_TRUE(redo.committed) << redo.error;
    EXPECT_EQ(t.step_count(), 3);
  });
}

}  // namespace
}  // namespace omnilearn::training

namespace omnilearn::training {
namespace {

// The scheduler formed a generation without a hung peer: the others stop waiting for it when
// told (the abandon check), not at the group timeout; the step commits nothing, and a new
// generation forms at once on the same trainers (the abandoned group is torn down elsewhere).
TEST(FailedCollective, AnAbandonedCollectiveGivesUpAndANewGroupForms) {
  at::set_num_threads(1);
  const TrainerConfig config = testing::synthetic_config(600);
  const DatasetPair data = load_datasets(config.data);
  testing::LoopbackStore store;
  // As in the trainer: collectives of generations below this one give up.
  std::atomic<int> abandon_below{0};
  std::latch hung(1);
  testing::run_ranks(3, [&](int rank) {
    Trainer t(config, data);
    t.set_abandon_check([&] { return abandon_below.load() > t.generation(); });
    // A group timeout far beyond the test's own: only the abandon check can end the wait.
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, 600s, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    ASSERT_TRUE(t.step({10, 10, 10}).committed);
    if (rank == 2) {
      hung.wait();  // a frozen peer: in the group, never in the next collective
      return;
    }
    const Snapshot before(t);
    std::thread trigger;
    if (rank == 0) trigger = std::thread([&] {
      std::this_thread::sleep_for(300ms);
      abandon_below = 1;  // what a Rendezvous of generation 1 with abandon_previous does
    });
    const StepResult r = t.step({10, 10, 10});
    if (trigger.joinable()) trigger.join();
    EXPECT_FALSE(r.committed);
    EXPECT_NE(r.error.find("abandoned"), std::string::npos) << r.error;
    expect_same(before, Snapshot(t));
    // The survivors form generation 1 and train; the hung group goes away on its own.
    struct Release {  // the hung rank leaves whatever happens here
      std::latch& hung;
      int rank;
      ~Release() {
        if (rank == 0) hung.count_down();
      }
    } release{hung, rank};
    const CollectiveStatus joined = t.join_group(store.client(), 1, rank, 2, 30s, testing::loopback());
    ASSERT_TRUE(joined.ok) << joined.error;
    const CollectiveStatus synced = t.sync_state_from_most_advanced();
    ASSERT_TRUE(synced.ok) << synced.error;
    const StepResult next = t.step({15, 15});
    EXPECT_TRUE(next.committed) << next.error;
  });
}

}  // namespace
}  // namespace omnilearn::training

namespace omnilearn::training {
namespace {

// The leader's lease ran out while a step ran: the gate refuses the commit on that rank, which
// changes nothing and leaves the group broken; the next generation adopts the state committed
// by the newest generation when step counts tie.
TEST(FailedCollective, ACommitGateRefusesAStepAndTheNewestGenerationsStateWins) {
  at::set_num_threads(1);
  const TrainerConfig config = testing::synthetic_config(600);
  const DatasetPair data = load_datasets(config.data);
  testing::LoopbackStore store;
  std::vector<int64_t> steps(2);
  std::vector<int> roots(2, -1);
  std::vector<std::vector<NamedTensor>> params(2);
  testing::run_ranks(2, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 2, 30s, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    if (rank == 0) t.set_commit_gate([] { return false; });
    const Snapshot before(t);
    const StepResult r = t.step({10, 10});
    if (rank == 0) {
      EXPECT_FALSE(r.committed);
      EXPECT_NE(r.error.find("commit refused"), std::string::npos) << r.error;
      expect_same(before, Snapshot(t));
      // The leader goes on alone in generation 1 and commits step 1 there.
      t.set_commit_gate({});
      ASSERT_TRUE(t.join_group(store.client(), 1, 0, 1, 30s, testing::loopback()).ok);
      ASSERT_TRUE(t.step({20}).committed);
    } else {
      EXPECT_TRUE(r.committed) << r.error;  // rank 1 committed step 1 in generation 0
    }
    // Both hold one step; generation 1's wins whatever the ranks.
    ASSERT_TRUE(t.join_group(store.client(), 2, 1 - rank, 2, 30s, testing::loopback()).ok);
    const CollectiveStatus synced = t.sync_state_from_most_advanced(&roots[static_cast<size_t>(rank)]);
    ASSERT_TRUE(synced.ok) << synced.error;
    steps[static_cast<size_t>(rank)] = t.step_count();
    params[static_cast<size_t>(rank)] = t.named_parameters();
  });
  EXPECT_EQ(steps[0], 1);
  EXPECT_EQ(steps[1], 1);
  EXPECT_EQ(roots[0], 1) << "old rank 0 is rank 1 of generation 2 and holds generation 1's step";
  EXPECT_EQ(roots[1], 1);
  testing::expect_equal(params[0], params[1], "replicas after the sync");
}

}  // namespace
}  // namespace omnilearn::training
