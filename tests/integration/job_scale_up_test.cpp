// Scale-up: a fourth worker joins a running job -> a new generation with four members;
// the joiner receives the state (every rank of that generation reports the same parameter
// checksum at the same step when it has synced) and trains (steps with four batches, its own
// non-zero), and a checkpoint written after the joiner trained holds a calm run's parameters
// (float64, to kExactTolerance): the state it received is the committed one, and no step was
// lost or doubled across the regroup.

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tests/support/job_run.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

// Synthetic data: the state transfer and the group change are what is tested, not speed. Steps
// are paced (the [data] size and batch make each a few ms) and the job is stopped by the test,
// so its length does not depend on how fast this machine is.
constexpr const char* kJob = R"(
[job]
name = "e2e-scale-up"

[model]
kind = "mlp"
hidden = [64, 32]

[data]
dataset = "synthetic"
train_size = 4096
test_size = 512

[train]
global_batch = 256
steps = 100000
optimizer = "sgd"
lr = 0.05
momentum = 0.9
seed = 11
precision = "float64"

[controller]
policy = "proportional"
min_batch = 8
interval = 10
cooldown = 2

[elastic]
min_workers = 3
max_workers = 4

[checkpoint]
every = 10
)";

class JobScaleUp : public JobTest {};

TEST_F(JobScaleUp, AFourthWorkerJoinsReceivesTheStateAndTrains) {
  auto& cluster = start_cluster();
  for (const auto* name : {"w1", "w2", "w3"}) start_worker(name);
  for (const auto* name : {"w1", "w2", "w3"}) {
    ASSERT_TRUE(cluster.wait_worker_joined(name, 15s)) << cluster.worker(name).describe();
  }
  ScratchDir dir("scale-up");
  JobRun run(cluster, dir.write("job.toml", kJob), dir.path() / "run");

  // Training with three, for a few steps.
  auto first = run.wait_for_event("step", 45s, [](const Json& e) {
    return e.at("step").get<int>() >= 5 && e.at("batches").size() == 3;
  });
  ASSERT_TRUE(first) << run.describe();
  const auto step_before_join = first->at("step").get<std::int64_t>();
  const auto generation_before = first->at("generation").get<std::int64_t>();

  start_worker("w4");
  ASSERT_TRUE(cluster.wait_worker_joined("w4", 15s)) << cluster.worker("w4").describe();

  auto has_joiner = [](const Json& members) {
    for (const auto& m : members) {
      if (m.get<std::string>().find("-w4-t") != std::string::npos) return true;
    }
    return false;
  };
  auto grown = run.wait_for_event("generation", 45s, [&](const Json& e) {
    return e.at("members").size() == 4 && has_joiner(e.at("members"));
  });
  ASSERT_TRUE(grown) << run.describe();
  const auto generation = grown->at("generation").get<std::int64_t>();
  EXPECT_GT(generation, generation_before);
  const auto members = grown->at("members");
  std::size_t joiner_rank = 0;
  for (std::size_t r = 0; r < members.size(); ++r) {
    if (has_joiner(Json::array({members[r]}))) joiner_rank = r;
  }
  EXPECT_NE(joiner_rank, 0u) << "a fresh trainer must not lead: it has no committed state";

  // The joiner trains: steps of the new generation with four batches, its own non-zero.
  auto trained = run.wait_for_event("step", 30s, [&](const Json& e) {
    return e.at("generation").get<std::int64_t>() == generation && e.at("batches").size() == 4 &&
           e.at("batches")[joiner_rank].get<int>() > 0 &&
           e.at("step").get<std::int64_t>() >= grown->at("step").get<std::int64_t>() + 3;
  });
  ASSERT_TRUE(trained) << run.describe();

  // Every rank of the new generation synced to one state: same step, same parameters.
  std::vector<Json> synced;
  ASSERT_TRUE(wait_until(
      [&] {
        synced.clear();
        for (const auto& e : events_named(run.events(), "synced")) {
          if (e.at("generation").get<std::int64_t>() == generation) synced.push_back(e);
        }
        return synced.size() >= 4;
      },
      10s))
      << run.describe();
  ASSERT_EQ(synced.size(), 4u) << run.describe();
  std::set<std::int64_t> ranks;
  for (const auto& e : synced) ranks.insert(e.at("rank").get<std::int64_t>());
  EXPECT_EQ(ranks, (std::set<std::int64_t>{0, 1, 2, 3}));
  const double reference = synced[0].at("parameter_checksum").get<double>();
  const auto sync_step = synced[0].at("step").get<std::int64_t>();
  EXPECT_GE(sync_step, step_before_join) << "the group went on from the committed state";
  EXPECT_NE(reference, 0.0);
  for (const auto& e : synced) {
    SCOPED_TRACE(e.dump());
    EXPECT_EQ(e.at("step").get<std::int64_t>(), sync_step);
    const double checksum = e.at("parameter_checksum").get<double>();
    EXPECT_LE(std::abs(checksum - reference), 1e-6 * std::max(1.0, std::abs(reference)))
        << "checksum " << checksum << " vs rank 0's " << reference;
  }
  bool joiner_synced = false;
  for (const auto& e : synced) {
    joiner_synced |= e.at("trainer").get<std::string>().find("-w4-t") != std::string::npos;
  }
  EXPECT_TRUE(joiner_synced) << "the joiner reported its synced state";

  // No step was redone: the leader's step numbers only go up across the regroup.
  std::int64_t previous = 0;
  for (const auto& e : events_named(run.events(), "step")) {
    const auto step = e.at("step").get<std::int64_t>();
    ASSERT_GT(step, previous) << "step " << step << " after " << previous;
    previous = step;
  }

  // A checkpoint of a step the four trained (the leader writes one every 10 steps) is a calm
  // run's state at that step.
  auto checkpointed = run.wait_for_event("step", 30s, [&](const Json& e) {
    return e.contains("checkpoint") && e.at("generation").get<std::int64_t>() == generation &&
           e.at("step").get<std::int64_t>() > trained->at("step").get<std::int64_t>();
  });
  ASSERT_TRUE(checkpointed) << run.describe();

  // Stop it; the four trainers leave with the job.
  auto stop = run_omnilearn({"stop", run.id(), "--address", cluster.address()}, 20s);
  ASSERT_EQ(stop.status.code, 0) << stop.err;
  auto summary = run.wait_finished(20s);
  ASSERT_TRUE(summary) << run.describe();
  EXPECT_EQ(summary->at("status"), "stopped");
  EXPECT_EQ(summary->at("lost_steps"), 0);
  expect_calm_replay_equal(dir.path() / "job.toml",
                           checkpointed->at("checkpoint").get<std::string>(),
                           checkpointed->at("step").get<std::int64_t>());
  const std::vector<ProcessInfo> left = job_processes_left(run.id(), 15s);
  EXPECT_TRUE(left.empty()) << "trainers still running after the job ended:\n" << describe(left);
}

}  // namespace
}  // namespace omnilearn::testing
