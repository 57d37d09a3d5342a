// Fault tests with a job: a node (the leader's, or a follower's) cut off from the head and from
// the other trainers by a network partition (the veth link between two network namespaces this
// test creates goes down). The node is declared dead, the job goes on with the two nodes on the
// head's side, and when the link returns the node rejoins as a new incarnation; the job
// completes every step, its final parameters those of a calm run (float64, to kExactTolerance). The
// same for an asynchronous job whose parameter server, or one of whose workers, is on the cut-off
// node. And the head cut off from every node at once: it declares none dead, and the jobs keep
// their trainers; an active head with a standby cut off from its nodes and from etcd gives way to
// the standby.
// Skipped, with the reason, where network namespaces cannot be created.

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <regex>
#include <thread>

#include "tests/support/etcd.hpp"
#include "tests/support/job_run.hpp"
#include "tests/support/netns.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr std::int64_t kSteps = 300;

const std::string kJob = synthetic_elastic_job("e2e-partition", kSteps, 41, "float64");

std::optional<Json> wait_for_event(const std::filesystem::path& run_dir,
                                   const std::function<bool(const Json&)>& predicate,
                                   std::chrono::milliseconds timeout) {
  std::optional<Json> hit;
  wait_until(
      [&] {
        for (const auto& e : read_events(run_dir)) {
          if (predicate(e)) {
            hit = e;
            return true;
          }
        }
        return false;
      },
      timeout, 100ms);
  return hit;
}

// Matches an event `kind` of a trainer on node `node` (a trainer's name holds its node's).
std::function<bool(const Json&)> trainer_event_on(const std::string& kind,
                                                  const std::string& node) {
  return [kind, part = "-" + node + "-"](const Json& e) {
    return e.value("event", "") == kind && e.value("trainer", "").find(part) != std::string::npos;
  };
}

std::string tail_of(const std::filesystem::path& run_dir) {
  auto events = read_events(run_dir);
  std::string text;
  for (std::size_t i = events.size() > 40 ? events.size() - 40 : 0; i < events.size(); ++i) {
    text += events[i].dump() + "\n";
  }
  return text;
}

// No trainer of the job in `run_dir` runs 30 s after it ended (`suspect`: which one a failure
// would most likely be).
void expect_no_process_left(const std::filesystem::path& run_dir, const std::string& suspect) {
  const auto events = read_events(run_dir);
  ASSERT_FALSE(events.empty());
  const std::vector<ProcessInfo> left =
      job_processes_left(events.front().at("job_id").get<std::string>(), 30s);
  EXPECT_TRUE(left.empty()) << "trainers still running after the job ended (" << suspect
                            << " included?):\n"
                            << describe(left);
}

