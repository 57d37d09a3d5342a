// asp::AspJob, scripted: placement, the hand-over of a drained server, fencing when a shard is
// silent or dies, the choice of the finishing worker and the bounds that fail a stalled job,
// input by input with time injected; a snapshot restored into a new machine, and a deal whose
// answer was lost.

#include "asp/asp_job.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace omnilearn::asp {
namespace {

AspJobOptions options(std::int32_t servers, std::int32_t workers) {
  AspJobOptions o;
  o.job_id = "j";
  o.servers = servers;
  o.min_workers = 1;
  o.max_workers = workers;
  o.steps = 4;
  o.global_batch = 8;
  o.controller.global_batch = 8;
  return o;
}

DealAsk asking(const std::string& trainer) {
  DealAsk a;
  a.trainer = trainer;
  return a;
}

template <class T>
std::vector<T> of(const std::vector<AspCommand>& commands) {
  std::vector<T> out;
  for (const auto& c : commands) {
    if (const T* t = std::get_if<T>(&c)) out.push_back(*t);
  }
  return out;
}

// `worker`'s next ask after pushing `batch` to two shards: shard 0 took it, shard 1 did not
// answer within the worker's bound.
DealAsk pushed_to_shard_0_only(const std::string& worker, std::uint64_t batch) {
  DealAsk failed = asking(worker);
  failed.failed_batch = batch;
  failed.incarnations = {0, -1};
  failed.versions = {1, 0};
  failed.unanswered = {-1, 0};
  return failed;
}

// `probe` of shard `shard`'s server goes unanswered at `now`: the server is told to stop as
// hung and the shard restarts as incarnation 1. Returns the commands that followed.
std::vector<AspCommand> unanswered_ping_restarts(AspJob& job, const ProbeCommand& probe,
                                                 Millis now, std::size_t shard) {
  job.probe_answered(probe, false, "no reply within 3000 ms", now);
  auto commands = job.take_commands();
  const auto stops = of<StopCommand>(commands);
  EXPECT_EQ(stops.size(), 1u);
  for (const auto& stop : stops) {
    EXPECT_EQ(stop.trainer, probe.server);
    EXPECT_EQ(stop.reason.rfind("hung:", 0), 0u) << stop.reason;
  }
  EXPECT_EQ(of<SpawnCommand>(commands).size(), 1u);
  EXPECT_EQ(job.shards()[shard].incarnation, 1);
  return commands;
}

// A job with every trainer started: servers listening, workers said hello.
struct Started {
  AspJob job;
  std::vector<std::string> servers, workers;
  explicit Started(AspJobOptions o, int nodes) : job(std::move(o)) {
    job.start(0);
    std::vector<AspJob::NodeView> views;
    for (int n = 0; n < nodes; ++n)
      views.push_back({"id" + std::to_string(n), "n" + std::to_string(n), false});
    job.nodes(views, 0);
    for (const auto& spawn : of<SpawnCommand>(job.take_commands())) {
      const HelloAnswer a = job.hello(spawn.trainer, 10);
      EXPECT_TRUE(a.accepted);
      if (a.server) {
        servers.push_back(spawn.trainer);
        job.server_ready(
            ServerReady{spawn.trainer, a.shard, "tcp://" + spawn.trainer, 0, 0, 10, 100, "initial"},
            20);
      } else {
        workers.push_back(spawn.trainer);
      }
    }
    job.take_commands();
  }
};

TEST(AspJob, PlacesServersRoundRobinThenSlotsOfWorkers) {
  AspJob job(options(3, 4));
  job.start(0);
  job.nodes({{"a", "na", false}, {"b", "nb", false}, {"c", "nc", true}}, 0);
  const auto spawns = of<SpawnCommand>(job.take_commands());
  ASSERT_EQ(spawns.size(), 5u);  // 3 servers, then one worker per live node not drained
  EXPECT_EQ(spawns[0].node, "a");
  EXPECT_EQ(spawns[1].node, "b");
  EXPECT_EQ(spawns[2].node, "a");
  EXPECT_EQ(spawns[0].trainer, "j-na-s0");
  EXPECT_EQ(spawns[3].trainer, "j-na-t3");
  EXPECT_EQ(spawns[4].trainer, "j-nb-t4");
}

TEST(AspJob, ADrainedServerHandsOverThenItsRestartResumesAtItsLastVersion) {
  Started s(options(1, 2), 2);
  ASSERT_EQ(s.servers.size(), 1u);
  const std::string server = s.servers[0];
  EXPECT_EQ(s.job.deal(asking(s.workers[0]), 30).action, DealAnswer::Action::kBatch);
  EXPECT_EQ(s.job.drain("id0", 40), 2);  // the server and a worker on node 0
  const auto hand = of<HandOverCommand>(s.job.take_commands());
  ASSERT_EQ(hand.size(), 1u);
  EXPECT_EQ(hand[0].server, server);
  // Deals wait while the shard moves: every push to it would be refused.
  EXPECT_EQ(s.job.deal(asking(s.workers[1]), 50).action, DealAnswer::Action::kWait);
  HandOverReply reply;
  reply.ok = true;
  reply.version = 17;
  reply.checkpoint = "shard0-at-17";
  s.job.handed_over(hand[0], reply, "", 60);
  const auto after = s.job.take_commands();
  const auto stops = of<StopCommand>(after);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].trainer, server);
  const auto spawns = of<SpawnCommand>(after);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(spawns[0].node, "id1");  // not on the drained node
  const HelloAnswer a = s.job.hello(spawns[0].trainer, 70);
  EXPECT_TRUE(a.server);
  EXPECT_EQ(a.incarnation, 1);
  EXPECT_EQ(a.resume_checkpoint, "shard0-at-17");
  EXPECT_EQ(a.resume_version, 17);
}

