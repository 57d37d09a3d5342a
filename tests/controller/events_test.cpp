// Events in the simulator: parsing, validation, and recovery after a speed change, a leave or a
// join (efficiency back to >= 0.95 within 3 rounds).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "random_cluster.hpp"
#include "controller/simulator.hpp"

namespace omnilearn::scheduler {
namespace {

// OMNILEARN_TEST_CLUSTERS: 100 under the sanitizers (tests/controller/CMakeLists.txt), where the
// point is memory and thread errors and 1,000 clusters take minutes.
#ifndef OMNILEARN_TEST_CLUSTERS
#define OMNILEARN_TEST_CLUSTERS 1000
#endif
constexpr int kClusters = OMNILEARN_TEST_CLUSTERS;

using testing::random_cluster;
using testing::random_event;
using testing::simulation_of;

TEST(ParseEvents, ReadsTheThreeKindsAndPrintsThemBack) {
  const auto e = parse_events("5:speed:3=0.5, 8:leave:1,10:join:2.0");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].round, 5);
  EXPECT_EQ(e[0].kind, ClusterEvent::Kind::kSpeed);
  EXPECT_EQ(e[0].worker, 3);
  EXPECT_DOUBLE_EQ(e[0].speed, 0.5);
  EXPECT_EQ(e[1].kind, ClusterEvent::Kind::kLeave);
  EXPECT_EQ(e[1].worker, 1);
  EXPECT_EQ(e[2].kind, ClusterEvent::Kind::kJoin);
  EXPECT_DOUBLE_EQ(e[2].speed, 2.0);
  EXPECT_EQ(e[0].to_string(), "5:speed:3=0.5");
  EXPECT_EQ(e[2].to_string(), "10:join:2");
  EXPECT_TRUE(parse_events("").empty());
}

TEST(ParseEvents, MalformedEventsAreOneLineErrorsNamingTheEvent) {
  for (const char* bad :
       {"5", "5:speed", "5:speed:3", "5:speed:3=0", "5:speed:3=-1", "x:leave:1", "-1:leave:1",
        "5:leave:one", "5:join:abc", "5:jump:1", "5:leave:1,", "5:leave:1:2", "5:speed:3=0.5x"}) {
    try {
      parse_events(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("malformed event"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(SimulationConfig, RejectsImpossibleClustersAndEvents) {
  auto rejects = [](auto mutate, const char* needle) {
    SimulationConfig s;
    s.speeds = {1, 1, 2, 4};
    s.global_batch = 256;
    s.min_batch = 8;
    s.max_batch = 256;
    mutate(s);
    try {
      s.validate();
      ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  rejects([](SimulationConfig& s) { s.speeds = {1, 0}; }, "positive");
  rejects([](SimulationConfig& s) { s.speeds.clear(); }, "no workers");
  rejects([](SimulationConfig& s) { s.global_batch = 16; }, "below 4 workers x min batch 8");
  rejects([](SimulationConfig& s) { s.events = parse_events("2:leave:9"); }, "not in the cluster");
  rejects([](SimulationConfig& s) { s.events = parse_events("2:leave:1,3:speed:1=2"); },
          "not in the cluster");
  rejects([](SimulationConfig& s) { s.events = parse_events("20:join:1"); }, "last round");
  rejects([](SimulationConfig& s) { s.max_batch = 70, s.events = parse_events("2:leave:0"); },
          "exceeds 3 workers x max batch 70");
  rejects(
      [](SimulationConfig& s) {
        s.speeds = {1};
        s.events = parse_events("1:leave:0");
      },
      "last worker");
  rejects([](SimulationConfig& s) { s.noise = 1.5; }, "noise");
}

TEST(Simulate, AppliesTheIssueExampleEvents) {
  SimulationConfig s;
  s.speeds = {1, 1, 2, 4};
  s.events = parse_events("5:speed:3=0.5,8:leave:1,10:join:2.0");
  const SimulationResult r = simulate(s);
  ASSERT_EQ(r.rounds.size(), 12u);
  EXPECT_EQ(r.rounds[5].events, std::vector<std::string>{"5:speed:3=0.5"});
  EXPECT_EQ(r.rounds[8].workers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(r.rounds[10].workers, (std::vector<int>{0, 2, 3, 4}));
  EXPECT_LT(r.rounds[5].efficiency, 0.5);  // the plan still thinks worker 3 is fast
  EXPECT_GE(r.rounds[6].efficiency, 0.95);
  EXPECT_GE(r.rounds[8].efficiency, 0.95);  // a leave is redistributed at once
  EXPECT_GE(r.rounds[11].efficiency, 0.95);
  // Deterministic: the same config gives the same rounds.
  EXPECT_EQ(simulate(s).rounds[11].batches, r.rounds[11].batches);
}

// One random event at round 6 (after convergence) per cluster. Round 6 runs with the old plan
// (a speed change is only seen in the steps), so recovery is measured at rounds 7 and 8:
// "within 3 rounds" means round 8 (and every later one) at >= 0.95.
void expect_recovery(Policy policy, double overhead_share, double noise, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  int runs = 0;
  double worst[4] = {1, 1, 1, 1};
  for (int k = 0; k < kClusters; ++k) {
    const auto c = random_cluster(rng);
    auto s = simulation_of(c, policy, overhead_share, noise, k);
    s.deadband = 0.02;
    s.rounds = 12;
    s.events.push_back(random_event(rng, 6, static_cast<int>(c.speeds.size()), c.speeds));
    try {
      s.validate();
    } catch (const std::invalid_argument&) {
      continue;  // a join that n * min_batch > B forbids
    }
    ++runs;
    const SimulationResult r = simulate(s);
    for (int d = 0; d < 4; ++d) {
      const RoundRecord& rec = r.rounds[6 + d];
      worst[d] = std::min(worst[d], noise > 0 ? rec.plan_efficiency : rec.efficiency);
    }
    // With noise too: the gate once kept a plan 7% off for three rounds after a
    // worker slowed by 5-7% (0.933 worst at 2% noise), until the slow change detector compared
    // medians instead of asking every observation of a run to lie beyond 5%.
    const double bound = 0.95;
    for (int i = 8; i < s.rounds; ++i) {
      const double e = noise > 0 ? r.rounds[i].plan_efficiency : r.rounds[i].efficiency;
      ASSERT_GE(e, bound) << to_string(policy) << " cluster " << k << " round " << i << " after "
                         << s.events[0].to_string();
    }
  }
  std::printf(
      "%s, overhead %.0f%%, noise %.0f%%: %d runs; worst efficiency at the event round "
      "and the 3 after: %.3f %.3f %.3f %.3f\n",
      std::string(to_string(policy)).c_str(), overhead_share * 100, noise * 100, runs, worst[0],
      worst[1], worst[2], worst[3]);
  EXPECT_GT(runs, kClusters * 9 / 10);  // nearly every cluster got its event
}

TEST(EventRecovery, ProportionalLinearCostRecoversWithinThreeRounds) {
  expect_recovery(Policy::kProportional, 0.0, 0.0, 21);
  expect_recovery(Policy::kProportional, 0.0, 0.02, 22);
}

TEST(EventRecovery, AffineRecoversWithinThreeRoundsWithAndWithoutOverhead) {
  expect_recovery(Policy::kAffine, 0.0, 0.0, 23);
  expect_recovery(Policy::kAffine, 0.2, 0.0, 24);
  expect_recovery(Policy::kAffine, 0.2, 0.02, 25);
}

}  // namespace
}  // namespace omnilearn::scheduler
