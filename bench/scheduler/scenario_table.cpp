// Following speeds that change (docs/benchmarks.md, "Following speed changes"): the controller
// replayed over the five speed scenarios of controller/speed_scenarios.hpp, each built from a
// recorded steady trace (its real noise kept), with the recorded noise alone and with 20% extra
// step noise, over --seeds seeds: each seed starts the repeated recording at its own offset
// (spread evenly over it; ScenarioConfig::offset) and draws its own extra noise. Per scenario: the
// time lost against the oracle that knows each speed from the step it changes (median and worst),
// against the reference that learns each change from the changed worker's first heartbeat window
// after it (median and worst), and the reference's own loss against the oracle (median), the
// measuring reference's loss against the oracle (it knows when each speed changes and measures the
// new speed from the steps it runs: ReplayResult::measuring_time_lost; median and worst), the steps
// each change took to be followed (from the change to the first step run with a plan that follows
// it; worst over seeds, per kind of change: two control rounds are 2 x --interval steps), and plan
// changes per 100 steady steps (mean, worst).
//
//   scheduler_scenario_table [--seeds 20] [--steps 1200] [--interval 10] [--z NOISE_Z]
//                            [--deadband D] [--window N] [--persist-rounds N] [--persist-gain G]
//                            [--change QR,QMIN,QZ,R,MIN,Z,SR,SMIN,SZ] [--run-min-spread S]
//                            [--quick-max-change C] [--slow-min-spread S]
//                            [--regimes K,WITHIN,MAX] [--switch LLR,MIN,SPREAD]
//                            [--provisional N] [--independent-noise]
//                            [--correlated-noise] [--per-step] BASE.csv
// --z, --deadband, --window, --persist-rounds, --persist-gain: the controller's noise_z,
// deadband (0.05 here), throughput_window, persist_rounds and persist_gain (ControllerConfig);
// --change: its change detection's three levels (ChangeDetection: quick_run, quick_min_change,
// quick_spread_z, run, min_change, spread_z, slow_run, slow_min_change, slow_spread_z);
// --run-min-spread, --slow-min-spread: the spread below which its run level, its slow level
// stays off (run_min_spread, slow_min_spread);
// --quick-max-change: the change its quick level's bar stops at (quick_max_change; inf: none);
// --regimes: the regimes it remembers, the observations within which one may come back and
// how near it must be (remembered_regimes, recall_within, recall_max_change; 0,12,0.15: none);
// --switch: the test for a switch back to a remembered regime (switch_llr, switch_min_change,
// switch_min_spread; 0,0.4,0.1: off);
// --provisional: its provisional_observations; --independent-noise, --correlated-noise:
// correlated_noise off, on; to see what other settings buy and cost.
// --per-step: the settings for one observation per step (for_step_observations), for a base
// recorded per step (traces.py --per-step-out, tests/data/steps_*.csv); flags after it
// override them.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "controller/speed_scenarios.hpp"
#include "controller/trace_replay.hpp"

using namespace omnilearn::scheduler;

