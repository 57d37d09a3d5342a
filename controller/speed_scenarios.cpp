#include "controller/speed_scenarios.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace omnilearn::scheduler {

std::string_view to_string(SpeedScenario s) {
  switch (s) {
    case SpeedScenario::kSteady:
      return "steady";
    case SpeedScenario::kStep:
      return "step";
    case SpeedScenario::kDrift:
      return "drift";
    case SpeedScenario::kNeighbour:
      return "neighbour";
    case SpeedScenario::kJoin:
      return "join";
    case SpeedScenario::kLeave:
      return "leave";
  }
  return "?";
}

void ScenarioConfig::validate() const {
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("speed scenario: " + what);
  };
  if (skip < 0) fail("skip must be >= 0");
  if (offset < 0) fail("offset must be >= 0");
  if (at < 1 || at >= steps)
    fail("at must be within the scenario's steps (1.." + std::to_string(steps - 1) + ")");
  if (!(factor > 0.0) || !std::isfinite(factor)) fail("factor must be positive and finite");
  if (length < 1) fail("length must be at least 1 step");
  if (kind == SpeedScenario::kNeighbour && period <= length) {
    fail("period must be longer than length (the neighbour must leave)");
  }
  if (kind == SpeedScenario::kDrift && (drift_every < 1 || drift_every > length)) {
    fail("drift_every must be in [1, length]");
  }
}

namespace {

std::string times(double f) {
  std::ostringstream o;
  o.precision(3);
  o << f << "x slower";
  return o.str();
}

}  // namespace

