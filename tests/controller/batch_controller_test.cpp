// BatchController: membership by key, measurements, plans (order, versions, bounds, caps).
#include "controller/batch_controller.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "controller/simulator.hpp"
#include "random_cluster.hpp"

namespace omnilearn::scheduler {
namespace {

using testing::uniform_int;
using testing::uniform_real;

ControllerConfig config(int global_batch, Policy policy = Policy::kProportional) {
  ControllerConfig c;
  c.global_batch = global_batch;
  c.policy = policy;
  return c;
}

// Reports `steps` steps of a worker with linear cost at `speed` samples/s under the last plan.
void run_steps(BatchController& c, const std::map<std::string, double>& speed, int steps = 5) {
  const BatchPlan& p = c.last_plan();
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < p.keys.size(); ++i) {
      c.observe(p.keys[i], p.batches[i], p.batches[i] / speed.at(p.keys[i]));
    }
  }
}

// `steps` steps of every worker at the plan in force: worker i computes at speeds[i] samples/s,
// each step's time multiplied by a draw of `noise`.
template <class Noise>
void run_noisy_steps(BatchController& c, const std::vector<double>& speeds, int steps, Noise& noise,
                     std::mt19937_64& rng) {
  const BatchPlan& p = c.last_plan();
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < p.keys.size(); ++i) {
      c.observe(p.keys[i], p.batches[i], noise(rng) * p.batches[i] / speeds[i]);
    }
  }
}

TEST(ControllerConfig, RejectsImpossibleSettings) {
  auto bad = [](auto mutate) {
    ControllerConfig c;
    mutate(c);
    EXPECT_THROW(BatchController{c}, std::invalid_argument);
  };
  bad([](ControllerConfig& c) { c.global_batch = 0; });
  bad([](ControllerConfig& c) { c.min_batch = 0; });
  bad([](ControllerConfig& c) { c.min_batch = 64, c.max_batch = 32; });
  bad([](ControllerConfig& c) { c.global_batch = 4, c.min_batch = 8; });
  bad([](ControllerConfig& c) { c.deadband = 1.0; });
  bad([](ControllerConfig& c) { c.gain = 0.0; });
  bad([](ControllerConfig& c) { c.gain = 1.5; });
  bad([](ControllerConfig& c) { c.throughput_window = 0; });
  bad([](ControllerConfig& c) { c.affine.forgetting = 2.0; });
}

TEST(BatchController, FirstPlanIsEqualWithoutHintsAndProportionalWithThem) {
  BatchController plain(config(256));
  for (const char* k : {"a", "b", "c", "d"}) plain.add_worker(k);
  const BatchPlan p = plain.plan();
  EXPECT_EQ(p.batches, (std::vector<int>{64, 64, 64, 64}));
  EXPECT_TRUE(p.changed);
  EXPECT_EQ(p.version, 1u);

  BatchController hinted(config(256));
  hinted.add_worker("a", 100.0);
  hinted.add_worker("b", 100.0);
  hinted.add_worker("c", 200.0);
  hinted.add_worker("d", 400.0);
  EXPECT_EQ(hinted.plan().batches, (std::vector<int>{32, 32, 64, 128}));
}

TEST(BatchController, ConvergesInOneRoundOnLinearCostsAndThenHolds) {
  BatchController c(config(256));
  const std::map<std::string, double> speed{{"a", 100}, {"b", 100}, {"c", 200}, {"d", 400}};
  for (const auto& [k, v] : speed) c.add_worker(k);
  c.plan();
  run_steps(c, speed);
  const BatchPlan second = c.plan();
  EXPECT_EQ(second.batches, (std::vector<int>{32, 32, 64, 128}));
  EXPECT_TRUE(second.changed);
  EXPECT_EQ(second.version, 2u);
  EXPECT_NEAR(second.predicted_step_time, 0.32, 1e-12);
  run_steps(c, speed);
  const BatchPlan third = c.plan();
  EXPECT_FALSE(third.changed);
  EXPECT_EQ(third.version, 2u);
  EXPECT_EQ(c.plan().batches, third.batches);  // planning again without news changes nothing
}

