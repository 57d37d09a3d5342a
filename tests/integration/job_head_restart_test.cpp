// kill -9 (or a graceful stop, or SIGSTOP) of the head while one job has finished and another is
// training, and a new head on the same port and state: the finished job is still there with its
// outcome, the running one goes on with the same trainer processes (they kept their state
// through the outage) from the newest step they committed, under a new generation, to every
// step with none committed twice; the workers keep their identity, and a follower of the job's
// log rides through. An asynchronous job goes on the same way with its parameter server and
// workers.

#include <gtest/gtest.h>

#include <signal.h>

#include <set>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

class JobHeadRestart : public JobTest {};

// After a job the restarted head resumed has ended: `alive` workers, the head's status counts
// the job resumed and none failed, and none of the job's processes (`what`) is left.
void expect_resumed_and_gone(TestCluster& cluster, std::size_t alive, const std::string& job,
                             const char* what) {
  auto status = cluster.wait_for_status(
      [alive](const ClusterStatus& s) { return s.count("alive") == alive; }, 15s);
  ASSERT_TRUE(status) << cluster.last_status_text();
  EXPECT_EQ(status->json().at("head").at("resumed_jobs"), 1);
  EXPECT_EQ(status->json().at("head").at("failed_jobs"), 0);
  const std::vector<ProcessInfo> left = job_processes_left(job, 15s);
  EXPECT_TRUE(left.empty()) << what << " of the finished job still run:\n" << describe(left);
}

