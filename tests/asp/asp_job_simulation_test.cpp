// The ASP scheduler's machine (asp::AspJob) under seeded fault schedules (asp_job_sim.hpp):
// late, lost and zombie pushes, frozen nodes whose trainers run on, slow fences, servers killed
// at random and as fences reach them, workers killed, drained servers handing over, the head
// killed and restored from its last snapshot (in about 30% of the seeds). Every
// schedule must keep every invariant; a failure prints the line that replays it.
//
//   ASP_JOB_SIM_SEEDS=n   seeds to run (default 5000, a fifth under the sanitizers)
//   ASP_JOB_SIM_SEED=n    run only seed n, printing the machine's events
//   ASP_JOB_SIM_MUTATION=name  with that rule broken (asp_job_mutation_test's failing seeds)

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <vector>

#include "tests/asp/asp_job_sim.hpp"

#ifndef OMNILEARN_TEST_SEED_DIVISOR
#define OMNILEARN_TEST_SEED_DIVISOR 1
#endif

namespace omnilearn::asp::sim {
namespace {

std::vector<std::uint64_t> seeds() {
  if (const char* one = std::getenv("ASP_JOB_SIM_SEED")) return {std::strtoull(one, nullptr, 10)};
  std::uint64_t count = 5000 / OMNILEARN_TEST_SEED_DIVISOR;
  if (const char* n = std::getenv("ASP_JOB_SIM_SEEDS")) count = std::strtoull(n, nullptr, 10);
  std::uint64_t first = 1;  // ASP_JOB_SIM_FIRST_SEED runs seeds further on
  if (const char* f = std::getenv("ASP_JOB_SIM_FIRST_SEED")) first = std::strtoull(f, nullptr, 10);
  std::vector<std::uint64_t> out;
  for (std::uint64_t s = first; s < first + count; ++s) out.push_back(s);
  return out;
}

TEST(AspJobSimulation, EveryScheduleKeepsEveryInvariant) {
  SimResult total;
  const auto all = seeds();
  for (const std::uint64_t seed : all) {
    SimConfig config = random_config(seed);
    config.trace = std::getenv("ASP_JOB_SIM_SEED") != nullptr;
    if (const char* m = std::getenv("ASP_JOB_SIM_MUTATION")) config.mutation = mutation_named(m);
    const SimResult r = run_simulation(config);
    ASSERT_TRUE(r.ok()) << "seed " << seed << ": " << r.violations.front()
                        << "\n  replay: " << replay_line(config);
    total.updates += r.updates;
    total.late_pushes += r.late_pushes;
    total.abandoned_pulls += r.abandoned_pulls;
    total.zombie_pushes += r.zombie_pushes;
    total.fenced_pushes += r.fenced_pushes;
    total.fence_timeouts += r.fence_timeouts;
    total.server_restarts += r.server_restarts;
    total.hand_overs += r.hand_overs;
    total.lost_samples += r.lost_samples;
    total.evaluations += r.evaluations;
    total.partial_pushes += r.partial_pushes;
    total.head_restarts += r.head_restarts;
    total.lost_deals += r.lost_deals;
    total.hung_servers += r.hung_servers;
    total.hung_restarts += r.hung_restarts;
  }
  // The faults the invariants are about happened.
  if (all.size() >= 200) {
    EXPECT_GT(total.late_pushes, 0);
    EXPECT_GT(total.abandoned_pulls, 0);
    EXPECT_GT(total.zombie_pushes, 0);
    EXPECT_GT(total.fenced_pushes, 0);
    EXPECT_GT(total.fence_timeouts, 0);
    EXPECT_GT(total.server_restarts, 0);
    EXPECT_GT(total.hand_overs, 0);
    EXPECT_GT(total.lost_samples, 0);
    EXPECT_GT(total.evaluations, 0);
    EXPECT_GT(total.partial_pushes, 0);
    EXPECT_GT(total.head_restarts, 0);
    EXPECT_GT(total.lost_deals, 0);
    EXPECT_GT(total.hung_restarts, 0);
  }
  std::cout << all.size() << " schedules: " << total.updates << " updates, " << total.late_pushes
            << " late pushes, " << total.abandoned_pulls << " batches abandoned at the pull, "
            << total.zombie_pushes << " pushes from trainers declared gone, "
            << total.fenced_pushes << " refused by a fence, " << total.fence_timeouts
            << " fences past their bound, " << total.server_restarts << " server restarts, "
            << total.hand_overs << " hand-overs, " << total.partial_pushes << " partial pushes, "
            << total.lost_samples << " (epoch, shard, sample) updates lost with an incarnation, "
            << total.evaluations << " evaluations, " << total.head_restarts << " head restarts ("
            << total.lost_deals << " with a written deal's answer lost), " << total.hung_servers
            << " servers hung, " << total.hung_restarts << " restarted for it\n";
}

}  // namespace
}  // namespace omnilearn::asp::sim