TEST(BatchController, OrderIsJoinOrderAndSurvivorsKeepTheirPlaces) {
  BatchController c(config(300));
  for (const char* k : {"n1", "n2", "n3"}) c.add_worker(k);
  c.plan();
  EXPECT_TRUE(c.remove_worker("n2"));
  EXPECT_FALSE(c.remove_worker("n2"));  // a repeated Down is harmless
  c.add_worker("n4");
  const BatchPlan p = c.plan();
  EXPECT_EQ(p.keys, (std::vector<std::string>{"n1", "n3", "n4"}));
  EXPECT_EQ(p.batch_of("n4"), 100);
  EXPECT_THROW(p.batch_of("n2"), std::out_of_range);
  EXPECT_TRUE(p.changed);
}

TEST(BatchController, RemovedShareGoesToSurvivorsBySpeed) {
  BatchController c(config(240));
  const std::map<std::string, double> speed{{"a", 100}, {"b", 300}, {"c", 200}};
  for (const auto& [k, v] : speed) c.add_worker(k);
  c.plan();
  run_steps(c, speed);
  EXPECT_EQ(c.plan().batches, (std::vector<int>{40, 120, 80}));
  c.remove_worker("c");
  const BatchPlan p = c.plan();
  EXPECT_EQ(p.batches, (std::vector<int>{60, 180}));  // 80 more, 1:3 like their speeds
}

TEST(BatchController, NewcomerStartsFromItsHintOrTheMeanThroughput) {
  BatchController c(config(400));
  const std::map<std::string, double> speed{{"a", 100}, {"b", 300}};
  for (const auto& [k, v] : speed) c.add_worker(k);
  c.plan();
  run_steps(c, speed);
  c.plan();
  c.add_worker("mean");           // no hint: the mean of 100 and 300
  c.add_worker("hinted", 400.0);  // samples/s
  const BatchPlan p = c.plan();
  EXPECT_EQ(p.batches, (std::vector<int>{40, 120, 80, 160}));
}

TEST(BatchController, MemoryCapBindsAndTheRestGoesBySpeed) {
  BatchController c(config(400));
  c.add_worker("fast", 800.0, /*memory_cap=*/100);
  c.add_worker("slow", 100.0);
  c.add_worker("mid", 300.0);
  const BatchPlan p = c.plan();  // wanted 266.7 / 33.3 / 100; fast capped at 100
  EXPECT_EQ(p.batch_of("fast"), 100);
  EXPECT_EQ(p.batch_of("slow"), 75);
  EXPECT_EQ(p.batch_of("mid"), 225);
}

TEST(BatchController, InfeasibleMembershipIsAClearErrorNotAViolation) {
  ControllerConfig cfg = config(100);
  cfg.max_batch = 40;
  BatchController c(cfg);
  c.add_worker("a");
  c.add_worker("b");
  ASSERT_TRUE(c.infeasibility().has_value());
  EXPECT_NE(c.infeasibility()->find("sum to 80"), std::string::npos) << *c.infeasibility();
  EXPECT_THROW(c.plan(), InfeasibleBatchError);
  EXPECT_EQ(c.last_plan().version, 0u);
  c.add_worker("c");
  EXPECT_FALSE(c.infeasibility().has_value());
  EXPECT_EQ(c.plan().batches, (std::vector<int>{34, 33, 33}));
}

TEST(BatchController, RejectsBadWorkersAndIgnoresUnknownReports) {
  ControllerConfig cfg = config(64);
  cfg.min_batch = 8;
  BatchController c(cfg);
  c.add_worker("a");
  EXPECT_THROW(c.add_worker("a"), std::invalid_argument);
  EXPECT_THROW(c.add_worker("b", -1.0), std::invalid_argument);
  EXPECT_THROW(c.add_worker("b", std::nullopt, 4), std::invalid_argument);
  EXPECT_FALSE(c.observe("ghost", 8, 0.1));
  EXPECT_THROW(c.observe("a", 8, 0.0), std::invalid_argument);
  EXPECT_TRUE(c.observe("a", 8, 0.1));
}

