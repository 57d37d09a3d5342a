// Asynchronous training (mode = "asp") end to end, with real processes on loopback:
// parameter-server trainers holding shards of the flat parameter vector, worker trainers
// pulling, computing and pushing, the head's scheduler dealing every batch.
//
// - One worker in ASP is plain SGD: the same final parameters as BSP with one worker (1e-6),
//   with the parameters cut into two shards.
// - Workers of different speeds (slowdown 1 and 3) use every sample exactly once per epoch, and
//   staleness is measured; under "bound" every push is applied or counted as dropped.
// - kill -9 of a worker trainer: the job goes on (its batch dealt again) and finishes.
// - kill -9 of a server: restarted from its last checkpoint, the job finishes, and the summary
//   counts the updates lost; kill -9 of the node hosting it: restarted on the other node.
// - A worker node's agent frozen while its trainer keeps pushing: the worker's batches are
//   fenced off the server before they are dealt again; nothing it pushes later is applied.
// - A server's agent frozen while the server keeps serving: replaced on the other node, the
//   job finishes, and the stale server is gone once its agent thaws.
// - Drain of the server's node: the shard is handed over (a checkpoint at its last version) and
//   restarts on the other node without losing an update.
// - A worker joining mid-job pushes soon after its hello (measured from the events; the bound
//   asserted is generous, the figure printed).
// No timing is asserted beyond generous bounds; every process is cleaned up by JobTest.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/support/job_run.hpp"
#include "tests/support/torch_python.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

// A small MLP on synthetic data; N = 1024 is a multiple of every batch below, so that BSP and
// the dealer cut epochs alike.
// Several workers push full steps asynchronously: they train at a lower learning rate than a
// single worker (lr 0.05 with momentum 0.9 made two workers' loss diverge).
std::string job(const std::string& name, const std::string& mode, const std::string& train,
                const std::string& extra, int min_workers, int max_workers,
                const std::string& lr = "0.05") {
  return R"(
[job]
name = ")" +
         name + R"("
mode = ")" +
         mode + R"("

[model]
kind = "mlp"
hidden = [32]

[data]
dataset = "synthetic"
train_size = 1024
test_size = 256

[train]
global_batch = 64
optimizer = "sgd"
lr = )" + lr +
         R"(
momentum = 0.9
seed = 7
)" + train +
         R"(

[controller]
policy = "proportional"
min_batch = 4
interval = 10
cooldown = 2

[elastic]
min_workers = )" +
         std::to_string(min_workers) + R"(
max_workers = )" +
         std::to_string(max_workers) + "\n" + extra;
}

class JobAsp : public JobTest {
 protected:
  std::unique_ptr<JobRun> submit(const std::string& name, const std::string& text) {
    auto file = scratch_->write(name + ".toml", text);
    return std::make_unique<JobRun>(cluster(), file, scratch_->path() / ("run-" + name));
  }
  void start(const std::vector<std::string>& workers,
             const std::vector<std::vector<std::string>>& args = {}) {
    scratch_ = std::make_unique<ScratchDir>("omnilearn-asp");
    auto& cluster = start_cluster();
    for (std::size_t i = 0; i < workers.size(); ++i) {
      start_worker(workers[i], i < args.size() ? args[i] : std::vector<std::string>{});
    }
    for (const auto& w : workers) {
      ASSERT_TRUE(cluster.wait_worker_joined(w, 20s)) << cluster.worker(w).describe();
    }
  }
  // The fault tests' job: two nodes slowed x4 (so that a fault lands mid-job), one to two
  // workers, kFaultEpochs epochs; `extra` follows [elastic] ([asp], [checkpoint]).
  static constexpr int kFaultEpochs = 60;
  std::unique_ptr<JobRun> start_fault_job(const std::string& name, const std::string& extra) {
    start({"w1", "w2"}, {{"--slowdown", "4"}, {"--slowdown", "4"}});
    if (::testing::Test::HasFatalFailure()) return nullptr;
    return submit(name, job("asp-" + name, "asp", "epochs = " + std::to_string(kFaultEpochs),
                            extra, 1, 2, "0.01"));
  }
  // The node the job's (first) server was spawned on.
  static std::string server_node(JobRun& run) {
    auto server = run.wait_for_event("spawn", 30s,
                                     [](const Json& e) { return e.value("role", "") == "server"; });
    if (!server) {
      ADD_FAILURE() << "no server spawned\n" << run.describe();
      return "";
    }
    return server->at("node");
  }
  // No trainer of the job is left once it ended (`which` says who could have been).
  static void expect_trainers_gone(const JobRun& run, const char* which,
                                   std::chrono::seconds within) {
    const std::vector<ProcessInfo> left = job_processes_left(run.id(), within);
    EXPECT_TRUE(left.empty()) << "trainers (" << which << ") still running after the job ended:\n"
                              << describe(left);
  }
  static std::int64_t latest_step(const JobRun& run) {
    std::int64_t step = 0;
    for (const auto& e : run.events()) {
      if (e.value("event", "") == "asp_interval") step = e.value("step", std::int64_t{0});
    }
    return step;
  }
};

