#include "scheduler/estimator.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace omnilearn::scheduler {

std::optional<double> median(std::span<const double> values) {
  if (values.empty()) return std::nullopt;
  thread_local std::vector<double> v;  // reused: a plan takes a median per worker
  v.assign(values.begin(), values.end());
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

ThroughputEstimator::ThroughputEstimator(std::size_t window) {
  if (window == 0) {
    throw std::invalid_argument("ThroughputEstimator: window must be at least 1 step");
  }
  ring_.resize(window);
}

void ThroughputEstimator::observe(int batch, double seconds) {
  if (batch < 1 || !(seconds > 0.0) || !std::isfinite(seconds)) {
    std::ostringstream msg;
    msg << "step report needs batch >= 1 and a positive finite compute time (got batch " << batch
        << ", time " << seconds << ")";
    throw std::invalid_argument(msg.str());
  }
  ring_[next_] = batch / seconds;
  next_ = (next_ + 1) % ring_.size();
  count_ = std::min(count_ + 1, ring_.size());
}

std::optional<double> ThroughputEstimator::throughput() const {
  // The live entries are the first count_ slots until the ring wraps, then all of them.
  return median(std::span<const double>(ring_.data(), count_));
}

std::optional<double> ThroughputEstimator::time_at(int batch) const {
  const std::optional<double> x = throughput();
  if (!x) return std::nullopt;
  return batch / *x;
}

void ThroughputEstimator::clear() {
  next_ = 0;
  count_ = 0;
}

}  // namespace omnilearn::scheduler
