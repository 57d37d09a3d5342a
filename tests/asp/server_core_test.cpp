#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "asp/server_core.hpp"

namespace omnilearn::asp {
namespace {

// The injected optimizer: plain SGD on a shard, recording every call.
struct FakeOptimizer {
  std::vector<float> params = std::vector<float>(3, 0.0f);
  std::vector<double> scales;
  ServerCore::ApplyFn fn() {
    return [this](double scale, std::span<const float> g) {
      scales.push_back(scale);
      for (std::size_t i = 0; i < g.size(); ++i) params[i] -= static_cast<float>(scale) * g[i];
    };
  }
};

const std::vector<float> kGrad = {1.0f, 2.0f, 3.0f};

TEST(ServerCore, AScriptedInterleavingOfTwoWorkersGivesTheExpectedStaleness) {
  FakeOptimizer opt;
  ServerCore server(3, StalenessConfig{StalenessMode::kNone, 0, LrScaling::kNone}, opt.fn());
  const Version a0 = server.pull();            // A pulls v0
  const Version b0 = server.pull();            // B pulls v0
  EXPECT_EQ(server.push(0, a0, 4, kGrad).staleness, 0);  // v0 -> v1
  const Version a1 = server.pull();            // A pulls v1
  EXPECT_EQ(server.push(1, b0, 4, kGrad).staleness, 1);  // B's push from v0 at v1 -> v2
  EXPECT_EQ(server.push(0, a1, 4, kGrad).staleness, 1);  // A's push from v1 at v2 -> v3
  EXPECT_EQ(server.pull().number, 3);
  EXPECT_EQ(opt.scales.size(), 3u);
  EXPECT_FLOAT_EQ(opt.params[2], -9.0f);
  auto total = server.stats().total();
  EXPECT_EQ(total.max, 1);
  EXPECT_EQ(total.updates.at(0), 2);
  EXPECT_EQ(total.updates.at(1), 1);
}

TEST(ServerCore, TheScaleReachesApplyAndADroppedPushDoesNotMoveTheVersion) {
  FakeOptimizer opt;
  ServerCore server(3, StalenessConfig{StalenessMode::kBound, 1, LrScaling::kLinear}, opt.fn());
  server.set_batch_plan(/*global_batch=*/64, /*workers=*/4);  // B / n = 16
  const Version old = server.pull();
  auto first = server.push(0, server.pull(), 32, kGrad);
  EXPECT_EQ(first.status, PushStatus::kApplied);
  EXPECT_DOUBLE_EQ(first.scale, 2.0);
  server.push(0, server.pull(), 16, kGrad);
  auto late = server.push(1, old, 16, kGrad);  // staleness 2 > 1
  EXPECT_EQ(late.status, PushStatus::kDropped);
  EXPECT_EQ(late.staleness, 2);
  EXPECT_EQ(late.version.number, 2);
  EXPECT_EQ(opt.scales.size(), 2u);
  EXPECT_EQ(server.checkpoint().dropped, 1);
  EXPECT_EQ(server.stats().total().dropped, 1);
}

TEST(ServerCore, InverseScalingSeesTheStaleness) {
  FakeOptimizer opt;
  ServerCore server(3, StalenessConfig{StalenessMode::kInverse, 0, LrScaling::kNone}, opt.fn());
  const Version v0 = server.pull();
  server.push(0, v0, 1, kGrad);
  server.push(0, server.pull(), 1, kGrad);
  EXPECT_DOUBLE_EQ(server.push(1, v0, 1, kGrad).scale, 1.0 / 3);
}

TEST(ServerCore, PushesNamingVersionsNeverIssuedAreRejected) {
  FakeOptimizer opt;
  ServerCore server(3, StalenessConfig{StalenessMode::kNone, 0, LrScaling::kNone}, opt.fn());
  EXPECT_EQ(server.push(0, Version{0, 1}, 1, kGrad).status, PushStatus::kRejected);
  EXPECT_EQ(server.push(0, Version{1, 0}, 1, kGrad).status, PushStatus::kRejected);
  EXPECT_EQ(server.checkpoint().rejected, 2);
  EXPECT_EQ(server.pull().number, 0);
  EXPECT_TRUE(opt.scales.empty());
}

TEST(ServerCore, RejectsBadArgumentsAndLinearScalingWithoutAPlan) {
  FakeOptimizer opt;
  EXPECT_THROW(ServerCore(0, StalenessConfig{}, opt.fn()), std::invalid_argument);
  EXPECT_THROW(ServerCore(3, StalenessConfig{StalenessMode::kBound, 0, LrScaling::kNone}, opt.fn()),
               std::invalid_argument);
  EXPECT_THROW(ServerCore(3, StalenessConfig{}, nullptr), std::invalid_argument);
  ServerCore server(3, StalenessConfig{}, opt.fn());  // linear by default
  EXPECT_THROW(server.push(0, server.pull(), 4, kGrad), std::logic_error);
  server.set_batch_plan(8, 2);
  EXPECT_THROW(server.push(0, server.pull(), 4, std::vector<float>(2)), std::invalid_argument);
  EXPECT_THROW(server.push(0, server.pull(), 0, kGrad), std::invalid_argument);
  EXPECT_THROW(server.set_batch_plan(0, 2), std::invalid_argument);
  EXPECT_EQ(server.push(0, server.pull(), 4, kGrad).status, PushStatus::kApplied);
}

TEST(ServerCore, AnApplyThatThrowsLeavesTheVersionAndCounters) {
  ServerCore server(3, StalenessConfig{StalenessMode::kNone, 0, LrScaling::kNone},
                    [](double, std::span<const float>) { throw std::runtime_error("oom"); });
  EXPECT_THROW(server.push(0, server.pull(), 1, kGrad), std::runtime_error);
  EXPECT_EQ(server.pull().number, 0);
  EXPECT_EQ(server.checkpoint().pushes, 0);
}

TEST(ServerCore, ARestartedServerResumesFromItsCheckpointAndCountsTheLostUpdates) {
  FakeOptimizer opt;
  const StalenessConfig none{StalenessMode::kNone, 0, LrScaling::kNone};
  ServerCore server(3, none, opt.fn());
  for (int i = 0; i < 5; ++i) server.push(i % 2, server.pull(), 1, kGrad);
  const ServerCheckpoint saved = server.checkpoint();  // at v5
  EXPECT_EQ(saved.version, 5);
  for (int i = 0; i < 3; ++i) server.push(0, server.pull(), 1, kGrad);  // v8, then it dies
  const Version late = server.pull();  // a worker pulled v8 before the crash

  FakeOptimizer opt2;
  ServerCore restarted = ServerCore::resume(saved, 3, none, opt2.fn());
  EXPECT_EQ(restarted.pull(), (Version{1, 5}));
  EXPECT_EQ(restarted.updates_lost(), 0);  // nothing heard of the lost line yet
  restarted.note_version_seen(7);
  EXPECT_EQ(restarted.updates_lost(), 2);
  restarted.push(1, restarted.pull(), 1, kGrad);  // v6 in incarnation 1
  auto from_lost = restarted.push(0, late, 1, kGrad);
  EXPECT_EQ(from_lost.status, PushStatus::kApplied);
  EXPECT_EQ(from_lost.staleness, 1);  // counted from the checkpoint's v5; now at v6
  EXPECT_EQ(restarted.updates_lost(), 3);  // it had reached v8
  const auto after = restarted.checkpoint();
  EXPECT_EQ(after.incarnation, 1);
  EXPECT_EQ(after.version, 7);
  EXPECT_EQ(after.applied, 7);
  EXPECT_EQ(after.updates.at(0), 4);  // 3 before the checkpoint + the late one
  EXPECT_EQ(after.updates.at(1), 3);
}

TEST(ServerCore, CheckpointsRoundTripAndDecodingIsTotal) {
  ServerCheckpoint c{2, 40, 45, 40, 5, 1, {{0, 30}, {7, 10}}, {}};
  c.taken[0] = {{3, true}, {8, false}};
  c.taken[7] = {{4, true}};
  const auto bytes = encode_checkpoint(c);
  EXPECT_EQ(decode_checkpoint(bytes), c);
  EXPECT_FALSE(decode_checkpoint(std::span(bytes).first(bytes.size() - 1)));
  auto extra = bytes;
  extra.push_back(0);
  EXPECT_FALSE(decode_checkpoint(extra));
  auto bad_magic = bytes;
  bad_magic[0] = 'X';
  EXPECT_FALSE(decode_checkpoint(bad_magic));
  auto bad_counts = c;
  bad_counts.pushes = 44;  // applied + dropped != pushes
  EXPECT_FALSE(decode_checkpoint(encode_checkpoint(bad_counts)));
  auto no_batch = c;
  no_batch.taken[7].push_back({0, true});  // batch ids start at 1
  EXPECT_FALSE(decode_checkpoint(encode_checkpoint(no_batch)));
  auto flag = bytes;
  flag[flag.size() - 8] = 2;  // the last entry's applied flag: 0 or 1
  EXPECT_FALSE(decode_checkpoint(flag));
  auto twice = c;
  twice.taken[7].push_back({4, false});  // a batch is taken once
  EXPECT_FALSE(decode_checkpoint(encode_checkpoint(twice)));
  auto empty = c;
  empty.taken[9] = {};  // never written: a worker is recorded with its first batch
  EXPECT_FALSE(decode_checkpoint(encode_checkpoint(empty)));
  auto more_applied = c;
  more_applied.updates[7] = 0;  // worker 7's applied batch is not among its updates
  EXPECT_FALSE(decode_checkpoint(encode_checkpoint(more_applied)));
  auto overflow = c;
  overflow.dropped = std::numeric_limits<std::int64_t>::max();  // applied + dropped overflows
  EXPECT_FALSE(decode_checkpoint(encode_checkpoint(overflow)));
  auto huge = encode_checkpoint(ServerCheckpoint{});
  huge[huge.size() - 1] = 0x7f;  // a count of taken workers far beyond the bytes
  EXPECT_FALSE(decode_checkpoint(huge));
  EXPECT_FALSE(decode_checkpoint({}));
  // Every truncation of a valid checkpoint is refused, never a crash.
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_checkpoint(std::span(bytes).first(n))) << n;
  }
}

