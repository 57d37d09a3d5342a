// Issue 5, "Heterogeneous": three workers with slowdown 1, 1, 3 under the proportional policy.
// Within three controller rounds the slow worker's batch is at most 45% of each fast worker's,
// and once that plan is in force the compute times the workers report (their heartbeat
// counters, as carried by the step events) differ by less than 15%.
//
// What it takes to measure that on a small shared machine (measured with this job, `omnilearn
// run --local 3 --slowdown 1,1,3`, 200 steps, two cores under other builds' load):
// - Fairness. Without a CPU cap three trainers fight over two cores, and a slowed worker (asleep
//   two thirds of its step) leaves CPU to the fast ones: per-plan spreads of 5..76% and a new plan
//   nearly every round (11 in 200 steps). Every worker gets the same quota instead (cgroup, 10 ms
//   period; 3 x 0.5 CPU fits in two cores), so the slowdown is the only difference between them
//   (shared/BENCHMARKING.md): spreads of 3.5% and 8.6%, two plans in 200 steps.
// - Windows. The counters are means over one heartbeat. At ~5 steps/s a 200 ms heartbeat holds
//   one step, so the controller (median of 5 windows) and this test both see single-step noise
//   (coefficient of variation 20-40% here) and the plan churns with 5% deadband (16 plans in
//   200 steps, spreads 4..35% even with the quota). One-second heartbeats average ~5 steps; this
//   test does not exercise failure detection, so it can afford them.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

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

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Per-node compute time (median of the counters in step events) over the steps of one plan,
// leaving out the first `settle` seconds of it, when counters may still describe the previous
// plan.
struct SteadyState {
  std::vector<int> batches;
  std::map<std::string, double> compute_s;  // node -> median compute time per step
  std::size_t events = 0;
  double span_s = 0;  // time covered by the events used
  double spread() const {
    double lo = 1e300, hi = 0, sum = 0;
    for (const auto& [node, t] : compute_s) {
      lo = std::min(lo, t);
      hi = std::max(hi, t);
      sum += t;
    }
    return (hi - lo) / (sum / compute_s.size());
  }
  std::string describe() const {
    std::ostringstream text;
    text << "batches " << Json(batches).dump() << ", median compute ms:";
    for (const auto& [node, t] : compute_s) text << " " << node << "=" << t * 1e3;
    text << " over " << events << " steps (" << span_s << " s), spread " << spread() * 100
         << "%";
    return text.str();
  }
};

// The steady state of the latest plan of `generation` that took effect after `after_step`.
std::optional<SteadyState> steady_state(const std::vector<Json>& events, std::int64_t generation,
                                        std::int64_t after_step, double settle_s) {
  std::vector<const Json*> segment;  // step events of the newest batch vector
  double segment_start = 0;
  for (const auto& e : events) {
    if (e.value("event", "") != "step" || e.at("generation").get<std::int64_t>() != generation ||
        e.at("step").get<std::int64_t>() <= after_step) {
      continue;
    }
    if (segment.empty() || e.at("batches") != segment.front()->at("batches")) {
      segment.clear();
      segment_start = e.at("time").get<double>();
    }
    segment.push_back(&e);
  }
  SteadyState state;
  std::map<std::string, std::vector<double>> times;
  double first = 0, last = 0;
  for (const auto* e : segment) {
    const double t = e->at("time").get<double>();
    if (t < segment_start + settle_s) continue;
    if (state.events == 0) first = t;
    last = t;
    ++state.events;
    for (const auto& w : e->at("workers")) {
      times[w.at("node").get<std::string>()].push_back(w.at("compute_time_s").get<double>());
    }
  }
  if (state.events == 0) return std::nullopt;
  state.batches = segment.front()->at("batches").get<std::vector<int>>();
  state.span_s = last - first;
  for (auto& [node, values] : times) state.compute_s[node] = median(values);
  return state;
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

  // Then the compute times even out: the first plan to stay in force for a while (the balanced
  // one, or a refinement of it) spreads by less than 15%. Its first 1.5 heartbeats are left out
  // (counters may still describe the plan before); then at least four windows are used.
  std::optional<SteadyState> state;
  ASSERT_TRUE(wait_until(
      [&] {
        state = steady_state(run.events(), generation, good_plan->at("step").get<std::int64_t>() + 2,
                             /*settle_s=*/1.5);
        return state && state->events >= 15 && state->span_s >= 4.0;
      },
      40s, 200ms))
      << (state ? state->describe() : "no steady state") << "\n"
      << plan_list << run.describe();
  EXPECT_LT(state->spread(), 0.15) << state->describe() << "\n" << plan_list;
  EXPECT_LE(state->batches[slow], 0.45 * std::min(state->batches[fast1], state->batches[fast2]))
      << state->describe();
  RecordProperty("steady_state", state->describe());
  std::printf("steady state: %s\n", state->describe().c_str());

  auto stop = run_omnilearn({"stop", run.id(), "--address", cluster.address()}, 20s);
  ASSERT_EQ(stop.status.code, 0) << stop.err;
  auto summary = run.wait_finished(20s);
  ASSERT_TRUE(summary) << run.describe();
  EXPECT_EQ(summary->at("status"), "stopped");
  std::vector<ProcessInfo> left;
  EXPECT_TRUE(wait_until(
      [&] {
        left = job_trainer_processes(run.id());
        return left.empty();
      },
      15s))
      << "trainers still running after the job ended:\n" << describe(left);
}

}  // namespace
}  // namespace omnilearn::testing
