#include "controller/trace_replay.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "controller/simulator.hpp"

namespace omnilearn::scheduler {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) {
    while (!item.empty() && (item.back() == ' ' || item.back() == '\r')) item.pop_back();
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    out.push_back(item);
  }
  return out;
}

template <typename T>
std::optional<T> number(const std::string& s) {
  T value{};
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

// Uniform in (0, 1) from the top 53 bits: the same sequence on every standard library.
double uniform01(std::mt19937_64& rng) { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; }

// Log-normal factor with mean 1 and relative standard deviation about `sd` (Box-Muller).
double noise_factor(std::mt19937_64& rng, double sd) {
  if (sd <= 0.0) return 1.0;
  const double z = std::sqrt(-2.0 * std::log(uniform01(rng))) * std::cos(2.0 * M_PI * uniform01(rng));
  const double s = std::sqrt(std::log1p(sd * sd));
  return std::exp(s * z - 0.5 * s * s);
}

}  // namespace

std::int64_t Trace::first_step() const { return generations.empty() ? 0 : generations.front().step; }

std::int64_t Trace::last_step() const {
  return observations.empty() ? first_step() : observations.back().last_step;
}

Trace parse_trace(std::istream& in, const std::string& name) {
  Trace t;
  t.name = name;
  std::string line;
  int line_no = 0;
  std::set<std::string> known;
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(name + ":" + std::to_string(line_no) + ": " + why);
  };
  while (std::getline(in, line)) {
    ++line_no;
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    const auto f = split(line, ',');
    if (f.empty() || (f.size() == 1 && f[0].empty())) continue;
    const std::string& kind = f[0];
    auto step_at = [&](std::size_t i) {
      auto v = number<std::int64_t>(f.at(i));
      if (!v || *v < 0) fail("field " + std::to_string(i + 1) + " must be a step number");
      return *v;
    };
    auto seconds_at = [&](std::size_t i) {
      auto v = number<double>(f.at(i));
      if (!v || !(*v >= 0.0) || !std::isfinite(*v)) {
        fail("field " + std::to_string(i + 1) + " must be seconds >= 0");
      }
      return *v;
    };
    if (kind == "global_batch") {
      if (f.size() != 2) fail("expected global_batch,B");
      auto b = number<int>(f[1]);
      if (!b || *b < 1) fail("global_batch must be a positive integer");
      t.global_batch = *b;
    } else if (kind == "generation") {
      if (f.size() != 3) fail("expected generation,STEP,W0;W1;...");
      TraceGeneration g{step_at(1), split(f[2], ';')};
      if (g.members.empty()) fail("a generation needs members");
      if (!t.generations.empty() && g.step < t.generations.back().step) fail("generations out of order");
      for (const auto& m : g.members) known.insert(m);
      t.generations.push_back(std::move(g));
    } else if (kind == "change") {
      if (f.size() < 3) fail("expected change,STEP,WORKER,DESCRIPTION");
      TraceChange c{step_at(1), f[2], f.size() > 3 ? f[3] : "speed change"};
      if (!t.changes.empty() && c.step < t.changes.back().step) fail("changes out of order");
      t.changes.push_back(std::move(c));
    } else if (kind == "alpha") {
      if (f.size() != 3) fail("expected alpha,WORKER,SECONDS");
      t.alpha_s[f[1]] = seconds_at(2);
    } else if (kind == "obs") {
      if (f.size() != 6) fail("expected obs,WORKER,FIRST,LAST,BATCH,COMPUTE_S");
      TraceObservation o{f[1], step_at(2), step_at(3), 0, seconds_at(5)};
      auto b = number<int>(f[4]);
      if (!b || *b < 1) fail("the batch must be a positive integer");
      o.batch = *b;
      if (o.first_step > o.last_step) fail("first step after last step");
      if (!(o.compute_s > 0.0)) fail("compute time must be positive");
      if (!known.contains(o.worker)) fail("worker '" + o.worker + "' is in no earlier generation");
      t.observations.push_back(std::move(o));
    } else {
      fail("unknown record '" + kind + "' (global_batch, generation, change, alpha, obs)");
    }
  }
  if (t.global_batch < 1) fail("no global_batch line");
  if (t.generations.empty()) fail("no generation line");
  std::stable_sort(t.observations.begin(), t.observations.end(),
                   [](const TraceObservation& a, const TraceObservation& b) {
                     return a.last_step < b.last_step;
                   });
  return t;
}