namespace {

// The settings the traces were recorded with (bench/scheduler/traces.py): interval 10,
// cool-down 3, warm-up 6, min batch 8, deadband 0.05; the controller otherwise at its
// defaults, and then as the command line sets it.
ControllerConfig recorded_settings() {
  ControllerConfig c;
  c.deadband = 0.05;
  c.min_batch = 8;
  return c;
}
ControllerConfig controller_settings = recorded_settings();

ReplayConfig make(double noise, int seed, int interval) {
  ReplayConfig c;
  c.controller = controller_settings;
  c.rounds = ControlRoundsConfig{interval, 3, 6};
  c.step_noise = noise;
  c.seed = static_cast<std::uint64_t>(seed);
  return c;
}

// The scenarios of the benchmark (and of tests/controller/speed_scenarios_test.cpp): nothing
// changing (the loss of the steady cluster alone), the fastest
// worker 3x slower for good, drifting to 2x slower over 300 steps, a neighbour halving the
// second fastest for 100 steps in every 400; the slowest joining, the second fastest leaving.
std::vector<ScenarioConfig> scenarios(std::int64_t steps, const std::vector<std::string>& w) {
  std::vector<ScenarioConfig> out;
  ScenarioConfig c;
  c.steps = steps;
  c.at = steps / 3;
  c.kind = SpeedScenario::kSteady;
  out.push_back(c);
  c.kind = SpeedScenario::kStep;
  c.worker = w[0];
  c.factor = 3.0;
  out.push_back(c);
  c.kind = SpeedScenario::kDrift;
  c.factor = 2.0;
  c.length = 300;
  out.push_back(c);
  c.kind = SpeedScenario::kNeighbour;
  c.worker = w[1];
  c.at = 200;
  c.factor = 2.0;
  c.length = 100;
  c.period = 400;
  out.push_back(c);
  c.kind = SpeedScenario::kJoin;
  c.worker = w.back();
  c.at = steps / 3;
  out.push_back(c);
  c.kind = SpeedScenario::kLeave;
  c.worker = w[1];
  out.push_back(c);
  return out;
}

// "a neighbour arrives: 2x slower" -> "a neighbour arrives"; "generation of 4" stays.
std::string kind_of(const std::string& cause) {
  std::string k = cause.substr(cause.find(':') == std::string::npos ? 0 : cause.find(':') + 2);
  const auto colon = k.find(':');
  return colon == std::string::npos ? k : k.substr(0, colon);
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 20, interval = 10;
  std::int64_t steps = 1200;
  std::string file;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seeds") && i + 1 < argc) {
      seeds = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--interval") && i + 1 < argc) {
      interval = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--z") && i + 1 < argc) {
      controller_settings.noise_z = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--deadband") && i + 1 < argc) {
      controller_settings.deadband = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--window") && i + 1 < argc) {
      controller_settings.throughput_window = static_cast<std::size_t>(std::atoll(argv[++i]));
    } else if (!std::strcmp(argv[i], "--persist-rounds") && i + 1 < argc) {
      controller_settings.persist_rounds = static_cast<std::size_t>(std::atoll(argv[++i]));
    } else if (!std::strcmp(argv[i], "--persist-gain") && i + 1 < argc) {
      controller_settings.persist_gain = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--independent-noise")) {
      controller_settings.correlated_noise = false;
    } else if (!std::strcmp(argv[i], "--correlated-noise")) {
      controller_settings.correlated_noise = true;
    } else if (!std::strcmp(argv[i], "--per-step")) {
      controller_settings = for_step_observations(controller_settings);
    } else if (!std::strcmp(argv[i], "--provisional") && i + 1 < argc) {
      controller_settings.provisional_observations =
          static_cast<std::size_t>(std::atoll(argv[++i]));
    } else if (!std::strcmp(argv[i], "--quick-max-change") && i + 1 < argc) {
      controller_settings.change.quick_max_change = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--run-min-spread") && i + 1 < argc) {
      controller_settings.change.run_min_spread = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--switch") && i + 1 < argc) {
      auto& d = controller_settings.change;
      if (std::sscanf(argv[++i], "%lf,%lf,%lf", &d.switch_llr, &d.switch_min_change,
                      &d.switch_min_spread) != 3) {
        file.clear();
        break;
      }
    } else if (!std::strcmp(argv[i], "--slow-min-spread") && i + 1 < argc) {
      controller_settings.change.slow_min_spread = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--regimes") && i + 1 < argc) {
      auto& d = controller_settings.change;
      if (std::sscanf(argv[++i], "%zu,%zu,%lf", &d.remembered_regimes, &d.recall_within,
                      &d.recall_max_change) != 3) {
        file.clear();
        break;
      }
    } else if (!std::strcmp(argv[i], "--change") && i + 1 < argc) {
      auto& d = controller_settings.change;
      if (std::sscanf(argv[++i], "%zu,%lf,%lf,%zu,%lf,%lf,%zu,%lf,%lf", &d.quick_run,
                      &d.quick_min_change, &d.quick_spread_z, &d.run, &d.min_change, &d.spread_z,
                      &d.slow_run, &d.slow_min_change, &d.slow_spread_z) != 9) {
        file.clear();
        break;
      }
    } else if (file.empty() && argv[i][0] != '-') {
      file = argv[i];
    } else {
      file.clear();
      break;
    }
  }
  if (file.empty() || seeds < 1 || interval < 1) {
    std::fprintf(stderr,
                 "usage: %s [--seeds N] [--steps N] [--interval STEPS] [--z NOISE_Z >= 0] "
                 "[--deadband D] [--window N] [--persist-rounds N] [--persist-gain G] "
                 "[--change QUICK_RUN,QUICK_MIN,QUICK_Z,RUN,MIN,Z,SLOW_RUN,SLOW_MIN,SLOW_Z] "
                 "[--run-min-spread S] [--quick-max-change C] [--slow-min-spread S] "
                 "[--regimes K,WITHIN,MAX] [--switch LLR,MIN,SPREAD] [--provisional N] "
                 "[--independent-noise] [--correlated-noise] "
                 "[--per-step] "
                 "BASE.csv (a recorded steady trace, e.g. tests/data/trace_clean.csv)\n",
                 argv[0]);
    return 2;
  }
  try {
    controller_settings.validate();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  std::ifstream in(file);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return 2;
  }
  const Trace base = parse_trace(in, file.substr(file.rfind('/') + 1));
  std::printf(
      "| scenario | extra step noise | time lost, median (worst) | against the reference, "
      "median (worst) | the reference's own | the measuring reference's own, median (worst) | "
      "steps to follow, worst per kind of change | "
      "plan changes / 100 steady steps, mean (worst) |\n"
      "|---|---|---|---|---|---|---|---|\n");
  // Each seed starts the repeated recording at its own offset, spread evenly over it.
  const std::int64_t repeated = base.last_step() - base.first_step() - ScenarioConfig{}.skip;
  for (ScenarioConfig sc : scenarios(steps, base.generations.front().members)) {
    std::vector<Trace> traces;
    for (int seed = 1; seed <= seeds; ++seed) {
      sc.offset = repeated * (seed - 1) / seeds;
      traces.push_back(make_scenario(base, sc));
    }
    for (double noise : {0.0, 0.2}) {
      std::vector<double> lost, to_reference, reference, measuring, churn;
      std::map<std::string, int> follow;  // kind of change -> worst rounds (-1: never)
      for (int seed = 1; seed <= seeds; ++seed) {
        const ReplayResult r = replay(traces[seed - 1], make(noise, seed, interval));
        lost.push_back(r.time_lost);
        to_reference.push_back(r.time_lost_to_reference);
        reference.push_back(r.reference_time_lost);
        measuring.push_back(r.measuring_time_lost);
        churn.push_back(r.changes_per_100_steps);
        for (std::size_t k = 1; k < r.regimes.size(); ++k) {
          const std::string kind = kind_of(r.regimes[k].cause);
          const int f = static_cast<int>(r.regimes[k].steps_to_follow);
          auto [it, fresh] = follow.emplace(kind, f);
          if (!fresh) it->second = (f < 0 || it->second < 0) ? -1 : std::max(it->second, f);
        }
      }
      for (auto* v : {&lost, &to_reference, &reference, &measuring}) {
        std::sort(v->begin(), v->end());
      }
      double mean_churn = 0;
      for (double c : churn) mean_churn += c / static_cast<double>(churn.size());
      std::string rounds;
      for (const auto& [kind, f] : follow) {
        rounds += (rounds.empty() ? "" : "; ") + kind + " " +
                  (f < 0 ? std::string("never") : std::to_string(f));
      }
      const std::size_t mid = lost.size() / 2;
      std::printf(
          "| %s | %s | %.2f%% (%.2f%%) | %.2f%% (%.2f%%) | %.2f%% | %.2f%% (%.2f%%) | %s | %.2f "
          "(%.2f) |\n",
          std::string(to_string(sc.kind)).c_str(), noise > 0 ? "20%" : "none", 100 * lost[mid],
          100 * lost.back(), 100 * to_reference[mid], 100 * to_reference.back(),
          100 * reference[mid], 100 * measuring[mid], 100 * measuring.back(), rounds.c_str(),
          mean_churn, *std::max_element(churn.begin(), churn.end()));
    }
  }
  return 0;
}
