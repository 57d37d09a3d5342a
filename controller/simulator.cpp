#include "controller/simulator.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>

#include "controller/batch_controller.hpp"

namespace omnilearn::scheduler {
namespace {

constexpr std::string_view kEventForms =
    "expected ROUND:speed:WORKER=SPEED, ROUND:leave:WORKER or ROUND:join:SPEED";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

template <typename T>
std::optional<T> parse_number(std::string_view s) {
  s = trim(s);
  T value{};
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, value);
  if (s.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::string fmt_number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Uniform in [0, 1) from the top 53 bits: the same sequence on every standard library.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

std::string worker_key(int id) { return "w" + std::to_string(id); }

}  // namespace

ControllerConfig controller_config(const SimulationConfig& s) {
  ControllerConfig c;
  c.global_batch = s.global_batch;
  c.min_batch = s.min_batch;
  c.max_batch = s.max_batch;
  c.deadband = s.deadband;
  c.gain = s.gain;
  c.policy = s.policy;
  c.throughput_window = s.throughput_window;
  c.affine = s.affine;
  c.noise_z = s.noise_z;
  c.persist_rounds = s.persist_rounds;
  return c;
}

std::string ClusterEvent::to_string() const {
  const std::string r = std::to_string(round);
  switch (kind) {
    case Kind::kSpeed:
      return r + ":speed:" + std::to_string(worker) + "=" + fmt_number(speed);
    case Kind::kLeave:
      return r + ":leave:" + std::to_string(worker);
    case Kind::kJoin:
      return r + ":join:" + fmt_number(speed);
  }
  return r + ":?";
}

std::vector<ClusterEvent> parse_events(std::string_view text) {
  std::vector<ClusterEvent> events;
  if (trim(text).empty()) return events;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = trim(text.substr(start, comma - start));
    start = comma + 1;
    auto bad = [&](std::string_view why) {
      std::ostringstream msg;
      msg << "malformed event '" << item << "': " << why << " (" << kEventForms << ")";
      throw std::invalid_argument(msg.str());
    };
    const std::size_t c1 = item.find(':');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : item.find(':', c1 + 1);
    if (c2 == std::string_view::npos) bad("missing ':'");
    ClusterEvent e;
    const auto round = parse_number<int>(item.substr(0, c1));
    if (!round || *round < 0) bad("the round must be a non-negative integer");
    e.round = *round;
    const std::string_view kind = item.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view arg = item.substr(c2 + 1);
    auto positive_speed = [&](std::string_view s) {
      const auto v = parse_number<double>(s);
      if (!v || !(*v > 0.0) || !std::isfinite(*v)) bad("the speed must be a positive number");
      return *v;
    };
    auto worker_id = [&](std::string_view s) {
      const auto v = parse_number<int>(s);
      if (!v || *v < 0) bad("the worker must be a non-negative integer id");
      return *v;
    };
    if (kind == "speed") {
      const std::size_t eq = arg.find('=');
      if (eq == std::string_view::npos) bad("a speed event needs WORKER=SPEED");
      e.kind = ClusterEvent::Kind::kSpeed;
      e.worker = worker_id(arg.substr(0, eq));
      e.speed = positive_speed(arg.substr(eq + 1));
    } else if (kind == "leave") {
      e.kind = ClusterEvent::Kind::kLeave;
      e.worker = worker_id(arg);
    } else if (kind == "join") {
      e.kind = ClusterEvent::Kind::kJoin;
      e.speed = positive_speed(arg);
    } else {
      bad("unknown kind '" + std::string(kind) + "'");
    }
    events.push_back(e);
    if (comma == text.size()) break;
  }
  return events;
}

void SimulationConfig::validate() const {
  auto fail = [](const std::string& why) { throw std::invalid_argument(why); };
  if (speeds.empty()) fail("no workers: give at least one speed");
  for (double s : speeds) {
    if (!(s > 0.0) || !std::isfinite(s)) {
      fail("every speed must be positive and finite (got " + fmt_number(s) + ")");
    }
  }
  if (rounds < 1) fail("rounds must be at least 1");
  if (steps_per_round < 1) fail("steps per round must be at least 1");
  if (!(noise >= 0.0 && noise < 1.0)) fail("noise must be in [0, 1)");
  if (!(overhead_ms >= 0.0) || !std::isfinite(overhead_ms)) fail("overhead must be >= 0 ms");
  controller_config(*this).validate();

  // Replay membership so that every round's cluster can hold B.
  std::vector<bool> present(speeds.size(), true);
  std::size_t alive = speeds.size();
  auto check_fit = [&](int round) {
    const long long n = static_cast<long long>(alive);
    if (n * min_batch > global_batch) {
      fail("global batch " + std::to_string(global_batch) + " is below " + std::to_string(n) +
           " workers x min batch " + std::to_string(min_batch) + " at round " +
           std::to_string(round));
    }
    if (n * static_cast<long long>(max_batch) < global_batch) {
      fail("global batch " + std::to_string(global_batch) + " exceeds " + std::to_string(n) +
           " workers x max batch " + std::to_string(max_batch) + " at round " +
           std::to_string(round));
    }
  };
  check_fit(0);
  std::vector<ClusterEvent> ordered = events;
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const ClusterEvent& a, const ClusterEvent& b) { return a.round < b.round; });
  for (std::size_t k = 0; k < ordered.size(); ++k) {
    const ClusterEvent& e = ordered[k];
    if (e.round >= rounds) {
      fail("event " + e.to_string() + " is at or after the last round (" + std::to_string(rounds) +
           " rounds)");
    }
    const bool known = e.worker >= 0 && static_cast<std::size_t>(e.worker) < present.size() &&
                       present[static_cast<std::size_t>(e.worker)];
    switch (e.kind) {
      case ClusterEvent::Kind::kSpeed:
      case ClusterEvent::Kind::kLeave:
        if (!known) {
          fail("event " + e.to_string() + " names worker " + std::to_string(e.worker) +
               ", which is not in the cluster at round " + std::to_string(e.round));
        }
        if (e.kind == ClusterEvent::Kind::kLeave) {
          if (alive == 1) fail("event " + e.to_string() + " would remove the last worker");
          present[static_cast<std::size_t>(e.worker)] = false;
          --alive;
        }
        break;
      case ClusterEvent::Kind::kJoin:
        present.push_back(true);
        ++alive;
        break;
    }
    if (k + 1 == ordered.size() || ordered[k + 1].round != e.round) check_fit(e.round);
  }
}

