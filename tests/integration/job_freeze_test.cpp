// Fault tests with a job: a worker node frozen with SIGSTOP (agent and trainer both, as a
// hung machine would be) for longer than the heartbeat timeout. The node is declared dead, the
// job goes on without it, and when the node thaws it rejoins as a new incarnation; its stale
// trainer must not disturb the job, which completes every step and loses none: its final
// parameters are those of a calm run (float64, to kExactTolerance).

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <thread>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr std::int64_t kSteps = 300;

const std::string kJob = synthetic_elastic_job("e2e-freeze", kSteps, 37, "float64");

class JobFreeze : public JobTest {};

TEST_F(JobFreeze, AFrozenNodeIsLeftBehindAndRejoinsAsANewIncarnation) {
  CalmRun calm(kJob, kSteps);
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers("freeze", kJob));
  auto& cluster = this->cluster();
  auto& run = *run_;
  const auto& first_generation = first_generation_;
  const auto victim_trainer = first_generation.at("members")[1].get<std::string>();
  const auto victim = trainer_nodes(run.events()).at(victim_trainer);

  // The whole process group: the agent and its trainer stop together.
  ASSERT_TRUE(cluster.worker(victim).send_signal(SIGSTOP, /*whole_group=*/true));
  auto frozen_at = std::chrono::steady_clock::now();
  auto dead = cluster.wait_for_status([&](const auto& s) { return s.state(victim) == "dead"; },
                                      20s, 100ms);
  ASSERT_TRUE(dead) << cluster.last_status_text();
  // The job goes on without it: steps are committed while the node is still frozen.
  auto resumed = run.wait_for_event("recovered", 30s);
  ASSERT_TRUE(resumed) << run.describe();
  const auto resumed_step = resumed->at("step").get<std::int64_t>();
  auto progressed = run.wait_for_event("step", 30s, [&](const Json& e) {
    return e.at("step").get<std::int64_t>() >= resumed_step + 5;
  });
  ASSERT_TRUE(progressed) << "no progress while the node was frozen\n" << run.describe();
  EXPECT_EQ(progressed->at("batches").size(), 2u) << progressed->dump();

  // Thaw: the node comes back as incarnation 2.
  std::this_thread::sleep_until(frozen_at + 4s);
  ASSERT_TRUE(cluster.worker(victim).send_signal(SIGCONT, /*whole_group=*/true));
  auto rejoined = cluster.wait_for_status(
      [&](const auto& s) { return s.nodes_named(victim).size() == 2 && s.state(victim) == "alive"; },
      20s, 100ms);
  ASSERT_TRUE(rejoined) << cluster.last_status_text() << "\n" << cluster.worker(victim).describe();

  auto summary = run.wait_finished(90s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  EXPECT_EQ(summary->at("lost_steps"), 0) << "committed steps are never redone";
  calm.expect_equal(summary->at("checkpoint").get<std::string>());
  std::int64_t previous = 0;
  for (const auto& e : events_named(run.events(), "step")) {
    const auto step = e.at("step").get<std::int64_t>();
    ASSERT_GT(step, previous) << "the stale trainer must not commit or repeat a step";
    previous = step;
  }
  EXPECT_EQ(previous, kSteps);
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 15s);
  EXPECT_TRUE(left.empty())
      << "trainers (the stale one included) still running after the job ended:\n"
      << describe(left);
}

}  // namespace
}  // namespace omnilearn::testing
