// With real processes: faults of one trainer process alone, its agent and node healthy, as the
// leader (rank 0) and as a follower.
// - Killed (SIGKILL to the trainer only): the kernel's OOM killer, or a crash in a user's
//   model. Its agent reports the exit, so the head knows at once that it is gone.
// - Hung (SIGSTOP to the trainer only, then SIGCONT): a stuck device call, a swap storm, a
//   long pause. Its agent keeps sending heartbeats that say the node is fine, so only the
//   trainer's silence (a collective that times out, a probe left unanswered) shows it. When it
//   thaws it may still hold a lease or an exchange in flight, and must not commit a step.
// Each job must finish every step with no step committed twice and end with a calm run's
// parameters (float64), the node must stay the same live incarnation throughout, and no trainer
// may outlive the job. The deterministic simulation (tests/elastic/elastic_simulation_test.cpp)
// covers these faults at every phase; these check that the processes carry them out.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr std::int64_t kSteps = 300;

// The four jobs are one job file: one calm run for all, started with the first.
const std::string kJob = synthetic_elastic_job("trainer-faults", kSteps, 43, "float64");

CalmRun& calm_run() {
  static CalmRun run(kJob, kSteps);
  return run;
}

enum class Fault { kKill, kHang };

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The job finished every one of its `steps`, each committed once, none redone, with `calm`'s
// parameters: what every fault here must leave.
void expect_finished_exactly(const JobRun& run, const Json& summary, std::int64_t steps,
                             CalmRun& calm) {
  EXPECT_EQ(summary.at("status"), "succeeded");
  EXPECT_EQ(summary.at("steps"), steps);
  EXPECT_EQ(summary.at("lost_steps"), 0) << "committed steps are never redone";
  expect_no_split_brain(run.events(), steps);
  calm.expect_equal(summary.at("checkpoint").get<std::string>());
}

class JobTrainerFaults : public JobTest {
 protected:
  // Starts the job on three workers, faults the trainer of `rank` in the first generation, and
  // checks what the file's comment promises.
  void fault_trainer_and_check(int rank, Fault fault);
};

void JobTrainerFaults::fault_trainer_and_check(int rank, Fault fault) {
  auto& calm = calm_run();
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers(
      fault == Fault::kKill ? "trainer-killed" : "trainer-hung", kJob));
  auto& run = *run_;
  const auto victim_trainer = first_generation_.at("members")[rank].get<std::string>();
  const auto victim = trainer_nodes(run.events()).at(victim_trainer);
  const auto pids = trainer_processes(cluster().address(), victim_trainer);
  ASSERT_EQ(pids.size(), 1u) << describe(pids);
  const pid_t pid = pids.front().pid;
  const auto before = cluster().status();
  ASSERT_TRUE(before) << cluster().last_status_text();
  ASSERT_EQ(before->nodes_named(victim).size(), 1u) << before->json().dump(2);
  const auto node_id = before->node(victim)->at("id");

  const auto faulted_at = std::chrono::steady_clock::now();
  const double faulted_at_unix = unix_now();
  ASSERT_EQ(::kill(pid, fault == Fault::kKill ? SIGKILL : SIGSTOP), 0) << victim_trainer;
  auto recovered = run.wait_for_event("recovered", 30s);
  ASSERT_TRUE(recovered) << run.describe();
  // A killed trainer's agent reports the exit at once. A hung one is found by the probes of a
  // generation without progress (about two lease lengths, then a probe timeout: 2-3 s here),
  // not by the 30 s a collective waits; 10 s leaves room for a loaded machine.
  const double recovered_after = recovered->at("time").get<double>() - faulted_at_unix;
  std::cout << (fault == Fault::kKill ? "killed" : "hung") << " trainer of rank " << rank
            << ": recovered " << recovered_after << " s after the fault\n";
  EXPECT_LE(recovered_after, 10.0) << run.describe();
  // The job goes on without the faulted trainer: steps committed after the recovery by a
  // generation it is not a member of.
  const auto recovered_generation = recovered->at("generation").get<std::int64_t>();
  auto without = run.wait_for_event("generation", 1s, [&](const Json& e) {
    if (e.at("generation").get<std::int64_t>() != recovered_generation) return false;
    for (const auto& m : e.at("members")) {
      if (m.get<std::string>() == victim_trainer) return false;
    }
    return true;
  });
  ASSERT_TRUE(without) << "the recovered generation still has " << victim_trainer << "\n"
                       << run.describe();
  const auto recovered_step = recovered->at("step").get<std::int64_t>();
  auto progressed = run.wait_for_event("step", 30s, [&](const Json& e) {
    return e.at("step").get<std::int64_t>() >= recovered_step + 5;
  });
  ASSERT_TRUE(progressed) << "no progress without the faulted trainer\n" << run.describe();
  if (fault == Fault::kHang) {
    // Thawed well after the job went on: its lease has run out, its exchange was given up.
    std::this_thread::sleep_until(faulted_at + 4s);
    ASSERT_EQ(::kill(pid, SIGCONT), 0) << victim_trainer;
  }

  auto summary = run.wait_finished(120s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("total_steps"), kSteps);
  expect_finished_exactly(run, *summary, kSteps, calm);

  // Only the trainer failed: its node is the same incarnation, alive, and was never dead.
  const auto after = cluster().status();
  ASSERT_TRUE(after) << cluster().last_status_text();
  ASSERT_EQ(after->nodes_named(victim).size(), 1u) << after->json().dump(2);
  EXPECT_EQ(after->node(victim)->at("id"), node_id) << after->json().dump(2);
  EXPECT_EQ(after->state(victim), "alive") << after->json().dump(2);

  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 20s);
  EXPECT_TRUE(left.empty()) << "trainers still running after the job ended (the faulted one "
                            << pid << " included?):\n"
                            << describe(left);
}

