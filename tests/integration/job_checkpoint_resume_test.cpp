// kill -9 of the head and of every trainer process of a running three-worker float64 job at
// once, then the head started again on the same port and state: no trainer holds the job's
// committed state any more, so the job goes back to its newest checkpoint (a
// `resumed_from_checkpoint` event naming its step), trains the steps after it again with new
// trainers, and ends with the parameters of a calm run to 1e-9.
//
// What it proves on one machine: the checkpoint lies in a directory the job declares shared
// (`[checkpoint] shared = true`); on loopback every worker sees the same disk anyway, so this
// shows the scheduler's choice, the load, the fencing and the exact math, not a shared file
// system. That a node-local checkpoint is loaded only on its node, and that a job without a
// readable checkpoint fails saying so, is checked by elastic_job_test and the
// simulation.

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <map>
#include <set>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr std::int64_t kSteps = 200;
constexpr std::int64_t kEvery = 20;

// The file name the trainer gives the checkpoint of `step` (trainer_process.cpp).
std::string checkpoint_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld.pt", static_cast<long long>(step));
  return name;
}

class JobCheckpointResume : public JobTest {};

TEST_F(JobCheckpointResume, TheHeadAndEveryTrainerKilledResumesFromTheNewestCheckpoint) {
  const auto test_start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - test_start).count();
  };
  ScratchDir scratch("checkpoint-resume");
  const auto shared_dir = scratch.path() / "shared-checkpoints";
  const std::string job = synthetic_elastic_job("checkpoint-resume", kSteps, 29, "float64") +
                          "\n[checkpoint]\nevery = " + std::to_string(kEvery) + "\ndir = \"" +
                          shared_dir.string() + "\"\nshared = true\n";
  CalmRun calm(job, kSteps);
  auto& cluster = start_cluster();
  for (const auto* worker : {"w1", "w2", "w3"}) start_worker(worker);
  for (const auto* worker : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  JobRun run(cluster, scratch.write("job.toml", job), scratch.path() / "run");
  // Past two checkpoints, with all three trainers in the generation.
  ASSERT_TRUE(run.wait_for_event("step", 90s, [](const Json& e) {
    return e.at("step").get<std::int64_t>() >= 2 * kEvery + 10 && e.at("workers").size() == 3;
  })) << run.describe();
  const auto trainers = job_trainer_processes(run.id());
  ASSERT_EQ(trainers.size(), 3u) << describe(trainers);

  cluster.kill_head();
  for (const auto& t : trainers) ASSERT_EQ(::kill(t.pid, SIGKILL), 0) << t.command_line;
  // What the dead head had written: the newest checkpoint it recorded (persisted before its
  // step's line) and the last step.
  std::int64_t newest_checkpoint = 0, last_step = 0;
  for (const auto& e : run.events()) {
    if (e.value("event", "") != "step") continue;
    last_step = std::max(last_step, e.at("step").get<std::int64_t>());
    if (e.contains("checkpoint")) newest_checkpoint = e.at("step").get<std::int64_t>();
  }
  ASSERT_GE(newest_checkpoint, 2 * kEvery);
  std::this_thread::sleep_for(500ms);
  cluster.restart_head();

  const double killed_at = elapsed();
  auto summary = run.wait_finished(150s);
  const double finished_at = elapsed();
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2).substr(0, 4000));
  ASSERT_EQ(summary->at("status"), "succeeded") << run.describe();
  EXPECT_EQ(summary->at("steps"), kSteps);

  const auto& events = run.events();
  const auto resumed = events_named(events, "resumed_from_checkpoint");
  ASSERT_EQ(resumed.size(), 1u) << run.describe();
  const Json& r = resumed[0];
  EXPECT_EQ(r.at("step").get<std::int64_t>(), newest_checkpoint) << r;
  EXPECT_EQ(r.at("checkpoint").get<std::string>(),
            (shared_dir / checkpoint_name(newest_checkpoint)).string())
      << r;
  const auto lost = r.at("lost_steps").get<std::int64_t>();
  EXPECT_GE(lost, 0) << r;
  EXPECT_LE(lost, last_step - newest_checkpoint) << r;
  EXPECT_GE(summary->at("lost_steps").get<std::int64_t>(), lost);
  const std::int64_t resumed_generation = r.at("generation").get<std::int64_t>();

  // Every step committed once, except those after the checkpoint: once before the resume (by
  // the generations that died) and once again after it. The job's steps only go up, but for
  // the one step back to the checkpoint.
  std::map<std::int64_t, std::set<std::int64_t>> generations_of_step;
  std::int64_t previous = 0;
  int backs = 0, spawns = 0;
  for (const auto& e : events) {
    const auto kind = e.value("event", "");
    if (kind == "spawn") ++spawns;
    if (kind != "step" && kind != "superseded_step") continue;
    const auto step = e.at("step").get<std::int64_t>();
    generations_of_step[step].insert(e.at("generation").get<std::int64_t>());
    if (kind != "step") continue;
    if (step <= previous) {
      ++backs;
      EXPECT_EQ(step, newest_checkpoint + 1) << "the job went back elsewhere: " << e;
    }
    previous = step;
  }
  EXPECT_EQ(backs, last_step > newest_checkpoint ? 1 : 0);
  for (std::int64_t step = 1; step <= kSteps; ++step) {
    const auto& generations = generations_of_step[step];
    if (step > newest_checkpoint && step <= last_step) {
      ASSERT_EQ(generations.size(), 2u) << "step " << step;
      EXPECT_LT(*generations.begin(), resumed_generation) << "step " << step;
      EXPECT_GE(*generations.rbegin(), resumed_generation) << "step " << step;
    } else {
      EXPECT_EQ(generations.size(), 1u) << "step " << step;
    }
  }
  EXPECT_EQ(spawns, 6) << "three trainers, then three new ones";
  std::printf(
      "resumed from the checkpoint at step %lld (last step before the kill %lld, %lld "
      "counted lost)\n",
      static_cast<long long>(newest_checkpoint), static_cast<long long>(last_step),
      static_cast<long long>(lost));
  calm.expect_equal(summary->at("checkpoint").get<std::string>());
  std::printf("timeline: kills at %.1f s, job finished at %.1f s, calm run compared at %.1f s\n",
              killed_at, finished_at, elapsed());
}

}  // namespace
}  // namespace omnilearn::testing
