// asp::BatchFences, scripted: a batch given up is settled only after every asked shard said
// whether it took it (asp_job_simulation_test drives it, through asp::AspJob, under seeded
// faults).

#include <gtest/gtest.h>

#include <optional>
#include <span>
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
  const FenceStart start = fences.worker_gone(dealer, 1);
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
  const FenceStart start = fences.worker_gone(dealer, 1);
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

// A shard that died answers nothing; its rounds wait and are asked again of the incarnation that
// resumes it from its checkpoint, which answers for what the checkpoint holds.
TEST(BatchFences, ADeadShardsRoundsWaitAndAreAskedAgainOfItsRestart) {
  EpochDealer dealer(32, 1, /*max_epochs=*/1);
  BatchFences fences(2);
  const auto a = dealer.pull(1, 4);
  const auto b = dealer.pull(2, 4);
  const FenceStart first = fences.worker_gone(dealer, 1);
  const FenceStart second = fences.worker_gone(dealer, 2);
  ASSERT_TRUE(first.ask && second.ask);
  // Shard 0 took both and says so; shard 1 dies without answering.
  EXPECT_TRUE(fences.answer(dealer, first.ask->round, 0, Taken{{a.id, true}}).empty());
  EXPECT_TRUE(fences.answer(dealer, second.ask->round, 0, Taken{{b.id, true}}).empty());
  EXPECT_TRUE(fences.waiting_on(0).empty());
  const auto again = fences.waiting_on(1);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].round, first.ask->round);
  EXPECT_EQ(again[0].worker, 1);
  EXPECT_EQ(again[0].through, kWholeWorker);
  EXPECT_EQ(again[0].shards, (std::vector<std::int32_t>{1}));
  EXPECT_EQ(again[1].round, second.ask->round);
  EXPECT_EQ(again[1].worker, 2);
  EXPECT_EQ(fences.pending(), 2u) << "a dead shard's silence settles nothing";
  EXPECT_TRUE(fences.fencing(a.id));
  EXPECT_TRUE(fences.fencing(b.id));
  // Shard 1 took both batches; a went into its checkpoint, b came after it and was lost with
  // the restart.
  ServerCore shard(1, StalenessConfig{StalenessMode::kNone, 0, LrScaling::kNone},
                   [](double, std::span<const float>) {});
  const std::vector<float> g{1.0f};
  shard.push(1, shard.pull(), 4, g, a.id);
  const ServerCheckpoint saved = shard.checkpoint();
  shard.push(2, shard.pull(), 4, g, b.id);
  ServerCore restarted = ServerCore::resume(saved, 1, shard.config(),
                                            [](double, std::span<const float>) {});
  const auto by_a = fences.answer(dealer, again[0].round, 1,
                                  restarted.fence(again[0].worker, again[0].through));
  ASSERT_EQ(by_a.size(), 1u);
  EXPECT_EQ(by_a[0].outcome, EpochDealer::Settled::kAccepted) << "in the checkpoint it resumed";
  const auto by_b = fences.answer(dealer, again[1].round, 1,
                                  restarted.fence(again[1].worker, again[1].through));
  ASSERT_EQ(by_b.size(), 1u);
  EXPECT_EQ(by_b[0].outcome, EpochDealer::Settled::kDealtAgain) << "lost with the restart";
  EXPECT_EQ(fences.pending(), 0u);
  const auto b_again = dealer.pull(3, 4);
  EXPECT_EQ(b_again.indices, b.indices);
  EXPECT_EQ(b_again.shards_done, (std::vector<std::int32_t>{0})) << "shard 1 only";
  // A late answer of the dead incarnation changes nothing.
  EXPECT_TRUE(fences.answer(dealer, first.ask->round, 1, Taken{{a.id, true}}).empty());
  EXPECT_TRUE(fences.waiting_on(1).empty());
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

TEST(BatchFences, AFailedPushWithNoShardToAskSettlesAtOnce) {
  EpochDealer dealer(16, 1, /*max_epochs=*/1);
  BatchFences fences(2);
  // Every shard answered the push, one took it: dealt again for the other, nothing fenced.
  const auto b = dealer.pull(2, 4);
  const FenceStart failed = fences.push_failed(dealer, 2, b.id, {1}, false, {});
  EXPECT_FALSE(failed.ask);
  ASSERT_EQ(failed.settled.size(), 1u);
  EXPECT_EQ(failed.settled[0].outcome, EpochDealer::Settled::kDealtAgain);
  EXPECT_FALSE(failed.settled[0].asked) << "no shard to ask: nothing was fenced";
  EXPECT_EQ(dealer.counters().partial_pushes, 1);
  // A worker gone with nothing held is still fenced off every shard (a zombie's later pushes).
  const FenceStart gone = fences.worker_gone(dealer, 3);
  ASSERT_TRUE(gone.ask);
  EXPECT_EQ(gone.ask->shards, (std::vector<std::int32_t>{0, 1}));
  EXPECT_TRUE(fences.answer(dealer, gone.ask->round, 0, Taken{}).empty());
  EXPECT_TRUE(fences.answer(dealer, gone.ask->round, 1, Taken{}).empty()) << "no batch to settle";
  EXPECT_EQ(fences.pending(), 0u);
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
  const FenceStart gone = fences.worker_gone(dealer, 1);
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

TEST(BatchFences, ARestoredStateStillWaitsForTheSameAnswers) {
  EpochDealer dealer(8, 1, /*max_epochs=*/1);
  BatchFences fences(2);
  const auto a = dealer.pull(1, 4);
  const FenceStart start = fences.worker_gone(dealer, 1);
  ASSERT_TRUE(start.ask);
  EXPECT_TRUE(fences.answer(dealer, start.ask->round, 0, Taken{{a.id, true}}).empty());
  // The dealer's and the fences' state go through their text, as the head's store keeps them.
  EpochDealer dealer2(8, 1, 1);
  dealer2.restore_state(nlohmann::json::parse(dealer.state().dump()));
  BatchFences restored(2);
  restored.restore_state(nlohmann::json::parse(fences.state().dump()));
  EXPECT_EQ(restored.pending(), 1u);
  EXPECT_TRUE(restored.fencing(a.id));
  const auto waiting = restored.waiting_on(1);
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].round, start.ask->round);
  EXPECT_TRUE(restored.waiting_on(0).empty());  // shard 0 answered before the restart
  const auto settled = restored.answer(dealer2, start.ask->round, 1, Taken{{a.id, true}});
  ASSERT_EQ(settled.size(), 1u);
  EXPECT_EQ(settled[0].outcome, EpochDealer::Settled::kAccepted);
  EXPECT_FALSE(restored.fencing(a.id));
  // A round that waits on a shard the job does not have is refused.
  auto bad = fences.state();
  bad["rounds"][0]["waiting"] = {5};
  BatchFences other(2);
  EXPECT_THROW(other.restore_state(bad), std::invalid_argument);
}

}  // namespace
}  // namespace omnilearn::asp