TEST_F(JobTrainerFaults, AKilledFollowerTrainerIsLeftBehindAndNoStepIsLost) {
  fault_trainer_and_check(1, Fault::kKill);
}

TEST_F(JobTrainerFaults, AKilledLeaderTrainerIsLeftBehindAndNoStepIsLost) {
  fault_trainer_and_check(0, Fault::kKill);
}

TEST_F(JobTrainerFaults, AHungFollowerTrainerIsLeftBehindAndCommitsNothingWhenItThaws) {
  fault_trainer_and_check(1, Fault::kHang);
}

TEST_F(JobTrainerFaults, AHungLeaderTrainerIsLeftBehindAndCommitsNothingWhenItThaws) {
  fault_trainer_and_check(0, Fault::kHang);
}

// The job stopped (`omnilearn job stop`) just after one member's trainer hung: the others are
// then waiting on it in a collective, and told to stop by the scheduler. A stop ends the wait a
// trainer is in, and a stopping trainer waits at most a second more for anyone (a leader's
// last word to its followers), so they exit within seconds: without that they stayed for the
// collective's 30 s. The hung one exits when it thaws.
TEST_F(JobTrainerFaults, AJobStoppedWhileAMemberHangsLeavesNobodyWaitingOnIt) {
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers("stopped-while-hung", kJob));
  auto& run = *run_;
  // The generation training now (three members: the one that committed step 10).
  std::optional<Json> training;
  for (const auto& e : run.events()) {
    if (e.value("event", "") == "generation" && e.at("members").size() == 3) training = e;
  }
  ASSERT_TRUE(training) << run.describe();
  const auto members = training->at("members").get<std::vector<std::string>>();
  std::vector<pid_t> pids;
  for (const auto& name : members) {
    const auto found = trainer_processes(cluster().address(), name);
    ASSERT_EQ(found.size(), 1u) << name << "\n" << describe(found);
    pids.push_back(found.front().pid);
  }
  ASSERT_EQ(::kill(pids[1], SIGSTOP), 0) << members[1];
  const auto stopped_at = std::chrono::steady_clock::now();
  const auto stop = run_omnilearn({"job", "stop", run.id(), "--address", cluster().address()}, 20s);
  ASSERT_EQ(stop.status.code, 0) << stop.out << stop.err;

  for (const std::size_t rank : {std::size_t{0}, std::size_t{2}}) {
    const bool gone = wait_until(
        [&] { return trainer_processes(cluster().address(), members[rank]).empty(); }, 25s,
        50ms);
    const double after =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
    std::cout << "rank " << rank << " (" << members[rank] << ") gone " << after
              << " s after the stop\n";
    EXPECT_TRUE(gone) << members[rank] << " still runs 25 s after the stop\n" << run.describe();
    // A collective's own timeout is 30 s; 10 s leaves room for a loaded machine.
    EXPECT_LE(after, 10.0) << members[rank] << " waited on the hung member\n" << run.describe();
  }
  ASSERT_EQ(::kill(pids[1], SIGCONT), 0) << members[1];
  auto summary = run.wait_finished(30s);
  ASSERT_TRUE(summary) << run.describe();
  EXPECT_EQ(summary->at("status"), "stopped") << summary->dump(2);
  expect_no_split_brain(run.events(), summary->at("steps").get<std::int64_t>());
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 20s);
  EXPECT_TRUE(left.empty()) << "trainers still running after the job was stopped:\n"
                            << describe(left);
}

