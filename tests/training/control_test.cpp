// The control broadcast (how the actor layer publishes a batch plan at a step boundary) and the
// barrier, over 3 ranks.
#include <ATen/Parallel.h>

#include "tests/training/test_support.hpp"

namespace omnilearn::training {
namespace {

using namespace std::chrono_literals;

TEST(ControlBroadcast, RankZerosWordsReachEveryRank) {
  at::set_num_threads(1);
  const TrainerConfig config = testing::synthetic_config(100, 12);
  const DatasetPair data = load_datasets(config.data);
  testing::LoopbackStore store;
  // Lengths around the inline capacity (63 words) and well beyond it, and empty.
  const std::vector<size_t> lengths = {5, 0, 63, 64, 1000};
  testing::run_ranks(3, [&](int rank) {
    Trainer t(config, data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, 20s, testing::loopback()).ok);
    for (size_t len : lengths) {
      std::vector<int64_t> words;
      if (rank == 0) {
        for (size_t i = 0; i < len; ++i) words.push_back(static_cast<int64_t>(i * i) - 7);
      } else {
        words.assign(3, -1);  // stale content is replaced
      }
      const CollectiveStatus st = t.broadcast_control(words);
      ASSERT_TRUE(st.ok) << st.error;
      ASSERT_EQ(words.size(), len) << "rank " << rank;
      for (size_t i = 0; i < len; ++i) ASSERT_EQ(words[i], static_cast<int64_t>(i * i) - 7);
      ASSERT_TRUE(t.barrier().ok);
    }
    // A typical use: rank 0 publishes the next plan, every rank steps with it.
    std::vector<int64_t> plan = {3, 7, 20, 30, 14};  // generation, version, b...
    if (rank != 0) plan.clear();
    ASSERT_TRUE(t.broadcast_control(plan).ok);
    const StepResult r =
        t.step({static_cast<int>(plan[2]), static_cast<int>(plan[3]), static_cast<int>(plan[4])});
    EXPECT_TRUE(r.committed) << r.error;
  });
}

TEST(ControlBroadcast, AloneIsANoOp) {
  const TrainerConfig config = testing::synthetic_config(100, 12);
  Trainer t(config);
  std::vector<int64_t> words = {1, 2, 3};
  EXPECT_TRUE(t.broadcast_control(words).ok);
  EXPECT_EQ(words, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(t.barrier().ok);
}

}  // namespace
}  // namespace omnilearn::training