// A node cut off from the head and from the other two: with `leader`, the node whose trainer
// leads the job (rank 0 of the first generation), else a follower's (rank 2). Ranks follow the
// trainers' names, which begin with their node's: "far" sorts before "near1" and "near2",
// "remote" after them. A cut-off leader can renew no lease, so it commits nothing more; the
// survivors go on as a generation of two under a new leader.
void partition_a_node(bool leader) {
  NetworkPair network;
  std::string why;
  if (!network.create(&why)) GTEST_SKIP() << "partition test skipped: " << why;
  CalmRun calm(kJob, kSteps);
  // Job-test heartbeats (200 ms, dead after 1.5 s): trainers loading LibTorch on two cores.
  NamespacedCluster cluster(network, 200ms, 1500ms);
  const std::string cut = leader ? "far" : "remote";
  cluster.start_worker("near1", Side::kHead);
  cluster.start_worker("near2", Side::kHead);
  auto& far = cluster.start_worker(cut, Side::kWorker);
  ASSERT_TRUE(cluster.wait_for_status(
      [&](const auto& s) {
        return s.state("near1") == "alive" && s.state("near2") == "alive" &&
               s.state(cut) == "alive";
      },
      20s))
      << cluster.last_status_text() << far.describe();

  ScratchDir dir("partition");
  auto run_dir = dir.path() / "run";
  auto submitted = cluster.run({"submit", dir.write("job.toml", kJob).string(), "--run-dir",
                                run_dir.string()});
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  auto training = wait_for_event(run_dir, [](const Json& e) {
    return e.value("event", "") == "step" && e.at("step").get<int>() >= 10 &&
           e.at("batches").size() == 3;
  }, 60s);
  ASSERT_TRUE(training) << tail_of(run_dir) << far.describe();
  const auto first_generation = events_named(read_events(run_dir), "generation").at(0);
  const auto& members = first_generation.at("members");
  const std::string far_rank = members.at(leader ? 0 : 2).get<std::string>();
  ASSERT_NE(far_rank.find("-" + cut + "-"), std::string::npos)
      << "the cut-off node's trainer is not rank " << (leader ? 0 : 2) << ": " << first_generation;

  network.set_link_up(false);
  auto dead = cluster.wait_for_status([&](const auto& s) { return s.state(cut) == "dead"; }, 20s);
  ASSERT_TRUE(dead) << cluster.last_status_text();
  // The survivors' collective with the unreachable trainer fails (by its timeout: a partition
  // resets no connection), then they go on as a generation of two.
  auto resumed = wait_for_event(run_dir, [](const Json& e) {
    return e.value("event", "") == "step" && e.at("batches").size() == 2;
  }, 60s);
  ASSERT_TRUE(resumed) << "the job did not go on without the partitioned node\n" << tail_of(run_dir);
  const auto resumed_step = resumed->at("step").get<std::int64_t>();
  ASSERT_TRUE(wait_for_event(run_dir, [&](const Json& e) {
    return e.value("event", "") == "step" && e.at("step").get<std::int64_t>() >= resumed_step + 5;
  }, 30s)) << tail_of(run_dir);

  network.set_link_up(true);
  auto back = cluster.wait_for_status(
      [&](const auto& s) { return s.nodes_named(cut).size() == 2 && s.state(cut) == "alive"; },
      30s);
  ASSERT_TRUE(back) << "the node did not rejoin after the link came back: "
                    << cluster.last_status_text() << "\n" << far.describe();
  EXPECT_EQ(back->nodes_named(cut)[0]["state"], "dead");

  std::optional<Json> summary;
  wait_until([&] { return (summary = read_summary(run_dir)).has_value(); }, 120s, 200ms);
  ASSERT_TRUE(summary) << tail_of(run_dir);
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  EXPECT_EQ(summary->at("lost_steps"), 0);
  std::int64_t previous = 0;
  for (const auto& e : events_named(read_events(run_dir), "step")) {
    const auto step = e.at("step").get<std::int64_t>();
    ASSERT_GT(step, previous);
    previous = step;
  }
  EXPECT_EQ(previous, kSteps);
  calm.expect_equal(summary->at("checkpoint").get<std::string>());
}

TEST(JobPartition, APartitionedFollowerIsLeftBehindAndRejoinsWhenTheLinkReturns) {
  partition_a_node(false);
}

TEST(JobPartition, APartitionedLeaderIsLeftBehindAndTheOthersGoOnUnderANewOne) {
  partition_a_node(true);
}