TEST_F(JobAsp, OneWorkerEqualsBspWithOneWorker) {
  std::string why;
  const auto python = find_torch_python(&why);
  if (!python) GTEST_SKIP() << why;
  ASSERT_NO_FATAL_FAILURE(start({"w1"}));
  auto bsp = submit("bsp", job("bsp-one", "bsp", "steps = 40", "", 1, 1));
  auto bsp_summary = bsp->wait_finished(120s);
  ASSERT_TRUE(bsp_summary) << bsp->describe();
  ASSERT_EQ(bsp_summary->at("status"), "succeeded") << bsp->describe();
  auto asp = submit("asp", job("asp-one", "asp", "steps = 40",
                               "\n[asp]\nservers = 2\nstaleness = \"none\"\n", 1, 1));
  auto asp_summary = asp->wait_finished(120s);
  ASSERT_TRUE(asp_summary) << asp->describe();
  ASSERT_EQ(asp_summary->at("status"), "succeeded") << asp->describe();
  EXPECT_EQ(asp_summary->at("mode"), "asp");
  EXPECT_EQ(asp_summary->at("updates"), 40);
  EXPECT_EQ(asp_summary->at("steps"), 40);
  EXPECT_EQ(asp_summary->at("staleness").at("max"), 0);
  EXPECT_EQ(asp_summary->at("dropped_stale"), 0);

  const std::string a = bsp_summary->at("checkpoint");
  const std::string b = asp_summary->at("checkpoint");
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  // Both are PyTorch-loadable; the largest difference of any parameter.
  const auto compared = run_python(
      *python, {"-c",
                "import sys, torch\n"
                "a = torch.load(sys.argv[1])['model']; b = torch.load(sys.argv[2])['model']\n"
                "assert a.keys() == b.keys(), (a.keys(), b.keys())\n"
                "print(max(float((a[k] - b[k]).abs().max()) for k in a))\n",
                a, b});
  ASSERT_EQ(compared.status.code, 0) << compared.out << compared.err;
  const double diff = std::stod(compared.out);
  std::printf("ASP (1 worker, 2 shards) vs BSP (1 worker), 40 steps: max |difference| %.3g\n",
              diff);
  EXPECT_LE(diff, 1e-6) << compared.out;
}

// BatchNorm statistics live on shard 0 and every applied push adds its batch's change: the
// final model's counters count every update of the job, not the finishing worker's own (about
// half of them before), and its running statistics are one average over both workers' batches.
TEST_F(JobAsp, BatchNormStatisticsAreKeptByTheServerForEveryWorker) {
  std::string why;
  const auto python = find_torch_python(&why);
  if (!python) GTEST_SKIP() << why;
  ASSERT_NO_FATAL_FAILURE(start({"w1", "w2"}));
  // Shard checkpoints every 10 updates: the last (at 40) holds the server's statistics as the
  // finishing worker pulled them, before it refreshed them for the final model.
  std::string text = job("asp-bn", "asp", "steps = 40",
                         "\n[asp]\nservers = 2\nstaleness = \"none\"\n"
                         "\n[checkpoint]\nevery = 10\n",
                         2, 2, "0.01");
  const std::string mlp = "kind = \"mlp\"\nhidden = [32]";
  ASSERT_NE(text.find(mlp), std::string::npos);
  text.replace(text.find(mlp), mlp.size(), "kind = \"resnet\"\nchannels = [4, 8]");
  auto run = submit("bn", text);
  auto summary = run->wait_finished(180s);
  ASSERT_TRUE(summary) << run->describe();
  ASSERT_EQ(summary->at("status"), "succeeded") << run->describe();
  ASSERT_EQ(summary->at("updates"), 40);
  std::int64_t most = 0;
  std::string counts;
  for (const auto& w : summary->at("workers")) {
    most = std::max<std::int64_t>(most, w.value("updates", std::int64_t{0}));
    counts += " " + std::to_string(w.value("updates", std::int64_t{0}));
  }
  std::printf("BatchNorm under ASP: updates per worker%s\n", counts.c_str());
  ASSERT_LT(most, 40) << "both workers pushed";
  const auto counted = run_python(
      *python,
      {"-c",
       "import os, sys, torch\n"
       "m = torch.load(sys.argv[1])['model']\n"
       "c = [int(v) for k, v in m.items() if k.endswith('num_batches_tracked')]\n"
       "assert c, list(m)\n"
       "print(min(c), max(c))\n"
       "keys = [k for k in m if k.endswith(('running_mean', 'running_var', "
       "'num_batches_tracked'))]\n"
       "final = torch.cat([m[k].reshape(-1).float() for k in keys])\n"
       "s = torch.load(os.path.join(os.path.dirname(sys.argv[1]), 'server-shard0-i0.pt'))\n"
       "kept = s['shard']['buffers'].float()\n"
       "counter = torch.tensor([k.endswith('num_batches_tracked') for k in keys\n"
       "                        for _ in range(m[k].numel())])\n"
       "print('server version', s['asp']['version'], 'values', kept.numel() == final.numel())\n"
       "print('counters equal', bool((kept[counter] == final[counter]).all()))\n"
       "print('statistics refreshed', bool((kept[~counter] - final[~counter]).abs().max() > 1e-4))\n",
       std::string(summary->at("checkpoint"))});
  ASSERT_EQ(counted.status.code, 0) << counted.out << counted.err;
  // The server counted every applied push, and the final model's statistics are not the
  // server's (which lag the parameters: [asp] refresh_statistics, on by default) but its own.
  EXPECT_EQ(counted.out,
            "40 40\nserver version 40 values True\ncounters equal True\n"
            "statistics refreshed True\n")
      << "every BatchNorm layer counted every applied push, and the finishing worker refreshed "
         "the statistics";
}

