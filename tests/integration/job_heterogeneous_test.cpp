// Issue 5, "Heterogeneous": three workers with slowdown 1, 1, 3 under the proportional policy.
// Within three controller rounds the slow worker's batch is at most 45% of each fast worker's,
// and from then on the compute times the workers report (their heartbeat counters, as carried
// by the step events) differ by less than 15%.
//
// What it takes to measure that on a small shared machine (measured with this job, `omnilearn
// run --local 3 --slowdown 1,1,3`, 200-250 steps, two cores shared with other builds):
// - Fairness between the workers. Without a CPU cap three trainers fight over two cores, and a
//   slowed worker (asleep two thirds of its step) leaves CPU to the fast ones: per-plan spreads
//   of 5..76% and a new plan nearly every round (11 in 200 steps). Every worker gets the same
//   quota instead (cgroup, 10 ms period; 3 x 0.5 CPU fits in two cores), so the slowdown is the
//   only difference between them (shared/BENCHMARKING.md).
// - Fairness against the rest of the machine. A quota caps a node but does not reserve CPU: a
//   cgroup competes as one scheduler entity against every other process, and under other
//   builds' load the quota'd trainers got 0.25-0.45 CPU, varying by the second (per-plan spreads
//   13..77%). favour_quota_cgroups() gives their cgroups a large CPU weight, so each emulated
//   node gets its quota, as a real node of that size would (then: 5..14%).
// - Windows. The counters are means over one heartbeat. At ~5 steps/s a 200 ms heartbeat holds
//   one step, so the controller (median of 5 windows) and this test both see single-step noise
//   (coefficient of variation 20-40% here) and the plan churns with 5% deadband (16 plans in
//   200 steps). One-second heartbeats average ~5 steps; this test does not exercise failure
//   detection, so it can afford them.
// - What is measured. The controller keeps refining the plan within its deadband, so the spread
//   is taken over 12 s of training after the balanced plan: each plan's spread (per-node median
//   counters), weighted by its steps. One plan can be 2 x deadband off by itself.

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

// One plan in force: per-node compute time (median of the counters the step events carry) over
// its steps, leaving out its first `settle` seconds, when counters may still describe the plan
// before.
struct Segment {
  std::vector<int> batches;
  std::map<std::string, double> compute_s;  // node -> median compute time per step
  std::size_t events = 0;                   // step events used
  double spread() const {  // (slowest - fastest) / mean
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
    text << "  batches " << Json(batches).dump() << ", median compute ms:";
    for (const auto& [node, t] : compute_s) text << " " << node << "=" << t * 1e3;
    text << " over " << events << " steps: spread " << spread() * 100 << "%\n";
    return text.str();
  }
};

// The step-time spread of a stretch of training: every plan in force during it, weighted by
// how many steps it ran. The controller keeps refining around the balance (each refinement
// within its deadband of the last), so one plan alone says little; the weighted median over the
// stretch is the spread the job trained with.
struct Stretch {
  std::vector<Segment> segments;
  double first_time = 0, last_time = 0;
  std::size_t events() const {
    std::size_t n = 0;
    for (const auto& s : segments) n += s.events;
    return n;
  }
  double spread() const {
    std::vector<std::pair<double, std::size_t>> weighted;
    for (const auto& s : segments) weighted.emplace_back(s.spread(), s.events);
    std::sort(weighted.begin(), weighted.end());
    std::size_t seen = 0;
    for (const auto& [spread, n] : weighted) {
      seen += n;
      if (2 * seen >= events()) return spread;
    }
    return 1e300;
  }
  std::string describe() const {
    std::ostringstream text;
    text << "spread " << spread() * 100 << "% (weighted median over " << events()
         << " steps in " << last_time - first_time << " s):\n";
    for (const auto& s : segments) text << s.describe();
    return text.str();
  }
};

// The step events of `generation` after `after_step` and within `window_s` of the first of
// them, cut into plans.
Stretch stretch(const std::vector<Json>& events, std::int64_t generation, std::int64_t after_step,
                double window_s, double settle_s) {
  Stretch out;
  std::vector<std::vector<const Json*>> plans;
  for (const auto& e : events) {
    if (e.value("event", "") != "step" || e.at("generation").get<std::int64_t>() != generation ||
        e.at("step").get<std::int64_t>() <= after_step) {
      continue;
    }
    const double t = e.at("time").get<double>();
    if (plans.empty()) out.first_time = t;
    if (t > out.first_time + window_s) break;
    out.last_time = t;
    if (plans.empty() || e.at("batches") != plans.back().front()->at("batches")) plans.emplace_back();
    plans.back().push_back(&e);
  }
  for (const auto& plan : plans) {
    Segment segment;
    segment.batches = plan.front()->at("batches").get<std::vector<int>>();
    const double start = plan.front()->at("time").get<double>();
    std::map<std::string, std::vector<double>> times;
    for (const auto* e : plan) {
      if (e->at("time").get<double>() < start + settle_s) continue;
      ++segment.events;
      for (const auto& w : e->at("workers")) {
        times[w.at("node").get<std::string>()].push_back(w.at("compute_time_s").get<double>());
      }
    }
    if (segment.events == 0) continue;
    for (auto& [node, values] : times) segment.compute_s[node] = median(values);
    out.segments.push_back(std::move(segment));
  }
  return out;
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

  // Then the compute times even out: over the 12 s after the balanced plan took effect, the
  // plans in force (it, and the controller's refinements of it) spread by less than 15%. Each
  // plan's first 1.5 heartbeats are left out; at least 30 steps must remain.
  constexpr double kWindow = 12.0;
  Stretch after;
  ASSERT_TRUE(wait_until(
      [&] {
        after = stretch(run.events(), generation, good_plan->at("step").get<std::int64_t>() + 2,
                        kWindow, /*settle_s=*/1.5);
        return after.last_time - after.first_time >= kWindow - 0.5;
      },
      45s, 200ms))
      << after.describe() << plan_list << run.describe();
  ASSERT_GE(after.events(), 30u) << "the plan changed too often to measure\n"
                                 << after.describe() << plan_list;
  EXPECT_LT(after.spread(), 0.15) << after.describe() << plan_list;
  for (const auto& segment : after.segments) {
    EXPECT_LE(segment.batches[slow],
              0.45 * std::min(segment.batches[fast1], segment.batches[fast2]))
        << "the slow worker stays at <= 45% of a fast one's batch\n" << after.describe();
  }
  RecordProperty("stretch", after.describe());
  std::printf("%s", after.describe().c_str());

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