// A member whose training thread computes one step for far longer than its steps take (a call
// stuck in its device, a node slowed a thousandfold) while its process and agent are fine: it
// answers the scheduler's probes, but says for how long it has been computing, and past 20
// times its measured step compute (at least 10 s) it is taken for hung, like a process that
// misses its probes. The generation re-forms without it before its exchange times out (30 s);
// otherwise the job's stall limit (60 s without a committed step) fails the job before the
// re-formation's formation timeout writes the member off. The replacement placed on the same
// node hangs the same way, and with two lost there the node is held back from the job. Its node
// back to full speed, the job finishes every step with a calm run's parameters. (100 steps: the
// replacement must join before the survivors finish them.)
constexpr std::int64_t kLongSteps = 100;
const std::string& long_step_job() {
  static const std::string job = [] {
    // A model whose forward takes tens of milliseconds, so that x1000 is tens of seconds.
    std::string text = synthetic_elastic_job("hung-compute", kLongSteps, 47, "float64");
    const std::string small = "hidden = [128, 64]";
    text.replace(text.find(small), small.size(), "hidden = [1024, 1024]");
    return text;
  }();
  return job;
}

TEST_F(JobTrainerFaults, AMemberComputingOneStepForeverIsLeftBehindAndTheJobGoesOn) {
  CalmRun calm(long_step_job(), kLongSteps);
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers("hung-compute", long_step_job()));
  auto& run = *run_;
  const auto victim_trainer = first_generation_.at("members")[1].get<std::string>();
  const auto victim = trainer_nodes(run.events()).at(victim_trainer);
  // Measured first: the limit is relative to the trainer's own step compute, which the
  // controller has from every step past the warm-up (2 x cooldown steps). Not a plan event:
  // three equal workers may keep their first plan for the whole job.
  ASSERT_TRUE(run.wait_for_event("step", 60s, [](const Json& e) {
    return e.value("step", std::int64_t{0}) >= 20;
  })) << run.describe();
  const double slowed_at = unix_now();
  const auto slowed = run_omnilearn(
      {"node", "set", victim, "--slowdown", "1000", "--address", cluster().address()}, 20s);
  ASSERT_EQ(slowed.status.code, 0) << slowed.out << slowed.err;
  auto gone = run.wait_for_event("trainer_gone", 60s, [&](const Json& e) {
    return e.value("trainer", "") == victim_trainer;
  });
  ASSERT_TRUE(gone) << run.describe();
  EXPECT_NE(gone->dump().find("hung: its training thread has computed one step"),
            std::string::npos)
      << gone->dump();
  auto recovered = run.wait_for_event("recovered", 60s);
  ASSERT_TRUE(recovered) << run.describe();
  const double recovered_after = recovered->at("time").get<double>() - slowed_at;
  std::cout << "a member computing one step for ever: recovered " << recovered_after
            << " s after its node was slowed x1000\n";
  // 10 s of computing, then the next probe; 25 s leaves room for a loaded machine and is still
  // short of the collective's 30 s.
  EXPECT_LE(recovered_after, 25.0) << run.describe();
  // Its replacement on the same node hangs the same way; with two lost there, the node is held
  // back from the job instead of getting a third at once.
  auto held = run.wait_for_event("node_held_back", 90s);
  ASSERT_TRUE(held) << run.describe();
  EXPECT_EQ(held->value("node", ""), victim) << held->dump();
  EXPECT_EQ(held->value("losses", 0), 2) << held->dump();
  EXPECT_DOUBLE_EQ(held->value("held_back_s", 0.0), 0.5) << held->dump();
  EXPECT_NE(held->value("reason", "").find("hung:"), std::string::npos) << held->dump();
  EXPECT_NE(held->value("trainer", ""), victim_trainer) << "the replacement was lost too";
  const auto back = run_omnilearn(
      {"node", "set", victim, "--slowdown", "1", "--address", cluster().address()}, 20s);
  ASSERT_EQ(back.status.code, 0) << back.out << back.err;

  auto summary = run.wait_finished(240s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2));
  expect_finished_exactly(run, *summary, kLongSteps, calm);
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 30s);
  EXPECT_TRUE(left.empty()) << "trainers still running after the job ended:\n" << describe(left);
}

