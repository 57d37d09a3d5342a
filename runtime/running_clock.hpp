#pragma once
// RunningClock: monotonic time in which this process ran. A process that was stopped (SIGSTOP,
// a paused VM) or starved of CPU comes back to a clock that moved on without it, and every
// deadline it keeps against a peer (a heartbeat, a probe, a lease, a step) would expire at once,
// for a silence it could not have heard: a head frozen for ten seconds would declare every node
// dead on thawing and have the agents stop every trainer. This clock leaves out of each gap
// between two readings whatever exceeds `max_gap`. Its owner reads it from a timer well inside
// `max_gap`, so a longer gap means the owner did not run. Leaving time out only ever moves the
// owner's deadlines later: a peer is declared dead later, and a lease the owner granted is taken
// to last longer than it did, which is the safe side of a lease.
//
// Not thread-safe: one actor owns it and reads it on its own turns.

#include <chrono>
#include <cstdint>
#include <string_view>

namespace omnilearn::runtime {

class RunningClock {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RunningClock(Clock::duration max_gap) : max_gap_(max_gap) {}

  Clock::time_point now() { return at(Clock::now()); }

  // The running time at the monotonic reading `raw` (readings in order; tests pass their own).
  Clock::time_point at(Clock::time_point raw) {
    found_gap_ = Clock::duration::zero();
    if (read_ && raw - last_raw_ > max_gap_) {
      found_gap_ = raw - last_raw_;
      left_out_ += found_gap_ - max_gap_;
      ++gaps_;
    }
    if (!read_ || raw > last_raw_) last_raw_ = raw;
    read_ = true;
    return raw - left_out_;
  }

  // The gap the last reading found (zero if none): what its owner may want to log.
  Clock::duration found_gap() const { return found_gap_; }
  Clock::duration left_out() const { return left_out_; }  // in all, since the first reading
  std::uint64_t gaps() const { return gaps_; }            // readings that found a gap

 private:
  Clock::duration max_gap_;
  Clock::time_point last_raw_{};
  Clock::duration left_out_{0};
  Clock::duration found_gap_{0};
  std::uint64_t gaps_ = 0;
  bool read_ = false;
};

// Logs the gap the clock's last reading found, if any: "`subject` did not run for N s (the
// head stopped or starved); `spared`". A warning from a second on (a stop), below that at debug
// level (a loaded machine's late timer, which is no news). Owners call it on every reading.
void log_found_gap(const RunningClock& clock, std::string_view subject, std::string_view spared);

}  // namespace omnilearn::runtime