TEST_F(JobAsp, WorkersOfDifferentSpeedsUseEverySampleOncePerEpoch) {
  ASSERT_NO_FATAL_FAILURE(start({"fast", "slow"}, {{"--slowdown", "1"}, {"--slowdown", "3"}}));
  // With evaluations every 20 updates: they must not disturb the dealing.
  auto run = submit("speeds", job("asp-speeds", "asp", "epochs = 3\neval_every = 20",
                                  "\n[asp]\nservers = 2\nstaleness = \"inverse\"\n", 2, 2, "0.01"));
  auto summary = run->wait_finished(150s);
  ASSERT_TRUE(summary) << run->describe();
  ASSERT_EQ(summary->at("status"), "succeeded") << run->describe();
  const auto& sampling = summary->at("sampling");
  EXPECT_EQ(sampling.at("epochs_completed"), 3);
  EXPECT_EQ(summary->at("epochs"), 3);
  // Every epoch complete (each sample accepted once in it) and no more samples accepted than
  // 3 x N: each sample exactly once per epoch.
  EXPECT_EQ(sampling.at("samples_accepted"), 3 * 1024) << summary->dump(2);
  EXPECT_EQ(sampling.at("duplicates"), 0);
  std::int64_t sum = 0;
  for (const auto& w : summary->at("workers")) {
    EXPECT_GT(w.at("updates").get<std::int64_t>(), 0) << w.dump();
    sum += w.at("updates").get<std::int64_t>();
  }
  EXPECT_EQ(sum, summary->at("updates").get<std::int64_t>());
  EXPECT_EQ(summary->at("updates"), summary->at("steps"));
  EXPECT_TRUE(summary->at("final_train_loss").is_number()) << summary->dump(2);  // not NaN
  // Two workers pushing asynchronously: pushes are stale now and then.
  EXPECT_GE(summary->at("staleness").at("max").get<std::int64_t>(), 1) << summary->dump(2);
  const auto intervals = events_named(run->events(), "asp_interval");
  ASSERT_FALSE(intervals.empty());
  EXPECT_TRUE(intervals.back().at("staleness").contains("p95"));
  // eval_every = 20: one evaluation per 20 updates at most, each of parameters pulled after
  // the update count it was dealt at, carried in an asp_interval event as BSP's in its step.
  std::int64_t evaluations = 0, last_dealt = -1;
  for (const auto& e : intervals) {
    if (!e.contains("test_accuracy")) continue;
    ++evaluations;
    const auto dealt = e.at("eval_dealt_at").get<std::int64_t>();
    EXPECT_GE(dealt, 20 * evaluations) << e.dump();
    EXPECT_GT(dealt, last_dealt) << e.dump();
    EXPECT_GE(e.at("eval_version").get<std::int64_t>(), dealt) << e.dump();
    EXPECT_GE(e.at("test_accuracy").get<double>(), 0.0);
    EXPECT_LE(e.at("test_accuracy").get<double>(), 1.0);
    EXPECT_GT(e.at("test_loss").get<double>(), 0.0);
    last_dealt = dealt;
  }
  const auto updates = summary->at("updates").get<std::int64_t>();
  EXPECT_GE(evaluations, 2) << summary->dump(2);
  EXPECT_LE(evaluations, updates / 20);
  EXPECT_EQ(summary->at("evaluations").get<std::int64_t>(), evaluations);
  std::printf("2 workers (slowdown 1, 3): %lld updates, staleness mean %.2f p95 %lld max %lld\n",
              static_cast<long long>(summary->at("updates").get<std::int64_t>()),
              summary->at("staleness").at("mean").get<double>(),
              static_cast<long long>(summary->at("staleness").at("p95").get<std::int64_t>()),
              static_cast<long long>(summary->at("staleness").at("max").get<std::int64_t>()));
}

TEST_F(JobAsp, BoundDropsPushesStalerThanTheBoundAndCountsThem) {
  ASSERT_NO_FATAL_FAILURE(start({"fast", "slow"}, {{"--slowdown", "1"}, {"--slowdown", "3"}}));
  auto run =
      submit("bound", job("asp-bound", "asp", "epochs = 2",
                          "\n[asp]\nstaleness = \"bound\"\nmax_staleness = 1\n", 2, 2, "0.01"));
  auto summary = run->wait_finished(150s);
  ASSERT_TRUE(summary) << run->describe();
  ASSERT_EQ(summary->at("status"), "succeeded") << run->describe();
  // Every push is weighed once: applied (an update) or dropped as too stale.
  const auto pushes = summary->at("pushes").get<std::int64_t>();
  const auto updates = summary->at("updates").get<std::int64_t>();
  const auto dropped = summary->at("dropped_stale").get<std::int64_t>();
  EXPECT_EQ(pushes, updates + dropped) << summary->dump(2);
  EXPECT_EQ(summary->at("sampling").at("epochs_completed"), 2);
  EXPECT_EQ(summary->at("sampling").at("samples_accepted"), 2 * 1024);
  std::printf("bound (max_staleness 1), slowdown 1 and 3: %lld pushes, %lld dropped\n",
              static_cast<long long>(pushes), static_cast<long long>(dropped));
}

