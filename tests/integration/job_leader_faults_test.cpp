// With real processes: faults that hit the leader (rank 0) or only part of a node, and
// a head that runs jobs back to back. Each case here once broke a job:
// - drain of rank 0's node ended the job early as "succeeded";
// - rank 0's agent frozen while its trainer ran gave two generations committing at once (split
//   brain), then a job that never ended;
// - the second of two jobs waited 60 s for trainer names the first had used;
// - a leader that exits without its TrainerDone;
// - a leader whose report of the last step and first done are lost (the head killed as they
//   arrive): the job ended without a `step` event for its last step.
// The deterministic simulation (tests/elastic/elastic_simulation_test.cpp) covers the rest of
// the fault matrix; these check that the actors carry the protocol out. The faulted jobs run in
// float64 and end with a calm run's parameters (CalmRun).

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

void expect_all_steps(const Json& summary) {
  EXPECT_EQ(summary.at("status"), "succeeded");
  EXPECT_EQ(summary.at("steps"), kSteps);
  EXPECT_EQ(summary.at("total_steps"), kSteps);
  EXPECT_EQ(summary.at("lost_steps"), 0);
}

// The two faulted jobs of kSteps are one job file but for the name (seed, data, steps): one calm
// run for both, started with the first.
const std::string kFaultedJob = synthetic_elastic_job("leader-faults", kSteps, 41, "float64");

CalmRun& calm_run() {
  static CalmRun run(kFaultedJob, kSteps);
  return run;
}

class JobLeaderFaults : public JobTest {
 protected:
  std::string leader_node() {
    const auto leader = first_generation_.at("members")[0].get<std::string>();
    return trainer_nodes(run_->events()).at(leader);
  }

  // A cluster of two workers whose trainers inherit `variable` = `marker` (a fault injection
  // of trainer/trainer_process.cpp that the first trainer to reach it marks by creating the
  // file); workers started later do not.
  void start_two_workers_with_fault(const char* variable, const std::filesystem::path& marker) {
    ::setenv(variable, marker.c_str(), 1);
    start_cluster();
    for (const auto* worker : {"w1", "w2"}) start_worker(worker);
    ::unsetenv(variable);
    for (const auto* worker : {"w1", "w2"}) {
      ASSERT_TRUE(cluster().wait_worker_joined(worker, 15s)) << cluster().worker(worker).describe();
    }
  }

  // No trainer of the job is left once it ended.
  void expect_trainers_gone() {
    const std::vector<ProcessInfo> left = job_processes_left(run_->id(), 20s);
    EXPECT_TRUE(left.empty()) << "trainers still running after the job ended:\n" << describe(left);
  }
};

TEST_F(JobLeaderFaults, DrainOfTheLeadersNodeFinishesEveryStep) {
  auto& calm = calm_run();
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers("drain-leader", kFaultedJob));
  const auto victim = leader_node();
  auto drain = run_omnilearn({"drain", victim, "--address", cluster().address()}, 20s);
  ASSERT_EQ(drain.status.code, 0) << drain.err;

  auto summary = run_->wait_finished(120s);
  ASSERT_TRUE(summary) << run_->describe();
  SCOPED_TRACE(summary->dump(2));
  expect_all_steps(*summary);
  EXPECT_EQ(summary->at("abandoned_in_flight_steps"), 0) << "a drain is not a failure";
  const auto& events = run_->events();
  expect_no_split_brain(events, kSteps);
  // The generation after the drain has a new leader, on another node.
  const auto generations = events_named(events, "generation");
  ASSERT_GE(generations.size(), 2u);
  const auto nodes = member_nodes(events, generations.back().at("generation").get<std::int64_t>());
  ASSERT_FALSE(nodes.empty());
  EXPECT_NE(nodes[0], victim);
  // The handover is over in a few generations (the first; the drain's, which stops every
  // member; the one without the drained node; a joiner's), not one every few steps while the
  // drained trainer keeps leading to the end of the job.
  EXPECT_LE(generations.size(), 5u);
  calm.expect_equal(summary->at("checkpoint").get<std::string>());
  expect_trainers_gone();
}

TEST_F(JobLeaderFaults, FrozenAgentOfTheLeaderWhileItsTrainerRunsGivesNoSplitBrain) {
  auto& calm = calm_run();
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers("freeze-agent", kFaultedJob));
  const auto victim = leader_node();
  auto& worker = cluster().worker(victim);
  // Only the agent: its trainer keeps running and can still talk to the head and its peers, as
  // in a partial failure (a hung agent, or its heartbeats lost).
  ASSERT_TRUE(worker.send_signal(SIGSTOP, /*whole_group=*/false));
  const auto frozen_at = std::chrono::steady_clock::now();
  auto dead = cluster().wait_for_status([&](const auto& s) { return s.state(victim) == "dead"; },
                                        20s, 100ms);
  ASSERT_TRUE(dead) << cluster().last_status_text();
  // The job goes on with the others while the agent is still frozen.
  auto resumed = run_->wait_for_event("recovered", 30s);
  ASSERT_TRUE(resumed) << run_->describe();
  std::this_thread::sleep_until(frozen_at + 4s);
  ASSERT_TRUE(worker.send_signal(SIGCONT, /*whole_group=*/false));

  auto summary = run_->wait_finished(120s);
  ASSERT_TRUE(summary) << run_->describe();
  SCOPED_TRACE(summary->dump(2));
  expect_all_steps(*summary);
  expect_no_split_brain(run_->events(), kSteps);
  calm.expect_equal(summary->at("checkpoint").get<std::string>());
  expect_trainers_gone();
}