// The head's own network goes down for several heartbeat timeouts while every node and every
// trainer is on the other side: the head hears nobody, but nothing says the nodes are gone (they
// train on among themselves). It declares none of them dead and writes off no trainer for the
// probes that went into the outage. When the link returns the same nodes (same ids) finish the
// job, every step committed once, its final parameters those of a calm run. With `kill_one`,
// w3's trainer is killed while the link is down: its agent reports the exit again once the
// head answers, and the job replaces that one trainer alone.
void cut_the_head_off(bool kill_one) {
  NetworkPair network;
  std::string why;
  if (!network.create(&why)) GTEST_SKIP() << "partition test skipped: " << why;
  CalmRun calm(kJob, kSteps);
  NamespacedCluster cluster(network, 200ms, 1500ms);
  std::map<std::string, ChildProcess*> workers;
  for (const auto* name : {"w1", "w2", "w3"}) {
    workers[name] = &cluster.start_worker(name, Side::kWorker);
  }
  ASSERT_TRUE(cluster.wait_for_status(
      [](const auto& s) {
        return s.state("w1") == "alive" && s.state("w2") == "alive" && s.state("w3") == "alive";
      },
      20s))
      << cluster.last_status_text();
  auto before = cluster.status();
  ASSERT_TRUE(before);

  ScratchDir dir("partition-head");
  auto run_dir = dir.path() / "run";
  auto submitted = cluster.run({"submit", dir.write("job.toml", kJob).string(), "--run-dir",
                                run_dir.string()});
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  ASSERT_TRUE(wait_for_event(run_dir, [](const Json& e) {
    return e.value("event", "") == "step" && e.at("step").get<int>() >= 10 &&
           e.at("batches").size() == 3;
  }, 60s)) << tail_of(run_dir);
  const std::string job_id = read_events(run_dir).front().at("job_id").get<std::string>();

  network.set_link_up(false);
  std::this_thread::sleep_for(2500ms);  // heartbeat timeout 1.5 s
  if (kill_one) {
    pid_t victim = 0;
    for (const auto& p : job_trainer_processes(job_id)) {
      if (p.command_line.find("-w3-") != std::string::npos) victim = p.pid;
    }
    ASSERT_GT(victim, 0) << describe(job_trainer_processes(job_id));
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
  }
  std::this_thread::sleep_for(2500ms);
  network.set_link_up(true);
  auto& head = cluster.head();
  ASSERT_TRUE(head.wait_for_output("heard from no node", 10s, Stream::kStderr))
      << head.describe();
  if (kill_one) {
    ASSERT_TRUE(workers["w3"]->wait_for_output("reporting again 1 trainer exit", 20s,
                                               Stream::kStderr))
        << workers["w3"]->describe();
  }

  std::optional<Json> summary;
  wait_until([&] { return (summary = read_summary(run_dir)).has_value(); }, 120s, 200ms);
  ASSERT_TRUE(summary) << tail_of(run_dir) << head.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  const auto events = read_events(run_dir);
  EXPECT_EQ(expect_each_step_once(events, kSteps), kill_one ? 4 : 3)
      << "trainers other than the killed one were started again";
  for (const auto& e : events) {
    if (e.value("event", "") != "trainer_gone") continue;
    EXPECT_TRUE(kill_one && e.value("trainer", "").find("-w3-") != std::string::npos) << e;
  }
  calm.expect_equal(summary->at("checkpoint").get<std::string>());
  auto after = cluster.status();
  ASSERT_TRUE(after);
  for (const auto* name : {"w1", "w2", "w3"}) {
    EXPECT_EQ(after->nodes_named(name).size(), 1u) << name << " registered again";
    EXPECT_EQ(after->state(name), "alive") << name;
    EXPECT_EQ(after->node(name)->at("id"), before->node(name)->at("id")) << name;
  }
}

TEST(JobPartition, AHeadCutOffFromEveryNodeKeepsTheNodesAndTheirTrainers) {
  cut_the_head_off(false);
}

TEST(JobPartition, AHeadCutOffFromEveryNodeHearsOfATrainerThatDiedMeanwhile) {
  cut_the_head_off(true);
}

