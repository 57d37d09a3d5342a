// The controller replayed over step-time traces recorded from real runs
// (tests/data/trace_*.csv, each with the command that recorded it). Deterministic: time is the
// recorded steps, the extra noise is seeded. These replace the timing assertion the end-to-end
// heterogeneous test used to make: what the controller does with real timings is checked here,
// in milliseconds, on any machine.
//
// Goals checked on every trace: >= 95% of the ideal (the oracle split of each regime's measured
// speeds, on the same steps and the same noise), steady (or following a real change) within 3
// control rounds, and once steady at most 1 plan change per 100 steps with 20% step-time noise.
#include "controller/trace_replay.hpp"

#include <gtest/gtest.h>

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

Trace load(const std::string& name) {
  const auto path = data_dir() / name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return parse_trace(in, name);
}

// The job's settings when the traces were recorded (bench/scheduler/traces.py): interval 10,
// cool-down 3, min batch 8; the controller otherwise at its defaults.
ReplayConfig config(double step_noise = 0.0, std::uint64_t seed = 1) {
  ReplayConfig c;
  c.controller.min_batch = 8;
  c.controller.deadband = 0.05;
  c.rounds = ControlRoundsConfig{10, 3, 6};
  c.step_noise = step_noise;
  c.seed = seed;
  return c;
}

// The older controller: a 5-observation median, no noise gate, no change detector.
ReplayConfig without_noise_filter(double step_noise, std::uint64_t seed) {
  ReplayConfig c = config(step_noise, seed);
  c.controller.throughput_window = 5;
  c.controller.noise_z = 0.0;
  c.controller.change.min_change = 1e9;
  c.controller.change.slow_run = 0;
  return c;
}

constexpr int kSeeds = 10;
const char* const kTraces[] = {"trace_clean.csv", "trace_noisy.csv", "trace_change.csv",
                               "trace_join.csv"};

void expect_goals(const ReplayResult& r, double max_churn) {
  EXPECT_GE(r.efficiency, 0.95) << r.describe();
  EXPECT_LE(r.changes_per_100_steps, max_churn) << r.describe();
  EXPECT_GE(r.churn_steps, 100) << "too short to judge churn\n" << r.describe();
  for (const ReplayRegime& regime : r.regimes) {
    EXPECT_GE(regime.rounds_to_follow, 0) << "never followed: " << regime.cause << "\n"
                                          << r.describe();
    EXPECT_LE(regime.rounds_to_follow, 3) << regime.cause << "\n" << r.describe();
  }
}

