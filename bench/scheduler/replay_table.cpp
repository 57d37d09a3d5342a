// The controller replayed over recorded traces (tests/data/trace_*.csv): the figures of
// docs/benchmarks.md, "Controller cost". For each trace, each controller (before
// a 5-observation median, no noise gate, no change detection; after: the defaults),
// each policy and each extra step noise, over --seeds seeds: efficiency against the oracle
// (median and worst), plan changes per 100 steps once steady (mean and worst), and the rounds
// each regime (start, real speed change, join) took to be followed (worst).
//
//   scheduler_replay_table [--seeds 10] [--interval 10] [--z NOISE_Z] [--window N]
//                          [--follow TOLERANCE] [--deadband 0.05] [--change ...]
//                          [--run-min-spread S] [--quick-max-change C] [--slow-min-spread S]
//                          [--regimes K,WITHIN,MAX] [--switch LLR,MIN,SPREAD]
//                          [--provisional N] [--per-step]
//                          [--independent-noise] [--correlated-noise] [--alpha]
//                          tests/data/trace_*.csv
// "noise-aware, per round" is the defaults without the smoothing across rounds
// (persist_rounds = 0); "noise-aware, across rounds" the defaults.
// --alpha: replay with the traces' fitted fixed cost per step (ReplayConfig::use_trace_alpha).
// --per-step: the controller set for one observation per step (for_step_observations), for the
// per-step recordings tests/data/steps_*.csv; --change, --provisional: its change detection
// (the nine settings of ChangeDetection's three levels) and provisional_observations;
// --run-min-spread, --slow-min-spread: the spread below which its run level, its slow level
// stays off, --quick-max-change: the change its quick level's bar stops at (inf: none),
// --regimes: remembered_regimes, recall_within and recall_max_change, --switch: switch_llr,
// switch_min_change and switch_min_spread (all after --per-step, which sets them);
// --independent-noise, --correlated-noise: the controller's correlated_noise off, on (what
// weighing the noise's correlation buys and costs).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "controller/trace_replay.hpp"

using namespace omnilearn::scheduler;