TEST_F(JobLeaderFaults, TwoJobsBackToBackBothStartAtOnce) {
  auto& cluster = start_cluster();
  for (const auto* worker : {"w1", "w2"}) start_worker(worker);
  for (const auto* worker : {"w1", "w2"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  scratch_ = std::make_unique<ScratchDir>("back-to-back");
  for (int job = 0; job < 2; ++job) {
    const std::string name = "back-to-back-" + std::to_string(job);
    JobRun run(cluster, scratch_->write(name + ".toml", synthetic_elastic_job(name, 20, 50 + job)),
               scratch_->path() / name);
    // Well inside the 60 s a trainer has to start: the second job does not wait for the
    // first job's trainer names.
    auto summary = run.wait_finished(45s);
    ASSERT_TRUE(summary) << run.describe();
    EXPECT_EQ(summary->at("status"), "succeeded") << summary->dump(2);
    EXPECT_EQ(summary->at("steps"), 20);
    for (const auto& gone : events_named(run.events(), "trainer_gone")) {
      ADD_FAILURE() << "job " << job << ": " << gone.dump();
    }
  }
}

TEST_F(JobLeaderFaults, ALeaderThatExitsWithoutItsDoneStillEndsTheJob) {
  scratch_ = std::make_unique<ScratchDir>("exit-before-done");
  const auto marker = scratch_->path() / "leader-exited";
  ASSERT_NO_FATAL_FAILURE(start_two_workers_with_fault("OMNILEARN_FAULT_EXIT_BEFORE_DONE", marker));
  auto& cluster = this->cluster();
  const std::string job = synthetic_elastic_job("exit-before-done", 40, 61, "float64");
  CalmRun calm(job, 40);
  JobRun run(cluster, scratch_->write("job.toml", job), scratch_->path() / "run");
  auto summary = run.wait_finished(90s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_TRUE(std::filesystem::exists(marker)) << "the fault was not injected";
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), 40);
  // The survivor that finished it wrote the final checkpoint; the summary says where it lies.
  EXPECT_FALSE(summary->at("checkpoint").get<std::string>().empty());
  EXPECT_FALSE(summary->at("checkpoint_node").get<std::string>().empty());
  ASSERT_FALSE(summary->at("checkpoints").empty());
  EXPECT_EQ(summary->at("checkpoints").back().at("path"), summary->at("checkpoint"));
  EXPECT_EQ(summary->at("checkpoints").back().at("node"), summary->at("checkpoint_node"));
  calm.expect_equal(summary->at("checkpoint").get<std::string>());
  // And `status` says so too, for the finished job.
  auto status = run_omnilearn({"status", "--json", "--address", cluster.address()}, 20s);
  ASSERT_EQ(status.status.code, 0) << status.err;
  const auto jobs = nlohmann::json::parse(status.out).at("jobs");
  bool found = false;
  for (const auto& job : jobs) {
    if (job.at("id") != run.id()) continue;
    found = true;
    EXPECT_EQ(job.at("checkpoint"), summary->at("checkpoint"));
    EXPECT_EQ(job.at("checkpoint_node"), summary->at("checkpoint_node"));
  }
  EXPECT_TRUE(found) << status.out;
  EXPECT_FALSE(events_named(run.events(), "trainer_gone").empty());
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 20s);
  EXPECT_TRUE(left.empty()) << describe(left);
}

TEST_F(JobLeaderFaults, ALeaderWhoseLastReportIsLostStillLogsTheLastStep) {
  scratch_ = std::make_unique<ScratchDir>("lose-final-report");
  const auto marker = scratch_->path() / "report-lost";
  ASSERT_NO_FATAL_FAILURE(
      start_two_workers_with_fault("OMNILEARN_FAULT_LOSE_FINAL_REPORT", marker));
  auto& cluster = this->cluster();
  constexpr std::int64_t kLast = 40;
  const std::string job = synthetic_elastic_job("lose-final-report", kLast, 67, "float64");
  JobRun run(cluster, scratch_->write("job.toml", job), scratch_->path() / "run");
  auto summary = run.wait_finished(90s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_TRUE(std::filesystem::exists(marker)) << "the fault was not injected";
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kLast);
  // The report came again with the leader's second done: the last step has its event, once,
  // with the loss and the plan the leader reported, and no step was taken for a superseded one.
  const auto steps = events_named(run.events(), "step");
  ASSERT_FALSE(steps.empty()) << run.describe();
  EXPECT_EQ(steps.back().at("step"), kLast) << steps.back();
  EXPECT_TRUE(steps.back().contains("loss")) << steps.back();
  EXPECT_EQ(steps.back().at("batches").size(), 2u) << steps.back();
  EXPECT_TRUE(events_named(run.events(), "superseded_step").empty());
  expect_no_split_brain(run.events(), kLast);
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 20s);
  EXPECT_TRUE(left.empty()) << describe(left);
}

}  // namespace
}  // namespace omnilearn::testing