Split best_integer_split(std::span<const CostModel> costs, std::span<const Bounds> bounds,
                         long long total) {
  std::vector<double> base, weight;
  for (const CostModel& c : costs) {
    if (!(c.beta > 0.0) || !(c.alpha >= 0.0)) {
      throw std::invalid_argument("best_integer_split: costs need alpha >= 0 and beta > 0");
    }
    base.push_back(-c.alpha / c.beta);
    weight.push_back(1.0 / c.beta);
  }
  const std::vector<double> x = fill_to_total(base, weight, bounds, static_cast<double>(total));
  // Every floor of the real optimum costs at most its step time (or is forced by lo), so giving
  // out the rest one unit at a time to whoever it costs least is optimal.
  Split out;
  out.batches = round_min_step_time(x, costs, bounds, total);
  for (std::size_t i = 0; i < x.size(); ++i) {
    out.step_time = std::max(out.step_time, costs[i].time(out.batches[i]));
  }
  return out;
}

SimulationResult simulate(const SimulationConfig& config) {
  config.validate();
  BatchController controller(controller_config(config));
  // The controller works in seconds and samples/s; the simulated cluster in ms and samples/ms.
  std::map<int, double> speed;  // id -> samples per ms, for the workers present
  auto join = [&](int id, double s) {
    speed[id] = s;
    controller.add_worker(worker_key(id),
                          config.speed_hints ? std::optional<double>(s * 1000.0) : std::nullopt);
  };
  for (std::size_t i = 0; i < config.speeds.size(); ++i)
    join(static_cast<int>(i), config.speeds[i]);
  int next_id = static_cast<int>(config.speeds.size());

  std::vector<ClusterEvent> events = config.events;
  std::stable_sort(events.begin(), events.end(),
                   [](const ClusterEvent& a, const ClusterEvent& b) { return a.round < b.round; });
  std::size_t next_event = 0;
  std::mt19937_64 rng(config.seed);
  SimulationResult result;

  for (int r = 0; r < config.rounds; ++r) {
    RoundRecord rec;
    rec.round = r;
    for (; next_event < events.size() && events[next_event].round == r; ++next_event) {
      const ClusterEvent& e = events[next_event];
      switch (e.kind) {
        case ClusterEvent::Kind::kSpeed:
          speed[e.worker] = e.speed;  // the controller has to notice by itself
          break;
        case ClusterEvent::Kind::kLeave:
          speed.erase(e.worker);
          controller.remove_worker(worker_key(e.worker));
          break;
        case ClusterEvent::Kind::kJoin:
          join(next_id++, e.speed);
          break;
      }
      rec.events.push_back(e.to_string());
    }

    const BatchPlan plan = controller.plan();
    const std::size_t n = plan.keys.size();
    rec.batches = plan.batches;
    rec.changed = plan.changed;
    std::vector<CostModel> cost(n);
    std::vector<Bounds> bounds(n);
    for (std::size_t i = 0; i < n; ++i) {
      const int id = std::stoi(plan.keys[i].substr(1));
      rec.workers.push_back(id);
      cost[i] = CostModel{config.overhead_ms, 1.0 / speed.at(id)};
      bounds[i] = Bounds{config.min_batch, config.max_batch};
    }

    rec.times.assign(n, 0.0);
    double step_sum = 0.0;
    for (int s = 0; s < config.steps_per_round; ++s) {
      double slowest = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        const double factor = 1.0 + config.noise * (2.0 * uniform01(rng) - 1.0);
        const double t = cost[i].time(rec.batches[i]) * factor;
        rec.times[i] += t / config.steps_per_round;
        slowest = std::max(slowest, t);
        controller.observe(plan.keys[i], rec.batches[i], t / 1000.0);
      }
      step_sum += slowest;
    }
    rec.step_time = step_sum / config.steps_per_round;
    rec.ideal_step_time = best_integer_split(cost, bounds, config.global_batch).step_time;
    double planned = 0.0;
    for (std::size_t i = 0; i < n; ++i) planned = std::max(planned, cost[i].time(rec.batches[i]));
    rec.efficiency = rec.ideal_step_time / rec.step_time;
    rec.plan_efficiency = rec.ideal_step_time / planned;
    result.rounds.push_back(std::move(rec));
  }
  return result;
}

}  // namespace omnilearn::scheduler