// Checkpoints written before taken batches were kept ("OLASPCK1") still resume, with none.
TEST(ServerCore, AVersionOneCheckpointDecodesWithNoTakenBatches) {
  std::vector<std::uint8_t> v1 = {'O', 'L', 'A', 'S', 'P', 'C', 'K', '1'};
  for (std::int64_t word : {2, 40, 45, 40, 5, 1, 1, 7, 40}) {  // counters, 1 pair: worker 7, 40
    for (int i = 0; i < 8; ++i) v1.push_back(static_cast<std::uint8_t>(word >> (8 * i)));
  }
  const auto c = decode_checkpoint(v1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->version, 40);
  EXPECT_EQ(c->updates.at(7), 40);
  EXPECT_TRUE(c->taken.empty());
  v1.push_back(0);
  EXPECT_FALSE(decode_checkpoint(v1));
}

// A shard resumed from a checkpoint answers a fence for the batches the checkpoint holds, and
// not for those its dead incarnation took after it (lost with the restart).
TEST(ServerCore, ARestartedShardAnswersFencesForTheBatchesItsCheckpointHolds) {
  FakeOptimizer opt;
  const StalenessConfig none{StalenessMode::kNone, 0, LrScaling::kNone};
  ServerCore server(3, none, opt.fn());
  server.push(4, server.pull(), 1, kGrad, 1);
  server.push(4, server.pull(), 1, kGrad, 2);
  const auto bytes = encode_checkpoint(server.checkpoint());
  server.push(4, server.pull(), 1, kGrad, 3);  // lost with the restart
  const auto saved = decode_checkpoint(bytes);
  ASSERT_TRUE(saved);
  FakeOptimizer opt2;
  ServerCore restarted = ServerCore::resume(*saved, 3, none, opt2.fn());
  EXPECT_EQ(restarted.fence(4, kWholeWorker), (std::vector<TakenBatch>{{1, true}, {2, true}}));
  EXPECT_EQ(restarted.push(4, restarted.pull(), 1, kGrad, 3).status, PushStatus::kFenced);
  // What it takes next joins the record it resumed with.
  restarted.push(5, restarted.pull(), 1, kGrad, 9);
  EXPECT_EQ(restarted.taken().at(5).size(), 1u);
  EXPECT_EQ(restarted.checkpoint().taken.at(4).size(), 2u);
}