TEST(BatchController, AffineLearnsOverheadAndEqualizesSteps) {
  ControllerConfig cfg = config(256, Policy::kAffine);
  cfg.deadband = 0.01;
  BatchController c(cfg);
  // t = 0.02 s + b / speed: speeds 100, 100, 100, 400 samples/s (every batch moves far enough
  // from the first equal split to give each worker two distinct batch values).
  const std::map<std::string, double> speed{{"a", 100}, {"b", 100}, {"c", 100}, {"d", 400}};
  for (const auto& [k, v] : speed) c.add_worker(k);
  for (int round = 0; round < 4; ++round) {
    const BatchPlan& p = c.plan();
    for (int s = 0; s < 5; ++s) {
      for (std::size_t i = 0; i < p.keys.size(); ++i) {
        c.observe(p.keys[i], p.batches[i], 0.02 + p.batches[i] / speed.at(p.keys[i]));
      }
    }
  }
  std::vector<CostModel> truth;
  for (const WorkerEstimate& e : c.estimates()) {
    ASSERT_TRUE(e.model.has_value()) << e.key;
    EXPECT_NEAR(e.model->alpha, 0.02, 1e-9) << e.key;
    EXPECT_NEAR(e.model->beta, 1.0 / speed.at(e.key), 1e-12) << e.key;
    truth.push_back({0.02, 1.0 / speed.at(e.key)});
  }
  const BatchPlan p = c.last_plan();
  double slowest = 0;
  for (std::size_t i = 0; i < p.keys.size(); ++i) {
    slowest = std::max(slowest, truth[i].time(p.batches[i]));
  }
  const std::vector<Bounds> bounds(4, Bounds{cfg.min_batch, cfg.max_batch});
  EXPECT_LE(slowest, 1.01 * best_integer_split(truth, bounds, 256).step_time);
}

// Property: random churn (joins with and without hints and caps, leaves, noisy reports, a
// policy per run): every plan sums to B and respects min, max and each memory cap, or the
// controller says why it cannot.
TEST(BatchControllerProperty, ConservationAndBoundsUnderChurn) {
  std::mt19937_64 rng(5);
  int plans = 0;
  for (int run = 0; run < 200; ++run) {
    ControllerConfig cfg;
    cfg.policy = static_cast<Policy>(uniform_int(rng, 0, 2));
    cfg.min_batch = uniform_int(rng, 1, 8);
    cfg.max_batch = cfg.min_batch + uniform_int(rng, 8, 256);
    cfg.global_batch = uniform_int(rng, cfg.min_batch * 4, cfg.max_batch * 8);
    cfg.deadband = uniform_real(rng, 0.0, 0.2);
    BatchController c(cfg);
    std::map<std::string, std::pair<double, std::optional<int>>> truth;  // speed, cap
    int next = 0;
    for (int step = 0; step < 40; ++step) {
      const int action = uniform_int(rng, 0, 9);
      if (action == 0 || c.size() < 2) {
        const std::string key = "w" + std::to_string(next++);
        const double speed = 100.0 * std::exp2(uniform_real(rng, 0.0, 4.0));
        std::optional<int> cap;
        if (uniform_int(rng, 0, 3) == 0) cap = uniform_int(rng, cfg.min_batch, cfg.max_batch);
        c.add_worker(key, uniform_int(rng, 0, 1) ? std::optional<double>(speed) : std::nullopt,
                     cap);
        truth[key] = {speed, cap};
      } else if (action == 1 && c.size() > 1) {
        auto it = truth.begin();
        std::advance(it, uniform_int(rng, 0, static_cast<int>(truth.size()) - 1));
        ASSERT_TRUE(c.remove_worker(it->first));
        truth.erase(it);
      }
      if (c.infeasibility()) {
        EXPECT_THROW(c.plan(), InfeasibleBatchError);
        continue;
      }
      const BatchPlan p = c.plan();
      ++plans;
      ASSERT_EQ(std::accumulate(p.batches.begin(), p.batches.end(), 0), cfg.global_batch);
      for (std::size_t i = 0; i < p.keys.size(); ++i) {
        const auto& [speed, cap] = truth.at(p.keys[i]);
        ASSERT_GE(p.batches[i], cfg.min_batch);
        ASSERT_LE(p.batches[i], cfg.max_batch);
        if (cap) {
          ASSERT_LE(p.batches[i], *cap);
        }
        for (int s = 0; s < 3; ++s) {
          const double noise = 1.0 + 0.1 * uniform_real(rng, -1.0, 1.0);
          c.observe(p.keys[i], p.batches[i], (0.005 + p.batches[i] / speed) * noise);
        }
      }
    }
  }
  EXPECT_GT(plans, 2000);  // most steps plan; some memberships cannot hold B
}

