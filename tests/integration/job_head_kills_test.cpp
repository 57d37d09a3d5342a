// kill -9 of the head at twenty random moments of one three-worker job (while a generation
// forms after the previous restart, mid-step, during a periodic checkpoint), each time started
// again 0.2-3 s later on the same port and state: the job resumes every time with the same
// trainer processes, finishes every step with none committed twice, and its final state, in
// float64, equals a calm run's to 1e-9. The same for an asynchronous job: every sample is
// taken once per epoch across the twenty restarts, by the same server and workers.

#include <gtest/gtest.h>

#include <random>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr std::int64_t kSteps = 2000;
constexpr int kKills = 20;

class JobHeadKills : public JobTest {};

TEST_F(JobHeadKills, TwentyHeadKillsLoseNoStepAndChangeNoParameter) {
  const std::string job = synthetic_elastic_job("head-kills", kSteps, 23, "float64");
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
  std::uniform_int_distribution<int> training_ms(200, 2500), outage_ms(200, 3000);
  int kills = 0;
  for (; kills < kKills; ++kills) {
    std::this_thread::sleep_for(std::chrono::milliseconds(training_ms(rng)));
    if (run.wait_for_event("finished", 0ms)) break;  // the job outran the schedule
    cluster.kill_head();
    std::this_thread::sleep_for(std::chrono::milliseconds(outage_ms(rng)));
    cluster.restart_head();
  }
  std::printf("head killed %d times\n", kills);
  EXPECT_GE(kills, 10) << "the job ended before half of the kills: make it longer";

  auto summary = run.wait_finished(300s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2).substr(0, 4000));
  ASSERT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);

  // Each resumed (one head_restarted event per restart), with the same trainers throughout,
  // and every step committed by one generation only.
  EXPECT_EQ(expect_each_step_once(run.events(), kSteps), 3) << "trainers were started again";
  int restarts = 0;
  for (const auto& e : run.events()) {
    if (e.value("event", "") != "head_restarted") continue;
    ++restarts;
    EXPECT_EQ(e.at("resumed"), true) << e;
  }
  EXPECT_EQ(restarts, kills);
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