Trace make_scenario(const Trace& base, const ScenarioConfig& c) {
  c.validate();
  if (base.generations.size() != 1) {
    throw std::invalid_argument(base.name +
                                ": a scenario's base needs one generation (a steady "
                                "cluster), not " +
                                std::to_string(base.generations.size()));
  }
  const std::vector<std::string>& all = base.generations.front().members;
  const std::string worker = c.worker.empty() ? all.front() : c.worker;
  if (std::find(all.begin(), all.end(), worker) == all.end()) {
    throw std::invalid_argument(base.name + ": worker '" + worker + "' is not in the trace");
  }
  std::vector<TraceObservation> tile;
  for (const auto& o : base.observations) {
    if (o.first_step > base.first_step() + c.skip) tile.push_back(o);
  }
  if (tile.empty()) {
    throw std::invalid_argument(base.name + ": no observations after step " +
                                std::to_string(base.first_step() + c.skip));
  }
  const std::int64_t origin = base.first_step() + c.skip;
  const std::int64_t period = base.last_step() - origin;
  if (c.offset >= period) {
    throw std::invalid_argument(base.name + ": offset " + std::to_string(c.offset) +
                                " is not below the " + std::to_string(period) +
                                " steps repeated after skip");
  }
  if (c.offset > 0) {
    // Rotate: the step at origin + offset + 1 comes first; a window across the cut is split.
    const std::int64_t cut = origin + c.offset;
    std::vector<TraceObservation> rotated;
    for (const auto& o : tile) {
      TraceObservation part = o;
      if (o.last_step > cut) {
        part.first_step = std::max(o.first_step, cut + 1) - c.offset;
        part.last_step = o.last_step - c.offset;
        rotated.push_back(part);
      }
      if (o.first_step <= cut) {
        part.first_step = o.first_step - c.offset + period;
        part.last_step = std::min(o.last_step, cut) - c.offset + period;
        rotated.push_back(part);
      }
    }
    std::stable_sort(rotated.begin(), rotated.end(),
                     [](const TraceObservation& a, const TraceObservation& b) {
                       return a.last_step < b.last_step;
                     });
    tile = std::move(rotated);
  }

  Trace t;
  t.name = base.name + ":" + std::string(to_string(c.kind));
  t.global_batch = base.global_batch;
  t.alpha_s = base.alpha_s;

  // The worker's slowdown from each change on: (step, factor), in effect from step + 1.
  std::vector<std::pair<std::int64_t, double>> changes;
  switch (c.kind) {
    case SpeedScenario::kStep:
      changes.push_back({c.at, c.factor});
      t.changes.push_back({c.at, worker, times(c.factor)});
      break;
    case SpeedScenario::kDrift: {
      const std::int64_t stairs = c.length / c.drift_every;
      for (std::int64_t k = 1; k <= stairs; ++k) {
        const std::int64_t s = c.at + (k - 1) * c.drift_every;
        if (s >= c.steps) break;
        const double f = 1.0 + (c.factor - 1.0) * static_cast<double>(k) / stairs;
        changes.push_back({s, f});
        t.changes.push_back({s, worker, "drift: " + times(f)});
      }
      break;
    }
    case SpeedScenario::kNeighbour:
      for (std::int64_t s = c.at; s < c.steps; s += c.period) {
        changes.push_back({s, c.factor});
        t.changes.push_back({s, worker, "a neighbour arrives: " + times(c.factor)});
        if (s + c.length < c.steps) {
          changes.push_back({s + c.length, 1.0});
          t.changes.push_back({s + c.length, worker, "the neighbour leaves"});
        }
      }
      break;
    case SpeedScenario::kSteady:
    case SpeedScenario::kJoin:
    case SpeedScenario::kLeave:
      break;
  }
  auto factor_at = [&](std::int64_t step) {
    double f = 1.0;
    for (const auto& [s, g] : changes) {
      if (s < step) f = g;
    }
    return f;
  };

  std::vector<std::string> without;
  for (const auto& m : all) {
    if (m != worker) without.push_back(m);
  }
  std::vector<std::int64_t> cuts;  // windows are cut after these steps
  for (const auto& [s, f] : changes) cuts.push_back(s);
  if (c.kind == SpeedScenario::kJoin) {
    t.generations = {{0, without}, {c.at, all}};
    t.generations[1].members.erase(
        std::find(t.generations[1].members.begin(), t.generations[1].members.end(), worker));
    t.generations[1].members.push_back(worker);  // a newcomer takes the last rank
    cuts.push_back(c.at);
  } else if (c.kind == SpeedScenario::kLeave) {
    t.generations = {{0, all}, {c.at, without}};
    cuts.push_back(c.at);
  } else {
    t.generations = {{0, all}};
  }
  std::sort(cuts.begin(), cuts.end());

  auto present = [&](const std::string& w, std::int64_t first, std::int64_t last) {
    if (w != worker) return true;
    if (c.kind == SpeedScenario::kJoin) return first > c.at;
    if (c.kind == SpeedScenario::kLeave) return last <= c.at;
    return true;
  };
  for (std::int64_t k = 0;; ++k) {
    bool any = false;
    for (const auto& o : tile) {
      std::int64_t first = o.first_step - origin + k * period;
      const std::int64_t last = o.last_step - origin + k * period;
      if (last > c.steps) continue;
      any = true;
      // Cut at every change inside [first, last): each part lies within one speed.
      auto cut = std::lower_bound(cuts.begin(), cuts.end(), first);
      while (first <= last) {
        const std::int64_t end = (cut != cuts.end() && *cut < last) ? *cut : last;
        if (present(o.worker, first, end)) {
          TraceObservation part = o;
          part.first_step = first;
          part.last_step = end;
          if (o.worker == worker) part.compute_s *= factor_at(first);
          t.observations.push_back(part);
        }
        first = end + 1;
        if (cut != cuts.end() && *cut < last) ++cut;
      }
    }
    if (!any) break;
  }
  std::stable_sort(t.observations.begin(), t.observations.end(),
                   [](const TraceObservation& a, const TraceObservation& b) {
                     return a.last_step < b.last_step;
                   });
  return t;
}

}  // namespace omnilearn::scheduler