TEST_F(JobAsp, KillOfAWorkerAndOfAServerTheJobFinishes) {
  // Slowed (x4) so that the kills land mid-job: unslowed, 3,000 updates take a few seconds.
  ASSERT_NO_FATAL_FAILURE(start({"w1", "w2"}, {{"--slowdown", "4"}, {"--slowdown", "4"}}));
  auto run =
      submit("kill", job("asp-kill", "asp", "steps = 3000",
                         "\n[asp]\nservers = 2\n\n[checkpoint]\nevery = 20\n", 1, 2, "0.01"));
  ASSERT_TRUE(run->wait_for_event("asp_interval", 90s, [](const Json& e) {
    return e.value("step", 0) >= 60;
  })) << run->describe();

  // A worker trainer, kill -9.
  const auto workers = trainer_processes(cluster().address(), run->id() + "-w1-t");
  ASSERT_EQ(workers.size(), 1u) << describe(workers);
  ASSERT_EQ(::kill(workers[0].pid, SIGKILL), 0);
  ASSERT_TRUE(run->wait_for_event("trainer_gone", 30s)) << run->describe();
  const auto after_worker = latest_step(*run);
  ASSERT_TRUE(run->wait_for_event("asp_interval", 60s, [&](const Json& e) {
    return e.value("step", std::int64_t{0}) > after_worker + 20;
  })) << run->describe();

  // A server trainer, kill -9, once a checkpoint of its shard exists.
  auto servers = trainer_processes(cluster().address(), run->id() + "-w1-s");
  if (servers.empty()) servers = trainer_processes(cluster().address(), run->id() + "-w2-s");
  ASSERT_FALSE(servers.empty());
  const auto& line = servers[0].command_line;
  const auto at = line.find("--trainer ") + 10;
  const std::string server = line.substr(at, line.find(' ', at) - at);
  const auto spawned = run->wait_for_event(
      "spawn", 1s, [&](const Json& e) { return e.value("trainer", "") == server; });
  ASSERT_TRUE(spawned) << server << "\n" << run->describe();
  const int shard = spawned->at("shard");
  ASSERT_TRUE(run->wait_for_event("checkpoint", 60s, [&](const Json& e) {
    return e.value("shard", -1) == shard;
  })) << run->describe();
  ASSERT_EQ(::kill(servers[0].pid, SIGKILL), 0);
  ASSERT_TRUE(run->wait_for_event("server_gone", 30s)) << run->describe();
  const auto recovered = run->wait_for_event("server_recovered", 90s);
  ASSERT_TRUE(recovered) << run->describe();
  EXPECT_EQ(recovered->at("shard"), shard);
  // Resumed from its checkpoint (every 20 updates), not from the start.
  EXPECT_GE(recovered->at("resumed_at").get<std::int64_t>(), 20) << recovered->dump();
  EXPECT_EQ(recovered->at("resumed_at").get<std::int64_t>() % 20, 0) << recovered->dump();

  auto summary = run->wait_finished(180s);
  ASSERT_TRUE(summary) << run->describe();
  ASSERT_EQ(summary->at("status"), "succeeded") << run->describe();
  EXPECT_EQ(summary->at("updates"), 3000);
  EXPECT_TRUE(summary->at("final_train_loss").is_number()) << summary->dump(2);  // not NaN
  std::int64_t restarts = 0;
  for (const auto& s : summary->at("servers")) restarts += s.at("restarts").get<std::int64_t>();
  EXPECT_EQ(restarts, 1) << summary->dump(2);
  EXPECT_GE(summary->at("updates_lost").get<std::int64_t>(), 0);
  // How many pushes the killed shard missed while the other took them (dealt again for the
  // killed one only), and how many it never answered, depends on timing: printed, not asserted
  // (asp_epoch_dealer_test and asp_restart_ledger_test check the rules).
  std::printf("server killed: %lld..%lld updates lost (checkpoint every 20), %lld failed "
              "batches, %lld of them pushed to the other shard and dealt again for this one\n",
              static_cast<long long>(summary->at("updates_lost").get<std::int64_t>()),
              static_cast<long long>(summary->at("updates_lost_at_most").get<std::int64_t>()),
              static_cast<long long>(summary->at("failed_batches").get<std::int64_t>()),
              static_cast<long long>(summary->at("sampling").at("partial_pushes").get<std::int64_t>()));
}

