// "Scale-down" (failure): `kill -9` of a worker process in the middle of a job. Its
// trainer dies with it (PDEATHSIG), the survivors' collective breaks, and the job resumes in a
// new generation within heartbeat timeout + 2 s of the kill, losing at most the step that was
// in flight, and completes with all its steps, its final parameters those of a calm run.

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <iostream>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr std::int64_t kSteps = 250;

// float64: the final state must equal a calm run's.
const std::string kJob = synthetic_elastic_job("e2e-kill", kSteps, 31, "float64");

// Both tests run kJob: one calm run for the two, started with the first.
CalmRun& calm_run() {
  static CalmRun run(kJob, kSteps);
  return run;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool has_trainer_of(const Json& members, const std::string& node) {
  for (const auto& m : members) {
    if (m.get<std::string>().find("-" + node + "-t") != std::string::npos) return true;
  }
  return false;
}

class JobKill : public JobTest {
 protected:
  // Kills the node whose trainer has `rank` in the first generation and checks everything the
  // issue promises about it.
  void kill_rank_and_check(int rank);
};

void JobKill::kill_rank_and_check(int rank) {
  auto& calm = calm_run();
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers("kill", kJob));
  auto& cluster = this->cluster();
  auto& run = *run_;
  const auto& first_generation = first_generation_;
  const auto victim_trainer = first_generation.at("members")[rank].get<std::string>();
  const auto victim = trainer_nodes(run.events()).at(victim_trainer);
  const auto victim_pids = trainer_processes(cluster.address(), run.id() + "-" + victim + "-t");
  ASSERT_EQ(victim_pids.size(), 1u) << describe(victim_pids);

  // A dead peer's socket must fail a survivor's collective, not kill it: Gloo writes to peers'
  // sockets, and a write to a closed one raises SIGPIPE.
  for (const auto& trainer : job_trainer_processes(run.id())) {
    EXPECT_EQ(ignores_signal(trainer.pid, SIGPIPE), true) << trainer.command_line;
  }

  // SIGKILL to the worker process alone (not its process group): its trainer must die by itself.
  const double killed_at = unix_now();
  ASSERT_TRUE(cluster.worker(victim).send_signal(SIGKILL, /*whole_group=*/false));
  std::vector<ProcessInfo> orphans;
  EXPECT_TRUE(wait_until(
      [&] {
        orphans = trainer_processes(cluster.address(), run.id() + "-" + victim + "-t");
        return orphans.empty();
      },
      3s))
      << "the trainer outlived its killed worker:\n" << describe(orphans);

  const double allowed =
      std::chrono::duration<double>(job_head_options().heartbeat_timeout).count() + 2.0;
  auto recovered = run.wait_for_event("recovered", 30s);
  ASSERT_TRUE(recovered) << run.describe();
  const double resumed_after = recovered->at("time").get<double>() - killed_at;
  EXPECT_LE(resumed_after, allowed) << "resumed " << resumed_after << " s after the kill\n"
                                    << run.describe();
  // How long the survivors' leader waited for its lease (lease_refused events of the generation
  // that recovered, first refusal to the recovery): for information, not asserted (timing).
  double lease_wait = 0;
  for (const auto& e : events_named(run.events(), "lease_refused")) {
    if (e.at("generation") == recovered->at("generation")) {
      lease_wait = recovered->at("time").get<double>() - e.at("time").get<double>();
      break;
    }
  }
  std::cout << "rank " << rank << " killed: resumed " << resumed_after
            << " s after the kill; its leader waited " << lease_wait << " s for the lease\n";
  auto without = run.wait_for_event("generation", 1s, [&](const Json& e) {
    return e.at("generation").get<int>() > first_generation.at("generation").get<int>() &&
           !has_trainer_of(e.at("members"), victim);
  });
  ASSERT_TRUE(without) << run.describe();
  EXPECT_EQ(without->at("members").size(), 2u) << without->dump();
  EXPECT_EQ(recovered->at("generation"), without->at("generation"))
      << "the job resumed in the generation of the survivors";

  auto summary = run.wait_finished(60s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  EXPECT_EQ(summary->at("total_steps"), kSteps);
  EXPECT_EQ(summary->at("lost_steps"), 0) << "committed steps are never redone";
  EXPECT_LE(summary->at("abandoned_in_flight_steps").get<int>(), 1);
  ASSERT_EQ(summary->at("recovery_s").size(), 1u);
  // Nothing lost, nothing doubled: the survivors' parameters are a calm run's.
  calm.expect_equal(summary->at("checkpoint").get<std::string>());

  const auto& events = run.events();
  auto gone = events_named(events, "trainer_gone");
  ASSERT_FALSE(gone.empty());
  EXPECT_EQ(gone[0].at("trainer"), victim_trainer);
  std::int64_t previous = 0;
  for (const auto& e : events_named(events, "step")) {
    const auto step = e.at("step").get<std::int64_t>();
    ASSERT_GT(step, previous) << "step " << step << " after " << previous;
    previous = step;
  }
  EXPECT_EQ(previous, kSteps);

  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 15s);
  EXPECT_TRUE(left.empty()) << "trainers still running after the job ended:\n" << describe(left);
  auto status = cluster.status(10s);
  ASSERT_TRUE(status) << cluster.last_status_text();
  EXPECT_EQ(status->state(victim), "dead");
}

TEST_F(JobKill, KillingAFollowersWorkerLosesNoCommittedStep) { kill_rank_and_check(1); }

TEST_F(JobKill, KillingTheLeadersWorkerLosesNoCommittedStep) { kill_rank_and_check(0); }

}  // namespace
}  // namespace omnilearn::testing