// A server moved off a drained node was asked to move: no death. A job that runs for months on
// a cluster drained for maintenance now and then must not fail for it. Deaths still count:
// the ninth (max_server_restarts = 8) fails the job.
TEST(AspJob, DrainsDoNotCountAsServerDeaths) {
  Started s(options(1, 2), 2);
  ASSERT_EQ(s.servers.size(), 1u);
  std::string server = s.servers[0];
  std::string node = "id0";  // where the server runs (round robin: the first node)
  Millis now = 100;
  const auto serve = [&](const std::vector<AspCommand>& commands) {
    const auto spawns = of<SpawnCommand>(commands);
    for (const auto& spawn : spawns) {
      const HelloAnswer a = s.job.hello(spawn.trainer, now);
      if (!a.server) continue;
      server = spawn.trainer;
      node = spawn.node;
      s.job.server_ready(ServerReady{server, a.shard, "tcp://" + server, a.incarnation,
                                     std::max<std::int64_t>(0, a.resume_version), 10, 100,
                                     a.resume_checkpoint.empty() ? "initial" : "resumed"},
                         now);
    }
  };
  for (int move = 0; move < 12; ++move) {
    const std::string from = node;
    s.job.drain(from, now += 10);
    const auto hand = of<HandOverCommand>(s.job.take_commands());
    ASSERT_EQ(hand.size(), 1u) << "move " << move;
    HandOverReply reply;
    reply.ok = true;
    reply.version = move;
    reply.checkpoint = "at-" + std::to_string(move);
    s.job.handed_over(hand[0], reply, "", now += 10);
    serve(s.job.take_commands());
    s.job.node_drained(from, from == "id0" ? "n0" : "n1", true, false, now += 10);
    s.job.take_commands();
    ASSERT_FALSE(s.job.finished()) << "move " << move << ": " << s.job.reason();
    ASSERT_NE(node, from) << "move " << move;
  }
  for (int death = 1; death <= 9; ++death) {
    s.job.trainer_exited(server, 137, false, "killed by signal 9", "", now += 10);
    const auto commands = s.job.take_commands();
    if (death < 9) {
      ASSERT_FALSE(s.job.finished()) << "death " << death << ": " << s.job.reason();
      serve(commands);
    }
  }
  ASSERT_TRUE(s.job.finished());
  EXPECT_EQ(s.job.state(), "failed");
  EXPECT_NE(s.job.reason().find("died 9 times"), std::string::npos) << s.job.reason();
}

