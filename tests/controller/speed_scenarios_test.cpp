// Speeds that change while a job runs (controller/speed_scenarios.hpp): how the scenarios are
// built from a steady trace, and the controller replayed over the five of them built from a
// recorded run (tests/data/trace_clean.csv), scored against the oracle that knows each speed
// from the step it changes. Deterministic: time is the replayed steps, the extra noise seeded.
// The full table, with the goals the controller does not meet, is scheduler_scenario_table's
// (docs/benchmarks.md, "Following speed changes").
#include "controller/speed_scenarios.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace omnilearn::scheduler {
namespace {

std::filesystem::path data_dir() {
  if (const char* src = std::getenv("OMNILEARN_SOURCE_DIR")) {
    return std::filesystem::path(src) / "tests" / "data";
  }
  return OMNILEARN_TEST_DATA_DIR;
}

// A recording in tests/data.
Trace load(const std::string& name) {
  const auto path = data_dir() / name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return parse_trace(in, name);
}

Trace recorded() { return load("trace_clean.csv"); }

// Two workers, a at 1,000 samples/s and b at 500, in windows of 4 steps, 100 steps.
Trace synthetic() {
  std::ostringstream text;
  text << "global_batch,300\ngeneration,0,a;b\n";
  for (int s = 1; s <= 100; s += 4) {
    text << "obs,a," << s << "," << s + 3 << ",150,0.15\n";
    text << "obs,b," << s << "," << s + 3 << ",150,0.30\n";
  }
  std::istringstream in(text.str());
  return parse_trace(in, "synthetic");
}

// a's k-th window (steps 4k + 1 .. 4k + 4, k from 0) took 0.1 + 0.001 k s at 150 samples: its
// per-sample time says where in the base a step came from. 100 steps.
Trace numbered() {
  std::ostringstream text;
  text << "global_batch,300\ngeneration,0,a;b\n";
  for (int k = 0; k < 25; ++k) {
    text << "obs,a," << 4 * k + 1 << "," << 4 * k + 4 << ",150," << 0.1 + 0.001 * k << "\n";
    text << "obs,b," << 4 * k + 1 << "," << 4 * k + 4 << ",150,0.3\n";
  }
  std::istringstream in(text.str());
  return parse_trace(in, "numbered");
}

// The settings the traces were recorded with: interval 10, cool-down 3, warm-up 6, min batch 8.
ReplayConfig config(double step_noise = 0.0, std::uint64_t seed = 1) {
  ReplayConfig c;
  c.controller.min_batch = 8;
  c.controller.deadband = 0.05;
  c.rounds = ControlRoundsConfig{10, 3, 6};
  c.step_noise = step_noise;
  c.seed = seed;
  return c;
}
constexpr std::int64_t kTwoRounds = 20;  // two control rounds at interval 10

// Each observation's per-sample time, by worker, at `step` (0 when none covers it).
double per_sample_at(const Trace& t, const std::string& w, std::int64_t step) {
  for (const auto& o : t.observations) {
    if (o.worker == w && o.first_step <= step && step <= o.last_step) return o.compute_s / o.batch;
  }
  return 0.0;
}

TEST(SpeedScenarios, StepChangeCutsWindowsAndSlowsOnlyTheWorkerFromTheChange) {
  ScenarioConfig c;
  c.kind = SpeedScenario::kStep;
  c.steps = 300;
  c.skip = 0;
  c.at = 150;  // inside the window 149..152 of every repetition
  c.worker = "a";
  c.factor = 3.0;
  const Trace t = make_scenario(synthetic(), c);
  EXPECT_EQ(t.name, "synthetic:step");
  ASSERT_EQ(t.changes.size(), 1u);
  EXPECT_EQ(t.changes[0].step, 150);
  EXPECT_EQ(t.changes[0].worker, "a");
  ASSERT_EQ(t.generations.size(), 1u);
  EXPECT_LE(t.last_step(), 300);
  EXPECT_GE(t.last_step(), 290);  // the base repeated end to end
  for (const auto& o : t.observations) {
    EXPECT_FALSE(o.first_step <= 150 && o.last_step > 150) << "a window straddles the change";
  }
  EXPECT_DOUBLE_EQ(per_sample_at(t, "a", 150), 0.001);
  EXPECT_DOUBLE_EQ(per_sample_at(t, "a", 151), 0.003);
  EXPECT_DOUBLE_EQ(per_sample_at(t, "a", 290), 0.003);
  EXPECT_DOUBLE_EQ(per_sample_at(t, "b", 151), 0.002);
}

TEST(SpeedScenarios, JoinAndLeaveChangeTheMembersAndTheirObservations) {
  ScenarioConfig c;
  c.steps = 200;
  c.skip = 0;
  c.at = 80;
  c.worker = "a";
  c.kind = SpeedScenario::kJoin;
  const Trace join = make_scenario(synthetic(), c);
  ASSERT_EQ(join.generations.size(), 2u);
  EXPECT_EQ(join.generations[0].members, std::vector<std::string>{"b"});
  EXPECT_EQ(join.generations[1].step, 80);
  EXPECT_EQ(join.generations[1].members, (std::vector<std::string>{"b", "a"}));
  for (const auto& o : join.observations) {
    if (o.worker == "a") {
      EXPECT_GT(o.first_step, 80);
    }
  }
  EXPECT_GT(per_sample_at(join, "a", 81), 0.0);

  c.kind = SpeedScenario::kLeave;
  const Trace leave = make_scenario(synthetic(), c);
  ASSERT_EQ(leave.generations.size(), 2u);
  EXPECT_EQ(leave.generations[1].members, std::vector<std::string>{"b"});
  for (const auto& o : leave.observations) {
    if (o.worker == "a") {
      EXPECT_LE(o.last_step, 80);
    }
  }
  EXPECT_TRUE(leave.changes.empty());
}

TEST(SpeedScenarios, NeighbourComesAndGoesAndDriftClimbsInStairs) {
  ScenarioConfig c;
  c.steps = 1000;
  c.skip = 0;
  c.worker = "b";
  c.kind = SpeedScenario::kNeighbour;
  c.at = 100;
  c.factor = 2.0;
  c.length = 50;
  c.period = 400;
  const Trace n = make_scenario(synthetic(), c);
  ASSERT_EQ(n.changes.size(), 6u);  // arrivals at 100, 500, 900; departures 150, 550, 950
  EXPECT_EQ(n.changes[2].step, 500);
  EXPECT_EQ(n.changes[3].step, 550);
  EXPECT_DOUBLE_EQ(per_sample_at(n, "b", 120), 0.004);
  EXPECT_DOUBLE_EQ(per_sample_at(n, "b", 160), 0.002);
  EXPECT_DOUBLE_EQ(per_sample_at(n, "b", 950), 0.004);
  EXPECT_DOUBLE_EQ(per_sample_at(n, "b", 951), 0.002);

  c.kind = SpeedScenario::kDrift;
  c.at = 200;
  c.length = 300;
  c.drift_every = 100;
  const Trace d = make_scenario(synthetic(), c);
  ASSERT_EQ(d.changes.size(), 3u);  // 4/3, 5/3, 2 times slower from 201, 301, 401
  EXPECT_DOUBLE_EQ(per_sample_at(d, "b", 200), 0.002);
  EXPECT_NEAR(per_sample_at(d, "b", 250), 0.002 * 4 / 3, 1e-12);
  EXPECT_NEAR(per_sample_at(d, "b", 350), 0.002 * 5 / 3, 1e-12);
  EXPECT_NEAR(per_sample_at(d, "b", 999), 0.004, 1e-12);
}

// Replays from several offsets meet a recording's bursts at different places: the base is
// rotated, and the window across the cut is split in two, each part keeping its mean.
TEST(SpeedScenarios, AnOffsetRotatesTheRepeatedBaseAndSplitsTheWindowAcrossTheCut) {
  const Trace base = numbered();
  ScenarioConfig c;
  c.kind = SpeedScenario::kSteady;
  c.steps = 250;
  c.skip = 0;
  c.at = 100;
  c.offset = 6;  // inside the window of steps 5..8
  const Trace t = make_scenario(base, c);
  for (std::int64_t s = 1; s <= 250; ++s) {
    const std::int64_t from = (s - 1 + 6) % 100 + 1;  // the base's step that step s replays
    EXPECT_DOUBLE_EQ(per_sample_at(t, "a", s), per_sample_at(base, "a", from)) << "step " << s;
    EXPECT_DOUBLE_EQ(per_sample_at(t, "b", s), 0.002) << "step " << s;
  }
  int opening = 0, closing = 0;  // the two parts of the window 5..8, in each repetition
  for (const auto& o : t.observations) {
    if (o.worker != "a" || o.compute_s != 0.101) continue;
    if (o.last_step - o.first_step == 1 && o.first_step % 100 == 1) ++opening;
    if (o.last_step - o.first_step == 1 && o.last_step % 100 == 0) ++closing;
  }
  EXPECT_EQ(opening, 3);
  EXPECT_EQ(closing, 2);
  c.offset = 0;
  EXPECT_DOUBLE_EQ(per_sample_at(make_scenario(base, c), "a", 1), 0.1 / 150);
  c.offset = 100;  // the whole base: no rotation left to make
  EXPECT_THROW(make_scenario(base, c), std::invalid_argument);
  c.offset = -1;
  EXPECT_THROW(make_scenario(base, c), std::invalid_argument);
}

TEST(SpeedScenarios, RefusesWhatItCannotBuild) {
  ScenarioConfig c;
  c.steps = 200;
  c.at = 50;
  c.skip = 0;
  c.worker = "z";
  EXPECT_THROW(make_scenario(synthetic(), c), std::invalid_argument);  // no such worker
  c.worker = "a";
  c.at = 200;
  EXPECT_THROW(make_scenario(synthetic(), c), std::invalid_argument);  // change after the end
  c.at = 50;
  c.kind = SpeedScenario::kNeighbour;
  c.length = 100;
  c.period = 100;
  EXPECT_THROW(make_scenario(synthetic(), c), std::invalid_argument);  // never leaves
  c.kind = SpeedScenario::kStep;
  c.skip = 100;
  EXPECT_THROW(make_scenario(synthetic(), c), std::invalid_argument);  // nothing after skip
  std::istringstream two("global_batch,8\ngeneration,0,a\ngeneration,5,a;b\nobs,a,1,2,8,0.1\n");
  c.skip = 0;
  EXPECT_THROW(make_scenario(parse_trace(two, "two"), c), std::invalid_argument);
}

// Known speeds: after a 3x slowdown of a (1,000 -> 333 samples/s beside b's 500), the oracle
// gives a 120 of 300; the controller gets there within two control rounds, and the time lost
// against the oracle is the steps it ran the old plan, nothing once it followed.
TEST(SpeedScenarios, ReplayOfAKnownStepChangeScoresAsComputedByHand) {
  ScenarioConfig c;
  c.steps = 400;
  c.skip = 0;
  c.at = 200;
  c.worker = "a";
  c.factor = 3.0;
  const Trace t = make_scenario(synthetic(), c);
  const ReplayResult r = replay(t, config());
  ASSERT_EQ(r.regimes.size(), 2u) << r.describe();
  EXPECT_EQ(r.regimes[0].oracle_batches, (std::vector<int>{200, 100}));
  EXPECT_EQ(r.regimes[1].oracle_batches, (std::vector<int>{120, 180}));
  EXPECT_GT(r.regimes[1].steps_to_follow, 0) << r.describe();
  EXPECT_LE(r.regimes[1].steps_to_follow, kTwoRounds) << r.describe();
  // Until it follows, a runs 200 samples at 3 ms a step (0.6 s against the oracle's 0.36 s);
  // the oracle's steps take 0.2 s before the change and 0.36 s after it.
  const double lag = static_cast<double>(r.regimes[1].steps_to_follow);
  const double oracle = 0.2 * static_cast<double>(200 - r.steady_from + 1) +
                        0.36 * static_cast<double>(t.last_step() - 200);
  EXPECT_NEAR(r.time_lost, lag * (0.6 - 0.36) / oracle, 1e-9) << r.describe();
  EXPECT_GT(r.time_lost, 0.0);
  // The reference learns the change from a's first window after it (steps 201-204) and runs
  // the new oracle plan two steps later: 5 steps at the old plan.
  EXPECT_NEAR(r.reference_time_lost, 5 * (0.6 - 0.36) / oracle, 1e-9) << r.describe();
  EXPECT_NEAR(r.time_lost_to_reference, (lag - 5) * (0.6 - 0.36) / (oracle + 5 * (0.6 - 0.36)),
              1e-9)
      << r.describe();
  // The quick level sees a at a third of its speed after two windows (steps 201-208), the
  // round runs at once and its plan applies two steps later: 9 steps at the old plan.
  EXPECT_EQ(r.regimes[1].steps_to_follow, 9) << r.describe();
  // The measuring reference knows the change at step 201 but not a's new speed: it runs that
  // step at the old plan, measures 3 ms a sample, and runs the new oracle plan from step 202.
  EXPECT_NEAR(r.measuring_time_lost, 1 * (0.6 - 0.36) / oracle, 1e-9) << r.describe();
}

std::vector<ScenarioConfig> recorded_scenarios() {
  std::vector<ScenarioConfig> out;
  ScenarioConfig c;
  c.steps = 1200;
  c.at = 400;
  c.kind = SpeedScenario::kStep;
  c.worker = "w1";
  c.factor = 3.0;
  out.push_back(c);
  c.kind = SpeedScenario::kDrift;
  c.factor = 2.0;
  c.length = 300;
  out.push_back(c);
  c.kind = SpeedScenario::kNeighbour;
  c.worker = "w2";
  c.at = 200;
  c.factor = 2.0;
  c.length = 100;
  c.period = 400;
  out.push_back(c);
  c.kind = SpeedScenario::kJoin;
  c.worker = "w4";
  c.at = 400;
  out.push_back(c);
  c.kind = SpeedScenario::kLeave;
  c.worker = "w2";
  out.push_back(c);
  return out;
}

// On the recorded trace, with its own noise and with 20% step noise over 10 seeds: a step
// change is followed within one control interval and loses at most 2% of the oracle's time over
// the trace, a join and a leave lose at most 2% too, and no scenario changes the plan more than
// once per 100 steady steps.
TEST(SpeedScenarios, RecordedTraceFollowsStepChangesWithoutChurn) {
  const Trace base = recorded();
  for (const ScenarioConfig& sc : recorded_scenarios()) {
    const Trace t = make_scenario(base, sc);
    for (double noise : {0.0, 0.2}) {
      double mean_churn = 0;
      const int seeds = noise > 0 ? 10 : 1;
      for (int seed = 1; seed <= seeds; ++seed) {
        const ReplayResult r = replay(t, config(noise, static_cast<std::uint64_t>(seed)));
        if (seed == 1) std::printf("noise %.0f%%: %s", 100 * noise, r.describe().c_str());
        mean_churn += r.changes_per_100_steps / seeds;
        EXPECT_LE(r.changes_per_100_steps, 1.0) << r.describe();
        EXPECT_GE(r.churn_steps, 300) << "too short to judge churn\n" << r.describe();
        if (sc.kind == SpeedScenario::kStep) {
          ASSERT_EQ(r.regimes.size(), 2u);
          EXPECT_GE(r.regimes[1].steps_to_follow, 0) << r.describe();
          EXPECT_LE(r.regimes[1].steps_to_follow, kTwoRounds) << r.describe();
          // Followed within one interval (a detected change waits for no round), and at most
          // 2% of the oracle's time lost over the trace.
          EXPECT_LE(r.regimes[1].steps_to_follow, kTwoRounds / 2) << r.describe();
          EXPECT_LE(r.time_lost, 0.02) << r.describe();
        }
        if (sc.kind == SpeedScenario::kJoin || sc.kind == SpeedScenario::kLeave) {
          EXPECT_LE(r.time_lost, 0.02) << r.describe();
        }
      }
      EXPECT_LE(mean_churn, 1.0) << t.name;
    }
  }
}

// Following a large change quickly: without the quick level the recorded step change waits
// for a third window and then for the next round (no detection asks for one at once), so it is
// followed later and loses more.
TEST(SpeedScenarios, QuickDetectionAndItsRoundFollowAStepChangeSooner) {
  ScenarioConfig sc = recorded_scenarios().front();
  ASSERT_EQ(sc.kind, SpeedScenario::kStep);
  const Trace t = make_scenario(recorded(), sc);
  const ReplayResult with = replay(t, config());
  ReplayConfig slow = config();
  slow.controller.change.quick_run = 0;
  const ReplayResult without = replay(t, slow);
  std::printf("with the quick level: %swithout: %s", with.describe().c_str(),
              without.describe().c_str());
  ASSERT_EQ(with.regimes.size(), 2u);
  ASSERT_EQ(without.regimes.size(), 2u);
  EXPECT_LT(with.regimes[1].steps_to_follow, without.regimes[1].steps_to_follow);
  EXPECT_LT(with.time_lost, without.time_lost);
}

// Beside a bursty CPU hog, the fastest worker 3x slower from step 400 (the benchmark's *step*):
// followed within two control rounds from each of 20 starting points in the recording, with
// its own noise and under 20% more. A step's spread reaches 40% there: without the quick
// level's cap (ChangeDetection::quick_max_change) one of these replays waits 31 steps, and in
// another a plan change two steps after the slowdown leaves the detector blind for 33.
TEST(SpeedScenarios, BesideACpuHogAStepChangeIsFollowedWithinTwoRoundsFromEveryOffset) {
  const Trace base = load("steps_noisy.csv");
  ScenarioConfig sc;
  sc.kind = SpeedScenario::kStep;
  sc.steps = 1200;
  sc.at = 400;
  sc.worker = base.generations.front().members.front();
  sc.factor = 3.0;
  const std::int64_t repeated = base.last_step() - base.first_step() - sc.skip;
  constexpr int kOffsets = 20;
  for (double noise : {0.0, 0.2}) {
    std::int64_t worst = 0;
    for (int k = 0; k < kOffsets; ++k) {
      sc.offset = repeated * k / kOffsets;
      ReplayConfig c = config(noise, static_cast<std::uint64_t>(k + 1));
      c.controller = for_step_observations(c.controller);
      const ReplayResult r = replay(make_scenario(base, sc), c);
      ASSERT_EQ(r.regimes.size(), 2u);
      EXPECT_GE(r.regimes[1].steps_to_follow, 0) << r.describe();
      EXPECT_LE(r.regimes[1].steps_to_follow, kTwoRounds)
          << "offset " << sc.offset << ", noise " << noise << "\n"
          << r.describe();
      worst = std::max(worst, r.regimes[1].steps_to_follow);
    }
    std::printf("noise %.0f%%: followed within %lld steps at worst\n", 100 * noise,
                static_cast<long long>(worst));
  }
}

// Beside a bursty CPU hog (tests/data/steps_noisy.csv, one observation per step), the run
// level's three observations beyond 2.5 small spreads are bursts more often than changes, and
// every detection drops the window the estimate stood on. With the settings for per-step
// observations the run and slow levels stay off at such noise (ChangeDetection::run_min_spread,
// slow_min_spread) and the plan holds: at most one change per 100 steady steps from every one
// of ten starting points, where both levels at any noise (the slow one from 5% changes)
// change it almost three times as often and lose more time.
TEST(SpeedScenarios, BesideACpuHogThePlanHoldsWithoutTheRunLevel) {
  const Trace base = load("steps_noisy.csv");
  ScenarioConfig sc;
  sc.kind = SpeedScenario::kSteady;
  sc.steps = 1200;
  const std::int64_t repeated = base.last_step() - base.first_step() - sc.skip;
  ReplayConfig shipped = config();
  shipped.controller = for_step_observations(shipped.controller);
  ReplayConfig any_noise = shipped;
  any_noise.controller.change.run_min_spread = 0.0;
  any_noise.controller.change.slow_min_spread = 0.0;
  any_noise.controller.change.slow_min_change = 0.05;
  constexpr int kOffsets = 10;
  double churn = 0, churn_any = 0, lost = 0, lost_any = 0;
  for (int k = 0; k < kOffsets; ++k) {
    sc.offset = repeated * k / kOffsets;
    const Trace t = make_scenario(base, sc);
    const ReplayResult r = replay(t, shipped);
    const ReplayResult a = replay(t, any_noise);
    EXPECT_LE(r.changes_per_100_steps, 1.0) << "offset " << sc.offset << "\n" << r.describe();
    EXPECT_GE(r.churn_steps, 300) << r.describe();
    churn += r.changes_per_100_steps / kOffsets;
    churn_any += a.changes_per_100_steps / kOffsets;
    lost += r.time_lost / kOffsets;
    lost_any += a.time_lost / kOffsets;
  }
  std::printf(
      "plan changes per 100 steady steps %.2f (run level at any noise: %.2f), time "
      "lost %.2f%% (%.2f%%)\n",
      churn, churn_any, 100 * lost, 100 * lost_any);
  EXPECT_LT(2 * churn, churn_any);
  EXPECT_LT(lost, lost_any);
}

// A neighbour that halves a worker's speed for 100 steps in every 400 (the scenario table's):
// when it leaves, and when it comes again, the worker's speed returns to a level it held
// before, and the window it had there comes back (ChangeDetection::remembered_regimes), with a
// round at once. On both recordings, from ten starting points each, with the recordings' own
// noise and under 20% extra: less time lost than with every change starting from three
// observations, and at most one plan change per 100 steady steps in every replay.
TEST(SpeedScenarios, ANeighbourThatComesAndGoesIsFollowedFromItsRememberedWindows) {
  for (const char* name : {"steps_clean.csv", "steps_noisy.csv"}) {
    const Trace base = load(name);
    const auto& members = base.generations.front().members;
    ScenarioConfig sc;
    sc.kind = SpeedScenario::kNeighbour;
    sc.steps = 1200;
    sc.worker = members[1];
    sc.at = 200;
    sc.factor = 2.0;
    sc.length = 100;
    sc.period = 400;
    const std::int64_t repeated = base.last_step() - base.first_step() - sc.skip;
    for (const double noise : {0.0, 0.2}) {
      constexpr int kOffsets = 10;
      double lost = 0, lost_fresh = 0;
      for (int k = 0; k < kOffsets; ++k) {
        sc.offset = repeated * k / kOffsets;
        const Trace t = make_scenario(base, sc);
        ReplayConfig shipped = config(noise, static_cast<std::uint64_t>(k + 1));
        shipped.controller = for_step_observations(shipped.controller);
        ReplayConfig fresh = shipped;
        fresh.controller.change.remembered_regimes = 0;
        const ReplayResult r = replay(t, shipped);
        const ReplayResult f = replay(t, fresh);
        EXPECT_LE(r.changes_per_100_steps, 1.0)
            << name << " noise " << noise << " offset " << sc.offset << "\n"
            << r.describe();
        lost += r.time_lost / kOffsets;
        lost_fresh += f.time_lost / kOffsets;
      }
      std::printf("%s, %.0f%% extra noise: time lost %.2f%% (without remembered regimes %.2f%%)\n",
                  name, 100 * noise, 100 * lost, 100 * lost_fresh);
      EXPECT_LT(lost, lost_fresh) << name << " noise " << noise;
    }
  }
}

}  // namespace
}  // namespace omnilearn::scheduler
