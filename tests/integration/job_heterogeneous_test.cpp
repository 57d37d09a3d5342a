// Heterogeneous: three workers with slowdown 1, 1, 3 under the proportional policy.
// Functional checks only: within three controller rounds the slow worker's batch is at most 45%
// of each fast worker's (a 3x slowdown leaves a wide margin), every step event carries the
// heartbeat window its timings belong to (what bench/scheduler/traces.py records), and the
// summary reports the measured speeds and calls its speed-up over uniform an estimate.
//
// There is no timing assertion this test used to make (compute times within 15% of
// each other over 12 s after the balanced plan): on a loaded two-core machine it failed about
// one run in four, whatever the controller did. How well the controller balances real timings
// is now checked deterministically by replaying traces recorded from real runs
// (tests/controller/trace_replay_test.cpp, tests/data/trace_*.csv).
//
// Every worker gets the same CPU quota (cgroup, 2 ms period; 3 x 0.5 CPU fits in two cores)
// with a raised CPU weight, so the slowdown is the only difference between them (a sleeping
// worker's CPU does not go to its neighbours), and heartbeats come once a second so each
// carries a few steps.

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

// Fashion-MNIST MLP with a large global batch: compute per step (tens of ms) dominates the
// timing noise of a shared machine. The job is stopped by the test once it has measured.
constexpr const char* kJob = R"(
[job]
name = "e2e-heterogeneous"

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
seed = 5
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

constexpr const char* kCpuQuota = "0.5";  // per worker: 3 x 0.5 fits in two cores

HeadOptions slow_heartbeats() {
  HeadOptions options = job_head_options();
  options.heartbeat_interval = std::chrono::milliseconds(1000);
  options.heartbeat_timeout = std::chrono::milliseconds(5000);
  return options;
}

class JobHeterogeneous : public JobTest {};

TEST_F(JobHeterogeneous, ProportionalBalancesSlowdowns113WithinThreeRounds) {
  auto& cluster = start_cluster(slow_heartbeats());
  start_worker("fast1", {"--slowdown", "1", "--cpu-quota", kCpuQuota});
  start_worker("fast2", {"--slowdown", "1", "--cpu-quota", kCpuQuota});
  start_worker("slow", {"--slowdown", "3", "--cpu-quota", kCpuQuota});
  for (const auto* name : {"fast1", "fast2", "slow"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(name, 15s)) << cluster.worker(name).describe();
  }
  std::printf("CPU weight raised for %d worker cgroups\n", favour_quota_cgroups());
  ScratchDir dir("heterogeneous");
  JobRun run(cluster, dir.write("job.toml", kJob), dir.path() / "run");

  auto generation_event = run.wait_for_event("generation", 60s, [](const Json& e) {
    return e.at("members").size() == 3;
  });
  ASSERT_TRUE(generation_event) << run.describe();
  const auto generation = generation_event->at("generation").get<std::int64_t>();
  const auto nodes = member_nodes(run.events(), generation);
  ASSERT_EQ(nodes.size(), 3u);
  auto rank_of = [&](const std::string& node) {
    return static_cast<std::size_t>(std::find(nodes.begin(), nodes.end(), node) - nodes.begin());
  };
  const std::size_t slow = rank_of("slow"), fast1 = rank_of("fast1"), fast2 = rank_of("fast2");
  ASSERT_LT(std::max({slow, fast1, fast2}), 3u);

  // The first three plans (controller rounds that changed something) of this generation.
  auto balanced = [&](const Json& plan) {
    const auto b = plan.at("batches").get<std::vector<int>>();
    return b[slow] <= 0.45 * b[fast1] && b[slow] <= 0.45 * b[fast2];
  };
  std::vector<Json> plans;
  std::optional<Json> good_plan;
  wait_until(
      [&] {
        plans.clear();
        for (const auto& e : events_named(run.events(), "plan")) {
          if (e.at("generation").get<std::int64_t>() == generation) plans.push_back(e);
        }
        for (std::size_t i = 0; i < std::min<std::size_t>(plans.size(), 3); ++i) {
          if (balanced(plans[i])) {
            good_plan = plans[i];
            return true;
          }
        }
        return plans.size() >= 3;
      },
      45s, 200ms);
  std::string plan_list;
  for (const auto& p : plans) plan_list += "  " + p.dump() + "\n";
  ASSERT_TRUE(good_plan) << "no plan among the first three gives the slow worker (rank " << slow
                         << ") <= 45% of a fast one's batch:\n"
                         << plan_list << run.describe();

  // The recorder's fields: each worker's timings name the heartbeat window they belong to.
  ASSERT_TRUE(run.wait_for_event("step", 30s, [&](const Json& e) {
    return e.at("step").get<std::int64_t>() > good_plan->at("step").get<std::int64_t>() + 5;
  })) << run.describe();
  std::size_t with_window = 0;
  for (const auto& e : events_named(run.events(), "step")) {
    for (const auto& w : e.at("workers")) {
      if (w.value("timing_steps", 0) > 0 && w.value("timing_batch", 0) > 0) ++with_window;
    }
  }
  EXPECT_GT(with_window, 0u) << "no step event names its timings' heartbeat window";
  // And every step of the generation carries every rank's compute of that step, which the
  // controller observes (the leader's report, from the gradient exchange).
  std::size_t with_times = 0, steps = 0;
  for (const auto& e : events_named(run.events(), "step")) {
    if (e.at("generation").get<std::int64_t>() != generation) continue;
    ++steps;
    if (!e.contains("compute_times_s")) continue;
    const auto times = e.at("compute_times_s").get<std::vector<double>>();
    ASSERT_EQ(times.size(), 3u) << e;
    for (double t : times) EXPECT_GT(t, 0.0) << e;
    ++with_times;
  }
  EXPECT_EQ(with_times, steps) << "step events without every rank's compute";

  auto stop = run_omnilearn({"stop", run.id(), "--address", cluster.address()}, 20s);
  ASSERT_EQ(stop.status.code, 0) << stop.err;
  auto summary = run.wait_finished(20s);
  ASSERT_TRUE(summary) << run.describe();
  EXPECT_EQ(summary->at("status"), "stopped");
  // Measured speeds and the ideal they imply; the speed-up over uniform is an estimate.
  ASSERT_TRUE(summary->at("measured_speeds").is_object()) << summary->dump(2);
  EXPECT_EQ(summary->at("measured_speeds").at("workers").size(), 3u);
  EXPECT_GT(summary->at("measured_speeds").at("ideal_speedup_over_uniform").get<double>(), 1.0);
  ASSERT_TRUE(summary->at("speedup_estimate").is_object()) << summary->dump(2);
  EXPECT_TRUE(summary->at("speedup_estimate").at("estimate").get<bool>());
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 15s);
  EXPECT_TRUE(left.empty()) << "trainers still running after the job ended:\n" << describe(left);
}

}  // namespace
}  // namespace omnilearn::testing