// A plan made from one window per worker is provisional. The next round replaces it
// under the deadband alone; without provisional plans the noise gate holds it, since two windows
// cannot prove a 10% gain (the gate here is about 19%).
TEST(BatchController, AProvisionalPlanIsReplacedWithoutTheNoiseGate) {
  for (const std::size_t provisional : {std::size_t{3}, std::size_t{0}}) {
    ControllerConfig cfg;
    cfg.global_batch = 100;
    cfg.deadband = 0.05;
    cfg.provisional_observations = provisional;
    BatchController c(cfg);
    c.add_worker("a");
    c.add_worker("b");
    c.observe("a", 50, 0.05);  // 1,000 samples/s each, from one window
    c.observe("b", 50, 0.05);
    const BatchPlan first = c.plan();
    EXPECT_EQ(first.batches, (std::vector<int>{50, 50}));
    EXPECT_EQ(first.provisional, provisional > 0);
    c.observe("a", 50, 0.05);
    c.observe("b", 50, 0.075);  // b is slower than its first window said: median 833/s
    const BatchPlan second = c.plan();
    if (provisional > 0) {
      EXPECT_TRUE(second.changed);
      EXPECT_GT(second.batches[0], 50);
      EXPECT_TRUE(second.provisional);  // still fewer than 3 windows of each
    } else {
      EXPECT_FALSE(second.changed) << "gate " << second.noise_gain;
      EXPECT_GT(second.noise_gain, 0.1);
    }
  }
}

// A large change of a worker's speed (the estimator's quick level) asks for a round at once
// (ControlRounds::due); the next plan follows it and clears the request. A small change, caught
// by the slow level, waits for the next round.
TEST(BatchController, ALargeSpeedChangeAsksForARoundAtOnce) {
  BatchController c(config(200));
  c.add_worker("a");
  c.add_worker("b");
  c.plan();
  auto noisy = [](int k) { return 1.0 + 0.01 * std::sin(1.3 * k); };
  for (int k = 0; k < 12; ++k) {
    c.observe("a", 100, 0.1 * noisy(k));  // 1,000 samples/s each
    c.observe("b", 100, 0.1 * noisy(k + 5));
  }
  EXPECT_FALSE(c.speed_changed());
  EXPECT_EQ(c.plan().batches, (std::vector<int>{100, 100}));
  c.observe("a", 100, 0.2 * noisy(12));  // a at half its speed
  EXPECT_FALSE(c.speed_changed());       // one window could be a pause
  c.observe("a", 100, 0.2 * noisy(13));
  EXPECT_TRUE(c.speed_changed());
  const BatchPlan p = c.plan();
  EXPECT_FALSE(c.speed_changed());
  EXPECT_TRUE(p.changed);
  EXPECT_NEAR(p.batch_of("a"), 67, 3);
  // b 8% slower: the slow level sees it (the window restarts) without asking for a round.
  for (int k = 0; k < 12; ++k) c.observe("b", p.batch_of("b"), p.batch_of("b") / 920.0 * noisy(k));
  EXPECT_EQ(c.estimates()[1].regime_changes, 1u);
  EXPECT_FALSE(c.speed_changed());
}