namespace {

// Per-worker per-sample compute time at every step, from the recorded windows.
class CostTable {
 public:
  CostTable(const Trace& t, bool use_alpha) : use_alpha_(use_alpha) {
    for (const auto& o : t.observations) {
      const double alpha = alpha_of(t, o.worker);
      windows_[o.worker].push_back({o.first_step, o.last_step,
                                    std::max(o.compute_s - alpha, 1e-3 * o.compute_s) / o.batch});
    }
    for (auto& [w, v] : windows_) {
      std::sort(v.begin(), v.end(), [](const Window& a, const Window& b) { return a.last < b.last; });
    }
  }
  double alpha_of(const Trace& t, const std::string& w) const {
    if (!use_alpha_) return 0.0;
    auto it = t.alpha_s.find(w);
    return it == t.alpha_s.end() ? 0.0 : it->second;
  }
  // The window covering `step`, else the next one, else the last one.
  double per_sample(const std::string& w, std::int64_t step) const {
    const auto& v = windows_.at(w);
    auto it = std::lower_bound(v.begin(), v.end(), step,
                               [](const Window& x, std::int64_t s) { return x.last < s; });
    if (it == v.end()) --it;
    return it->per_sample;
  }
  // Median per-sample time over the windows that lie within [from, to]; nullopt if none.
  std::optional<double> median_between(const std::string& w, std::int64_t from,
                                       std::int64_t to) const {
    auto it = windows_.find(w);
    if (it == windows_.end()) return std::nullopt;
    std::vector<double> v;
    for (const auto& x : it->second) {
      if (x.first >= from && x.last <= to) v.push_back(x.per_sample);
    }
    return median(v);
  }
  bool has(const std::string& w) const { return windows_.contains(w); }

 private:
  struct Window {
    std::int64_t first, last;
    double per_sample;
  };
  bool use_alpha_;
  std::map<std::string, std::vector<Window>> windows_;
};

std::vector<int> uniform_split(int total, std::size_t n) {
  std::vector<int> b(n, total / static_cast<int>(n));
  for (std::size_t i = 0; i < static_cast<std::size_t>(total) % n; ++i) ++b[i];
  return b;
}

}  // namespace

std::string ReplayResult::describe() const {
  std::ostringstream o;
  o.precision(3);
  o << trace << ": " << steps << " steps, steady from step " << steady_from << ": efficiency "
    << efficiency << " (all steps " << efficiency_all << "), time lost once steady "
    << 100.0 * time_lost << "% (" << 100.0 * time_lost_to_reference
    << "% against the reference that learns each change from its first window, itself "
    << 100.0 * reference_time_lost << "% over the oracle), speed-up over uniform "
    << speedup_over_uniform << "x of ideal " << ideal_speedup << "x; " << rounds << " rounds, "
    << plan_changes << " plan changes, " << churn_changes << " outside settling ("
    << changes_per_100_steps << " per 100 steps over " << churn_steps << " steps, "
    << persisted_changes << " by the smoothing across rounds, " << unjustified_changes
    << " not justified by the recorded speeds: " << unjustified_per_100_steps
    << " per 100 steps)\n";
  for (const auto& r : regimes) {
    o << "  from step " << r.start_step << " (" << r.cause << "): speeds";
    for (double s : r.speeds) o << " " << std::lround(s);
    o << " samples/s, oracle [";
    for (std::size_t i = 0; i < r.oracle_batches.size(); ++i) o << (i ? "," : "") << r.oracle_batches[i];
    o << "], linear ideal " << r.nominal_ideal_speedup << "x, rounds to follow "
      << r.rounds_to_follow << " (steps " << r.steps_to_follow << ")\n";
  }
  return o.str();
}