// The same outage with an asynchronous job: the server and both workers on the far side of the
// head's link, periodic checkpoints (so that the head pulls copies, which go unanswered while
// the link is down). The head declares no node dead and restarts no shard: the same three
// processes take every sample of every epoch once.
TEST(JobPartition, AnAsynchronousJobKeepsItsProcessesWhileTheHeadIsCutOff) {
  NetworkPair network;
  std::string why;
  if (!network.create(&why)) GTEST_SKIP() << "partition test skipped: " << why;
  constexpr int kEpochs = 40;
  const std::string job =
      synthetic_asp_job("e2e-partition-head-asp", kEpochs) + "\n[checkpoint]\nevery = 20\n";
  NamespacedCluster cluster(network, 200ms, 1500ms);
  for (const auto* name : {"w1", "w2"}) {
    cluster.start_worker(name, Side::kWorker, {"--slowdown", "4"});
  }
  ASSERT_TRUE(cluster.wait_for_status(
      [](const auto& s) { return s.state("w1") == "alive" && s.state("w2") == "alive"; }, 20s))
      << cluster.last_status_text();
  ScratchDir dir("partition-head-asp");
  auto run_dir = dir.path() / "run";
  auto submitted = cluster.run({"submit", dir.write("job.toml", job).string(), "--run-dir",
                                run_dir.string()});
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  ASSERT_TRUE(wait_for_event(run_dir, [](const Json& e) {
    return e.value("event", "") == "asp_interval" && e.at("step").get<int>() >= 20;
  }, 90s)) << tail_of(run_dir);

  network.set_link_up(false);
  std::this_thread::sleep_for(5s);  // heartbeat timeout 1.5 s
  network.set_link_up(true);
  auto& head = cluster.head();
  ASSERT_TRUE(head.wait_for_output("heard from no node", 10s, Stream::kStderr))
      << head.describe();

  std::optional<Json> summary;
  wait_until([&] { return (summary = read_summary(run_dir)).has_value(); }, 150s, 200ms);
  ASSERT_TRUE(summary) << tail_of(run_dir) << head.describe();
  SCOPED_TRACE(summary->dump(2));
  expect_every_sample_once(*summary, kEpochs);
  int spawns = 0;
  for (const auto& e : read_events(run_dir)) {
    if (e.value("event", "") == "spawn") ++spawns;
    EXPECT_NE(e.value("event", ""), "trainer_gone") << e;
  }
  EXPECT_EQ(spawns, 3) << "servers or workers were started again";
  auto after = cluster.status();
  ASSERT_TRUE(after);
  for (const auto* name : {"w1", "w2"}) {
    EXPECT_EQ(after->nodes_named(name).size(), 1u) << name << " registered again";
  }
}

