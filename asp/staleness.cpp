#include "asp/staleness.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace omnilearn::asp {

std::string_view to_string(StalenessMode mode) {
  switch (mode) {
    case StalenessMode::kNone: return "none";
    case StalenessMode::kInverse: return "inverse";
    case StalenessMode::kBound: return "bound";
  }
  return "none";
}

std::string_view to_string(LrScaling scaling) {
  return scaling == LrScaling::kLinear ? "linear" : "none";
}

std::optional<StalenessMode> parse_staleness_mode(std::string_view name) {
  if (name == "none") return StalenessMode::kNone;
  if (name == "inverse") return StalenessMode::kInverse;
  if (name == "bound") return StalenessMode::kBound;
  return std::nullopt;
}

std::optional<LrScaling> parse_lr_scaling(std::string_view name) {
  if (name == "none") return LrScaling::kNone;
  if (name == "linear") return LrScaling::kLinear;
  return std::nullopt;
}

void validate(const StalenessConfig& config) {
  if (config.mode == StalenessMode::kBound && config.max_staleness < 1) {
    throw std::invalid_argument("asp: staleness \"bound\" needs max_staleness >= 1, got " +
                                std::to_string(config.max_staleness));
  }
  if (config.mode != StalenessMode::kBound && config.max_staleness != 0) {
    throw std::invalid_argument("asp: max_staleness is only for staleness \"bound\" (it is \"" +
                                std::string(to_string(config.mode)) + "\")");
  }
}

StepDecision decide_step(const StalenessConfig& config, std::int64_t staleness,
                         std::int64_t batch, double reference_batch) {
  if (staleness < 0) {
    throw std::invalid_argument("asp: negative staleness " + std::to_string(staleness));
  }
  if (batch < 1) throw std::invalid_argument("asp: a push needs batch >= 1, got " + std::to_string(batch));
  double scale = 1.0;
  if (config.lr_scaling == LrScaling::kLinear) {
    if (!(reference_batch > 0) || !std::isfinite(reference_batch)) {
      throw std::invalid_argument("asp: linear lr_scaling needs a mean batch B / n > 0");
    }
    scale = static_cast<double>(batch) / reference_batch;
  }
  switch (config.mode) {
    case StalenessMode::kNone: break;
    case StalenessMode::kInverse: scale /= 1.0 + static_cast<double>(staleness); break;
    case StalenessMode::kBound:
      if (staleness > config.max_staleness) return StepDecision{false, 0.0};
      break;
  }
  return StepDecision{true, scale};
}

void StalenessStats::Tally::add(WorkerId worker, std::int64_t staleness, bool was_applied) {
  ++histogram[staleness];
  sum += staleness;
  if (was_applied) {
    ++applied;
    ++updates[worker];
  } else {
    ++dropped;
  }
}

StalenessSummary StalenessStats::Tally::summary() const {
  StalenessSummary s;
  s.applied = applied;
  s.dropped = dropped;
  s.pushes = applied + dropped;
  s.updates = updates;
  if (s.pushes == 0) return s;
  s.mean = static_cast<double>(sum) / static_cast<double>(s.pushes);
  s.max = histogram.rbegin()->first;
  // Nearest rank, in integers: the smallest r with r >= 0.95 n is ceil(95 n / 100).
  const std::int64_t rank = (95 * s.pushes + 99) / 100;
  std::int64_t seen = 0;
  for (const auto& [value, count] : histogram) {
    seen += count;
    if (seen >= rank) {
      s.p95 = value;
      break;
    }
  }
  return s;
}

void StalenessStats::record(WorkerId worker, std::int64_t staleness, bool applied) {
  if (staleness < 0) {
    throw std::invalid_argument("asp: negative staleness " + std::to_string(staleness));
  }
  interval_.add(worker, staleness, applied);
  total_.add(worker, staleness, applied);
}

StalenessSummary StalenessStats::interval() const { return interval_.summary(); }

StalenessSummary StalenessStats::take_interval() {
  StalenessSummary s = interval_.summary();
  interval_ = Tally{};
  return s;
}

StalenessSummary StalenessStats::total() const { return total_.summary(); }

nlohmann::json StalenessStats::totals_state() const {
  return nlohmann::json{{"histogram", total_.histogram},
                        {"sum", total_.sum},
                        {"applied", total_.applied},
                        {"dropped", total_.dropped},
                        {"updates", total_.updates}};
}

void StalenessStats::restore_totals(const nlohmann::json& state) {
  try {
    Tally t;
    t.histogram = state.at("histogram").get<std::map<std::int64_t, std::int64_t>>();
    t.sum = state.at("sum").get<std::int64_t>();
    t.applied = state.at("applied").get<std::int64_t>();
    t.dropped = state.at("dropped").get<std::int64_t>();
    t.updates = state.at("updates").get<std::map<WorkerId, std::int64_t>>();
    total_ = std::move(t);
    interval_ = Tally{};
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("the staleness totals: ") + e.what());
  }
}

}  // namespace omnilearn::asp