// kill -9 of the worker process (the node's agent) that hosts the one server: the node is
// declared dead after the heartbeat timeout, its trainers died with it, and the shard restarts
// on the other node from its checkpoint (the run directory is shared: one machine).
// Each node runs in its own directory and the job's [checkpoint] dir is relative, so each
// node's checkpoints lie on "its own disk": the restarted server cannot read the dead node's
// file and must resume from the copy the head kept.
TEST_F(JobAsp, KillOfTheNodeHostingTheServerRestartsItOnTheOtherNodeFromTheHeadsCopy) {
  scratch_ = std::make_unique<ScratchDir>("omnilearn-asp");
  auto& nodes = start_cluster();
  for (const auto* name : {"w1", "w2"}) {
    const auto dir = scratch_->path() / (std::string("disk-") + name);
    std::filesystem::create_directories(dir);
    ProcessOptions options;
    options.working_directory = dir.string();
    start_worker(name, {"--slowdown", "4"}, options);
  }
  for (const auto* name : {"w1", "w2"}) {
    ASSERT_TRUE(nodes.wait_worker_joined(name, 20s)) << nodes.worker(name).describe();
  }
  auto run = submit("node", job("asp-node", "asp", "steps = 3000",
                                "\n[asp]\nservers = 1\n\n[checkpoint]\nevery = 20\n"
                                "dir = \"node-local-checkpoints\"\n",
                                1, 2, "0.01"));
  auto spawned = run->wait_for_event("spawn", 30s,
                                     [](const Json& e) { return e.value("role", "") == "server"; });
  ASSERT_TRUE(spawned) << run->describe();
  const std::string victim = spawned->at("node");
  const std::string other = victim == "w1" ? "w2" : "w1";
  ASSERT_TRUE(run->wait_for_event("checkpoint", 90s)) << run->describe();
  ASSERT_TRUE(cluster().worker(victim).send_signal(SIGKILL, /*whole_group=*/false));
  const auto recovered = run->wait_for_event("server_recovered", 60s);
  ASSERT_TRUE(recovered) << run->describe();
  const auto restarted = run->wait_for_event(
      "server_ready", 1s, [](const Json& e) { return e.value("incarnation", 0) > 0; });
  ASSERT_TRUE(restarted) << run->describe();
  EXPECT_EQ(restarted->at("node"), other) << run->describe();
  EXPECT_GE(recovered->at("resumed_at").get<std::int64_t>(), 20) << recovered->dump();
  EXPECT_EQ(recovered->at("resumed_from"), "head") << recovered->dump();
  EXPECT_EQ(recovered->at("resumed_at").get<std::int64_t>() % 20, 0) << recovered->dump();
  // The victim's checkpoints are on its "disk" only; the survivor's disk has none of its own
  // before the restart.
  EXPECT_TRUE(std::filesystem::exists(scratch_->path() / ("disk-" + victim) /
                                      "node-local-checkpoints" / "server-shard0-i0.pt"));
  auto summary = run->wait_finished(180s);
  ASSERT_TRUE(summary) << run->describe();
  ASSERT_EQ(summary->at("status"), "succeeded") << run->describe();
  EXPECT_EQ(summary->at("updates"), 3000);
  std::printf("node with the server killed: %lld updates lost\n",
              static_cast<long long>(summary->at("updates_lost").get<std::int64_t>()));
}

// A worker node's agent frozen (SIGSTOP on the agent alone) while its worker trainer keeps
// running: the head declares the node dead, the scheduler fences the worker's batches off the
// server and deals them again, and the trainer, still pushing, must change nothing: the
// server's version is exactly the updates the scheduler counted, and every sample is accepted
// exactly once per epoch. Without the fence its late push would be applied and its samples
// dealt to another worker too (asp_job_mutation_test: with the fence left out, the seeded
// simulation of the scheduler's machine gives shards samples twice).
TEST_F(JobAsp, AFrozenAgentWhoseWorkerKeepsPushingChangesNothingAfterItsFence) {
  auto run = start_fault_job("freeze", "\n[asp]\nservers = 1\n");
  ASSERT_TRUE(run);
  const std::string server = server_node(*run);
  ASSERT_FALSE(server.empty());
  const std::string victim = server == "w1" ? "w2" : "w1";
  // Both workers push before the freeze.
  ASSERT_TRUE(run->wait_for_event("asp_interval", 90s, [](const Json& e) {
    return e.value("step", 0) >= 40;
  })) << run->describe();
  const auto victim_trainers = trainer_processes(cluster().address(), run->id() + "-" + victim + "-t");
  ASSERT_EQ(victim_trainers.size(), 1u) << describe(victim_trainers);

  auto& agent = cluster().worker(victim);
  ASSERT_TRUE(agent.send_signal(SIGSTOP, /*whole_group=*/false));
  const auto frozen_at = std::chrono::steady_clock::now();
  auto dead = cluster().wait_for_status([&](const auto& s) { return s.state(victim) == "dead"; },
                                        20s, 100ms);
  ASSERT_TRUE(dead) << cluster().last_status_text();
  auto gone = run->wait_for_event("trainer_gone", 30s, [&](const Json& e) {
    return e.value("trainer", "").find("-" + victim + "-t") != std::string::npos;
  });
  ASSERT_TRUE(gone) << run->describe();
  // The frozen node's trainer was still running when its node was declared dead.
  EXPECT_EQ(::kill(victim_trainers[0].pid, 0), 0) << "the trainer died with its agent frozen";
  const auto after = latest_step(*run);
  ASSERT_TRUE(run->wait_for_event("asp_interval", 60s, [&](const Json& e) {
    return e.value("step", std::int64_t{0}) > after + 20;
  })) << "no progress while the agent was frozen\n" << run->describe();
  std::this_thread::sleep_until(frozen_at + 4s);
  ASSERT_TRUE(agent.send_signal(SIGCONT, /*whole_group=*/false));

  auto summary = run->wait_finished(240s);
  ASSERT_TRUE(summary) << run->describe();
  SCOPED_TRACE(summary->dump(2));
  ASSERT_EQ(summary->at("status"), "succeeded");
  const auto updates = summary->at("updates").get<std::int64_t>();
  ASSERT_EQ(summary->at("servers").size(), 1u);
  const auto& shard = summary->at("servers")[0];
  EXPECT_EQ(shard.at("restarts"), 0);
  // staleness "none": every push taken is applied, so the server's version is the updates.
  EXPECT_EQ(shard.at("version").get<std::int64_t>(), updates)
      << "a push the scheduler did not count was applied (or one counted was not)";
  EXPECT_EQ(summary->at("pushes").get<std::int64_t>(), updates);
  const auto& sampling = summary->at("sampling");
  EXPECT_EQ(sampling.at("epochs_completed"), kFaultEpochs);
  EXPECT_EQ(sampling.at("samples_accepted"), kFaultEpochs * 1024);
  EXPECT_EQ(sampling.at("duplicates"), 0);
  const auto& fences = summary->at("fences");
  EXPECT_GE(fences.at("rounds").get<std::int64_t>(), 1);
  EXPECT_EQ(fences.at("no_answer"), 0) << "the server was alive throughout";
  // Whether the trainer's last push reached the server before or after its fence is timing:
  // printed, not asserted.
  std::printf("frozen agent, trainer kept running: %lld updates, fences: %lld rounds, %lld "
              "batches taken, %lld dealt again; %lld pushes refused by the fence\n",
              static_cast<long long>(updates),
              static_cast<long long>(fences.at("rounds").get<std::int64_t>()),
              static_cast<long long>(fences.at("batches_taken").get<std::int64_t>()),
              static_cast<long long>(fences.at("batches_dealt_again").get<std::int64_t>()),
              static_cast<long long>(shard.at("pushes_fenced").get<std::int64_t>()));
  expect_trainers_gone(*run, "the frozen node's included", 15s);
}

