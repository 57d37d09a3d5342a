// Mutation checks of the ASP machine's simulation (asp_job_sim.hpp): each rule is broken on
// purpose (asp::AspMutation) and some seeded schedule must then fail, or the simulation's
// passing says nothing about that rule.
//
//   ASP_JOB_MUTATION_SEEDS=n   the most seeds tried per mutation (default 1000)
//   ASP_JOB_MUTATION_COUNT=1   run every one of them and print how many fail (for the docs)

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "tests/asp/asp_job_sim.hpp"

namespace omnilearn::asp::sim {
namespace {

std::uint64_t seed_budget() {
  const char* value = std::getenv("ASP_JOB_MUTATION_SEEDS");
  if (!value || !*value) return 1000;
  return std::strtoull(value, nullptr, 10);
}

class AspJobMutation : public ::testing::TestWithParam<AspMutation> {};

TEST_P(AspJobMutation, BreakingTheRuleFailsTheSimulation) {
  const std::uint64_t budget = seed_budget();
  const bool count_all = std::getenv("ASP_JOB_MUTATION_COUNT") != nullptr;
  std::uint64_t failing = 0, failed = 0, ran = 0;
  std::string violation, replay;
  for (std::uint64_t seed = 1; seed <= budget && (count_all || failing == 0); ++seed) {
    SimConfig config = random_config(seed);
    config.mutation = GetParam();
    const SimResult r = run_simulation(config);
    ++ran;
    if (r.ok()) continue;
    ++failed;
    if (failing == 0) {
      failing = seed;
      violation = r.violations.front();
      replay = replay_line(config);
    }
  }
  std::cout << to_string(GetParam()) << ": "
            << (failing ? "seed " + std::to_string(failing) + " fails: " + violation +
                              "\n  replay: " + replay
                        : std::string("no seed fails"))
            << (count_all
                    ? " (" + std::to_string(failed) + " of " + std::to_string(ran) + " seeds fail)"
                    : std::string())
            << "\n";
  EXPECT_NE(failing, 0u) << "with the rule '" << to_string(GetParam()) << "' broken, " << budget
                         << " seeds pass: they do not exercise it";
}

INSTANTIATE_TEST_SUITE_P(Rules, AspJobMutation,
                         ::testing::Values(AspMutation::kNoFence, AspMutation::kSilenceIsNotTaken,
                                           AspMutation::kDeadSilenceIsNotTaken,
                                           AspMutation::kStopBeforeHandOver,
                                           AspMutation::kRestoreForgetsAsks,
                                           AspMutation::kUndeliveredStaysDealt),
                         [](const ::testing::TestParamInfo<AspMutation>& info) {
                           return std::string(to_string(info.param));
                         });

}  // namespace
}  // namespace omnilearn::asp::sim