// An asynchronous job (mode = "asp") whose only server is on the partitioned node, with one of
// its two workers: the node is declared dead, the shard restarts on the head's side from the
// head's copy of its last checkpoint, and the job goes on with the worker there. The cut-off
// server still serves the worker beside it (same side of the link), which cannot reach the
// head for a new batch: nothing they do reaches the restarted shard. When the link returns the
// node rejoins as a new incarnation, its agent stops the stale trainers, and the job finishes
// with every sample of every epoch accepted exactly once.
TEST(JobPartition, AnAsynchronousJobsServerCutOffRestartsOnTheHeadsSide) {
  NetworkPair network;
  std::string why;
  if (!network.create(&why)) GTEST_SKIP() << "partition test skipped: " << why;
  constexpr int kEpochs = 60;
  // One server, one or two workers; periodic checkpoints, so that the head has a copy.
  const std::string job =
      synthetic_asp_job("e2e-partition-asp", kEpochs) + "\n[checkpoint]\nevery = 20\n";
  NamespacedCluster cluster(network, 200ms, 1500ms);
  // The far node alone first, so that the server is placed there; slowed x4 (as the other
  // asynchronous fault tests) so that the fault lands mid-job.
  auto& far = cluster.start_worker("far", Side::kWorker, {"--slowdown", "4"});
  ASSERT_TRUE(cluster.wait_for_status([](const auto& s) { return s.state("far") == "alive"; }, 20s))
      << cluster.last_status_text() << far.describe();
  ScratchDir dir("partition-asp");
  auto run_dir = dir.path() / "run";
  auto submitted = cluster.run({"submit", dir.write("job.toml", job).string(), "--run-dir",
                                run_dir.string()});
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  auto ready = wait_for_event(run_dir, [](const Json& e) {
    return e.value("event", "") == "server_ready";
  }, 60s);
  ASSERT_TRUE(ready) << tail_of(run_dir) << far.describe();
  ASSERT_EQ(ready->at("node"), "far");
  auto& near = cluster.start_worker("near", Side::kHead, {"--slowdown", "4"});
  ASSERT_TRUE(wait_for_event(run_dir, [](const Json& e) {
    return e.value("event", "") == "worker_joined" && e.value("node", "") == "near";
  }, 60s)) << tail_of(run_dir) << near.describe();
  ASSERT_TRUE(wait_for_event(run_dir, [](const Json& e) {
    return e.value("event", "") == "checkpoint";
  }, 60s)) << tail_of(run_dir);

  network.set_link_up(false);
  const double cut_at = std::chrono::duration<double>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  ASSERT_TRUE(cluster.wait_for_status([](const auto& s) { return s.state("far") == "dead"; }, 20s))
      << cluster.last_status_text();
  auto restarted = wait_for_event(run_dir, [](const Json& e) {
    return e.value("event", "") == "server_ready" && e.value("incarnation", 0) > 0;
  }, 60s);
  ASSERT_TRUE(restarted) << "the shard did not restart on the head's side\n" << tail_of(run_dir);
  EXPECT_EQ(restarted->at("node"), "near");
  // Updates on the head's side after the restart.
  const double restarted_at = restarted->at("time").get<double>();
  ASSERT_TRUE(wait_for_event(run_dir, [&](const Json& e) {
    return e.value("event", "") == "asp_interval" && e.at("time").get<double>() > restarted_at &&
           e.value("updates", 0) > 0;
  }, 30s)) << "no update after the restart\n" << tail_of(run_dir);

  network.set_link_up(true);
  ASSERT_TRUE(cluster.wait_for_status(
      [](const auto& s) { return s.nodes_named("far").size() == 2 && s.state("far") == "alive"; },
      30s))
      << "the node did not rejoin after the link came back: " << cluster.last_status_text()
      << "\n" << far.describe();

  std::optional<Json> summary;
  wait_until([&] { return (summary = read_summary(run_dir)).has_value(); }, 240s, 200ms);
  ASSERT_TRUE(summary) << tail_of(run_dir);
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("servers")[0].at("restarts"), 1);
  EXPECT_EQ(summary->at("sampling").at("samples_accepted"), kEpochs * kSyntheticAspSamples);
  EXPECT_EQ(summary->at("sampling").at("duplicates"), 0);
  std::printf("server cut off: listening again on the head's side %.1f s after the cut, "
              "%lld..%lld updates lost\n",
              restarted_at - cut_at,
              static_cast<long long>(summary->at("updates_lost").get<std::int64_t>()),
              static_cast<long long>(summary->at("updates_lost_at_most").get<std::int64_t>()));
  expect_no_process_left(run_dir, "the stale server");
}

