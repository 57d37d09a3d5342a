#include "training/compute_throttle.hpp"

#include <time.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>

namespace omnilearn::training {

double ComputeThrottle::process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void SlowdownThrottle::set_factor(double factor) {
  if (!(factor >= 1.0) || !std::isfinite(factor)) {
    throw std::invalid_argument("slowdown factor must be a finite number >= 1, got " +
                                std::to_string(factor));
  }
  factor_.store(factor);
}

ThrottleCharge SlowdownThrottle::after_compute(double wall_s, double cpu_s) {
  using Clock = std::chrono::steady_clock;
  const double factor = factor_.load();
  ThrottleCharge charge;
  if (factor <= 1.0) return charge;
  const Clock::time_point start = Clock::now();
  if (spins_.load()) {
    // Burnt here, so throttled by a quota as the compute is; the wall time it took is what the
    // emulation added.
    const double until = process_cpu_seconds() + (factor - 1.0) * cpu_s;
    while (process_cpu_seconds() < until) {
    }
    charge.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    charge.added_s = charge.wall_s;
  } else {
    charge.added_s = (factor - 1.0) * wall_s;
    std::this_thread::sleep_for(std::chrono::duration<double>(charge.added_s));
    charge.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return charge;
}

void ComputeMeter::begin(ComputeThrottle* throttle) {
  *this = ComputeMeter{};
  throttle_ = throttle && throttle->active() ? throttle : nullptr;
  mark_ = Clock::now();
  if (throttle_) cpu_mark_ = ComputeThrottle::process_cpu_seconds();
}

void ComputeMeter::mark() {
  const Clock::time_point now = Clock::now();
  const double wall = std::chrono::duration<double>(now - mark_).count();
  active_s_ += wall;
  mark_ = now;
  if (!throttle_) return;
  const double cpu_now = ComputeThrottle::process_cpu_seconds();
  const ThrottleCharge charge = throttle_->after_compute(wall, cpu_now - cpu_mark_);
  added_s_ += charge.added_s;
  throttle_wall_s_ += charge.wall_s;
  mark_ = Clock::now();
  cpu_mark_ = ComputeThrottle::process_cpu_seconds();
}

}  // namespace omnilearn::training
