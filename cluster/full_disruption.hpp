#pragma once
// The head's full-disruption rule, apart from the membership table's bookkeeping so that the
// elastic simulation (tests/elastic) runs the same rule as the head. When two or more nodes are
// live and none of them has been heard for `quiet`, the head more likely lost its own network
// than every node at once: it declares none of them dead for up to `hold` beyond the heartbeat
// timeout. Once it hears any node again, every node still silent gets a heartbeat timeout from
// then (an agent retries at its own pace). MembershipConfig::full_disruption_hold says why.
// Pure: time is passed in. Not thread-safe; one owner.

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>

namespace omnilearn::actors {

class FullDisruption {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  // `quiet`: silence of every node that starts the rule (two missed beats: waiting for a whole
  // timeout would let the first node silent be declared dead before the rule could see that
  // every one is, their beats being spread over an interval). `hold` = 0 turns the rule off.
  FullDisruption(Duration quiet, Duration timeout, Duration hold)
      : quiet_(quiet), timeout_(timeout), hold_(hold) {}

  // `last_heard`: the last-heard time of every live node. Whether the rule holds at `now` (no
  // node may be declared dead). Past `hold` it no longer does, and every node, silent past the
  // timeout, is declared dead by the caller at once. When a node was heard after the rule held,
  // each time at or before the disruption's start is moved to the newest one.
  bool update(std::span<TimePoint* const> last_heard, TimePoint now) {
    std::optional<TimePoint> newest;
    for (const TimePoint* t : last_heard) newest = std::max(newest.value_or(*t), *t);
    if (hold_.count() > 0 && last_heard.size() >= 2 && now - *newest >= quiet_) {
      if (!since_) since_ = *newest;
      return now - *since_ < timeout_ + hold_;
    }
    if (since_ && newest && *newest > *since_) {
      for (TimePoint* t : last_heard) {
        if (*t <= *since_) *t = *newest;
      }
    }
    since_.reset();
    return false;
  }

  // While the rule holds: when the last live node was last heard. nullopt otherwise.
  std::optional<TimePoint> since() const { return since_; }

 private:
  Duration quiet_;
  Duration timeout_;
  Duration hold_;
  std::optional<TimePoint> since_;
};

}  // namespace omnilearn::actors
