#include "controller/control_rounds.hpp"

#include <algorithm>
#include <stdexcept>

namespace omnilearn::scheduler {

void ControlRoundsConfig::validate() const {
  auto fail = [](const char* what) {
    throw std::invalid_argument(std::string("control rounds: ") + what);
  };
  if (interval_steps < 1) fail("interval_steps must be at least 1");
  if (cooldown_steps < 0) fail("cooldown_steps must be >= 0");
  if (warmup_steps < 0) fail("warmup_steps must be >= 0");
}

ControlRounds::ControlRounds(ControlRoundsConfig config) : config_(config) { config_.validate(); }

void ControlRounds::generation_started(std::int64_t step, const std::vector<std::string>& members) {
  plan_effective_ = step + 1;
  counted_from_ = plan_effective_ + std::max(config_.warmup_steps, config_.cooldown_steps);
  last_round_ = step;
  fresh_.clear();
  for (const auto& m : members) fresh_[m] = false;
}

void ControlRounds::round_ran(std::int64_t step, bool changed, std::int64_t effective_step) {
  last_round_ = step;
  if (!changed) return;
  plan_effective_ = effective_step;
  // A plan never shortens a generation's warm-up.
  counted_from_ = std::max(counted_from_, effective_step + config_.cooldown_steps);
  for (auto& [member, fresh] : fresh_) fresh = false;
}

bool ControlRounds::accept(const std::string& member, std::int64_t first_step,
                           std::int64_t last_step) {
  auto it = fresh_.find(member);
  if (it == fresh_.end() || first_step > last_step || first_step < counted_from_) return false;
  it->second = true;
  return true;
}

bool ControlRounds::fresh() const {
  if (fresh_.empty()) return false;
  return std::all_of(fresh_.begin(), fresh_.end(), [](const auto& m) { return m.second; });
}

bool ControlRounds::due(std::int64_t step, bool speed_changed) const {
  return (speed_changed || step - last_round_ >= config_.interval_steps) && fresh();
}

}  // namespace omnilearn::scheduler
