// "Scale-down" (graceful): `omnilearn drain NODE` in the middle of a job moves the
// node's trainer out at a step boundary: a new generation without it, no committed step lost,
// nothing abandoned, and the job completes with all its steps, its final parameters those of a
// calm run (float64, to kExactTolerance). The node itself stays.

#include <gtest/gtest.h>

#include <chrono>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr std::int64_t kSteps = 300;

// Synthetic data and a small MLP: the protocol is tested, not the learning. kSteps is enough
// that the drain lands well before the end even on an idle machine (steps take >= ~10 ms).
const std::string kJob = synthetic_elastic_job("e2e-drain", kSteps, 21, "float64");

bool has_trainer_of(const Json& members, const std::string& node) {
  for (const auto& m : members) {
    if (m.get<std::string>().find("-" + node + "-t") != std::string::npos) return true;
  }
  return false;
}

class JobDrain : public JobTest {};

TEST_F(JobDrain, ADrainedNodeLeavesAtAStepBoundaryAndNoStepIsLost) {
  CalmRun calm(kJob, kSteps);
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers("drain", kJob));
  auto& cluster = this->cluster();
  auto& run = *run_;
  const auto& first_generation = first_generation_;
  // Drain a follower (rank 1): its share must move to the others.
  const auto victim_trainer = first_generation.at("members")[1].get<std::string>();
  const auto victim = trainer_nodes(run.events()).at(victim_trainer);
  const auto victim_pids = trainer_processes(cluster.address(), run.id() + "-" + victim + "-t");
  ASSERT_EQ(victim_pids.size(), 1u) << describe(victim_pids);

  auto drain = run_omnilearn({"drain", victim, "--address", cluster.address()}, 20s);
  ASSERT_EQ(drain.status.code, 0) << drain.err;
  EXPECT_NE(drain.out.find("draining node " + victim), std::string::npos) << drain.out;

  auto without = run.wait_for_event("generation", 30s, [&](const Json& e) {
    return e.at("generation").get<int>() > first_generation.at("generation").get<int>() &&
           !has_trainer_of(e.at("members"), victim);
  });
  ASSERT_TRUE(without) << run.describe();
  EXPECT_EQ(without->at("members").size(), 2u) << without->dump();
  const auto generation = without->at("generation").get<std::int64_t>();
  EXPECT_TRUE(run.wait_for_event("step", 30s, [&](const Json& e) {
    return e.at("generation").get<std::int64_t>() == generation && e.at("batches").size() == 2;
  })) << "the two left must train on: " << run.describe();

  auto summary = run.wait_finished(60s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  EXPECT_EQ(summary->at("total_steps"), kSteps);
  EXPECT_EQ(summary->at("lost_steps"), 0);
  EXPECT_EQ(summary->at("abandoned_in_flight_steps"), 0) << "a drain is not a failure";
  EXPECT_TRUE(summary->at("recovery_s").empty());
  EXPECT_GE(summary->at("generations").get<int>(), 2);
  calm.expect_equal(summary->at("checkpoint").get<std::string>());

  const auto& events = run.events();
  const auto drains = events_named(events, "drain");
  EXPECT_FALSE(drains.empty());
  for (const auto& e : drains) {
    // The node by the name the user gave, which `--follow` prints beside the trainer.
    EXPECT_EQ(e.value("node", ""), victim) << e.dump();
  }
  EXPECT_TRUE(events_named(events, "trainer_gone").empty()) << "nobody failed";
  // No step ran twice (the leader's numbers only go up) and the last one is the job's end.
  std::int64_t previous = 0;
  for (const auto& e : events_named(events, "step")) {
    const auto step = e.at("step").get<std::int64_t>();
    ASSERT_GT(step, previous) << "step " << step << " after " << previous;
    previous = step;
  }
  EXPECT_EQ(previous, kSteps);
  // Nothing new is placed on a draining node.
  for (const auto& e : events_named(events, "spawn")) {
    EXPECT_TRUE(e.at("trainer").get<std::string>() == victim_trainer ||
                e.at("node").get<std::string>() != victim)
        << e.dump();
  }

  // The drained trainer left on its own; the node did not: it is still alive in the cluster.
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 15s);
  EXPECT_TRUE(left.empty()) << "trainers still running after the job ended:\n" << describe(left);
  EXPECT_TRUE(cluster.worker(victim).running());
  auto status = cluster.status(10s);
  ASSERT_TRUE(status) << cluster.last_status_text();
  EXPECT_EQ(status->state(victim), "alive");
}

}  // namespace
}  // namespace omnilearn::testing