// An asynchronous job's worker cut off alone: the server and the other worker stay on the head's
// side. The cut-off node is declared dead, its worker written off and the batches it held dealt
// again; the job goes on with the worker beside the server. When the link returns the node
// rejoins as a new incarnation and its agent stops the stale worker, whose pushes, if any still
// reach the server, change nothing: the job finishes with every sample of every epoch accepted
// exactly once, and the server never restarts.
TEST(JobPartition, AnAsynchronousJobsWorkerCutOffIsWrittenOffAndItsBatchesDealtAgain) {
  NetworkPair network;
  std::string why;
  if (!network.create(&why)) GTEST_SKIP() << "partition test skipped: " << why;
  constexpr int kEpochs = 60;
  const std::string job = synthetic_asp_job("e2e-partition-asp-worker", kEpochs);
  NamespacedCluster cluster(network, 200ms, 1500ms);
  // The near node alone first, so that the server is placed there; slowed x4 (as the other
  // asynchronous fault tests) so that the fault lands mid-job.
  auto& near = cluster.start_worker("near", Side::kHead, {"--slowdown", "4"});
  ASSERT_TRUE(
      cluster.wait_for_status([](const auto& s) { return s.state("near") == "alive"; }, 20s))
      << cluster.last_status_text() << near.describe();
  ScratchDir dir("partition-asp-worker");
  auto run_dir = dir.path() / "run";
  auto submitted =
      cluster.run({"submit", dir.write("job.toml", job).string(), "--run-dir", run_dir.string()});
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  auto ready = wait_for_event(
      run_dir, [](const Json& e) { return e.value("event", "") == "server_ready"; }, 60s);
  ASSERT_TRUE(ready) << tail_of(run_dir) << near.describe();
  ASSERT_EQ(ready->at("node"), "near");
  auto& far = cluster.start_worker("far", Side::kWorker, {"--slowdown", "4"});
  auto far_pushed = wait_for_event(run_dir, trainer_event_on("first_push", "far"), 60s);
  ASSERT_TRUE(far_pushed) << tail_of(run_dir) << far.describe();

  network.set_link_up(false);
  ASSERT_TRUE(cluster.wait_for_status([](const auto& s) { return s.state("far") == "dead"; }, 20s))
      << cluster.last_status_text();
  auto gone = wait_for_event(run_dir, trainer_event_on("trainer_gone", "far"), 30s);
  ASSERT_TRUE(gone) << "the cut-off worker was not written off\n" << tail_of(run_dir);
  const double gone_at = gone->at("time").get<double>();
  ASSERT_TRUE(wait_for_event(
      run_dir,
      [&](const Json& e) {
        return e.value("event", "") == "asp_interval" && e.at("time").get<double>() > gone_at &&
               e.value("updates", 0) > 0;
      },
      30s))
      << "no update after the worker was written off\n"
      << tail_of(run_dir);

  network.set_link_up(true);
  ASSERT_TRUE(cluster.wait_for_status(
      [](const auto& s) { return s.nodes_named("far").size() == 2 && s.state("far") == "alive"; },
      30s))
      << "the node did not rejoin after the link came back: " << cluster.last_status_text() << "\n"
      << far.describe();

  std::optional<Json> summary;
  wait_until([&] { return (summary = read_summary(run_dir)).has_value(); }, 240s, 200ms);
  ASSERT_TRUE(summary) << tail_of(run_dir);
  SCOPED_TRACE(summary->dump(2));
  expect_every_sample_once(*summary, kEpochs);
  EXPECT_EQ(summary->at("sampling").at("duplicates"), 0);
  std::printf("worker cut off: written off with %lld samples held\n",
              static_cast<long long>(gone->value("samples_held", std::int64_t{0})));
  expect_no_process_left(run_dir, "the stale worker");
}

