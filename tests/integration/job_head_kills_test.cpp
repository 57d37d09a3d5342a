// kill -9 of the head at twenty random moments of one three-worker job, each time started again
// 0.2-5 s later on the same port and state: while a generation forms after the previous
// restart, mid-step, around a periodic checkpoint, right after `omnilearn drain` of a member's
// node was acknowledged (the restored job must carry the drain through), and right after a
// fourth worker's trainer was placed (the restored job must let it join). The job finishes
// every step with none committed twice, its final state, in float64, equals a calm run's to
// 1e-9, and the only trainers that come or go are the ones the drain and the join explain: the
// drained node's trainer leaves, the joining worker's trainer is started once, and no other
// trainer is started again. The same for an asynchronous job: every sample is taken once per
// epoch across the twenty restarts, by the same server and workers.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr std::int64_t kSteps = 2000;
constexpr std::int64_t kCheckpointEvery = 50;
constexpr int kKills = 20;
// The kills with a scenario of their own (the others come after a random training time).
constexpr int kDrainKill = 5;   // right after a member's node is drained
constexpr int kJoinOutage = 9;  // w4 is started while the head is down ...
constexpr int kJoinKill = 10;   // ... and the head killed right after its trainer is placed

bool has_member(const Json& members, const std::string& trainer) {
  return std::any_of(members.begin(), members.end(),
                     [&](const Json& m) { return m.get<std::string>() == trainer; });
}

class JobHeadKills : public JobTest {};

TEST_F(JobHeadKills, TwentyHeadKillsLoseNoStepAndChangeNoParameter) {
  const std::string job = synthetic_elastic_job("head-kills", kSteps, 23, "float64") +
                          "\n[checkpoint]\nevery = " + std::to_string(kCheckpointEvery) + "\n";
  CalmRun calm(job, kSteps);
  auto& cluster = start_cluster();
  for (const auto* worker : {"w1", "w2", "w3"}) start_worker(worker);
  for (const auto* worker : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  ScratchDir scratch("head-kills");
  JobRun run(cluster, scratch.write("job.toml", job), scratch.path() / "run");
  ASSERT_TRUE(run.wait_for_event("step", 60s)) << run.describe();

  std::mt19937_64 rng(20261205);
  std::uniform_int_distribution<int> training_ms(200, 2500), outage_ms(200, 5000);
  std::string victim, victim_trainer, joiner;
  int kills = 0;
  for (; kills < kKills; ++kills) {
    if (kills == kDrainKill) {
      // Drain a follower of a generation that trains with all three, then kill the head as
      // soon as the drain is acknowledged.
      std::optional<Json> three;  // a step of three after the last restart
      wait_until(
          [&] {
            for (const auto& e : run.events()) {
              if (e.value("event", "") == "head_restarted") three.reset();
              if (e.value("event", "") == "step" && e.at("batches").size() == 3) three = e;
            }
            return three.has_value();
          },
          60s, 100ms);
      ASSERT_TRUE(three) << "no step with three workers before the drain: " << run.describe();
      for (const auto& e : events_named(run.events(), "generation")) {
        if (e.at("generation") == three->at("generation")) {
          victim_trainer = e.at("members")[1].get<std::string>();
        }
      }
      ASSERT_FALSE(victim_trainer.empty()) << run.describe();
      victim = trainer_nodes(run.events()).at(victim_trainer);
      auto drain = run_omnilearn({"drain", victim, "--address", cluster.address()}, 20s);
      ASSERT_EQ(drain.status.code, 0) << drain.out << drain.err;
      cluster.kill_head();
      const bool carried_out =
          run.wait_for_event("generation", 0ms,
                             [&](const Json& e) {
                               return e.at("generation").get<std::int64_t>() >
                                          three->at("generation").get<std::int64_t>() &&
                                      !e.at("members").empty() &&
                                      !has_member(e.at("members"), victim_trainer);
                             })
              .has_value();
      std::printf("kill %d: right after draining %s (trainer %s; a generation without it %s)\n",
                  kills, victim.c_str(), victim_trainer.c_str(),
                  carried_out ? "was issued already" : "was not issued yet");
    } else if (kills == kJoinKill) {
      // The restarted head placed a trainer on w4: kill it before that trainer joins.
      auto spawn =
          run.wait_for_event("spawn", 60s, [&](const Json& e) { return e.at("node") == "w4"; });
      ASSERT_TRUE(spawn) << "no trainer placed on the new worker w4: " << run.describe();
      joiner = spawn->at("trainer").get<std::string>();
      const bool joined =
          run.wait_for_event("generation", 0ms,
                             [&](const Json& e) { return has_member(e.at("members"), joiner); })
              .has_value();
      cluster.kill_head();
      std::printf("kill %d: right after %s was placed on w4\n", kills, joiner.c_str());
      EXPECT_FALSE(joined) << "the head was to be killed while " << joiner
                           << " was joining, but it had joined already";
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(training_ms(rng)));
      if (run.wait_for_event("finished", 0ms)) break;  // the job outran the schedule
      cluster.kill_head();
    }
    const int outage = outage_ms(rng);
    if (kills == kJoinOutage) {
      start_worker("w4");
      std::printf("kill %d: w4 started while the head is down\n", kills);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(outage));
    cluster.restart_head();
    if (kills == kJoinOutage) {
      ASSERT_TRUE(cluster.wait_worker_joined("w4", 30s)) << cluster.worker("w4").describe();
    }
  }
  std::printf("head killed %d times\n", kills);
  ASSERT_GT(kills, kJoinKill) << "the job ended before the drain and the join: make it longer";

  auto summary = run.wait_finished(300s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2).substr(0, 4000));
  ASSERT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  const auto& events = run.events();

  // Every step committed by one generation only. Four trainers were ever started: the first
  // three, each once (none was started again after any of the kills), and w4's, once (the
  // join); none on the drained node after the drain.
  EXPECT_EQ(expect_each_step_once(events, kSteps), 4) << "trainers were started again";
  std::map<std::string, int> spawns_on;
  for (const auto& e : events_named(events, "spawn")) ++spawns_on[e.at("node").get<std::string>()];
  EXPECT_EQ(spawns_on, (std::map<std::string, int>{{"w1", 1}, {"w2", 1}, {"w3", 1}, {"w4", 1}}));
  // No trainer was written off: the drained one left by the drain (no trainer_gone), the
  // others stayed.
  for (const auto& e : events_named(events, "trainer_gone")) ADD_FAILURE() << e;

  // The drain was carried through by the restored job: a "drain" event for the node, and
  // generations without its trainer trained; the node itself stays in the cluster.
  const auto drains = events_named(events, "drain");
  ASSERT_FALSE(drains.empty()) << "the restored job forgot the drain of " << victim;
  for (const auto& e : drains) EXPECT_EQ(e.value("node", ""), victim) << e;
  // Its trainer exited on its own (told to stop: drained), while the job went on.
  bool victim_exited = false;
  for (const auto& e : events) {
    if (e.value("event", "") == "finished") break;
    if (e.value("event", "") == "trainer_exited" && e.value("trainer", "") == victim_trainer) {
      victim_exited = true;
      EXPECT_EQ(e.at("exit_code"), 0) << e;
    }
  }
  EXPECT_TRUE(victim_exited) << victim_trainer << " did not leave before the job ended";
  // The join happened: w4's trainer trained in a generation, and so did the job's last step.
  std::map<std::int64_t, Json> members_of;
  for (const auto& e : events_named(events, "generation")) {
    members_of[e.at("generation").get<std::int64_t>()] = e.at("members");
  }
  const auto steps = events_named(events, "step");
  ASSERT_FALSE(steps.empty());
  const auto& last_members = members_of[steps.back().at("generation").get<std::int64_t>()];
  EXPECT_TRUE(has_member(last_members, joiner))
      << "w4's trainer did not train to the end: " << last_members;
  EXPECT_FALSE(has_member(last_members, victim_trainer))
      << "the drained trainer trained to the end: " << last_members;
  EXPECT_EQ(last_members.size(), 3u) << last_members;
  EXPECT_TRUE(cluster.worker(victim).running());

  // Each resumed (one head_restarted event per restart).
  int restarts = 0;
  for (const auto& e : events) {
    if (e.value("event", "") != "head_restarted") continue;
    ++restarts;
    EXPECT_EQ(e.at("resumed"), true) << e;
  }
  EXPECT_EQ(restarts, kills);
  int checkpoints = 0;
  for (const auto& e : steps) checkpoints += e.contains("checkpoint") ? 1 : 0;
  std::printf("%d periodic checkpoints reported\n", checkpoints);
  EXPECT_GE(checkpoints, 1);
  calm.expect_equal(summary->at("checkpoint").get<std::string>());
}