TEST(AspJob, ASilentLiveShardIsAskedAgainAndADeadOnesRoundGoesToItsRestart) {
  Started s(options(2, 2), 2);
  const DealAnswer batch = s.job.deal(asking(s.workers[0]), 30);
  ASSERT_EQ(batch.action, DealAnswer::Action::kBatch);
  s.job.deal(pushed_to_shard_0_only(s.workers[0], batch.batch_id), 40);
  auto fences = of<FenceCommand>(s.job.take_commands());
  ASSERT_EQ(fences.size(), 1u);
  EXPECT_EQ(fences[0].shard, 1);
  ASSERT_TRUE(fences[0].round);
  // Silent past the bound while alive: asked again, not taken for "not taken".
  s.job.fence_answered(fences[0], std::nullopt, "timed out", 5040);
  auto again = of<FenceCommand>(s.job.take_commands());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].round, fences[0].round);
  // It dies: its restart is asked the same round once it listens, after the gone workers' fences.
  s.job.trainer_exited(again[0].server, 9, false, "killed", "", 5100);
  const auto spawns = of<SpawnCommand>(s.job.take_commands());
  ASSERT_EQ(spawns.size(), 1u);
  const HelloAnswer a = s.job.hello(spawns[0].trainer, 5200);
  s.job.server_ready(
      ServerReady{spawns[0].trainer, 1, "tcp://new", a.incarnation, 0, 10, 100, "initial"}, 5300);
  auto restart = of<FenceCommand>(s.job.take_commands());
  ASSERT_EQ(restart.size(), 1u);
  EXPECT_EQ(restart[0].server, spawns[0].trainer);
  EXPECT_EQ(restart[0].incarnation, 1);
  EXPECT_EQ(restart[0].round, fences[0].round);
  // Its checkpoint holds the batch: every shard took it, so the push counts.
  FenceReply taken;
  taken.ok = true;
  taken.incarnation = 1;
  taken.version = 1;
  taken.taken.push_back(TakenBatch{batch.batch_id, true});
  s.job.fence_answered(restart[0], taken, "", 5400);
  EXPECT_EQ(s.job.updates(), 1);
}

// A live shard silent past a fence's bound has its process pinged (once while a ping is out).
// Answered, it is slow: nothing changes. Unanswered, it is hung while its agent still sends
// heartbeats: told to stop, and its shard restarts as incarnation + 1, whose listening is when
// the round is asked again.
TEST(AspJob, ASilentShardWhoseProcessDoesNotAnswerAPingIsRestartedAsHung) {
  Started s(options(2, 2), 2);
  const DealAnswer batch = s.job.deal(asking(s.workers[0]), 30);
  ASSERT_EQ(batch.action, DealAnswer::Action::kBatch);
  s.job.deal(pushed_to_shard_0_only(s.workers[0], batch.batch_id), 40);
  auto fences = of<FenceCommand>(s.job.take_commands());
  ASSERT_EQ(fences.size(), 1u);
  s.job.fence_answered(fences[0], std::nullopt, "timed out", 5040);
  auto commands = s.job.take_commands();
  auto probes = of<ProbeCommand>(commands);
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0].server, fences[0].server);
  EXPECT_EQ(probes[0].incarnation, 0);
  auto again = of<FenceCommand>(commands);
  ASSERT_EQ(again.size(), 1u);
  // Silent again while the ping is out: asked again, not pinged twice.
  s.job.fence_answered(again[0], std::nullopt, "timed out", 7000);
  commands = s.job.take_commands();
  EXPECT_TRUE(of<ProbeCommand>(commands).empty());
  again = of<FenceCommand>(commands);
  ASSERT_EQ(again.size(), 1u);

  // The ping answered: slow, not hung.
  s.job.probe_answered(probes[0], true, "", 7100);
  EXPECT_TRUE(s.job.take_commands().empty());
  EXPECT_EQ(s.job.shards()[1].incarnation, 0);

  // Silent once more, and this time the ping goes unanswered.
  s.job.fence_answered(again[0], std::nullopt, "timed out", 12000);
  probes = of<ProbeCommand>(s.job.take_commands());
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0].server, fences[0].server);
  const auto spawns = of<SpawnCommand>(unanswered_ping_restarts(s.job, probes[0], 15000, 1));
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_FALSE(s.job.finished());
  // A late answer about the old incarnation changes nothing.
  s.job.probe_answered(probes[0], false, "no reply", 15100);
  EXPECT_TRUE(s.job.take_commands().empty());
  // Its restart is asked the round once it listens.
  const HelloAnswer a = s.job.hello(spawns[0].trainer, 15200);
  EXPECT_EQ(a.incarnation, 1);
  s.job.server_ready(
      ServerReady{spawns[0].trainer, 1, "tcp://new", a.incarnation, 0, 10, 100, "initial"}, 15300);
  const auto restart = of<FenceCommand>(s.job.take_commands());
  ASSERT_EQ(restart.size(), 1u);
  EXPECT_EQ(restart[0].round, fences[0].round);
}