// The agent of the node hosting the only server frozen while the server keeps running: the
// node is declared dead, the shard restarts on the other node from its last checkpoint, and
// the old server, still serving whoever had its endpoint, must not disturb the job: pushes it
// took after the restart are counted as lost, never applied to the new incarnation, and its
// checkpoints go to its own file. The job finishes with every sample accepted once, and the
// stale server is gone once its agent thaws.
TEST_F(JobAsp, AFrozenAgentWhoseServerKeepsServingIsReplacedAndTheJobFinishes) {
  auto run = start_fault_job("zombie", "\n[asp]\nservers = 1\n\n[checkpoint]\nevery = 20\n");
  ASSERT_TRUE(run);
  const std::string victim = server_node(*run);
  ASSERT_FALSE(victim.empty());
  ASSERT_TRUE(run->wait_for_event("checkpoint", 90s)) << run->describe();
  const auto servers = trainer_processes(cluster().address(), run->id() + "-" + victim + "-s");
  ASSERT_EQ(servers.size(), 1u) << describe(servers);

  auto& agent = cluster().worker(victim);
  ASSERT_TRUE(agent.send_signal(SIGSTOP, /*whole_group=*/false));
  const auto frozen_at = std::chrono::steady_clock::now();
  auto recovered = run->wait_for_event("server_recovered", 60s);
  ASSERT_TRUE(recovered) << run->describe();
  EXPECT_EQ(::kill(servers[0].pid, 0), 0) << "the server died with its agent frozen";
  const auto restarted = run->wait_for_event(
      "server_ready", 1s, [](const Json& e) { return e.value("incarnation", 0) > 0; });
  ASSERT_TRUE(restarted) << run->describe();
  EXPECT_NE(restarted->at("node"), victim);
  std::this_thread::sleep_until(frozen_at + 4s);
  ASSERT_TRUE(agent.send_signal(SIGCONT, /*whole_group=*/false));

  auto summary = run->wait_finished(240s);
  ASSERT_TRUE(summary) << run->describe();
  SCOPED_TRACE(summary->dump(2));
  ASSERT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("servers")[0].at("restarts"), 1);
  EXPECT_EQ(summary->at("sampling").at("samples_accepted"), kFaultEpochs * 1024);
  EXPECT_EQ(summary->at("sampling").at("duplicates"), 0);
  EXPECT_TRUE(summary->at("final_train_loss").is_number());
  std::printf("frozen agent of the server's node: resumed at %lld, %lld..%lld updates lost\n",
              static_cast<long long>(recovered->at("resumed_at").get<std::int64_t>()),
              static_cast<long long>(summary->at("updates_lost").get<std::int64_t>()),
              static_cast<long long>(summary->at("updates_lost_at_most").get<std::int64_t>()));
  expect_trainers_gone(*run, "the stale server included", 30s);
}