// A speed that comes back brings back its window (ChangeDetection::remembered_regimes): the
// estimate then stands on a whole window, and the controller asks for a round at once, as for
// a quick-level change, even where the level that found the change would wait for the next
// round. Here only the run level finds changes (the quick level's bar is out of reach).
TEST(BatchController, ARememberedSpeedThatComesBackAsksForARoundAtOnce) {
  ControllerConfig cfg = for_step_observations(config(200));
  cfg.change.quick_min_change = 100.0;
  cfg.change.quick_max_change = std::numeric_limits<double>::infinity();
  cfg.change.run_min_spread = 0.0;
  BatchController c(cfg);
  c.add_worker("a");
  c.add_worker("b");
  c.plan();
  auto noisy = [](int k) { return 1.0 + 0.01 * std::sin(1.3 * k); };
  int k = 0;
  for (; k < 60; ++k) {
    c.observe("a", 100, 0.1 * noisy(k));
    c.observe("b", 100, 0.1 * noisy(k + 5));
  }
  EXPECT_EQ(c.plan().batches, (std::vector<int>{100, 100}));
  for (; k < 100; ++k) c.observe("a", 100, 0.2 * noisy(k));  // a neighbour: half the speed
  EXPECT_EQ(c.estimates()[0].regime_changes, 1u);
  EXPECT_FALSE(c.speed_changed());  // the run level's change waits for the round
  const BatchPlan slow = c.plan();
  EXPECT_NEAR(slow.batch_of("a"), 67, 3);
  for (; k < 103; ++k) c.observe("a", slow.batch_of("a"), slow.batch_of("a") / 1000.0 * noisy(k));
  EXPECT_EQ(c.estimates()[0].regime_changes, 2u);
  EXPECT_EQ(c.estimates()[0].observations, 48u);  // the window from before the neighbour
  EXPECT_TRUE(c.speed_changed());
  const BatchPlan back = c.plan();
  EXPECT_TRUE(back.changed);
  EXPECT_EQ(back.batches, (std::vector<int>{100, 100}));
  EXPECT_FALSE(c.speed_changed());
}

// Smoothing across rounds: a deadband of 0.1 holds a plan against any one round's
// gain up to 10%; an imbalance the gate calls real, seen persist_rounds rounds in a row, is
// corrected all the same, once; with persist_rounds = 0 it is held for good.
TEST(BatchController, AnImbalanceTheDeadbandHoldsIsCorrectedAfterPersistRounds) {
  for (const std::size_t rounds : {std::size_t{3}, std::size_t{0}}) {
    ControllerConfig cfg = config(256);
    cfg.deadband = 0.1;
    cfg.persist_rounds = rounds;
    BatchController c(cfg);
    std::map<std::string, double> speed{{"a", 1000}, {"b", 1000}, {"c", 1000}, {"d", 1000}};
    for (const auto& [k, v] : speed) c.add_worker(k);
    c.plan();
    run_steps(c, speed, 10);
    ASSERT_EQ(c.plan().batches, (std::vector<int>{64, 64, 64, 64}));
    speed["a"] = 930;  // 7% slower: the plan's step is 5.7% longer than the target's
    std::vector<int> changed_at;
    for (int round = 1; round <= 20; ++round) {
      run_steps(c, speed, 10);
      const BatchPlan p = c.plan();
      if (p.changed) {
        changed_at.push_back(round);
        EXPECT_TRUE(p.persisted);
        EXPECT_LT(p.batches[0], 64);
        EXPECT_NEAR(p.predicted_step_time, p.target_step_time, 1e-12);
      } else {
        EXPECT_FALSE(p.persisted);
      }
    }
    if (rounds > 0) {
      // Held while the gain is new (the change detector's rounds, then persist_rounds more),
      // then corrected once and kept.
      ASSERT_EQ(changed_at.size(), 1u);
      EXPECT_GE(changed_at[0], static_cast<int>(rounds));
      EXPECT_LE(changed_at[0], static_cast<int>(rounds) + 2);
    } else {
      EXPECT_TRUE(changed_at.empty());
    }
  }
}