// A server hung between a worker's push and its next pull: the push was answered, so nothing
// is fenced, and the next pull gets no reply. The worker abandons that batch before pushing and
// names the silent shard in its next ask; the server's process is pinged once while a ping is
// out, restarted when the ping goes unanswered, and the abandoned batch is dealt again.
TEST(AspJob, APullThatGotNoReplyHasItsServerPingedAndRestartedIfHung) {
  Started s(options(2, 2), 2);
  const DealAnswer batch = s.job.deal(asking(s.workers[0]), 30);
  ASSERT_EQ(batch.action, DealAnswer::Action::kBatch);
  DealAsk abandoned = asking(s.workers[0]);
  abandoned.failed_batch = batch.batch_id;
  abandoned.incarnations = {-1, -1};
  abandoned.unanswered = {-1, -1};
  abandoned.unreachable = {1};
  const DealAnswer again = s.job.deal(abandoned, 5040);
  auto commands = s.job.take_commands();
  EXPECT_TRUE(of<FenceCommand>(commands).empty()) << "nothing was pushed: nothing to fence";
  auto probes = of<ProbeCommand>(commands);
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0].server, s.job.shards()[1].trainer);
  EXPECT_EQ(probes[0].incarnation, 0);
  ASSERT_EQ(again.action, DealAnswer::Action::kBatch);
  EXPECT_EQ(again.indices, batch.indices) << "the abandoned batch is dealt again";

  // The other worker's pull fails too while the ping is out: not pinged twice.
  DealAsk also = asking(s.workers[1]);
  also.unreachable = {1};
  s.job.deal(also, 5100);
  EXPECT_TRUE(of<ProbeCommand>(s.job.take_commands()).empty());

  ASSERT_EQ(of<SpawnCommand>(unanswered_ping_restarts(s.job, probes[0], 8040, 1)).size(), 1u);

  // A report naming a shard that is down (its restart not yet listening) pings nobody.
  DealAsk late = asking(s.workers[1]);
  late.unreachable = {1};
  s.job.deal(late, 8100);
  EXPECT_TRUE(of<ProbeCommand>(s.job.take_commands()).empty());
}

