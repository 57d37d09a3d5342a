// `omnilearn simulate`: runs the batch-size controller against a simulated heterogeneous
// cluster and prints, per round, the batches, step time and efficiency (or --json).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/flag_checks.hpp"
#include "controller/simulator.hpp"

namespace omnilearn::cli {
namespace {

namespace sched = omnilearn::scheduler;

struct SimulateOptions {
  std::vector<double> speeds;
  int global_batch = 256;
  std::string policy = "proportional";
  int rounds = 12;
  int steps_per_round = 5;
  double deadband = 0.05;
  double gain = 1.0;
  int min_batch = 1;
  int max_batch = 0;  // 0: the global batch
  double noise = 0.0;
  double overhead_ms = 0.0;
  std::string events;
  std::uint64_t seed = 1;
  bool hints = false;
  bool json = false;
};

sched::SimulationConfig to_config(const SimulateOptions& o) {
  sched::SimulationConfig c;
  c.speeds = o.speeds;
  c.global_batch = o.global_batch;
  const std::optional<sched::Policy> policy = sched::parse_policy(o.policy);
  if (!policy) {
    throw CliError("unknown policy '" + o.policy + "': use uniform, proportional or affine");
  }
  c.policy = *policy;
  c.rounds = o.rounds;
  c.steps_per_round = o.steps_per_round;
  c.deadband = o.deadband;
  c.gain = o.gain;
  c.min_batch = o.min_batch;
  c.max_batch = o.max_batch > 0 ? o.max_batch : std::max(o.global_batch, o.min_batch);
  c.noise = o.noise;
  c.overhead_ms = o.overhead_ms;
  c.seed = o.seed;
  c.speed_hints = o.hints;
  try {
    c.events = sched::parse_events(o.events);
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw CliError(e.what());
  }
  return c;
}

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(v[i]);
  }
  return out;
}

void print_table(const sched::SimulationConfig& c, const sched::SimulationResult& r) {
  std::printf(
      "%s policy, %zu workers, global batch %d, %d rounds x %d steps, noise %g, "
      "overhead %g ms, deadband %g, gain %g\n",
      std::string(sched::to_string(c.policy)).c_str(), c.speeds.size(), c.global_batch, c.rounds,
      c.steps_per_round, c.noise, c.overhead_ms, c.deadband, c.gain);
  std::printf("%5s %10s %10s %6s %6s  %s\n", "round", "step_ms", "ideal_ms", "eff", "plan",
              "batches (worker ids in the JSON)");
  int first_good = -1;
  for (const sched::RoundRecord& rec : r.rounds) {
    std::string events;
    for (const std::string& e : rec.events) events += (events.empty() ? "  <- " : ", ") + e;
    std::printf("%5d %10.3f %10.3f %6.3f %6.3f %c%s%s\n", rec.round, rec.step_time,
                rec.ideal_step_time, rec.efficiency, rec.plan_efficiency, rec.changed ? '*' : ' ',
                join_ints(rec.batches).c_str(), events.c_str());
    if (first_good < 0 && rec.efficiency >= 0.95) first_good = rec.round;
  }
  double sum = 0.0;
  for (const sched::RoundRecord& rec : r.rounds) sum += rec.efficiency;
  std::printf(
      "mean efficiency %.3f; first round at >= 0.95: %s  (* = plan changed; eff = "
      "ideal / achieved step time, plan = the same without noise)\n",
      sum / static_cast<double>(r.rounds.size()),
      first_good < 0 ? "none" : std::to_string(first_good).c_str());
}

void print_json(const sched::SimulationConfig& c, const sched::SimulationResult& r) {
  nlohmann::ordered_json out;
  out["policy"] = std::string(sched::to_string(c.policy));
  out["global_batch"] = c.global_batch;
  out["time_unit"] = "ms";
  nlohmann::ordered_json rounds = nlohmann::ordered_json::array();
  for (const sched::RoundRecord& rec : r.rounds) {
    nlohmann::ordered_json j;
    j["round"] = rec.round;
    j["batches"] = rec.batches;
    j["times"] = rec.times;
    j["step_time"] = rec.step_time;
    j["ideal_step_time"] = rec.ideal_step_time;
    j["efficiency"] = rec.efficiency;
    j["plan_efficiency"] = rec.plan_efficiency;
    j["workers"] = rec.workers;
    j["changed"] = rec.changed;
    j["events"] = rec.events;
    rounds.push_back(std::move(j));
  }
  out["rounds"] = std::move(rounds);
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

void add_simulate_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Run the batch-size controller on a simulated heterogeneous cluster");
  // Taken whole and checked item by item (a CLI11 delimiter drops empty items).
  cmd->add_option_function<std::string>(
         "--speeds", [opts](const std::string& text) { opts->speeds = parse_number_list(text); },
         "Per-worker speeds in samples per ms, comma-separated (worker ids 0, 1, ...); "
         "higher is faster (run's --slowdowns are the other way: a factor F is speed 1/F)")
      ->required()
      ->check(positive_number_list());
  cmd->add_option("--global-batch", opts->global_batch, "Global batch B (default 256)");
  cmd->add_option("--policy", opts->policy,
                  "uniform | proportional | affine (default proportional)");
  cmd->add_option("--rounds", opts->rounds, "Control rounds to simulate (default 12)");
  cmd->add_option("--steps-per-round", opts->steps_per_round,
                  "Training steps observed between two plans (default 5)");
  cmd->add_option("--deadband", opts->deadband,
                  "Keep the plan unless a new one is predicted this much faster (0.05)");
  cmd->add_option("--gain", opts->gain, "Fraction of the correction applied per round (1)");
  cmd->add_option("--min-batch", opts->min_batch, "Smallest per-worker batch (default 1)");
  cmd->add_option("--max-batch", opts->max_batch, "Largest per-worker batch (default: B)");
  cmd->add_option("--noise", opts->noise, "Multiplicative step-time noise, uniform +-x (0)");
  cmd->add_option("--overhead-ms", opts->overhead_ms, "Fixed per-step cost on every worker (0)");
  cmd->add_option("--events", opts->events,
                  "Comma-separated ROUND:speed:WORKER=SPEED, ROUND:leave:WORKER, ROUND:join:SPEED");
  cmd->add_option("--seed", opts->seed, "Noise seed (default 1)");
  cmd->add_flag("--hints", opts->hints, "Tell the controller each worker's speed when it joins");
  cmd->add_flag("--json", opts->json, "Print one JSON object instead of the table");
  cmd->footer("Example: omnilearn simulate --speeds 4,4,2,1 --rounds 8");
  cmd->callback([opts, &exit_code] {
    const sched::SimulationConfig config = to_config(*opts);
    sched::SimulationResult result;
    try {
      result = sched::simulate(config);
    } catch (const std::invalid_argument& e) {
      throw CliError(e.what());
    }
    if (opts->json) {
      print_json(config, result);
    } else {
      print_table(config, result);
    }
    exit_code = 0;
  });
}

}  // namespace omnilearn::cli