namespace {

struct Variant {
  const char* name;
  bool filtered;
  std::size_t persist_rounds;  // smoothing across rounds (0: off)
};

double noise_z = ControllerConfig{}.noise_z;
double follow = ReplayConfig{}.follow_tolerance;
std::size_t window = ControllerConfig{}.throughput_window;
bool use_alpha = false;
double deadband = 0.05;
ChangeDetection change;
std::size_t provisional = ControllerConfig{}.provisional_observations;
double persist_z = ControllerConfig{}.persist_z;
bool correlated_noise = ControllerConfig{}.correlated_noise;
bool independent_noise = false;  // --independent-noise: correlated_noise off, whatever else says

ReplayConfig make(const Variant& v, Policy policy, double noise, int seed, int interval) {
  const bool filtered = v.filtered;
  ReplayConfig c;
  c.controller.min_batch = 8;
  c.controller.deadband = deadband;
  c.controller.persist_rounds = v.persist_rounds;
  c.controller.policy = policy;
  c.rounds = ControlRoundsConfig{interval, 3, 6};
  c.step_noise = noise;
  c.seed = static_cast<std::uint64_t>(seed);
  c.controller.noise_z = noise_z;
  c.follow_tolerance = follow;
  c.controller.throughput_window = window;
  c.controller.change = change;
  c.controller.provisional_observations = provisional;
  c.controller.persist_z = persist_z;
  c.controller.correlated_noise = correlated_noise && !independent_noise;
  c.use_trace_alpha = use_alpha;
  if (!filtered) {
    c.controller.throughput_window = 5;
    c.controller.noise_z = 0.0;
    c.controller.change.min_change = 1e9;
    c.controller.change.slow_run = 0;
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 10, interval = 10;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seeds") && i + 1 < argc) {
      seeds = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--follow") && i + 1 < argc) {
      follow = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--alpha")) {
      use_alpha = true;
    } else if (!std::strcmp(argv[i], "--window") && i + 1 < argc) {
      window = static_cast<std::size_t>(std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--z") && i + 1 < argc) {
      noise_z = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--deadband") && i + 1 < argc) {
      deadband = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--interval") && i + 1 < argc) {
      interval = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--independent-noise")) {
      independent_noise = true;
    } else if (!std::strcmp(argv[i], "--correlated-noise")) {
      correlated_noise = true;  // after --per-step, which sets it
    } else if (!std::strcmp(argv[i], "--per-step")) {
      // The settings for per-step recordings (tests/data/steps_*.csv): for_step_observations.
      const ControllerConfig step = for_step_observations(ControllerConfig{});
      window = step.throughput_window;
      noise_z = step.noise_z;
      provisional = step.provisional_observations;
      change = step.change;
      persist_z = step.persist_z;
      correlated_noise = step.correlated_noise;
    } else if (!std::strcmp(argv[i], "--provisional") && i + 1 < argc) {
      provisional = static_cast<std::size_t>(std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--quick-max-change") && i + 1 < argc) {
      change.quick_max_change = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--run-min-spread") && i + 1 < argc) {
      change.run_min_spread = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--switch") && i + 1 < argc) {
      auto& d = change;
      if (std::sscanf(argv[++i], "%lf,%lf,%lf", &d.switch_llr, &d.switch_min_change,
                      &d.switch_min_spread) != 3) {
        files.clear();
        break;
      }
    } else if (!std::strcmp(argv[i], "--slow-min-spread") && i + 1 < argc) {
      change.slow_min_spread = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--regimes") && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%zu,%zu,%lf", &change.remembered_regimes, &change.recall_within,
                      &change.recall_max_change) != 3) {
        files.clear();
        break;
      }
    } else if (!std::strcmp(argv[i], "--change") && i + 1 < argc) {
      // As scheduler_scenario_table's: the three levels' nine settings, in order.
      if (std::sscanf(argv[++i], "%zu,%lf,%lf,%zu,%lf,%lf,%zu,%lf,%lf", &change.quick_run,
                      &change.quick_min_change, &change.quick_spread_z, &change.run,
                      &change.min_change, &change.spread_z, &change.slow_run,
                      &change.slow_min_change, &change.slow_spread_z) != 9) {
        files.clear();
        break;
      }
    } else {
      files.push_back(argv[i]);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr,
                 "usage: %s [--seeds N] [--interval STEPS] [--z NOISE_Z] [--window N] [--follow "
                 "TOLERANCE] [--deadband D] [--change QR,QMIN,QZ,R,MIN,Z,SR,SMIN,SZ] "
                 "[--run-min-spread S] [--quick-max-change C] [--slow-min-spread S] "
                 "[--regimes K,WITHIN,MAX] [--switch LLR,MIN,SPREAD] [--provisional N] "
                 "[--per-step] [--independent-noise] "
                 "[--correlated-noise] [--alpha] TRACE.csv...\n",
                 argv[0]);
    return 2;
  }
  std::printf("| trace | controller | policy | extra step noise | efficiency median (worst) | "
              "speed-up over uniform (ideal) | plan changes / 100 steps mean (worst) | "
              "not justified by the recorded speeds / 100 steps mean (worst) | "
              "rounds to follow, worst per regime |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& file : files) {
    std::ifstream in(file);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", file.c_str());
      return 2;
    }
    const std::string name = file.substr(file.rfind('/') + 1);
    const Trace trace = parse_trace(in, name);
    const std::size_t persist = ControllerConfig{}.persist_rounds;
    for (const Variant v : {Variant{"before", false, 0}, Variant{"noise-aware, per round", true, 0},
                            Variant{"noise-aware, across rounds", true, persist}}) {
      for (Policy policy : {Policy::kProportional, Policy::kAffine}) {
        for (double noise : {0.0, 0.2}) {
          std::vector<double> eff, churn, unjustified, speedup, ideal;
          std::vector<int> follow;
          for (int seed = 1; seed <= seeds; ++seed) {
            const ReplayResult r = replay(trace, make(v, policy, noise, seed, interval));
            eff.push_back(r.efficiency);
            churn.push_back(r.changes_per_100_steps);
            unjustified.push_back(r.unjustified_per_100_steps);
            speedup.push_back(r.speedup_over_uniform);
            ideal.push_back(r.ideal_speedup);
            if (follow.empty()) follow.assign(r.regimes.size(), 0);
            for (std::size_t k = 0; k < r.regimes.size() && k < follow.size(); ++k) {
              const int f = r.regimes[k].rounds_to_follow;
              follow[k] = (f < 0 || follow[k] < 0) ? -1 : std::max(follow[k], f);
            }
            if (noise == 0.0) break;  // the recorded noise alone: one replay says it all
          }
          auto med = [](std::vector<double> x) {
            std::sort(x.begin(), x.end());
            return x[x.size() / 2];
          };
          double mean_churn = 0, mean_unjustified = 0;
          for (double c : churn) mean_churn += c / churn.size();
          for (double c : unjustified) mean_unjustified += c / unjustified.size();
          std::string rounds;
          for (int f : follow) rounds += (rounds.empty() ? "" : ", ") + (f < 0 ? std::string("never") : std::to_string(f));
          std::printf("| %s | %s | %s | %s | %.3f (%.3f) | %.2fx (%.2fx) | %.2f (%.2f) | %.2f (%.2f) | %s |\n",
                      name.c_str(), v.name, std::string(to_string(policy)).c_str(),
                      noise > 0 ? "20%" : "none", med(eff),
                      *std::min_element(eff.begin(), eff.end()), med(speedup), med(ideal),
                      mean_churn, *std::max_element(churn.begin(), churn.end()), mean_unjustified,
                      *std::max_element(unjustified.begin(), unjustified.end()), rounds.c_str());
        }
      }
    }
  }
  return 0;
}