TEST(AspJob, TheFirstWorkerToAskOnceTrainingIsDoneFinishesAndAnotherTakesOverIfItGoes) {
  AspJobOptions o = options(1, 2);
  o.steps = 1;
  Started s(o, 2);
  const DealAnswer batch = s.job.deal(asking(s.workers[0]), 30);
  ASSERT_EQ(batch.action, DealAnswer::Action::kBatch);
  DealAsk pushed = asking(s.workers[0]);
  pushed.pushed_batch = batch.batch_id;
  pushed.applied = true;
  pushed.incarnations = {0};
  pushed.versions = {1};
  EXPECT_EQ(s.job.deal(pushed, 40).action, DealAnswer::Action::kFinish);
  EXPECT_EQ(s.job.deal(asking(s.workers[1]), 50).action, DealAnswer::Action::kWait);
  s.job.trainer_exited(s.workers[0], 9, false, "killed", "", 60);
  s.job.take_commands();
  EXPECT_EQ(s.job.deal(asking(s.workers[1]), 70).action, DealAnswer::Action::kFinish);
  s.job.finished(FinishReport{s.workers[0], true, "", 0.9, 0.1, "late.pt"}, 80);
  EXPECT_FALSE(s.job.finished());  // not the finisher any more
  s.job.finished(FinishReport{s.workers[1], true, "", 0.9, 0.1, "final.pt"}, 90);
  EXPECT_EQ(s.job.state(), "succeeded");
  EXPECT_EQ(s.job.final_checkpoint(), "final.pt");
}

TEST(AspJob, NoUpdateForTheSpawnTimeoutPlusTheGracePeriodFailsTheJob) {
  AspJobOptions o = options(1, 1);
  o.spawn_timeout = 1000;
  o.grace_period = 500;
  Started s(o, 1);
  s.job.tick(1400);
  EXPECT_FALSE(s.job.finished());
  s.job.tick(1600);
  EXPECT_EQ(s.job.state(), "failed");
  EXPECT_EQ(s.job.reason(), "no update for 2 s");
  // Every trainer is told to stop, then the job ends.
  const auto commands = s.job.take_commands();
  EXPECT_EQ(of<StopCommand>(commands).size(), 2u);
  ASSERT_EQ(of<FinishCommand>(commands).size(), 1u);
}

TEST(AspJob, FewerThanMinWorkersForTheGracePeriodFailsTheJob) {
  AspJobOptions o = options(1, 1);
  o.spawn_timeout = 100000;
  o.grace_period = 500;
  Started s(o, 1);
  ASSERT_EQ(s.job.state(), "running");
  s.job.trainer_exited(s.workers[0], 9, false, "killed", "", 100);
  EXPECT_EQ(of<SpawnCommand>(s.job.take_commands()).size(), 1u);  // its replacement
  s.job.tick(200);
  s.job.tick(650);
  EXPECT_FALSE(s.job.finished());
  s.job.tick(750);
  EXPECT_EQ(s.job.state(), "failed");
  EXPECT_EQ(s.job.reason(), "fewer than min_workers = 1 workers for more than 0.5 s");
}

TEST(AspJob, ADealIsWrittenDownBeforeItsAnswerAndARestoredMachineDealsOnTheSame) {
  AspJobOptions o = options(2, 2);
  o.steps = 100;
  Started s(o, 2);
  const DealAnswer first = s.job.deal(asking(s.workers[0]), 30);
  ASSERT_EQ(first.action, DealAnswer::Action::kBatch);
  const auto commands = s.job.take_commands();
  ASSERT_FALSE(commands.empty());
  EXPECT_TRUE(std::holds_alternative<PersistCommand>(commands.front()));
  // Worker 0's push reached shard 0 only; shard 1 did not answer: a fence round opens.
  DealAsk failed = asking(s.workers[0]);
  failed.failed_batch = first.batch_id;
  failed.incarnations = {0, -1};
  failed.versions = {1, 0};
  failed.unanswered = {-1, 0};
  s.job.deal(failed, 40);
  const auto fences = of<FenceCommand>(s.job.take_commands());
  ASSERT_EQ(fences.size(), 1u);
  ASSERT_TRUE(fences[0].round);
  const nlohmann::json snapshot = nlohmann::json::parse(s.job.snapshot(50).dump());

  AspJob restored(o);
  restored.restore(snapshot, 7);
  const auto again = of<FenceCommand>(restored.take_commands());
  // The gone-worker fences (none here) and the open round, asked of the same incarnation.
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].round, fences[0].round);
  EXPECT_EQ(again[0].shard, 1);
  EXPECT_EQ(again[0].server, fences[0].server);
  // The fence finds the push taken: every shard took it.
  FenceReply taken;
  taken.ok = true;
  taken.taken.push_back(TakenBatch{first.batch_id, true});
  restored.fence_answered(again[0], taken, "", 20);
  EXPECT_EQ(restored.updates(), 1);
  // Both machines deal the same next batch to worker 1.
  s.job.fence_answered(fences[0], taken, "", 60);
  const DealAnswer next = s.job.deal(asking(s.workers[1]), 70);
  const DealAnswer next_restored = restored.deal(asking(s.workers[1]), 30);
  ASSERT_EQ(next_restored.action, DealAnswer::Action::kBatch);
  EXPECT_EQ(next_restored.batch_id, next.batch_id);
  EXPECT_EQ(next_restored.indices, next.indices);
  EXPECT_EQ(next_restored.servers, next.servers);
}