// A gain inside the deadband that the gate of 4 standard errors cannot tell from noise, but
// that lasts: one worker 8% slower under 6% per-step noise, a gain near 6% (the smoothing
// across rounds needs persist_gain plus a gate near 5%). With persist_z (for_step_observations)
// the plan is replaced once the gain has held at 1.5 standard errors while every worker made a
// fresh window of observations; without it, only when the noise happens to lift the gain over
// the higher bar for persist_rounds rounds, later or never.
TEST(BatchController, AGainHeldAcrossAFreshWindowIsCorrectedAtPersistZ) {
  // The first round (of 40) that changed the plan after the slowdown; 0 for none.
  auto corrected_in = [](double persist_z, std::uint32_t seed) {
    ControllerConfig cfg = for_step_observations(config(256));
    cfg.persist_z = persist_z;
    cfg.deadband = 0.1;
    BatchController c(cfg);
    const std::vector<std::string> keys{"a", "b", "c", "d"};
    for (const auto& k : keys) c.add_worker(k);
    c.plan();
    std::mt19937_64 rng(seed);
    std::lognormal_distribution<double> noise(0.0, 0.06);
    std::vector<double> speed(4, 1000.0);
    int first = 0;
    for (int round = 1; round <= 40; ++round) {
      if (round == 7) speed[0] = 920.0;  // a 8% slower, after the first plans settled
      run_noisy_steps(c, speed, 10, noise, rng);
      const BatchPlan next = c.plan();
      if (round > 7 && next.changed) {
        EXPECT_TRUE(next.persisted);
        EXPECT_LT(next.batch_of("a"), 64);
        if (first == 0) {
          first = round;
        } else if (persist_z > 0.0) {
          ADD_FAILURE() << "changed again in round " << round;
        }
      }
    }
    return first;
  };
  int sooner = 0;
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    const int with = corrected_in(1.5, seed);
    const int without = corrected_in(0.0, seed);
    std::printf("seed %u: corrected in round %d with persist_z, %d without (0: never)\n", seed,
                with, without);
    // Not before a fresh window of 48 observations (5 rounds of 10 steps) after the median
    // moved, and within ten rounds of that.
    EXPECT_GE(with, 7 + 5) << "seed " << seed;
    EXPECT_LE(with, 22) << "seed " << seed;
    EXPECT_TRUE(without == 0 || without >= with) << "seed " << seed;
    sooner += without == 0 || without > with ? 1 : 0;
  }
  EXPECT_GE(sooner, 4);
}

// The lower bar does not make noise a reason: equal workers under 25% per-step noise, 10 steps
// a round, 2,000 rounds: the churn goal (at most one plan change per 100 steps) holds.
TEST(BatchController, NoiseAloneSeldomHoldsAcrossAWindow) {
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    ControllerConfig cfg = for_step_observations(config(256));
    BatchController c(cfg);
    const std::vector<std::string> keys{"a", "b", "c", "d"};
    for (const auto& k : keys) c.add_worker(k);
    c.plan();
    std::mt19937_64 rng(seed);
    std::lognormal_distribution<double> noise(0.0, 0.25);
    int changed = 0, persisted = 0;
    for (int round = 0; round < 2000; ++round) {
      run_noisy_steps(c, std::vector<double>(4, 1000.0), 10, noise, rng);
      const BatchPlan next = c.plan();
      if (round >= 5) {
        changed += next.changed ? 1 : 0;
        persisted += next.persisted ? 1 : 0;
      }
    }
    std::printf("seed %u: %d changes (%d persisted) in 19,950 steps\n", seed, changed, persisted);
    EXPECT_LE(changed, 200) << "seed " << seed;
  }
}

// Noise that lasts (ControllerConfig::correlated_noise): equal workers whose step times follow a
// first-order autoregressive process in logarithms (correlation 0.7 from one step to the next,
// a 15% spread), as beside a CPU hog whose bursts span a few steps. A median of 48 such
// observations varies about 2.4 times as much as one of 48 independent ones (the local levels
// the correlation is measured against take up part of it: the errors come out about 1.7 times
// larger). Without it the gate takes the bursts for speed and changes the plan twice per 100
// steps; with it, under once.
TEST(BatchController, CorrelatedNoiseRaisesTheGateAndHoldsThePlan) {
  struct Autoregressive {
    std::vector<double> state = std::vector<double>(4, 0.0);
    std::size_t next = 0;
    std::normal_distribution<double> z{0.0, 0.15 * std::sqrt(1.0 - 0.7 * 0.7)};
    double operator()(std::mt19937_64& rng) {
      double& x = state[next++ % state.size()];
      x = 0.7 * x + z(rng);
      return std::exp(x);
    }
  };
  auto run = [](bool correlated, std::uint32_t seed, double* error) {
    ControllerConfig cfg = for_step_observations(config(256));
    cfg.correlated_noise = correlated;
    BatchController c(cfg);
    for (const char* k : {"a", "b", "c", "d"}) c.add_worker(k);
    c.plan();
    std::mt19937_64 rng(seed);
    Autoregressive noise;
    int changed = 0;
    *error = 0.0;
    for (int round = 0; round < 1000; ++round) {
      run_noisy_steps(c, std::vector<double>(4, 1000.0), 10, noise, rng);
      changed += c.plan().changed && round >= 5 ? 1 : 0;
      *error += *c.estimates()[0].rel_error / 1000.0;
    }
    return changed;
  };
  int fewer = 0;
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    double error_with = 0.0, error_without = 0.0;
    const int with = run(true, seed, &error_with);
    const int without = run(false, seed, &error_without);
    std::printf(
        "seed %u: %d plan changes in 9,950 steps weighing the correlation, %d without; "
        "mean relative error %.3f, %.3f\n",
        seed, with, without, error_with, error_without);
    EXPECT_GT(error_with, 1.5 * error_without) << "seed " << seed;
    EXPECT_LE(with, without) << "seed " << seed;
    EXPECT_LE(with, 100) << "seed " << seed;  // the churn goal: one change per 100 steps
    fewer += with < without ? 1 : 0;
  }
  EXPECT_GE(fewer, 3);
}