TEST_F(JobHeadRestart, ARunningJobGoesOnWithItsTrainersAfterTheHeadRestarts) {
  auto& cluster = start_cluster();
  for (const auto* worker : {"w1", "w2", "w3"}) start_worker(worker);
  for (const auto* worker : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  ScratchDir scratch("head-restart");
  JobRun done(cluster, scratch.write("short.toml", synthetic_elastic_job("short", 20, 3)),
              scratch.path() / "short");
  auto done_summary = done.wait_finished(90s);
  ASSERT_TRUE(done_summary) << done.describe();
  ASSERT_EQ(done_summary->at("status"), "succeeded") << done.describe();

  constexpr std::int64_t kSteps = 400;
  JobRun running(cluster, scratch.write("long.toml", synthetic_elastic_job("long", kSteps, 5)),
                 scratch.path() / "long");
  ASSERT_TRUE(running.wait_for_event("step", 60s, [](const Json& e) {
    return e.at("step").get<int>() >= 5;
  })) << running.describe();
  const auto trainers_before = job_trainer_processes(running.id());
  ASSERT_EQ(trainers_before.size(), 3u) << describe(trainers_before);
  auto before = cluster.status();
  ASSERT_TRUE(before);
  // A follower of the running job rides through the restart and ends with the job's outcome.
  ChildProcess follow({omnilearn_binary().string(), "logs", running.id(), "--address",
                       cluster.address(), "--follow"},
                      omnilearn_process_options({}));
  ASSERT_TRUE(follow.wait_for_output("step", 20s)) << follow.describe();

  cluster.kill_head();
  std::this_thread::sleep_for(500ms);
  cluster.restart_head();

  auto summary = running.wait_finished(180s);
  ASSERT_TRUE(summary) << running.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  const auto& events = running.events();
  const int spawns = expect_each_step_once(events, kSteps);
  auto restarted = running.wait_for_event("head_restarted", 1s);
  ASSERT_TRUE(restarted) << running.describe();
  EXPECT_EQ(restarted->at("head_epoch"), 2);
  EXPECT_EQ(restarted->at("resumed"), true);
  EXPECT_GE(restarted->at("outage_s").get<double>(), 0.4) << *restarted;
  // The same three trainer processes trained on: the job spawned none after the restart.
  double first_step_after = -1;
  for (const auto& e : events) {
    if (first_step_after < 0 && e.value("event", "") == "step" &&
        e.at("time").get<double>() > restarted->at("time").get<double>()) {
      first_step_after = e.at("time").get<double>() - restarted->at("time").get<double>();
    }
  }
  EXPECT_EQ(spawns, 3) << "trainers were started again";
  std::printf("head back -> next committed step: %.3f s\n", first_step_after);

  auto followed = follow.wait_exit(45s);
  ASSERT_TRUE(followed) << "still following after the job ended: " << follow.describe();
  EXPECT_EQ(followed->code, 0) << follow.describe();
  EXPECT_NE(follow.output(Stream::kStdout).find("succeeded"), std::string::npos)
      << follow.describe();

  // `logs` answers for both jobs from the new head.
  auto logs = run_omnilearn({"logs", done.id(), "--address", cluster.address()}, 15s);
  EXPECT_EQ(logs.status.code, 0) << logs.err;
  EXPECT_NE(logs.out.find("succeeded"), std::string::npos) << logs.out;

  // The workers kept their identity, and the head says what it restored.
  auto after =
      cluster.wait_for_status([](const ClusterStatus& s) { return s.count("alive") == 3; }, 15s);
  ASSERT_TRUE(after) << cluster.last_status_text();
  for (const auto* name : {"w1", "w2", "w3"}) {
    EXPECT_EQ(after->node(name)->at("id"), before->node(name)->at("id")) << name;
    EXPECT_EQ(after->node(name)->at("incarnation"), before->node(name)->at("incarnation"));
  }
  const auto& head = after->json().at("head");
  EXPECT_EQ(head.at("epoch"), 2);
  EXPECT_EQ(head.at("restored_jobs"), 2);
  EXPECT_EQ(head.at("resumed_jobs"), 1);
  EXPECT_EQ(head.at("failed_jobs"), 0);
  const std::vector<ProcessInfo> left = job_processes_left(running.id(), 15s);
  EXPECT_TRUE(left.empty()) << "trainers of the finished job still run:\n" << describe(left);
}

// A head frozen (SIGSTOP) for longer than the heartbeat timeout, a leader's lease and a probe,
// then thawed: the time it did not run is not the nodes' silence, so it declares no node dead,
// its agents stop no trainer, and the job goes on with the same three trainer processes, every
// step committed once.
TEST_F(JobHeadRestart, AJobGoesOnWithItsTrainersAfterTheHeadWasFrozen) {
  auto& cluster = start_cluster();
  for (const auto* worker : {"w1", "w2", "w3"}) start_worker(worker);
  for (const auto* worker : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  ScratchDir scratch("head-frozen");
  constexpr std::int64_t kSteps = 300;
  JobRun running(cluster, scratch.write("job.toml", synthetic_elastic_job("frozen", kSteps, 5)),
                 scratch.path() / "run");
  ASSERT_TRUE(running.wait_for_event("step", 60s, [](const Json& e) {
    return e.at("step").get<int>() >= 5;
  })) << running.describe();
  auto before = cluster.status();
  ASSERT_TRUE(before);

  auto& head = cluster.head().process();
  ASSERT_TRUE(head.send_signal(SIGSTOP));
  std::this_thread::sleep_for(8s);  // heartbeat timeout 3 s; the agents keep trying
  ASSERT_TRUE(head.send_signal(SIGCONT));
  ASSERT_TRUE(head.wait_for_output("did not run for", 10s, Stream::kStderr)) << head.describe();

  auto summary = running.wait_finished(120s);
  ASSERT_TRUE(summary) << running.describe() << head.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  EXPECT_EQ(expect_each_step_once(running.events(), kSteps), 3) << "trainers were started again";
  for (const auto& e : running.events()) {
    EXPECT_NE(e.value("event", ""), "trainer_gone") << e;
  }
  auto after = cluster.status();
  ASSERT_TRUE(after);
  for (const auto* name : {"w1", "w2", "w3"}) {
    EXPECT_EQ(after->state(name), "alive") << name;
    EXPECT_EQ(after->node(name)->at("id"), before->node(name)->at("id")) << name;
    EXPECT_EQ(after->node(name)->at("incarnation"), before->node(name)->at("incarnation"));
  }
  const std::vector<ProcessInfo> left = job_processes_left(running.id(), 15s);
  EXPECT_TRUE(left.empty()) << "trainers of the finished job still run:\n" << describe(left);
}

// A graceful stop (SIGTERM, as systemd or Kubernetes send) of a head whose state is on disk
// leaves the running job to the next head, as a kill -9 does: the head says so, its trainers
// keep running without it, and a head started again on the same port and state resumes the
// job with the same three trainer processes, every step committed once.
TEST_F(JobHeadRestart, AGracefulStopLeavesTheRunningJobToTheNextHead) {
  auto& cluster = start_cluster();
  for (const auto* worker : {"w1", "w2", "w3"}) start_worker(worker);
  for (const auto* worker : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  ScratchDir scratch("head-graceful");
  constexpr std::int64_t kSteps = 300;
  JobRun running(cluster, scratch.write("job.toml", synthetic_elastic_job("graceful", kSteps, 9)),
                 scratch.path() / "run");
  ASSERT_TRUE(running.wait_for_event("step", 60s, [](const Json& e) {
    return e.at("step").get<int>() >= 5;
  })) << running.describe();
  const auto pids = [&] {
    std::set<pid_t> out;
    for (const auto& p : job_trainer_processes(running.id())) out.insert(p.pid);
    return out;
  };
  const std::set<pid_t> before = pids();
  ASSERT_EQ(before.size(), 3u) << describe(job_trainer_processes(running.id()));

  auto& head = cluster.head().process();
  auto stopped = cluster.stop_head(SIGTERM);
  ASSERT_TRUE(stopped) << "the head did not stop on SIGTERM: " << head.describe();
  EXPECT_EQ(stopped->to_string(), "exit 0") << head.describe();
  EXPECT_NE(head.output(Stream::kStderr).find("running jobs and their trainers go on"),
            std::string::npos)
      << head.describe();
  EXPECT_EQ(head.output(Stream::kStderr).find("head shutting down"), std::string::npos)
      << head.describe();
  // Nothing ended the job: no "finished" event, and its trainers outlive the head.
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(events_named(running.events(), "finished").empty()) << running.describe();
  EXPECT_EQ(pids(), before) << describe(job_trainer_processes(running.id()));
  cluster.restart_head();

  auto summary = running.wait_finished(180s);
  ASSERT_TRUE(summary) << running.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  EXPECT_EQ(expect_each_step_once(running.events(), kSteps), 3) << "trainers were started again";
  auto restarted = running.wait_for_event("head_restarted", 1s);
  ASSERT_TRUE(restarted) << running.describe();
  EXPECT_EQ(restarted->at("head_epoch"), 2);
  EXPECT_EQ(restarted->at("resumed"), true);
  expect_resumed_and_gone(cluster, 3, running.id(), "trainers");
}

// With the state in memory (`--store memory:`) no head can resume a job: a graceful stop stops
// the running job's trainers, as it always did, and says so.
TEST_F(JobHeadRestart, AGracefulStopOfAHeadWithoutDurableStateStopsTheTrainers) {
  HeadOptions options = job_head_options();
  options.extra_args = {"--store", "memory:"};
  auto& cluster = start_cluster(options);
  for (const auto* worker : {"w1", "w2"}) start_worker(worker);
  for (const auto* worker : {"w1", "w2"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  ScratchDir scratch("head-graceful-memory");
  JobRun running(cluster, scratch.write("job.toml", synthetic_elastic_job("memory", 2000, 9)),
                 scratch.path() / "run");
  ASSERT_TRUE(running.wait_for_event("step", 60s, [](const Json& e) {
    return e.at("step").get<int>() >= 5;
  })) << running.describe();
  ASSERT_EQ(job_trainer_processes(running.id()).size(), 2u);

  auto& head = cluster.head().process();
  auto stopped = cluster.stop_head(SIGTERM);
  ASSERT_TRUE(stopped) << "the head did not stop on SIGTERM: " << head.describe();
  EXPECT_EQ(stopped->to_string(), "exit 0") << head.describe();
  EXPECT_NE(head.output(Stream::kStderr).find("running jobs are stopped"), std::string::npos)
      << head.describe();
  const std::vector<ProcessInfo> left = job_processes_left(running.id(), 15s);
  EXPECT_TRUE(left.empty()) << "trainers outlived a head that kept nothing:\n" << describe(left);
  for (const auto* worker : {"w1", "w2"}) {
    EXPECT_TRUE(cluster.worker(worker).wait_for_output("head shutting down", 5s, Stream::kStderr))
        << cluster.worker(worker).describe();
  }
}

// The same for an asynchronous job: kill -9 of the head mid-job and a new head 0.5 s later.
// The parameter server and the workers are the same processes after it (nothing is spawned
// again), and the job's own accounting says every sample was taken once per epoch: the dealer
// accepted epochs x N samples, and the server applied exactly the updates the job counted.
TEST_F(JobHeadRestart, AnAsynchronousJobGoesOnWithItsServersAndWorkers) {
  auto& cluster = start_cluster();
  // Slowed x4, so that the kill lands mid-job.
  start_worker("w1", {"--slowdown", "4"});
  start_worker("w2", {"--slowdown", "4"});
  for (const auto* worker : {"w1", "w2"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  ScratchDir scratch("head-restart-asp");
  constexpr int kEpochs = 40;
  const std::string job = synthetic_asp_job("asp-restart", kEpochs);
  JobRun run(cluster, scratch.write("asp.toml", job), scratch.path() / "asp");
  ASSERT_TRUE(run.wait_for_event("asp_interval", 90s, [](const Json& e) {
    return e.at("step").get<int>() >= 20;
  })) << run.describe();
  const auto pids = [&] {
    std::set<pid_t> out;
    for (const auto& p : job_trainer_processes(run.id())) out.insert(p.pid);
    return out;
  };
  const std::set<pid_t> before = pids();
  ASSERT_EQ(before.size(), 3u) << describe(job_trainer_processes(run.id()));

  cluster.kill_head();
  std::this_thread::sleep_for(500ms);
  cluster.restart_head();

  // Training goes on under the new head with the same processes.
  auto back = run.wait_for_event("head_restarted", 30s);
  ASSERT_TRUE(back) << run.describe();
  const double back_at = back->at("time").get<double>();
  ASSERT_TRUE(run.wait_for_event("asp_interval", 60s, [&](const Json& e) {
    return e.at("time").get<double>() > back_at && e.value("updates", 0) > 0;
  })) << run.describe();
  EXPECT_EQ(pids(), before) << describe(job_trainer_processes(run.id()));

  auto summary = run.wait_finished(150s);
  ASSERT_TRUE(summary) << run.describe();
  SCOPED_TRACE(summary->dump(2));
  expect_every_sample_once(*summary, kEpochs);
  const auto& sampling = summary->at("sampling");

  auto restarted = run.wait_for_event("head_restarted", 1s);
  ASSERT_TRUE(restarted) << run.describe();
  EXPECT_EQ(restarted->at("head_epoch"), 2);
  EXPECT_EQ(restarted->at("resumed"), true);
  int spawns = 0, undelivered = 0;
  double first_update_after = -1;
  for (const auto& e : run.events()) {
    if (e.value("event", "") == "spawn") ++spawns;
    if (e.value("event", "") == "batch_undelivered") ++undelivered;
    if (first_update_after < 0 && e.value("event", "") == "asp_interval" &&
        e.at("time").get<double>() > restarted->at("time").get<double>() &&
        e.value("updates", 0) > 0) {
      first_update_after = e.at("time").get<double>() - restarted->at("time").get<double>();
    }
  }
  EXPECT_EQ(spawns, 3) << "servers or workers were started again";
  // Intervals are written once a second: an upper bound of the time to the next update.
  std::printf(
      "ASP: head back -> end of the first 1 s interval with updates: %.3f s; %d batches dealt "
      "again as undelivered, %lld pushes reported again\n",
      first_update_after, undelivered,
      static_cast<long long>(sampling.at("duplicates").get<std::int64_t>()));

  expect_resumed_and_gone(cluster, 2, run.id(), "servers or workers");
}

// The same freeze under an asynchronous job: the parameter server and the workers go on as the
// same processes, and every sample is taken once per epoch.
TEST_F(JobHeadRestart, AnAsynchronousJobGoesOnWithItsProcessesAfterTheHeadWasFrozen) {
  auto& cluster = start_cluster();
  start_worker("w1", {"--slowdown", "4"});
  start_worker("w2", {"--slowdown", "4"});
  for (const auto* worker : {"w1", "w2"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(worker, 15s)) << cluster.worker(worker).describe();
  }
  ScratchDir scratch("head-frozen-asp");
  constexpr int kEpochs = 40;
  JobRun run(cluster, scratch.write("asp.toml", synthetic_asp_job("asp-frozen", kEpochs)),
             scratch.path() / "asp");
  ASSERT_TRUE(run.wait_for_event("asp_interval", 90s, [](const Json& e) {
    return e.at("step").get<int>() >= 20;
  })) << run.describe();
  ASSERT_EQ(job_trainer_processes(run.id()).size(), 3u);

  auto& head = cluster.head().process();
  ASSERT_TRUE(head.send_signal(SIGSTOP));
  std::this_thread::sleep_for(8s);
  ASSERT_TRUE(head.send_signal(SIGCONT));
  ASSERT_TRUE(head.wait_for_output("did not run for", 10s, Stream::kStderr)) << head.describe();

  auto summary = run.wait_finished(150s);
  ASSERT_TRUE(summary) << run.describe() << head.describe();
  SCOPED_TRACE(summary->dump(2));
  expect_every_sample_once(*summary, kEpochs);
  int spawns = 0;
  for (const auto& e : run.events()) {
    if (e.value("event", "") == "spawn") ++spawns;
    EXPECT_NE(e.value("event", ""), "trainer_gone") << e;
  }
  EXPECT_EQ(spawns, 3) << "servers or workers were started again";
  auto status = cluster.status();
  ASSERT_TRUE(status);
  for (const auto* name : {"w1", "w2"}) EXPECT_EQ(status->state(name), "alive") << name;
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 15s);
  EXPECT_TRUE(left.empty()) << "servers or workers still run:\n" << describe(left);
}

}  // namespace
}  // namespace omnilearn::testing