// The only server's process hung (SIGSTOP on the server alone) while its agent keeps sending
// heartbeats: nothing reports it, and every worker's pull fails. A pull that got no reply, or a
// push whose fence then goes unanswered (which of the two depends on where the workers were
// when it stopped), has the head ping its process; no answer, and the shard restarts from its
// last checkpoint (5 s pull or fence bound + 3 s probe bound), the hung process told to stop.
// Without that the job stood still for as long as it hung, and failed after 90 s without an
// update.
TEST_F(JobAsp, AHungServerWhoseAgentIsFineIsReplacedAndTheJobFinishes) {
  auto run = start_fault_job("hung-server", "\n[asp]\nservers = 1\n\n[checkpoint]\nevery = 20\n");
  ASSERT_TRUE(run);
  const std::string victim = server_node(*run);
  ASSERT_FALSE(victim.empty());
  ASSERT_TRUE(run->wait_for_event("checkpoint", 90s)) << run->describe();
  const auto servers = trainer_processes(cluster().address(), run->id() + "-" + victim + "-s");
  ASSERT_EQ(servers.size(), 1u) << describe(servers);
  ASSERT_EQ(::kill(servers[0].pid, SIGSTOP), 0);
  const auto frozen_at = std::chrono::steady_clock::now();
  auto gone = run->wait_for_event("server_gone", 60s);
  ASSERT_TRUE(gone) << run->describe();
  EXPECT_EQ(gone->at("reason").get<std::string>().rfind("hung:", 0), 0u) << gone->dump();
  auto recovered = run->wait_for_event("server_recovered", 60s);
  ASSERT_TRUE(recovered) << run->describe();
  std::printf("hung server: recovered after %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen_at).count());
  // Still hung when the shard restarted; thawed, it reads its stop and exits.
  EXPECT_EQ(::kill(servers[0].pid, 0), 0) << "the hung server died by itself";
  ASSERT_EQ(::kill(servers[0].pid, SIGCONT), 0);
  auto summary = run->wait_finished(240s);
  ASSERT_TRUE(summary) << run->describe();
  SCOPED_TRACE(summary->dump(2));
  ASSERT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("servers")[0].at("restarts"), 1);
  EXPECT_EQ(summary->at("sampling").at("samples_accepted"), kFaultEpochs * 1024);
  EXPECT_EQ(summary->at("sampling").at("duplicates"), 0);
  std::printf("hung server: found by %s\n",
              summary->at("fences").at("no_answer").get<std::int64_t>() > 0
                  ? "a fence that went unanswered"
                  : "pulls that got no reply");
  expect_trainers_gone(*run, "the hung server included", 30s);
}