TEST(TraceFormat, ParsesRecordsAndNamesTheBadLine) {
  std::istringstream ok(
      "# a comment\nglobal_batch,64\ngeneration,0,a;b\nalpha,a,0.001\nchange,5,b,slower\n"
      "obs,a,1,3,32,0.1\nobs,b,1,2,32,0.2\n");
  const Trace t = parse_trace(ok, "ok");
  EXPECT_EQ(t.global_batch, 64);
  ASSERT_EQ(t.generations.size(), 1u);
  EXPECT_EQ(t.generations[0].members, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.changes.at(0).worker, "b");
  EXPECT_DOUBLE_EQ(t.alpha_s.at("a"), 0.001);
  ASSERT_EQ(t.observations.size(), 2u);
  EXPECT_EQ(t.observations[0].worker, "b");  // ordered by last step
  EXPECT_EQ(t.last_step(), 3);

  auto error_of = [](const std::string& text) {
    std::istringstream in(text);
    try {
      parse_trace(in, "t.csv");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("global_batch,64\ngeneration,0,a\nbogus,1\n").find("t.csv:3: unknown record"),
            std::string::npos);
  EXPECT_NE(error_of("global_batch,64\ngeneration,0,a\nobs,z,1,2,8,0.1\n").find("'z'"),
            std::string::npos);
  EXPECT_NE(error_of("global_batch,64\ngeneration,0,a\nobs,a,1,2,8,-1\n").find("t.csv:3"),
            std::string::npos);
  EXPECT_NE(error_of("generation,0,a\n").find("global_batch"), std::string::npos);
}

// A synthetic trace with known speeds: the oracle split, the linear ideal and a perfect
// controller's efficiency come out as computed by hand.
TEST(TraceReplay, SyntheticTraceScoresAsComputedByHand) {
  std::ostringstream text;
  text << "global_batch,300\ngeneration,0,a;b\n";
  for (int s = 1; s <= 400; s += 5) {
    text << "obs,a," << s << "," << s + 4 << ",150,0.15\n";  // 1000 samples/s
    text << "obs,b," << s << "," << s + 4 << ",150,0.30\n";  // 500 samples/s
  }
  std::istringstream in(text.str());
  const ReplayResult r = replay(parse_trace(in, "synthetic"), config());
  ASSERT_EQ(r.regimes.size(), 1u);
  EXPECT_EQ(r.regimes[0].oracle_batches, (std::vector<int>{200, 100}));
  EXPECT_NEAR(r.regimes[0].nominal_ideal_speedup, 1.5, 1e-9);
  EXPECT_NEAR(r.ideal_speedup, 1.5, 1e-9);           // uniform 0.30 s vs oracle 0.20 s
  EXPECT_NEAR(r.efficiency, 1.0, 1e-9) << r.describe();  // proportional finds it at once
  EXPECT_EQ(r.regimes[0].rounds_to_follow, 1);
  EXPECT_EQ(r.churn_changes, 0);
}

// The four recorded traces as they are (the noise the machine had), and then with 20% per-step
// noise on top, over several seeds.
TEST(TraceReplay, RecordedTracesMeetTheGoals) {
  for (const char* name : kTraces) {
    const ReplayResult r = replay(load(name), config());
    std::printf("%s", r.describe().c_str());
    expect_goals(r, 1.0);
  }
}

// The goals under 20% extra step noise for trace `name`, kSeeds seeds, each replayed with
// make(0.2, seed); prints the worst figures.
void expect_goals_under_twenty_percent_noise(
    const char* name, ReplayConfig (*make)(double step_noise, std::uint64_t seed)) {
  double worst_eff = 1.0, worst_churn = 0.0, mean_churn = 0.0, worst_unjustified = 0.0;
  int worst_follow = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    const ReplayResult r = replay(load(name), make(0.2, static_cast<std::uint64_t>(seed)));
    EXPECT_GE(r.efficiency, 0.95) << name << " seed " << seed << "\n" << r.describe();
    EXPECT_GE(r.churn_steps, 100) << r.describe();
    EXPECT_LE(r.unjustified_per_100_steps, 1.0) << name << " seed " << seed << "\n"
                                                << r.describe();
    for (const ReplayRegime& g : r.regimes) {
      EXPECT_GE(g.rounds_to_follow, 0) << name << " seed " << seed << ": never followed "
                                       << g.cause << "\n" << r.describe();
      EXPECT_LE(g.rounds_to_follow, 3) << name << " seed " << seed << ": " << g.cause << "\n"
                                       << r.describe();
      worst_follow = g.rounds_to_follow < 0 ? 999 : std::max(worst_follow, g.rounds_to_follow);
    }
    worst_eff = std::min(worst_eff, r.efficiency);
    worst_churn = std::max(worst_churn, r.changes_per_100_steps);
    worst_unjustified = std::max(worst_unjustified, r.unjustified_per_100_steps);
    mean_churn += r.changes_per_100_steps / kSeeds;
  }
  EXPECT_LE(mean_churn, 1.0) << name;
  std::printf("%s, 20%% step noise, %d seeds: worst efficiency %.3f, plan changes once steady "
              "mean %.2f worst %.2f per 100 steps (not justified: worst %.2f), worst rounds to "
              "follow %d\n",
              name, kSeeds, worst_eff, mean_churn, worst_churn, worst_unjustified, worst_follow);
}

