#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "asp/epoch_dealer.hpp"
#include "training/sampler.hpp"

namespace omnilearn::asp {
namespace {

TEST(EpochDealer, DealsTheSamePermutationAsTheBspSamplerInOrder) {
  EpochDealer dealer(50, 7);
  training::EpochSampler sampler(50, 7);
  std::vector<std::int64_t> dealt;
  while (dealer.epoch() == 0) {
    auto batch = dealer.pull(dealt.size() % 3, 1 + dealt.size() % 5);
    dealt.insert(dealt.end(), batch.indices.begin(), batch.indices.end());
  }
  EXPECT_EQ(dealt, sampler.permutation(0));
}

TEST(EpochDealer, TheLastBatchOfAnEpochIsPartialAndTheNextStartsAFreshEpoch) {
  EpochDealer dealer(10, 1);
  auto a = dealer.pull(0, 4), b = dealer.pull(1, 4), c = dealer.pull(0, 4);
  EXPECT_EQ(a.indices.size(), 4u);
  EXPECT_EQ(b.indices.size(), 4u);
  EXPECT_EQ(c.indices.size(), 2u);
  EXPECT_EQ(c.epoch, 0);
  auto d = dealer.pull(1, 4);
  EXPECT_EQ(d.epoch, 1);
  EXPECT_EQ(d.indices.size(), 4u);
  EXPECT_EQ(dealer.epoch(), 1);
}

TEST(EpochDealer, EpochsCountWhenEverySampleIsPushedAndTheRunEnds) {
  EpochDealer dealer(6, 3, /*max_epochs=*/2);
  std::vector<DealtBatch> held;
  for (int i = 0; i < 4; ++i) held.push_back(dealer.pull(i % 2, 3));
  EXPECT_TRUE(dealer.pull(0, 3).empty());  // both epochs dealt
  EXPECT_EQ(dealer.epochs_completed(), 0);
  EXPECT_EQ(dealer.push(0, held[0].id), Receipt::kAccepted);
  EXPECT_EQ(dealer.epochs_completed(), 0);
  EXPECT_EQ(dealer.push(1, held[1].id), Receipt::kAccepted);
  EXPECT_EQ(dealer.epochs_completed(), 1);
  EXPECT_FALSE(dealer.finished());
  EXPECT_EQ(dealer.push(0, held[2].id), Receipt::kAccepted);
  EXPECT_EQ(dealer.push(1, held[3].id), Receipt::kAccepted);
  EXPECT_EQ(dealer.epochs_completed(), 2);
  EXPECT_TRUE(dealer.finished());
}

TEST(EpochDealer, AGoneWorkersIndicesAreDealtAgainFirstAndItsLatePushIsADuplicate) {
  EpochDealer dealer(100, 5);
  auto mine = dealer.pull(/*worker=*/2, 8);
  auto other = dealer.pull(1, 8);
  EXPECT_EQ(dealer.outstanding_batches(2), 1);
  EXPECT_EQ(dealer.outstanding_samples(2), 8);
  EXPECT_EQ(dealer.worker_gone(2), 8);
  EXPECT_EQ(dealer.outstanding_batches(2), 0);
  EXPECT_EQ(dealer.reissue_backlog(), 8);
  // Reissued first, in pieces of what is asked.
  auto again1 = dealer.pull(1, 5);
  auto again2 = dealer.pull(0, 5);
  EXPECT_TRUE(again1.reissued);
  EXPECT_TRUE(again2.reissued);
  EXPECT_EQ(again2.indices.size(), 3u);
  std::vector<std::int64_t> both = again1.indices;
  both.insert(both.end(), again2.indices.begin(), again2.indices.end());
  EXPECT_EQ(both, mine.indices);
  auto fresh = dealer.pull(0, 5);
  EXPECT_FALSE(fresh.reissued);
  EXPECT_EQ(dealer.counters().samples_reissued, 8);
  // The "gone" worker was only late.
  EXPECT_EQ(dealer.push(2, mine.id), Receipt::kDuplicate);
  EXPECT_EQ(dealer.counters().duplicates, 1);
  EXPECT_EQ(dealer.push(1, other.id), Receipt::kAccepted);
  EXPECT_EQ(dealer.push(1, other.id), Receipt::kDuplicate);
  EXPECT_EQ(dealer.counters().duplicates, 2);
  EXPECT_EQ(dealer.counters().samples_accepted, 8);
}

TEST(EpochDealer, PushesOfUnknownOrAnotherWorkersBatchesAreNotAccepted) {
  EpochDealer dealer(20, 1);
  auto batch = dealer.pull(0, 4);
  EXPECT_EQ(dealer.push(1, batch.id), Receipt::kUnknown);
  EXPECT_EQ(dealer.push(0, 999), Receipt::kUnknown);
  EXPECT_EQ(dealer.push(0, 0), Receipt::kUnknown);
  EXPECT_EQ(dealer.counters().unknown, 3);
  EXPECT_EQ(dealer.push(0, batch.id), Receipt::kAccepted);
}

TEST(EpochDealer, ReissuedBatchesStayWithinOneEpochOldestFirst) {
  EpochDealer dealer(4, 2);
  auto e0 = dealer.pull(0, 4);  // all of epoch 0
  auto e1 = dealer.pull(1, 2);  // half of epoch 1
  dealer.worker_gone(1);
  dealer.worker_gone(0);
  auto first = dealer.pull(2, 10);
  EXPECT_EQ(first.epoch, 0);
  EXPECT_EQ(first.indices, e0.indices);
  auto second = dealer.pull(2, 10);
  EXPECT_EQ(second.epoch, 1);
  EXPECT_EQ(second.indices, e1.indices);
}

TEST(EpochDealer, ExactlyOncePerEpochWithRandomPullsPushesAndDepartures) {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const std::int64_t n = 97;
    EpochDealer dealer(n, seed, /*max_epochs=*/3);
    std::vector<std::vector<int>> used(3, std::vector<int>(n, 0));
    std::vector<DealtBatch> held;
    std::vector<WorkerId> holder;
    std::uint64_t x = seed;
    auto next = [&] { x = x * 6364136223846793005ULL + 1442695040888963407ULL; return x >> 33; };
    int guard = 0;
    while (!dealer.finished() && ++guard < 100000) {
      const auto r = next() % 10;
      if (r < 5) {
        const WorkerId w = static_cast<WorkerId>(next() % 4);
        auto b = dealer.pull(w, 1 + static_cast<std::int64_t>(next() % 13));
        if (!b.empty()) { held.push_back(b); holder.push_back(w); }
      } else if (r < 9 && !held.empty()) {
        const auto i = next() % held.size();
        if (dealer.push(holder[i], held[i].id) == Receipt::kAccepted) {
          for (auto idx : held[i].indices) ++used[static_cast<std::size_t>(held[i].epoch)][static_cast<std::size_t>(idx)];
        }
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        holder.erase(holder.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        dealer.worker_gone(static_cast<WorkerId>(next() % 4));  // its held batches become stale
      }
    }
    ASSERT_TRUE(dealer.finished()) << "seed " << seed;
    for (const auto& epoch : used) {
      for (int count : epoch) ASSERT_EQ(count, 1) << "seed " << seed;
    }
  }
}

TEST(EpochDealer, APushThatReachedSomeShardsIsDealtAgainForTheOthersOnly) {
  EpochDealer dealer(100, 9);
  auto partial = dealer.pull(/*worker=*/0, 8);
  auto lost = dealer.pull(/*worker=*/1, 4);
  EXPECT_TRUE(partial.shards_done.empty());
  // Worker 0's push reached shards 0 and 2 of 3; worker 1's reached none.
  EXPECT_EQ(dealer.push_failed(0, partial.id, {2, 0}), 8);
  EXPECT_EQ(dealer.push_failed(1, lost.id, {}), 4);
  EXPECT_EQ(dealer.outstanding_batches(0), 0);
  EXPECT_EQ(dealer.reissue_backlog(), 12);
  // Not merged, though one pull could hold both: they go to different shards.
  auto again = dealer.pull(2, 20);
  EXPECT_TRUE(again.reissued);
  EXPECT_EQ(again.indices, partial.indices);
  EXPECT_EQ(again.shards_done, (std::vector<std::int32_t>{0, 2}));
  // Failing again adds to what the batch already reached.
  EXPECT_EQ(dealer.push_failed(2, again.id, {1, 0}), 8);
  auto rest = dealer.pull(2, 20);
  EXPECT_EQ(rest.indices, lost.indices);
  EXPECT_TRUE(rest.shards_done.empty());
  auto last = dealer.pull(2, 20);
  EXPECT_EQ(last.indices, partial.indices);
  EXPECT_EQ(last.shards_done, (std::vector<std::int32_t>{0, 1, 2}));
  // A batch not outstanding for that worker queues nothing.
  EXPECT_EQ(dealer.push_failed(0, partial.id, {1}), 0);
  EXPECT_EQ(dealer.push_failed(1, last.id, {1}), 0);
  EXPECT_EQ(dealer.push(2, last.id), Receipt::kAccepted);
  EXPECT_EQ(dealer.push(2, rest.id), Receipt::kAccepted);
  EXPECT_EQ(dealer.counters().samples_accepted, 12);
  EXPECT_EQ(dealer.counters().partial_pushes, 2);  // the two that some shard took
}

TEST(EpochDealer, EveryShardTakesEachSampleOncePerEpochWithPartialPushes) {
  constexpr int kShards = 3;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const std::int64_t n = 61;
    EpochDealer dealer(n, seed, /*max_epochs=*/2);
    // used[epoch][shard][sample]: gradients of that sample applied to that shard's slice.
    std::vector<std::vector<std::vector<int>>> used(
        2, std::vector<std::vector<int>>(kShards, std::vector<int>(n, 0)));
    std::vector<DealtBatch> held;
    std::vector<WorkerId> holder;
    std::uint64_t x = seed;
    auto next = [&] { x = x * 6364136223846793005ULL + 1442695040888963407ULL; return x >> 33; };
    auto apply = [&](const DealtBatch& b, std::int32_t shard) {
      for (auto idx : b.indices) {
        ++used[static_cast<std::size_t>(b.epoch)][static_cast<std::size_t>(shard)]
              [static_cast<std::size_t>(idx)];
      }
    };
    int guard = 0;
    while (!dealer.finished() && ++guard < 100000) {
      const auto r = next() % 10;
      if (r < 5 || held.empty()) {
        const WorkerId w = static_cast<WorkerId>(next() % 4);
        auto b = dealer.pull(w, 1 + static_cast<std::int64_t>(next() % 13));
        if (!b.empty()) { held.push_back(b); holder.push_back(w); }
        continue;
      }
      const auto i = next() % held.size();
      const DealtBatch b = held[i];
      const WorkerId w = holder[i];
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      holder.erase(holder.begin() + static_cast<std::ptrdiff_t>(i));
      std::vector<std::int32_t> todo;
      for (std::int32_t s = 0; s < kShards; ++s) {
        if (std::find(b.shards_done.begin(), b.shards_done.end(), s) == b.shards_done.end()) {
          todo.push_back(s);
        }
      }
      ASSERT_FALSE(todo.empty()) << "seed " << seed << ": a batch dealt with no shard left";
      if (r < 8) {
        // A push every shard it names answered.
        if (dealer.push(w, b.id) == Receipt::kAccepted) {
          for (auto s : todo) apply(b, s);
        }
      } else {
        // Some of the shards answered, not all.
        std::vector<std::int32_t> taken;
        for (auto s : todo) {
          if (next() % 2 && taken.size() + 1 < todo.size()) taken.push_back(s);
        }
        if (dealer.push_failed(w, b.id, taken) > 0) {
          for (auto s : taken) apply(b, s);
        }
      }
    }
    ASSERT_TRUE(dealer.finished()) << "seed " << seed;
    for (const auto& epoch : used) {
      for (const auto& shard : epoch) {
        for (int count : shard) ASSERT_EQ(count, 1) << "seed " << seed;
      }
    }
  }
}

TEST(EpochDealer, RejectsBadArguments) {
  EXPECT_THROW(EpochDealer(0, 1), std::invalid_argument);
  EXPECT_THROW(EpochDealer(5, 1, -1), std::invalid_argument);
  EpochDealer dealer(5, 1);
  EXPECT_THROW(dealer.pull(0, 0), std::invalid_argument);
}

TEST(EpochDealer, SettleAcceptsABatchEveryShardTookAndDealsTheRestAgain) {
  EpochDealer dealer(12, 5, /*max_epochs=*/1);
  const auto a = dealer.pull(1, 4), b = dealer.pull(1, 4), c = dealer.pull(2, 4);
  EXPECT_EQ(dealer.outstanding_ids(1), (std::vector<std::uint64_t>{a.id, b.id}));
  EXPECT_EQ(dealer.batch_samples(c.id), 4);
  // Both shards took a: accepted as a push would be.
  EXPECT_EQ(dealer.settle(1, a.id, {1, 0}, 2), EpochDealer::Settled::kAccepted);
  EXPECT_EQ(dealer.counters().samples_accepted, 4);
  EXPECT_EQ(dealer.push(1, a.id), Receipt::kDuplicate);
  // Shard 1 took b: dealt again for shard 0 only; settling it again changes nothing.
  EXPECT_EQ(dealer.settle(1, b.id, {1}, 2), EpochDealer::Settled::kDealtAgain);
  EXPECT_EQ(dealer.settle(1, b.id, {1}, 2), EpochDealer::Settled::kNotOutstanding);
  EXPECT_EQ(dealer.settle(1, c.id, {0, 1}, 2), EpochDealer::Settled::kNotOutstanding);  // not 1's
  const auto again = dealer.pull(3, 8);
  EXPECT_EQ(again.indices, b.indices);
  EXPECT_EQ(again.shards_done, (std::vector<std::int32_t>{1}));
  // Its next holder's push reached shard 0: with shards_done, every shard has it.
  EXPECT_EQ(dealer.settle(3, again.id, {0}, 2), EpochDealer::Settled::kAccepted);
  EXPECT_EQ(dealer.push(2, c.id), Receipt::kAccepted);
  EXPECT_TRUE(dealer.finished());
  EXPECT_EQ(dealer.counters().samples_accepted, 12);
}

TEST(EpochDealer, ARestoredStateDealsOnExactlyAsTheOriginal) {
  EpochDealer dealer(23, 5, /*max_epochs=*/3);
  const auto a = dealer.pull(1, 4);
  const auto b = dealer.pull(2, 5);
  dealer.pull(1, 3);
  EXPECT_EQ(dealer.push(1, a.id), Receipt::kAccepted);
  dealer.push_failed(2, b.id, {0});  // dealt again for the other shards
  dealer.worker_gone(1);             // its last batch is dealt again first
  // The state goes through its text, as the head's store keeps it.
  EpochDealer restored(23, 5, 3);
  restored.restore_state(nlohmann::json::parse(dealer.state().dump()));
  EXPECT_EQ(restored.reissue_backlog(), dealer.reissue_backlog());
  EXPECT_EQ(restored.epoch(), dealer.epoch());
  for (int i = 0; i < 30; ++i) {
    const auto x = dealer.pull(3 + i % 2, 1 + i % 6);
    const auto y = restored.pull(3 + i % 2, 1 + i % 6);
    ASSERT_EQ(x.id, y.id);
    EXPECT_EQ(x.epoch, y.epoch);
    EXPECT_EQ(x.indices, y.indices);
    EXPECT_EQ(x.shards_done, y.shards_done);
    EXPECT_EQ(x.reissued, y.reissued);
    if (x.empty()) break;
    EXPECT_EQ(dealer.push(3 + i % 2, x.id), restored.push(3 + i % 2, y.id));
  }
  EXPECT_EQ(restored.epochs_completed(), dealer.epochs_completed());
  EXPECT_EQ(restored.counters().samples_accepted, dealer.counters().samples_accepted);
  EXPECT_EQ(restored.counters().partial_pushes, dealer.counters().partial_pushes);
}

TEST(EpochDealer, AStateThatCannotBeReadIsRefusedAndChangesNothing) {
  EpochDealer dealer(10, 1);
  const auto a = dealer.pull(1, 4);
  auto state = dealer.state();
  state["position"] = 10;  // outside the dataset
  EpochDealer other(10, 1);
  EXPECT_THROW(other.restore_state(state), std::invalid_argument);
  state.erase("outstanding");
  EXPECT_THROW(dealer.restore_state(state), std::invalid_argument);
  EXPECT_EQ(dealer.outstanding_batches(1), 1);
  EXPECT_EQ(dealer.push(1, a.id), Receipt::kAccepted);
}

}  // namespace
}  // namespace omnilearn::asp