// A worker's trainer hung (SIGSTOP on the trainer alone), its agent fine: the other worker goes
// on at once (nothing waits for the hung one's batch), and once it thaws it pushes on. Every
// sample is still accepted once per epoch. A deal request the hang caught in flight times out
// on the worker's side and is sent again with the same report, which the dealer then counts as
// a duplicate and ignores: `duplicates` may be 1 here, and the accepted samples say that no
// batch counted twice.
TEST_F(JobAsp, AHungWorkerWhoseAgentIsFineHoldsNobodyUp) {
  auto run = start_fault_job("hung-worker", "\n[asp]\nservers = 1\n");
  ASSERT_TRUE(run);
  const std::string server = server_node(*run);
  ASSERT_FALSE(server.empty());
  const std::string victim = server == "w1" ? "w2" : "w1";
  ASSERT_TRUE(run->wait_for_event("asp_interval", 90s, [](const Json& e) {
    return e.value("step", 0) >= 40;
  })) << run->describe();
  const auto victims = trainer_processes(cluster().address(), run->id() + "-" + victim + "-t");
  ASSERT_EQ(victims.size(), 1u) << describe(victims);
  ASSERT_EQ(::kill(victims[0].pid, SIGSTOP), 0);
  const auto frozen_at = std::chrono::steady_clock::now();
  const auto after = latest_step(*run);
  EXPECT_TRUE(run->wait_for_event("asp_interval", 60s, [&](const Json& e) {
    return e.value("step", std::int64_t{0}) > after + 20;
  })) << "no progress while the worker hung\n" << run->describe();
  std::printf("hung worker: progress after %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen_at).count());
  std::this_thread::sleep_until(frozen_at + 4s);
  ::kill(victims[0].pid, SIGCONT);
  auto summary = run->wait_finished(240s);
  ASSERT_TRUE(summary) << run->describe();
  SCOPED_TRACE(summary->dump(2));
  ASSERT_EQ(summary->at("status"), "succeeded");
  EXPECT_EQ(summary->at("sampling").at("samples_accepted"), kFaultEpochs * 1024);
  EXPECT_EQ(summary->at("sampling").at("epochs_completed"), kFaultEpochs);
  EXPECT_LE(summary->at("sampling").at("duplicates").get<std::int64_t>(), 1);
  std::printf("hung worker: %lld report(s) sent again and ignored\n",
              static_cast<long long>(summary->at("sampling").at("duplicates").get<std::int64_t>()));
  expect_trainers_gone(*run, "the hung worker included", 30s);
}

// `omnilearn drain` of the node hosting the only server, with no periodic checkpoints: the
// server hands its shard over (refuses every later push, checkpoints at its last version) and
// restarts on the other node from that checkpoint, so not one update is lost, where a restart
// without the hand-over would begin again from the initial parameters.
TEST_F(JobAsp, DrainOfTheServersNodeHandsTheShardOverWithoutLosingAnUpdate) {
  auto run = start_fault_job("drain", "\n[asp]\nservers = 1\n");
  ASSERT_TRUE(run);
  const std::string victim = server_node(*run);
  ASSERT_FALSE(victim.empty());
  ASSERT_TRUE(run->wait_for_event("asp_interval", 90s, [](const Json& e) {
    return e.value("step", 0) >= 200;
  })) << run->describe();
  auto drain = run_omnilearn({"drain", victim, "--address", cluster().address()}, 20s);
  ASSERT_EQ(drain.status.code, 0) << drain.out << drain.err;

  auto handed = run->wait_for_event("server_handed_over", 30s);
  ASSERT_TRUE(handed) << run->describe();
  EXPECT_TRUE(handed->at("ok").get<bool>()) << handed->dump();
  const auto version = handed->at("version").get<std::int64_t>();
  EXPECT_GE(version, 200) << handed->dump();
  auto recovered = run->wait_for_event("server_recovered", 90s);
  ASSERT_TRUE(recovered) << run->describe();
  EXPECT_EQ(recovered->at("resumed_at").get<std::int64_t>(), version) << recovered->dump();
  EXPECT_EQ(recovered->at("updates_lost").get<std::int64_t>(), 0) << recovered->dump();
  const auto restarted = run->wait_for_event(
      "server_ready", 1s, [](const Json& e) { return e.value("incarnation", 0) > 0; });
  ASSERT_TRUE(restarted) << run->describe();
  EXPECT_NE(restarted->at("node"), victim) << "placed on the drained node";

  auto summary = run->wait_finished(240s);
  ASSERT_TRUE(summary) << run->describe();
  SCOPED_TRACE(summary->dump(2));
  ASSERT_EQ(summary->at("status"), "succeeded");
  const auto updates = summary->at("updates").get<std::int64_t>();
  const auto& shard = summary->at("servers")[0];
  EXPECT_EQ(shard.at("restarts"), 1);
  EXPECT_EQ(summary->at("updates_lost"), 0);
  // The restart went on from the hand-over's version, so the final version counts every update.
  EXPECT_EQ(shard.at("version").get<std::int64_t>(), updates);
  EXPECT_EQ(summary->at("sampling").at("samples_accepted"), kFaultEpochs * 1024);
  EXPECT_EQ(summary->at("sampling").at("duplicates"), 0);
  std::printf("drain of the server's node: handed over at version %lld in %.3f s, resumed from "
              "%s; %lld updates, at most %lld lost\n",
              static_cast<long long>(version), handed->at("seconds").get<double>(),
              recovered->at("resumed_from").get<std::string>().c_str(),
              static_cast<long long>(updates),
              static_cast<long long>(summary->at("updates_lost_at_most").get<std::int64_t>()));
}

TEST_F(JobAsp, AWorkerJoiningMidJobPushesSoonAfterItsHello) {
  ASSERT_NO_FATAL_FAILURE(start({"w1"}));
  auto run = submit(
      "join", job("asp-join", "asp", "steps = 100000", "\n[asp]\nservers = 1\n", 1, 2, "0.01"));
  ASSERT_TRUE(run->wait_for_event("asp_interval", 90s, [](const Json& e) {
    return e.value("step", 0) >= 20;
  })) << run->describe();
  start_worker("w2");
  ASSERT_TRUE(cluster().wait_worker_joined("w2", 20s));
  auto first = run->wait_for_event("first_push", 90s, [](const Json& e) {
    return e.value("trainer", "").find("-w2-t") != std::string::npos;
  });
  ASSERT_TRUE(first) << run->describe();
  const double since_hello = first->at("since_hello_s");
  std::printf("a worker joining mid-job: first push %.3f s after its hello\n", since_hello);
  EXPECT_GE(since_hello, 0.0);
  EXPECT_LT(since_hello, 30.0);  // the issue asks for 2 s; a loaded CI machine gets slack
  // It joined without any regroup: the first worker kept pushing.
  const auto joined = run->wait_for_event("worker_joined", 1s, [](const Json& e) {
    return e.value("trainer", "").find("-w2-t") != std::string::npos;
  });
  ASSERT_TRUE(joined);
  EXPECT_LT(joined->at("time").get<double>(), first->at("time").get<double>());
  auto stop = run_omnilearn({"stop", run->id(), "--address", cluster().address()}, 20s);
  EXPECT_EQ(stop.status.code, 0) << stop.out << stop.err;
  auto summary = run->wait_finished(60s);
  ASSERT_TRUE(summary) << run->describe();
  EXPECT_EQ(summary->at("status"), "stopped");
}

TEST_F(JobAsp, BadAspSettingsAreRejectedAtSubmitWithTheLocation) {
  ASSERT_NO_FATAL_FAILURE(start({"w1"}));
  struct Case {
    std::string table;
    std::string where;  // line:column of the bad key in the file below
    std::string says;
  };
  // job() puts [asp] after [elastic]: the table's first key is on line 34.
  const std::vector<Case> cases = {
      {"servers = 0\n", ":34:11:", "[asp] servers: expected an integer in [1, 4096], got 0"},
      {"staleness = \"bound\"\n", ":34:13:", "\"bound\" needs max_staleness"},
      {"staleness = \"inverse\"\nmax_staleness = 2\n",
       ":35:17:", "only with staleness = \"bound\""},
      {"lr_scaling = \"sqrt\"\n", ":34:14:", "expected one of \"none\", \"linear\""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.table);
    const auto text = job("asp-bad", "asp", "steps = 10", "\n[asp]\n" + c.table, 1, 1);
    const auto file = scratch_->write("bad.toml", text);
    auto result = run_omnilearn({"submit", file.string(), "--address", cluster().address(),
                                 "--run-dir", (scratch_->path() / "run-bad").string()},
                                20s);
    ASSERT_FALSE(result.timed_out);
    EXPECT_EQ(result.status.code, 2) << result.err;
    EXPECT_NE(result.err.find(file.string() + c.where), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(c.says), std::string::npos) << result.err;
  }
}

}  // namespace
}  // namespace omnilearn::testing
