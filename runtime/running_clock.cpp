#include "runtime/running_clock.hpp"

#include <spdlog/spdlog.h>

namespace omnilearn::runtime {

void log_found_gap(const RunningClock& clock, std::string_view subject, std::string_view spared) {
  if (clock.found_gap() <= RunningClock::Clock::duration::zero()) return;
  const double gap_s = std::chrono::duration<double>(clock.found_gap()).count();
  spdlog::log(gap_s >= 1.0 ? spdlog::level::warn : spdlog::level::debug,
              "{} did not run for {:.1f} s (the head stopped or starved); {}", subject, gap_s,
              spared);
}

}  // namespace omnilearn::runtime