TEST(ServerCore, AFencedBatchIsRefusedAndTheFenceSaysWhichOfItsBatchesWereTaken) {
  FakeOptimizer opt;
  ServerCore server(3, StalenessConfig{StalenessMode::kBound, 1, LrScaling::kNone}, opt.fn());
  const Version v0 = server.pull();
  EXPECT_EQ(server.push(7, v0, 4, kGrad, /*batch_id=*/3).status, PushStatus::kApplied);
  EXPECT_EQ(server.push(8, server.pull(), 4, kGrad, 6).status, PushStatus::kApplied);
  EXPECT_EQ(server.push(7, v0, 4, kGrad, 5).status, PushStatus::kDropped);  // staleness 2 > 1
  // Through batch 5: batches 3 (applied) and 5 (dropped) were taken; worker 8's are not named.
  const auto taken = server.fence(7, 5);
  EXPECT_EQ(taken, (std::vector<TakenBatch>{{3, true}, {5, false}}));
  EXPECT_TRUE(server.fenced(7, 4));
  EXPECT_FALSE(server.fenced(7, 9));
  EXPECT_FALSE(server.fenced(7, 0));  // a push naming no batch: only a whole-worker fence stops it
  EXPECT_FALSE(server.fenced(8, 4));
  // A late push of a fenced batch changes nothing; a later batch of the worker goes through.
  const auto version = server.pull();
  const auto refused = server.push(7, server.pull(), 4, kGrad, 4);
  EXPECT_EQ(refused.status, PushStatus::kFenced);
  EXPECT_EQ(refused.version, version);
  EXPECT_EQ(server.pull(), version);
  EXPECT_EQ(server.checkpoint().pushes, 3);
  EXPECT_EQ(server.fenced_pushes(), 1);
  EXPECT_EQ(server.push(7, server.pull(), 4, kGrad, 9).status, PushStatus::kApplied);
  // A lower fence does not lower it; a whole-worker fence stops everything, id 0 included.
  server.fence(7, 1);
  EXPECT_TRUE(server.fenced(7, 5));
  const auto all = server.fence(7, kWholeWorker);
  EXPECT_EQ(all.size(), 3u);  // 3, 5 and 9
  EXPECT_EQ(server.push(7, server.pull(), 4, kGrad, 0).status, PushStatus::kFenced);
  EXPECT_EQ(server.push(7, server.pull(), 4, kGrad, 10).status, PushStatus::kFenced);
  EXPECT_EQ(server.fenced_pushes(), 3);
  EXPECT_EQ(opt.scales.size(), 3u);
}