TEST(AspJob, ABatchWhoseAnswerWasLostIsDealtAgainWhenItsWorkerAsksWithoutIt) {
  AspJobOptions o = options(1, 1);
  o.steps = 100;
  Started s(o, 1);
  const DealAnswer lost = s.job.deal(asking(s.workers[0]), 30);
  ASSERT_EQ(lost.action, DealAnswer::Action::kBatch);
  s.job.take_commands();
  // The worker never got it and asks again with nothing to report.
  const DealAnswer next = s.job.deal(asking(s.workers[0]), 40);
  ASSERT_EQ(next.action, DealAnswer::Action::kBatch);
  EXPECT_NE(next.batch_id, lost.batch_id);
  EXPECT_EQ(next.indices, lost.indices);  // the same samples, dealt again first
  ASSERT_NE(s.job.dealer(), nullptr);
  EXPECT_EQ(s.job.dealer()->outstanding_batches(1), 1);
}

// An agent sends a trainer's exit again to a head that restarted, not knowing whether the old
// head wrote it down: the job records it once, before and after a restore.
TEST(AspJob, AnExitReportedAgainIsRecordedOnceAcrossARestore) {
  AspJobOptions o = options(1, 2);
  o.steps = 100;
  Started s(o, 2);
  auto exits = [](const std::vector<AspCommand>& commands) {
    int n = 0;
    for (const auto& e : of<EventCommand>(commands)) n += e.event.at("event") == "trainer_exited";
    return n;
  };
  s.job.trainer_exited(s.workers[0], 9, false, "killed", "", 60);
  auto commands = s.job.take_commands();
  EXPECT_EQ(exits(commands), 1);
  EXPECT_EQ(of<SpawnCommand>(commands).size(), 1u);  // its replacement
  s.job.trainer_exited(s.workers[0], 9, false, "killed", "", 70);
  commands = s.job.take_commands();
  EXPECT_EQ(exits(commands), 0);
  EXPECT_TRUE(of<SpawnCommand>(commands).empty());

  AspJob restored(o);
  restored.restore(nlohmann::json::parse(s.job.snapshot(80).dump()), 90);
  restored.take_commands();
  restored.trainer_exited(s.workers[0], 9, false, "killed", "", 100);
  commands = restored.take_commands();
  EXPECT_EQ(exits(commands), 0);
  EXPECT_TRUE(of<SpawnCommand>(commands).empty());
  restored.trainer_exited(s.workers[1], 9, false, "killed", "", 110);
  EXPECT_EQ(exits(restored.take_commands()), 1);
}

TEST(AspJob, ASnapshotThatCannotBeReadChangesNothing) {
  AspJobOptions o = options(1, 1);
  o.steps = 100;
  Started s(o, 1);
  nlohmann::json snapshot = s.job.snapshot(30);
  snapshot["shards"] = nlohmann::json::array();  // the job has one shard
  AspJob restored(o);
  EXPECT_THROW(restored.restore(snapshot, 0), std::invalid_argument);
  snapshot.erase("dealer");
  EXPECT_THROW(s.job.restore(snapshot, 40), std::invalid_argument);
  EXPECT_EQ(s.job.deal(asking(s.workers[0]), 50).action, DealAnswer::Action::kBatch);
}

}  // namespace
}  // namespace omnilearn::asp
