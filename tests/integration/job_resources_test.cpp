// Resources come and go: `omnilearn node set NODE --slowdown 4` while a job runs
// makes that node's trainer slower, its heartbeats say so, and a later plan gives it a clearly
// smaller batch than before and than the others.
//
// Set up as the heterogeneous test (see there for the measurements behind it): one CPU quota per
// worker, with a large CPU weight, so that a node's speed is its own and not what its neighbours
// leave it, and one-second heartbeats, so that the counters the controller
// balances are means over several steps rather than single noisy ones.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr const char* kJob = R"(
[job]
name = "e2e-resources"

[model]
kind = "mlp"
hidden = [256, 128]

[data]
dataset = "fashion-mnist"

[train]
global_batch = 768
steps = 100000
optimizer = "sgd"
lr = 0.05
momentum = 0.9
seed = 9
threads = 1

[controller]
policy = "proportional"
min_batch = 16
interval = 10
cooldown = 3

[elastic]
min_workers = 3
max_workers = 3
)";

constexpr const char* kCpuQuota = "0.5";

HeadOptions slow_heartbeats() {
  HeadOptions options = job_head_options();
  options.heartbeat_interval = std::chrono::milliseconds(1000);
  options.heartbeat_timeout = std::chrono::milliseconds(5000);
  return options;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class JobResources : public JobTest {};

TEST_F(JobResources, ASlowedNodeGetsAClearlySmallerBatch) {
  auto& cluster = start_cluster(slow_heartbeats());
  for (const auto* name : {"w1", "w2", "w3"}) {
    start_worker(name, {"--cpu-quota", kCpuQuota});
  }
  for (const auto* name : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(name, 15s)) << cluster.worker(name).describe();
  }
  favour_quota_cgroups();
  ScratchDir dir("resources");
  JobRun run(cluster, dir.write("job.toml", kJob), dir.path() / "run");

  auto training = run.wait_for_event("step", 60s, [](const Json& e) {
    return e.at("step").get<int>() >= 15 && e.at("batches").size() == 3;
  });
  ASSERT_TRUE(training) << run.describe();
  const auto generation = training->at("generation").get<std::int64_t>();
  const auto nodes = member_nodes(run.events(), generation);
  ASSERT_EQ(nodes.size(), 3u);
  // Slow down a follower's node (the leader's would do too; a follower keeps it simple to read).
  const std::size_t target = 2;
  const std::string node = nodes[target];

  // Its batch just before, from the newest step.
  int before = 0;
  for (const auto& e : run.events()) {
    if (e.value("event", "") == "step") before = e.at("batches")[target].get<int>();
  }
  const double changed_at = unix_now();
  auto set = run_omnilearn({"node", "set", node, "--slowdown", "4", "--address", cluster.address()},
                           20s);
  ASSERT_EQ(set.status.code, 0) << set.err;
  EXPECT_NE(set.out.find("slowdown 4"), std::string::npos) << set.out;

  auto smaller = run.wait_for_event("plan", 40s, [&](const Json& e) {
    if (e.at("generation").get<std::int64_t>() != generation) return false;
    if (e.at("time").get<double>() < changed_at) return false;
    const auto b = e.at("batches").get<std::vector<int>>();
    int others = 1 << 30;
    for (std::size_t r = 0; r < b.size(); ++r) {
      if (r != target) others = std::min(others, b[r]);
    }
    return b[target] <= 0.5 * others && b[target] <= 0.67 * before;
  });
  ASSERT_TRUE(smaller) << "no plan after `node set " << node << " --slowdown 4` gives it a batch "
                       << "<= 50% of the others' and <= 2/3 of its " << before << " before\n"
                       << run.describe();

  // The node reports the new slowdown too (status --json shows what its agent applies).
  auto status = cluster.wait_for_status(
      [&](const ClusterStatus& s) {
        auto n = s.node(node);
        return n && n->contains("usage") && n->at("usage").value("slowdown", 0.0) == 4.0;
      },
      10s);
  EXPECT_TRUE(status) << cluster.last_status_text();

  auto stop = run_omnilearn({"stop", run.id(), "--address", cluster.address()}, 20s);
  ASSERT_EQ(stop.status.code, 0) << stop.err;
  auto summary = run.wait_finished(20s);
  ASSERT_TRUE(summary) << run.describe();
  EXPECT_EQ(summary->at("status"), "stopped");
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 15s);
  EXPECT_TRUE(left.empty()) << "trainers still running after the job ended:\n" << describe(left);
}

}  // namespace
}  // namespace omnilearn::testing