// Workers come and go over a long job: the record (and so every checkpoint) keeps the newest
// kTakenWorkersKept of them, forgetting the one whose newest push is oldest.
TEST(ServerCore, TheTakenRecordKeepsTheWorkersThatPushedMostRecently) {
  FakeOptimizer opt;
  ServerCore server(3, StalenessConfig{StalenessMode::kNone, 0, LrScaling::kNone}, opt.fn());
  std::uint64_t batch = 1;
  server.push(0, server.pull(), 1, kGrad, batch++);  // worker 0 first ...
  for (WorkerId w = 1; w < static_cast<WorkerId>(ServerCore::kTakenWorkersKept); ++w) {
    server.push(w, server.pull(), 1, kGrad, batch++);
  }
  server.push(0, server.pull(), 1, kGrad, batch++);  // ... and again, so 1 is now the oldest
  EXPECT_EQ(server.taken().size(), ServerCore::kTakenWorkersKept);
  server.push(9999, server.pull(), 1, kGrad, batch++);
  EXPECT_EQ(server.taken().size(), ServerCore::kTakenWorkersKept);
  EXPECT_EQ(server.taken().count(1), 0u);
  EXPECT_EQ(server.taken().count(0), 1u);
  EXPECT_EQ(server.taken().count(9999), 1u);
  EXPECT_TRUE(server.fence(1, kWholeWorker).empty());
  // The bounded record round-trips.
  EXPECT_EQ(decode_checkpoint(encode_checkpoint(server.checkpoint())), server.checkpoint());
}

TEST(ServerCore, AFenceReportsOnlyTheNewestTakenBatchesItKeeps) {
  FakeOptimizer opt;
  ServerCore server(3, StalenessConfig{StalenessMode::kNone, 0, LrScaling::kNone}, opt.fn());
  for (std::uint64_t b = 1; b <= ServerCore::kTakenKept + 4; ++b) {
    server.push(2, server.pull(), 1, kGrad, b);
  }
  const auto taken = server.fence(2, kWholeWorker);
  ASSERT_EQ(taken.size(), ServerCore::kTakenKept);
  EXPECT_EQ(taken.front().batch, 5u);
  EXPECT_EQ(taken.back().batch, ServerCore::kTakenKept + 4);
}

}  // namespace
}  // namespace omnilearn::asp