// Noise seldom clears the gate round after round. Equal workers with +-10% step-time noise and
// 5 steps per round (where the smoothing can act: persist_gain plus the gate, about 0.02 +
// 0.05, is under the deadband, and consecutive rounds share most of the 24-step window, so
// their estimates are alike), a thousand rounds: the smoothing adds at most a handful of
// changes, and the churn goal (at most one change per 100 steps) holds with it.
TEST(BatchController, NoiseAloneSeldomPersists) {
  auto changes = [](std::size_t rounds, std::uint32_t seed) {
    ControllerConfig cfg = config(256);
    cfg.deadband = 0.1;
    cfg.persist_rounds = rounds;
    BatchController c(cfg);
    const std::vector<std::string> keys{"a", "b", "c", "d"};
    for (const auto& k : keys) c.add_worker(k);
    c.plan();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> noise(0.9, 1.1);
    int changed = 0, persisted = 0;
    double gate = 0.0;
    for (int round = 0; round < 1000; ++round) {
      run_noisy_steps(c, std::vector<double>(4, 1000.0), 5, noise, rng);
      const BatchPlan next = c.plan();
      changed += next.changed ? 1 : 0;
      persisted += next.persisted ? 1 : 0;
      gate += next.noise_gain / 1000.0;
    }
    // The regime this test is for: the smoothing's threshold under the deadband.
    EXPECT_LT(0.02 + gate, 0.1) << "mean gate " << gate;
    return std::pair{changed, persisted};
  };
  for (std::uint32_t seed = 1; seed <= 5; ++seed) {
    const auto [with, persisted] = changes(3, seed);
    const auto [without, never] = changes(0, seed);
    std::printf("seed %u: %d changes with smoothing (%d by it), %d without\n", seed, with,
                persisted, without);
    EXPECT_EQ(never, 0);
    EXPECT_LE(persisted, 10) << "seed " << seed;        // of 1,000 rounds
    EXPECT_LE(with, without + 10) << "seed " << seed;
    EXPECT_LE(with, 50) << "seed " << seed;             // 5,000 steps: at most 1 per 100
  }
}

// The count is of control rounds in a row: a plan for a new generation (PlanTrigger::
// kGeneration, no new timings) restarts it, so the correction comes later than without it.
TEST(BatchController, AGenerationPlanRestartsTheCount) {
  auto first_change = [](int generation_at) {
    ControllerConfig cfg = config(256);
    cfg.deadband = 0.1;
    BatchController c(cfg);
    std::map<std::string, double> speed{{"a", 1000}, {"b", 1000}, {"c", 1000}, {"d", 1000}};
    for (const auto& [k, v] : speed) c.add_worker(k);
    c.plan();
    run_steps(c, speed, 10);
    c.plan();
    speed["a"] = 930;
    for (int round = 1; round <= 20; ++round) {
      run_steps(c, speed, 10);
      if (round == generation_at) {
        EXPECT_FALSE(c.plan(PlanTrigger::kGeneration).changed);
        continue;
      }
      if (c.plan().changed) return round;
    }
    return -1;
  };
  const int plain = first_change(-1);
  ASSERT_GT(plain, 1);
  const int restarted = first_change(plain - 1);
  EXPECT_EQ(restarted, plain + 2) << "plain " << plain;
}

}  // namespace
}  // namespace omnilearn::scheduler