// A trainer told to stop in the middle of a step its node's thousandfold slowdown stretches to
// minutes (a thermally throttled machine, a call that never returns): its runtime answers, its
// training thread cannot read the stop. The process leaves 10 s after the stop all the same,
// instead of holding its memory until the step ends; the others, waiting on it, leave at once.
TEST_F(JobTrainerFaults, ATrainerStoppedInAStepThatTakesMinutesLeavesWithinTheStopBound) {
  // A model whose forward takes tens of milliseconds, so that x1000 is a minute or more.
  std::string job = synthetic_elastic_job("stop-long-step", kSteps, 45);
  const std::string small = "hidden = [128, 64]";
  ASSERT_NE(job.find(small), std::string::npos);
  job.replace(job.find(small), small.size(), "hidden = [2048, 2048]");
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers("stop-long-step", job));
  auto& run = *run_;
  const auto members = first_generation_.at("members").get<std::vector<std::string>>();
  const auto victim_trainer = members[1];
  const auto victim = trainer_nodes(run.events()).at(victim_trainer);
  const auto slowed = run_omnilearn(
      {"node", "set", victim, "--slowdown", "1000", "--address", cluster().address()}, 20s);
  ASSERT_EQ(slowed.status.code, 0) << slowed.out << slowed.err;
  // Applied at the next step boundary; its first stretch of compute then sleeps for minutes.
  std::this_thread::sleep_for(3s);
  ASSERT_FALSE(trainer_processes(cluster().address(), victim_trainer).empty());
  const auto stopped_at = std::chrono::steady_clock::now();
  const auto stop = run_omnilearn({"job", "stop", run.id(), "--address", cluster().address()}, 20s);
  ASSERT_EQ(stop.status.code, 0) << stop.out << stop.err;
  for (const auto& name : members) {
    const bool gone = wait_until(
        [&] { return trainer_processes(cluster().address(), name).empty(); }, 40s, 50ms);
    const double after =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
    std::cout << name << (name == victim_trainer ? " (slowed)" : "") << " gone " << after
              << " s after the stop\n";
    EXPECT_TRUE(gone) << name << " still runs 40 s after the stop\n" << run.describe();
    // The bound is 10 s from the stop's arrival; 20 s leaves room for a loaded machine.
    EXPECT_LE(after, 20.0) << name << " outlived the stop bound\n" << run.describe();
  }
  auto summary = run.wait_finished(30s);
  ASSERT_TRUE(summary) << run.describe();
  EXPECT_EQ(summary->at("status"), "stopped") << summary->dump(2);
}

// A worker told to leave (SIGTERM to `omnilearn worker`, as systemd or Ctrl-C sends it) while
// its trainer hangs: a stopped process cannot act on the SIGTERM its agent sends it, so the
// agent kills it at once instead of waiting out its grace, and says goodbye in time: the node
// is "left", not declared dead for the heartbeats it missed meanwhile. The job goes on without
// it and finishes every step exactly, with a calm run's parameters.
TEST_F(JobTrainerFaults, AWorkerLeavingWhileItsTrainerHangsLeavesCleanly) {
  auto& calm = calm_run();
  ASSERT_NO_FATAL_FAILURE(start_job_on_three_workers("leave-while-hung", kJob));
  auto& run = *run_;
  const auto victim_trainer = first_generation_.at("members")[1].get<std::string>();
  const auto victim = trainer_nodes(run.events()).at(victim_trainer);
  const auto pids = trainer_processes(cluster().address(), victim_trainer);
  ASSERT_EQ(pids.size(), 1u) << describe(pids);
  ASSERT_EQ(::kill(pids.front().pid, SIGSTOP), 0) << victim_trainer;
  // Stopped for certain before its agent is told to leave (the state in /proc/PID/stat).
  const std::string stat_path = "/proc/" + std::to_string(pids.front().pid) + "/stat";
  ASSERT_TRUE(wait_until(
      [&] {
        std::ifstream stat(stat_path);
        std::string text;
        std::getline(stat, text);
        const auto paren = text.rfind(')');
        return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'T';
      },
      5s, 10ms));
  auto& agent = cluster().worker(victim);
  ASSERT_TRUE(agent.send_signal(SIGTERM));
  const auto exit = agent.wait_exit(10s);
  ASSERT_TRUE(exit) << agent.describe();
  EXPECT_TRUE(exit->exited() && exit->code == 0) << exit->to_string() << "\n" << agent.describe();
  const auto status = cluster().status();
  ASSERT_TRUE(status) << cluster().last_status_text();
  EXPECT_EQ(status->state(victim), "left") << status->json().dump(2);
  EXPECT_TRUE(trainer_processes(cluster().address(), victim_trainer).empty())
      << "the hung trainer outlived its agent";

  auto summary = run.wait_finished(120s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2));
  expect_finished_exactly(run, *summary, kSteps, calm);
}

}  // namespace
}  // namespace omnilearn::testing
