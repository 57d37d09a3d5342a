// Elastic protocol: 3 ranks -> 2 (one leaves) -> 3 (a fresh one joins and receives the state),
// in one process, on one store, one generation per membership.
#include <ATen/Parallel.h>

#include "tests/training/test_support.hpp"

namespace omnilearn::training {
namespace {

using namespace std::chrono_literals;
using testing::LoopbackStore;

const std::vector<int> kGen0 = {40, 100, 116};
const std::vector<int> kGen1 = {100, 156};
const std::vector<int> kGen2 = {50, 60, 146};
constexpr int kStepsPerGeneration = 5;

void train(Trainer& t, const std::vector<int>& plan) {
  for (int s = 0; s < kStepsPerGeneration; ++s) {
    const StepResult r = t.step(plan);
    ASSERT_TRUE(r.committed) << r.error;
  }
}

void join(Trainer& t, const LoopbackStore& store, int gen, int rank, int world) {
  const CollectiveStatus joined =
      t.join_group(store.client(), gen, rank, world, 30s, testing::loopback());
  ASSERT_TRUE(joined.ok) << joined.error;
  ASSERT_EQ(t.generation(), gen);
  const CollectiveStatus synced = t.sync_state_from_rank0();
  ASSERT_TRUE(synced.ok) << synced.error;
}

TEST(GroupRebuild, LeaveThenJoinKeepsTrainingAndTheJoinerGetsTheState) {
  at::set_num_threads(1);
  TrainerConfig config = testing::synthetic_config(1500);
  config.optimizer.nesterov = true;
  config.optimizer.weight_decay = 1e-4;
  config.optimizer.schedule.kind = "step";
  config.optimizer.schedule.step_size = 4;
  config.optimizer.schedule.gamma = 0.7;
  const DatasetPair data = load_datasets(config.data);
  LoopbackStore store;

  // Reference: one process with the same global batch at every step.
  Trainer reference(config, data);
  for (int s = 0; s < 3 * kStepsPerGeneration; ++s) ASSERT_TRUE(reference.step({256}).committed);

  std::vector<NamedTensor> joiner_before_sync, joiner_after_sync, rank0_at_gen2;
  std::vector<NamedTensor> joiner_opt_after_sync, rank0_opt_at_gen2;
  std::vector<std::vector<NamedTensor>> final_params(3);

  // Worker ids: 0 and 1 survive throughout, 2 leaves after generation 0, 3 joins generation 2.
  testing::run_ranks(4, [&](int id) {
    TrainerConfig c = config;
    c.model.seed = config.model.seed + 100 * static_cast<uint64_t>(id);
    Trainer t(c, data);
    if (id == 3) {
      joiner_before_sync = t.named_parameters();
      // Rank order changes too: the joiner takes rank 1, survivor 1 moves to rank 2.
      const CollectiveStatus joined =
          t.join_group(store.client(), 2, 1, 3, 30s, testing::loopback());
      ASSERT_TRUE(joined.ok) << joined.error;
      ASSERT_TRUE(t.sync_state_from_rank0().ok);
      joiner_after_sync = t.named_parameters();
      joiner_opt_after_sync = t.named_optimizer_state();
      EXPECT_EQ(t.step_count(), 2 * kStepsPerGeneration);
      train(t, kGen2);
      final_params[1] = t.named_parameters();
      return;
    }
    join(t, store, 0, id, 3);
    train(t, kGen0);
    if (id == 2) {
      t.leave_group();
      return;
    }
    join(t, store, 1, id, 2);
    train(t, kGen1);
    EXPECT_EQ(t.step_count(), 2 * kStepsPerGeneration);
    const int rank = id == 0 ? 0 : 2;
    if (id == 0) {
      rank0_at_gen2 = t.named_parameters();
      rank0_opt_at_gen2 = t.named_optimizer_state();
    }
    join(t, store, 2, rank, 3);
    train(t, kGen2);
    final_params[static_cast<size_t>(rank)] = t.named_parameters();
  });

  // The joiner started from other weights and ends with rank 0's, momentum included.
  EXPECT_GT(testing::relative_diff(joiner_before_sync[0].second, rank0_at_gen2[0].second), 0.1);
  testing::expect_equal(joiner_after_sync, rank0_at_gen2, "joiner parameters after sync");
  testing::expect_equal(joiner_opt_after_sync, rank0_opt_at_gen2, "joiner momentum after sync");
  for (int r = 1; r < 3; ++r) {
    testing::expect_equal(final_params[static_cast<size_t>(r)], final_params[0],
                          "rank " + std::to_string(r));
  }
  // Leaving and joining did not change the math: same as one process with B = 256.
  testing::expect_close(final_params[0], reference.named_parameters(), 1e-5, "vs one process");
}

}  // namespace
}  // namespace omnilearn::training

namespace omnilearn::training {
namespace {

// After a fault the survivors may be a step apart; the new generation must start from the one
// that committed the most, whatever its rank, or a committed step would be lost.
TEST(GroupRebuild, SyncTakesTheStateOfTheMostAdvancedRank) {
  at::set_num_threads(1);
  const TrainerConfig config = testing::synthetic_config(1500);
  const DatasetPair data = load_datasets(config.data);
  LoopbackStore store;
  std::vector<std::vector<NamedTensor>> params(3);
  std::vector<int64_t> steps(3);
  std::vector<int> roots(3, -1);
  testing::run_ranks(3, [&](int rank) {
    TrainerConfig c = config;
    c.model.seed = config.model.seed + static_cast<uint64_t>(rank);
    Trainer t(c, data);
    if (rank == 2) {
      for (int s = 0; s < 3; ++s) ASSERT_TRUE(t.step({64}).committed);
    } else if (rank == 1) {
      ASSERT_TRUE(t.step({64}).committed);
    }
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, 30s, testing::loopback()).ok);
    const CollectiveStatus synced = t.sync_state_from_most_advanced(&roots[static_cast<size_t>(rank)]);
    ASSERT_TRUE(synced.ok) << synced.error;
    params[static_cast<size_t>(rank)] = t.named_parameters();
    steps[static_cast<size_t>(rank)] = t.step_count();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(roots[static_cast<size_t>(r)], 2);
    EXPECT_EQ(steps[static_cast<size_t>(r)], 3);
    // Every replica is rank 2's, which trained 3 steps from its own initialization.
    testing::expect_equal(params[static_cast<size_t>(r)], params[2], "rank " + std::to_string(r));
  }
  EXPECT_GT(testing::max_relative_l2(params[0], Trainer(config, data).named_parameters()), 1e-3);
}

}  // namespace
}  // namespace omnilearn::training