ReplayResult replay(const Trace& trace, const ReplayConfig& config) {
  ControllerConfig cc = config.controller;
  cc.global_batch = trace.global_batch;
  if (cc.max_batch > trace.global_batch) cc.max_batch = trace.global_batch;
  BatchController controller(cc);
  ControlRounds rounds(config.rounds);
  const CostTable costs(trace, config.use_trace_alpha);
  std::mt19937_64 rng(config.seed);

  ReplayResult out;
  out.trace = trace.name;

  // Regime boundaries: generations and changes, in step order.
  struct Boundary {
    std::int64_t step;
    const TraceGeneration* generation;
    const TraceChange* change;
  };
  std::vector<Boundary> boundaries;
  for (const auto& g : trace.generations) boundaries.push_back({g.step, &g, nullptr});
  for (const auto& c : trace.changes) boundaries.push_back({c.step, nullptr, &c});
  std::stable_sort(boundaries.begin(), boundaries.end(),
                   [](const Boundary& a, const Boundary& b) { return a.step < b.step; });
  const std::int64_t last = trace.last_step();

  // The regime's true costs: the median recorded per-sample time within it, per member.
  std::vector<std::string> members;
  std::vector<CostModel> truth;
  std::vector<int> oracle;
  auto start_regime = [&](std::size_t k, const std::string& cause) {
    const std::int64_t from = boundaries[k].step + 1;
    const std::int64_t to = k + 1 < boundaries.size() ? boundaries[k + 1].step : last;
    ReplayRegime r;
    r.start_step = from;
    r.cause = cause;
    r.members = members;
    truth.clear();
    for (const auto& m : members) {
      // A regime with no complete window of a worker (too short) falls back to the windows
      // that reach into it, then to all of the worker's.
      auto p = costs.median_between(m, from, to);
      if (!p) p = costs.median_between(m, from - 1000000, to + 1000000);
      if (!p) throw std::invalid_argument(trace.name + ": worker " + m + " has no observations");
      truth.push_back(CostModel{costs.alpha_of(trace, m), *p});
      r.speeds.push_back(1.0 / *p);
    }
    const std::vector<Bounds> bounds(members.size(), Bounds{cc.min_batch, cc.max_batch});
    oracle = best_integer_split(truth, bounds, trace.global_batch).batches;
    r.oracle_batches = oracle;
    const double slowest = *std::min_element(r.speeds.begin(), r.speeds.end());
    r.nominal_ideal_speedup = std::accumulate(r.speeds.begin(), r.speeds.end(), 0.0) /
                              (static_cast<double>(r.speeds.size()) * slowest);
    out.regimes.push_back(std::move(r));
  };
  auto plan_follows = [&](const std::vector<int>& b) {
    // As good as the deadband lets any plan be, under the regime's speeds: no controller with
    // that deadband would change it (a slow newcomer a few samples under its share).
    double t_plan = 0, t_oracle = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      t_plan = std::max(t_plan, truth[i].time(b[i]));
      t_oracle = std::max(t_oracle, truth[i].time(oracle[i]));
    }
    if (t_plan <= (1.0 + cc.deadband) * t_oracle) return true;
    const auto& concerned = out.regimes.back().concerned;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (std::find(concerned.begin(), concerned.end(), members[i]) == concerned.end()) continue;
      if (std::abs(b[i] - oracle[i]) > config.follow_tolerance * oracle[i]) return false;
    }
    return true;
  };

  std::vector<int> batches;        // in force, per member
  std::vector<int> pending;        // a plan sent, applying from pending_from
  std::int64_t pending_from = -1;
  std::map<std::string, std::int64_t> batch_since;  // member -> first step at its batch
  int rounds_in_regime = 0;
  bool followed = false;
  std::int64_t settle_until_round = 0;  // rounds with index <= this are settling
  int round_index = 0;
  double sum_ctrl = 0, sum_oracle = 0, sum_uniform = 0, all_ctrl = 0, all_oracle = 0;
  double since_ctrl = 0, since_oracle = 0, since_reference = 0;
  // The measuring reference (ReplayResult::measuring_time_lost): its batches in force, per
  // member, and per worker the per-sample times it observed since the worker's last change and
  // its last estimate (kept while a change has left it no observation yet).
  std::vector<int> measuring;
  std::map<std::string, std::deque<double>> measured;
  std::map<std::string, double> measured_estimate;
  double since_measuring = 0;
  auto measuring_plan = [&]() {
    std::vector<CostModel> models;
    double known = 0;
    int count = 0;
    for (const auto& m : members) {
      if (const auto it = measured_estimate.find(m); it != measured_estimate.end()) {
        known += it->second;
        ++count;
      }
    }
    for (std::size_t i = 0; i < members.size(); ++i) {
      const auto it = measured_estimate.find(members[i]);
      // A newcomer with nothing measured yet: the others' mean, else equal shares.
      const double per_sample = it != measured_estimate.end() ? it->second
                                : count > 0                   ? known / count
                                                              : 1.0;
      models.push_back(CostModel{truth[i].alpha, per_sample});
    }
    const std::vector<Bounds> bounds(members.size(), Bounds{cc.min_batch, cc.max_batch});
    measuring = best_integer_split(models, bounds, trace.global_batch).batches;
  };
  std::vector<int> reference;       // the reference's batches in force, per member
  std::vector<int> reference_next;  // ... and those it learns at reference_from
  std::int64_t reference_from = -1;
  std::size_t next_boundary = 0;
  std::size_t next_obs = 0;
  bool steady = false;
  std::map<std::string, std::map<std::int64_t, double>> noise_log;  // worker -> step -> factor

  auto set_batches = [&](const std::vector<int>& b, std::int64_t from) {
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (batches.size() != members.size() || batches[i] != b[i]) batch_since[members[i]] = from;
    }
    batches = b;
  };
  auto check_followed = [&](std::int64_t step) {
    if (followed) return;
    const std::vector<int>& b = pending_from >= 0 ? pending : batches;
    if (plan_follows(b)) {
      followed = true;
      ReplayRegime& r = out.regimes.back();
      r.rounds_to_follow = rounds_in_regime;
      r.steps_to_follow =
          std::max(pending_from >= 0 ? pending_from : step, r.start_step) - r.start_step;
    }
  };

  // Whether replacing plan `old` by `next` from step `from` on was worth it under the speeds
  // the recording really had over the next justify_steps steps (each worker's median recorded
  // per-sample time there, without the replay's extra noise): the new plan ends those steps more
  // than `threshold` (the deadband, or persist_gain for a persisted change) sooner. A change
  // that follows a real drift of the shared machine is justified; one that chases noise is not.
  auto justified = [&](const std::vector<int>& old, const std::vector<int>& next,
                       std::int64_t from, double threshold) {
    const std::int64_t to = std::min(last, from + config.justify_steps - 1);
    if (to < from) return false;
    double t_old = 0, t_next = 0;
    std::vector<double> per_sample;
    for (std::size_t i = 0; i < members.size(); ++i) {
      per_sample.clear();
      for (std::int64_t s = from; s <= to; ++s) per_sample.push_back(costs.per_sample(members[i], s));
      const CostModel m{truth[i].alpha, *median(per_sample)};
      t_old = std::max(t_old, m.time(old[i]));
      t_next = std::max(t_next, m.time(next[i]));
    }
    return t_old > (1.0 + threshold) * t_next;
  };

  const std::int64_t first = trace.first_step();
  for (std::int64_t step = first + 1; step <= last; ++step) {
    // Boundaries at step - 1: the regime starting at `step`.
    while (next_boundary < boundaries.size() && boundaries[next_boundary].step == step - 1) {
      const Boundary& b = boundaries[next_boundary];
      std::string cause;
      std::vector<std::string> concerned;
      if (b.generation) {
        for (const auto& m : b.generation->members) {
          if (std::find(members.begin(), members.end(), m) == members.end()) concerned.push_back(m);
        }
        if (concerned.empty()) concerned = b.generation->members;  // a leave: everyone moves
        for (const auto& old : controller.estimates()) {
          if (std::find(b.generation->members.begin(), b.generation->members.end(), old.key) ==
              b.generation->members.end()) {
            controller.remove_worker(old.key);
          }
        }
        for (const auto& m : b.generation->members) {
          if (!controller.contains(m)) controller.add_worker(m);
        }
        members = b.generation->members;
        const BatchPlan p = controller.plan(PlanTrigger::kGeneration);
        std::vector<int> ordered;
        for (const auto& m : members) ordered.push_back(p.batch_of(m));
        batches.clear();
        pending_from = -1;
        set_batches(ordered, step);
        rounds.generation_started(step - 1, members);
        out.plans.push_back({step - 1, ordered, true});
        cause = "generation of " + std::to_string(members.size());
      } else {
        cause = b.change->worker + ": " + b.change->what;
        concerned = {b.change->worker};
      }
      start_regime(next_boundary, cause);
      if (b.generation) {
        measuring_plan();
        reference = oracle;
        reference_from = -1;
      } else {
        // Learnt from the changed worker's first window that starts after the change, applied
        // two steps after that window's last step; without such a window, never.
        std::int64_t seen = std::numeric_limits<std::int64_t>::max() - 2;
        for (const auto& o : trace.observations) {
          if (o.worker == b.change->worker && o.first_step > b.step) {
            seen = std::min(seen, o.last_step);
          }
        }
        reference_next = oracle;
        reference_from = seen + 2;
        measured[b.change->worker].clear();  // the speed it measured is gone
      }
      out.regimes.back().concerned = concerned;
      rounds_in_regime = 0;
      followed = false;
      settle_until_round = round_index + config.settle_rounds;
      check_followed(step);
      ++next_boundary;
    }
    if (pending_from == step) {
      set_batches(pending, step);
      pending_from = -1;
    }
    if (reference_from == step) {
      reference = reference_next;
      reference_from = -1;
    }

    // The step: every member's compute at its batch, the uniform split's and the oracle's,
    // under the same per-step noise.
    const std::vector<int> uniform = uniform_split(trace.global_batch, members.size());
    double t_ctrl = 0, t_uniform = 0, t_oracle = 0, t_reference = 0, t_measuring = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      const double f = noise_factor(rng, config.step_noise);
      noise_log[members[i]][step] = f;
      const CostModel m{truth[i].alpha, costs.per_sample(members[i], step)};
      t_ctrl = std::max(t_ctrl, m.time(batches[i]) * f);
      t_uniform = std::max(t_uniform, m.time(uniform[i]) * f);
      t_oracle = std::max(t_oracle, m.time(oracle[i]) * f);
      t_reference = std::max(t_reference, m.time(reference[i]) * f);
      const double t = m.time(measuring[i]) * f;
      t_measuring = std::max(t_measuring, t);
      auto& seen = measured[members[i]];
      seen.push_back((t - truth[i].alpha) / measuring[i]);
      if (seen.size() > cc.throughput_window) seen.pop_front();
      measured_estimate[members[i]] = *median(std::vector<double>(seen.begin(), seen.end()));
    }
    measuring_plan();  // in force from the next step
    all_ctrl += t_ctrl;
    all_oracle += t_oracle;
    if (steady) {
      since_ctrl += t_ctrl;
      since_oracle += t_oracle;
      since_reference += t_reference;
      since_measuring += t_measuring;
    }
    if (steady && round_index > settle_until_round) {
      sum_ctrl += t_ctrl;
      sum_oracle += t_oracle;
      sum_uniform += t_uniform;
    }
    ++out.steps;

    // Heartbeat windows ending at this step: the mean the agent would have sent of the steps
    // at the batch in force (its window restarts when the batch changes).
    for (; next_obs < trace.observations.size() &&
           trace.observations[next_obs].last_step <= step;
         ++next_obs) {
      const TraceObservation& o = trace.observations[next_obs];
      if (o.last_step != step) continue;
      const auto it = std::find(members.begin(), members.end(), o.worker);
      if (it == members.end()) continue;
      const std::size_t i = static_cast<std::size_t>(it - members.begin());
      const std::int64_t from = std::max(o.first_step, batch_since[o.worker]);
      if (from > step) continue;
      auto& log = noise_log[o.worker];
      double sum = 0.0;
      for (std::int64_t s = from; s <= step; ++s) {
        const auto f = log.find(s);
        sum += CostModel{truth[i].alpha, costs.per_sample(o.worker, s)}.time(batches[i]) *
               (f != log.end() ? f->second : 1.0);
      }
      log.erase(log.begin(), log.lower_bound(step));
      if (rounds.accept(o.worker, from, step)) {
        controller.observe(o.worker, batches[i], sum / static_cast<double>(step - from + 1));
      }
    }

    // The leader's report of this step: a round when due (at once after a detected change).
    if (rounds.due(step, controller.speed_changed())) {
      const BatchPlan p = controller.plan();
      ++round_index;
      ++rounds_in_regime;
      ++out.rounds;
      rounds.round_ran(step, p.changed, step + 2);
      if (p.changed) {
        std::vector<int> ordered;
        for (const auto& m : members) ordered.push_back(p.batch_of(m));
        if (steady && round_index > settle_until_round) {
          ++out.churn_changes;
          const std::vector<int>& old = pending_from >= 0 ? pending : batches;
          // A change the smoothing across rounds made (persisted) is worth its gain, not the
          // deadband's: it is justified when the real speeds make it persist_gain faster.
          const double threshold = p.persisted ? cc.persist_gain : cc.deadband;
          if (p.persisted) ++out.persisted_changes;
          if (!justified(old, ordered, step + 2, threshold)) ++out.unjustified_changes;
        }
        pending = ordered;
        pending_from = step + 2;
        ++out.plan_changes;
        out.plans.push_back({step, ordered, false});
      }
      check_followed(step);
      if (!steady && out.regimes.size() == 1 && rounds_in_regime >= config.settle_rounds) {
        steady = true;
        out.steady_from = step + 1;
      }
    }
    if (steady && round_index > settle_until_round) ++out.churn_steps;
  }
  out.efficiency = sum_ctrl > 0 ? sum_oracle / sum_ctrl : 0.0;
  out.efficiency_all = all_ctrl > 0 ? all_oracle / all_ctrl : 0.0;
  out.time_lost = since_oracle > 0 ? since_ctrl / since_oracle - 1.0 : 0.0;
  out.reference_time_lost = since_oracle > 0 ? since_reference / since_oracle - 1.0 : 0.0;
  out.measuring_time_lost = since_oracle > 0 ? since_measuring / since_oracle - 1.0 : 0.0;
  out.time_lost_to_reference = since_reference > 0 ? since_ctrl / since_reference - 1.0 : 0.0;
  out.speedup_over_uniform = sum_ctrl > 0 ? sum_uniform / sum_ctrl : 0.0;
  out.ideal_speedup = sum_oracle > 0 ? sum_uniform / sum_oracle : 0.0;
  out.changes_per_100_steps =
      out.churn_steps > 0 ? 100.0 * out.churn_changes / static_cast<double>(out.churn_steps) : 0.0;
  out.unjustified_per_100_steps =
      out.churn_steps > 0 ? 100.0 * out.unjustified_changes / static_cast<double>(out.churn_steps)
                          : 0.0;
  return out;
}

}  // namespace omnilearn::scheduler