TEST_F(JobHeadKills, TwentyHeadKillsDealEveryBatchOfAnAsynchronousJobOnce) {
  auto& cluster = start_cluster();
  start_worker("w1", {"--slowdown", "4"});
  start_worker("w2", {"--slowdown", "4"});
  for (const auto* worker : {"w1", "w2"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  ScratchDir scratch("head-kills-asp");
  constexpr int kEpochs = 200;
  const std::string job = synthetic_asp_job("asp-head-kills", kEpochs);
  JobRun run(cluster, scratch.write("asp.toml", job), scratch.path() / "asp");
  ASSERT_TRUE(run.wait_for_event("first_push", 90s)) << run.describe();

  std::mt19937_64 rng(20261206);
  std::uniform_int_distribution<int> training_ms(200, 2500), outage_ms(200, 3000);
  int kills = 0;
  for (; kills < kKills; ++kills) {
    std::this_thread::sleep_for(std::chrono::milliseconds(training_ms(rng)));
    if (run.wait_for_event("finished", 0ms)) break;
    cluster.kill_head();
    std::this_thread::sleep_for(std::chrono::milliseconds(outage_ms(rng)));
    cluster.restart_head();
  }
  std::printf("head killed %d times\n", kills);
  EXPECT_GE(kills, 10) << "the job ended before half of the kills: make it longer";

  auto summary = run.wait_finished(400s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2).substr(0, 4000));
  expect_every_sample_once(*summary, kEpochs);
  int restarts = 0, spawns = 0;
  for (const auto& e : run.events()) {
    const auto kind = e.value("event", "");
    if (kind == "head_restarted") ++restarts;
    if (kind == "spawn") ++spawns;
  }
  EXPECT_EQ(restarts, kills);
  EXPECT_EQ(spawns, 3) << "servers or workers were started again";
}

}  // namespace
}  // namespace omnilearn::testing