// The active head cut off from everything, its nodes, its standby and etcd, while a job runs:
// it cannot renew its lease, so it stops acting and exits just before the lease's TTL is out,
// before etcd can let the standby be elected: at no moment are two heads active. The standby,
// on the nodes' side, is elected, takes the job over with the same trainers (the agents follow
// it through --other-heads) and the job completes every step once, its final parameters those
// of a calm run. A TTL of 5 s: the old head exits at least 0.5 s before the new one can start.
TEST(JobPartition, AnActiveHeadCutOffFromEverythingGivesWayToItsStandby) {
  if (auto why = EtcdCluster::unavailable(); !why.empty()) GTEST_SKIP() << why;
  NetworkPair network;
  std::string why;
  if (!network.create(&why)) GTEST_SKIP() << "partition test skipped: " << why;
  CalmRun calm(kJob, kSteps);
  ScratchDir dir("partition-standby");
  // etcd on the nodes' side: cutting the link cuts the active head off from it too. Three
  // members, as a cluster runs it: a renewal then tries each in turn, each connect getting no
  // answer for a second, longer than the time between two renewals.
  EtcdCluster etcd(3, dir.path() / "etcd", NetworkPair::kWorkerAddress,
                   network.in_worker_namespace());
  const std::string store = etcd.store("cut-off");
  NamespacedCluster cluster(network, 200ms, 1500ms, {"--store", store, "--lease-ttl-s", "5"});
  std::vector<std::string> standby_command = network.in_worker_namespace();
  const std::vector<std::string> head_args{omnilearn_binary().string(),
                                           "head",
                                           "--host",
                                           NetworkPair::kWorkerAddress,
                                           "--port",
                                           "0",
                                           "--heartbeat-interval-ms",
                                           "200",
                                           "--heartbeat-timeout-ms",
                                           "1500",
                                           "--store",
                                           store,
                                           "--lease-ttl-s",
                                           "5",
                                           "--standby"};
  standby_command.insert(standby_command.end(), head_args.begin(), head_args.end());
  ChildProcess standby(standby_command, omnilearn_process_options({.name = "standby"}));
  static const std::regex kWaiting(R"(standby on (\S+): waiting for the active head)");
  auto waiting = standby.wait_for_output(kWaiting, 20s);
  std::smatch match;
  ASSERT_TRUE(waiting && std::regex_search(*waiting, match, kWaiting)) << standby.describe();
  const std::string standby_address = match[1].str();
  for (const auto* name : {"w1", "w2", "w3"}) {
    cluster.start_worker(name, Side::kWorker, {"--other-heads", standby_address});
  }
  ASSERT_TRUE(cluster.wait_for_status(
      [](const auto& s) {
        return s.state("w1") == "alive" && s.state("w2") == "alive" && s.state("w3") == "alive";
      },
      20s))
      << cluster.last_status_text();

  auto run_dir = dir.path() / "run";
  auto submitted =
      cluster.run({"submit", dir.write("job.toml", kJob).string(), "--run-dir", run_dir.string()});
  ASSERT_EQ(submitted.status.code, 0) << submitted.err;
  ASSERT_TRUE(wait_for_event(
      run_dir,
      [](const Json& e) {
        return e.value("event", "") == "step" && e.at("step").get<int>() >= 10 &&
               e.at("batches").size() == 3;
      },
      60s))
      << tail_of(run_dir);

  network.set_link_up(false);
  auto& active = cluster.head();
  auto exit = active.wait_exit(15s);
  ASSERT_TRUE(exit) << "the cut-off head is still running: " << active.describe();
  EXPECT_EQ(standby.output(Stream::kStdout).find("listening on"), std::string::npos)
      << "the standby was elected while the cut-off head still ran\n"
      << standby.describe() << active.describe();
  EXPECT_EQ(exit->code, 1) << active.describe();
  EXPECT_TRUE(active.wait_for_output("no longer the active head", 1s, Stream::kStderr))
      << active.describe();
  ASSERT_TRUE(standby.wait_for_output("listening on " + standby_address, 20s))
      << standby.describe();
  ASSERT_TRUE(wait_for_event(
      run_dir,
      [](const Json& e) {
        return e.value("event", "") == "head_restarted" && e.value("resumed", false);
      },
      30s))
      << tail_of(run_dir) << standby.describe();
  network.set_link_up(true);

  std::optional<Json> summary;
  wait_until([&] { return (summary = read_summary(run_dir)).has_value(); }, 120s, 200ms);
  ASSERT_TRUE(summary) << tail_of(run_dir) << standby.describe();
  SCOPED_TRACE(summary->dump(2));
  EXPECT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("steps"), kSteps);
  const auto events = read_events(run_dir);
  EXPECT_EQ(expect_each_step_once(events, kSteps), 3) << "trainers were started again";
  calm.expect_equal(summary->at("checkpoint").get<std::string>());
  standby.kill_and_reap();
  expect_no_process_left(run_dir, "a trainer of the cut-off head's time");
}

}  // namespace
}  // namespace omnilearn::testing
