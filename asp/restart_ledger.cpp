#include "asp/restart_ledger.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace omnilearn::asp {

void RestartLedger::replied(std::int64_t incarnation, std::int64_t version) {
  auto [it, fresh] = reached_.try_emplace(incarnation, version);
  if (!fresh) it->second = std::max(it->second, version);
}

void RestartLedger::unanswered(std::int64_t incarnation) { ++unanswered_[incarnation]; }

void RestartLedger::resumed(std::int64_t incarnation, std::int64_t version) {
  if (incarnation >= 1) resumed_[incarnation] = version;
}

std::int64_t RestartLedger::known_reached(std::int64_t incarnation) const {
  std::int64_t at = 0;
  if (auto r = resumed_.find(incarnation); r != resumed_.end()) at = r->second;
  if (auto r = reached_.find(incarnation); r != reached_.end()) at = std::max(at, r->second);
  return at;
}

std::int64_t RestartLedger::lost_at(std::int64_t incarnation) const {
  auto r = resumed_.find(incarnation);
  if (r == resumed_.end()) return 0;
  // Against the newest earlier incarnation that ran (replied or resumed): one that died
  // before it served (a failed start) lost nothing and hides nothing.
  std::int64_t previous = 0;
  for (std::int64_t k = incarnation - 1; k > 0; --k) {
    if (reached_.count(k) || resumed_.count(k)) {
      previous = k;
      break;
    }
  }
  return std::max<std::int64_t>(0, known_reached(previous) - r->second);
}

std::int64_t RestartLedger::lost() const {
  std::int64_t total = 0;
  for (const auto& [incarnation, version] : resumed_) total += lost_at(incarnation);
  return total;
}

std::int64_t RestartLedger::unanswered_before_restarts() const {
  if (resumed_.empty()) return 0;
  const std::int64_t live = resumed_.rbegin()->first;
  std::int64_t total = 0;
  for (const auto& [incarnation, count] : unanswered_) {
    if (incarnation < live) total += count;
  }
  return total;
}

std::int64_t RestartLedger::lost_at_most() const { return lost() + unanswered_before_restarts(); }

nlohmann::json RestartLedger::state() const {
  return nlohmann::json{{"reached", reached_}, {"unanswered", unanswered_}, {"resumed", resumed_}};
}

void RestartLedger::restore_state(const nlohmann::json& state) {
  try {
    using Map = std::map<std::int64_t, std::int64_t>;
    Map reached = state.at("reached").get<Map>();
    Map unanswered = state.at("unanswered").get<Map>();
    Map resumed = state.at("resumed").get<Map>();
    reached_ = std::move(reached);
    unanswered_ = std::move(unanswered);
    resumed_ = std::move(resumed);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("a restart ledger: ") + e.what());
  }
}

}  // namespace omnilearn::asp