// 20% per-step noise on top of the recorded noise (the churn condition), 10 seeds per
// trace. Every seed: >= 95% of the ideal, every regime followed within 3 rounds, and at most 1
// plan change per 100 steady steps that the recorded speeds did not justify (the recordings come
// from a loaded shared machine whose speeds drift for real; following them is wanted). All plan
// changes once steady, justified or not, average at most 1 per 100 steps. Over 60 seeds the
// tails are wider (scheduler_replay_table --seeds 60, docs/benchmarks.md): the worst replay
// reached 0.957 of the ideal, and 3 replays of 240 made more than 1 unjustified change per 100
// steps (1.32 at worst).
TEST(TraceReplay, TwentyPercentStepNoiseKeepsEfficiencyFollowAndChurn) {
  for (const char* name : kTraces) expect_goals_under_twenty_percent_noise(name, config);
}

// The same goals over recordings of one observation per worker and step (the compute of every
// rank the leader's step report carries, which the scheduler feeds the controller), with the
// controller set for such observations (for_step_observations). Recorded on a quieter machine
// than the windows above (load average 2-5), with the recording's noise and with 20% extra
// per-step noise, 10 seeds per trace.
const char* const kStepTraces[] = {"steps_clean.csv", "steps_noisy.csv", "steps_change.csv",
                                   "steps_join.csv"};

ReplayConfig per_step(double step_noise = 0.0, std::uint64_t seed = 1) {
  ReplayConfig c = config(step_noise, seed);
  c.controller = for_step_observations(c.controller);
  return c;
}

TEST(TraceReplay, PerStepRecordingsMeetTheGoals) {
  for (const char* name : kStepTraces) {
    const ReplayResult r = replay(load(name), per_step());
    std::printf("%s", r.describe().c_str());
    expect_goals(r, 1.0);
  }
}

TEST(TraceReplay, PerStepRecordingsUnderTwentyPercentStepNoise) {
  for (const char* name : kStepTraces) expect_goals_under_twenty_percent_noise(name, per_step);
}

// Following within 3 rounds under noise needs provisional plans: without them a first plan made
// from one or two noisy windows (the start, a newcomer) is held by the noise gate for as long as
// it cannot tell the plan's error from noise.
TEST(TraceReplay, WithoutProvisionalPlansAFirstNoisyPlanIsHeld) {
  int late = 0;
  for (const char* name : kTraces) {
    for (int seed = 1; seed <= kSeeds; ++seed) {
      ReplayConfig c = config(0.2, seed);
      c.controller.provisional_observations = 0;
      const ReplayResult r = replay(load(name), c);
      for (const ReplayRegime& g : r.regimes) {
        if (g.rounds_to_follow < 0 || g.rounds_to_follow > 3) {
          ++late;
          std::printf("without provisional plans: %s seed %d: %s followed after %d rounds\n",
                      name, seed, g.cause.c_str(), g.rounds_to_follow);
        }
      }
    }
  }
  EXPECT_GE(late, 2);
}

// Equal workers: the controller must not cost more than 3% against uniform batches.
TEST(TraceReplay, EqualWorkersCostAtMostThreePercentOverUniform) {
  for (double noise : {0.0, 0.2}) {
    for (int seed = 1; seed <= kSeeds; ++seed) {
      const ReplayResult r = replay(load("trace_noisy.csv"), config(noise, seed));
      EXPECT_GE(r.speedup_over_uniform, 0.97) << "noise " << noise << " seed " << seed << "\n"
                                              << r.describe();
    }
  }
}

// The churn assertion can fail: the controller without the noise filter (the one before issue
// 12: a 5-step median, no gate) changes plans several times per 100 steps on the same traces.
TEST(TraceReplay, WithoutTheNoiseFilterTheChurnBoundFails) {
  int failing = 0, runs = 0;
  for (const char* name : kTraces) {
    for (int seed = 1; seed <= kSeeds; ++seed) {
      const ReplayResult r = replay(load(name), without_noise_filter(0.2, seed));
      ++runs;
      failing += r.changes_per_100_steps > 1.0 ? 1 : 0;
      if (seed == 1) std::printf("without filter: %s", r.describe().c_str());
    }
  }
  std::printf("without the noise filter: %d of %d replays break the churn bound\n", failing, runs);
  EXPECT_GE(failing, runs * 3 / 4);
}

}  // namespace
}  // namespace omnilearn::scheduler
