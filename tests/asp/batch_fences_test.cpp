// asp::BatchFences, scripted: a batch given up is settled only after every asked shard said
// whether it took it (asp_fence_simulation_test drives it under seeded faults).

#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <vector>

#include "asp/batch_fences.hpp"

namespace omnilearn::asp {
namespace {

using Taken = std::vector<TakenBatch>;

TEST(BatchFences, AGoneWorkersPushEveryShardTookCountsAndIsNotDealtAgain) {
  EpochDealer dealer(8, 1, /*max_epochs=*/1);
  BatchFences fences(2);
  const auto a = dealer.pull(1, 4);
  const FenceStart start = fences.worker_gone(dealer, 1, {0, 1});
  ASSERT_TRUE(start.ask);
  EXPECT_TRUE(start.settled.empty());
  EXPECT_EQ(start.ask->worker, 1);
  EXPECT_EQ(start.ask->through, kWholeWorker);
  EXPECT_EQ(start.ask->shards, (std::vector<std::int32_t>{0, 1}));
  EXPECT_TRUE(fences.fencing(a.id));
  // Until the last answer the batch is neither accepted nor dealt again.
  EXPECT_TRUE(fences.answer(dealer, start.ask->round, 0, Taken{{a.id, true}}).empty());
  EXPECT_EQ(dealer.outstanding_batches(1), 1);
  EXPECT_EQ(dealer.pull(2, 4).indices.size(), 4u);  // fresh samples, not a's
  EXPECT_TRUE(fences.answer(dealer, start.ask->round, 0, Taken{}).empty());  // answered already
  const auto settled = fences.answer(dealer, start.ask->round, 1, Taken{{a.id, true}});
  ASSERT_EQ(settled.size(), 1u);
  EXPECT_EQ(settled[0].outcome, EpochDealer::Settled::kAccepted);
  EXPECT_TRUE(settled[0].applied);
  EXPECT_TRUE(settled[0].asked);
  EXPECT_EQ(settled[0].samples, 4);
  EXPECT_EQ(fences.pending(), 0u);
  EXPECT_FALSE(fences.fencing(a.id));
  EXPECT_EQ(dealer.reissue_backlog(), 0);
  EXPECT_EQ(dealer.counters().samples_accepted, 4);
}

TEST(BatchFences, WhatOneShardTookIsDealtAgainForTheOthersOnlyAndSilenceIsNotTaken) {
  EpochDealer dealer(16, 1, /*max_epochs=*/1);
  BatchFences fences(3);
  const auto a = dealer.pull(1, 4);
  const FenceStart start = fences.worker_gone(dealer, 1, {0, 1, 2});
  ASSERT_TRUE(start.ask);
  fences.answer(dealer, start.ask->round, 2, Taken{{a.id, false}});  // dropped it
  fences.answer(dealer, start.ask->round, 1, std::nullopt);         // no answer
  const auto settled = fences.answer(dealer, start.ask->round, 0, Taken{});
  ASSERT_EQ(settled.size(), 1u);
  EXPECT_EQ(settled[0].outcome, EpochDealer::Settled::kDealtAgain);
  const auto again = dealer.pull(2, 8);
  EXPECT_EQ(again.indices, a.indices);
  EXPECT_EQ(again.shards_done, (std::vector<std::int32_t>{2}));
}

TEST(BatchFences, AGoneShardAnswersNothingInEveryRoundThatWaitsForIt) {
  EpochDealer dealer(32, 1, /*max_epochs=*/1);
  BatchFences fences(2);
  const auto a = dealer.pull(1, 4);
  const auto b = dealer.pull(2, 4);
  const FenceStart first = fences.worker_gone(dealer, 1, {0, 1});
  const FenceStart second = fences.worker_gone(dealer, 2, {0, 1});
  ASSERT_TRUE(first.ask && second.ask);
  // Shard 0 answers both; shard 1 stays silent (slow: asked again, not settled) ...
  EXPECT_TRUE(fences.answer(dealer, first.ask->round, 0, Taken{{a.id, true}}).empty());
  EXPECT_TRUE(fences.answer(dealer, second.ask->round, 0, Taken{}).empty());
  EXPECT_EQ(fences.pending(), 2u);
  // ... until it is declared gone: both rounds settle, as not taken by shard 1.
  const auto settled = fences.shard_gone(dealer, 1, {});
  ASSERT_EQ(settled.size(), 2u);
  for (const auto& s : settled) EXPECT_EQ(s.outcome, EpochDealer::Settled::kDealtAgain);
  EXPECT_EQ(fences.pending(), 0u);
  EXPECT_FALSE(fences.fencing(a.id));
  EXPECT_FALSE(fences.fencing(b.id));
  // a went to shard 0 already: dealt again for shard 1 only.
  bool a_again = false;
  for (int i = 0; i < 2; ++i) {
    const auto again = dealer.pull(3, 4);
    if (again.indices == a.indices) {
      a_again = true;
      EXPECT_EQ(again.shards_done, (std::vector<std::int32_t>{0}));
    }
  }
  EXPECT_TRUE(a_again);
  EXPECT_TRUE(fences.shard_gone(dealer, 1, {}).empty()) << "nothing waits any more";
  // A late answer of the gone shard changes nothing.
  EXPECT_TRUE(fences.answer(dealer, first.ask->round, 1, Taken{{a.id, true}}).empty());
}

// A drained shard hands over what it took: its pending rounds settle on that, not on silence.
TEST(BatchFences, AHandedOverShardsKnownTakenBatchesAnswerItsPendingRounds) {
  EpochDealer dealer(32, 1, /*max_epochs=*/1);
  BatchFences fences(1);
  const auto a = dealer.pull(1, 4);
  const FenceStart start = fences.worker_gone(dealer, 1, {0});
  ASSERT_TRUE(start.ask);
  const auto settled =
      fences.shard_gone(dealer, 0, {{1, {TakenBatch{a.id, true}}}, {2, {TakenBatch{99, true}}}});
  ASSERT_EQ(settled.size(), 1u);
  EXPECT_EQ(settled[0].outcome, EpochDealer::Settled::kAccepted) << "in the hand-over checkpoint";
  EXPECT_TRUE(settled[0].applied);
  EXPECT_EQ(dealer.reissue_backlog(), 0);
}

TEST(BatchFences, AFailedPushAsksTheSilentShardsAndSettlesOnce) {
  EpochDealer dealer(16, 1, /*max_epochs=*/1);
  BatchFences fences(2);
  const auto a = dealer.pull(1, 4);
  // Shard 0 answered; shard 1 did not within the bound, but applied the push late, before
  // the fence reached it.
  const FenceStart start = fences.push_failed(dealer, 1, a.id, {0}, false, {1});
  ASSERT_TRUE(start.ask);
  EXPECT_EQ(start.ask->through, a.id);
  EXPECT_EQ(start.ask->shards, (std::vector<std::int32_t>{1}));
  // The request sent again (its reply was lost) starts nothing.
  const FenceStart repeat = fences.push_failed(dealer, 1, a.id, {0}, false, {1});
  EXPECT_FALSE(repeat.ask);
  EXPECT_TRUE(repeat.settled.empty());
  const auto settled = fences.answer(dealer, start.ask->round, 1, Taken{{a.id, true}});
  ASSERT_EQ(settled.size(), 1u);
  EXPECT_EQ(settled[0].outcome, EpochDealer::Settled::kAccepted);
  EXPECT_FALSE(fences.push_failed(dealer, 1, a.id, {0}, false, {1}).ask);  // settled already
  // Another batch of the worker that the shard took is not this round's business.
  const auto b = dealer.pull(1, 4);
  const FenceStart next = fences.push_failed(dealer, 1, b.id, {}, false, {0, 1});
  ASSERT_TRUE(next.ask);
  fences.answer(dealer, next.ask->round, 0, Taken{{a.id, true}});
  const auto not_taken = fences.answer(dealer, next.ask->round, 1, Taken{});
  ASSERT_EQ(not_taken.size(), 1u);
  EXPECT_EQ(not_taken[0].outcome, EpochDealer::Settled::kDealtAgain);
  EXPECT_TRUE(dealer.pull(2, 8).shards_done.empty());
}

TEST(BatchFences, WithNoShardToAskTheBatchesSettleAtOnce) {
  EpochDealer dealer(16, 1, /*max_epochs=*/1);
  BatchFences fences(2);
  const auto a = dealer.pull(1, 4);
  const FenceStart start = fences.worker_gone(dealer, 1, {});
  EXPECT_FALSE(start.ask);
  ASSERT_EQ(start.settled.size(), 1u);
  EXPECT_EQ(start.settled[0].batch, a.id);
  EXPECT_EQ(start.settled[0].outcome, EpochDealer::Settled::kDealtAgain);
  EXPECT_FALSE(start.settled[0].asked) << "no shard to ask: nothing was fenced";
  // A failed push whose silent shards are all gone: dealt again for them, the others kept.
  const auto b = dealer.pull(2, 4);
  const FenceStart failed = fences.push_failed(dealer, 2, b.id, {1}, false, {});
  ASSERT_EQ(failed.settled.size(), 1u);
  EXPECT_EQ(failed.settled[0].outcome, EpochDealer::Settled::kDealtAgain);
  EXPECT_EQ(dealer.counters().partial_pushes, 1);
  // An answer for a round that does not exist changes nothing.
  EXPECT_TRUE(fences.answer(dealer, 99, 0, Taken{}).empty());
  EXPECT_THROW(BatchFences(0), std::invalid_argument);
}

TEST(BatchFences, AWorkerGoneWhileItsFailedBatchIsFencedIsNotFencedForItTwice) {
  EpochDealer dealer(16, 1, /*max_epochs=*/1);
  BatchFences fences(1);
  const auto a = dealer.pull(1, 4);
  const auto b = dealer.pull(1, 4);
  const FenceStart failed = fences.push_failed(dealer, 1, a.id, {}, false, {0});
  ASSERT_TRUE(failed.ask);
  const FenceStart gone = fences.worker_gone(dealer, 1, {0});
  ASSERT_TRUE(gone.ask);
  EXPECT_EQ(fences.pending(), 2u);
  // The gone round settles b only; a settles with its own round.
  const auto by_gone = fences.answer(dealer, gone.ask->round, 0, Taken{{a.id, true}});
  ASSERT_EQ(by_gone.size(), 1u);
  EXPECT_EQ(by_gone[0].batch, b.id);
  const auto by_failed = fences.answer(dealer, failed.ask->round, 0, Taken{{a.id, true}});
  ASSERT_EQ(by_failed.size(), 1u);
  EXPECT_EQ(by_failed[0].batch, a.id);
  EXPECT_EQ(by_failed[0].outcome, EpochDealer::Settled::kAccepted);
}

}  // namespace
}  // namespace omnilearn::asp
