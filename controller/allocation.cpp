#include "controller/allocation.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <sstream>

namespace omnilearn::scheduler {
namespace {

void check_sizes(std::size_t a, std::size_t b, std::size_t c, const char* what) {
  if (a != b || a != c) {
    std::ostringstream msg;
    msg << what << ": inputs differ in length (" << a << ", " << b << ", " << c << ")";
    throw std::invalid_argument(msg.str());
  }
}

void check_weights(std::span<const double> weight, const char* what) {
  for (double w : weight) {
    if (!(w > 0.0) || !std::isfinite(w)) {
      std::ostringstream msg;
      msg << what << ": every speed must be positive and finite (got " << w << ")";
      throw std::invalid_argument(msg.str());
    }
  }
}

void require_feasible(std::span<const Bounds> bounds, long long total) {
  long long sum_lo = 0;
  long long sum_hi = 0;
  for (const Bounds& b : bounds) {
    sum_lo += b.lo;
    sum_hi += b.hi;
  }
  if (!infeasibility(bounds, total).empty()) {
    throw InfeasibleBatchError(total, sum_lo, sum_hi, bounds.size());
  }
}

std::string describe(long long total, long long sum_lo, long long sum_hi, std::size_t workers) {
  std::ostringstream msg;
  msg << "global batch " << total << " cannot be split over " << workers << " worker(s): ";
  if (workers == 0) {
    msg << "there are no workers; add a worker";
  } else if (total < sum_lo) {
    msg << "their minimum batches sum to " << sum_lo
        << "; raise the global batch or lower min_batch";
  } else if (total > sum_hi) {
    msg << "their maximum batches (max_batch and memory caps) sum to " << sum_hi
        << "; lower the global batch, raise max_batch or add workers";
  } else {
    msg << "a worker's minimum batch exceeds its maximum (memory cap below min_batch)";
  }
  return msg.str();
}

}  // namespace

InfeasibleBatchError::InfeasibleBatchError(long long total, long long sum_lo, long long sum_hi,
                                           std::size_t workers)
    : std::invalid_argument(describe(total, sum_lo, sum_hi, workers)),
      total_(total),
      sum_lo_(sum_lo),
      sum_hi_(sum_hi) {}

std::string infeasibility(std::span<const Bounds> bounds, long long total) {
  long long sum_lo = 0;
  long long sum_hi = 0;
  bool inverted = false;
  for (const Bounds& b : bounds) {
    sum_lo += b.lo;
    sum_hi += b.hi;
    inverted = inverted || b.lo > b.hi || b.lo < 0;
  }
  if (bounds.empty() || total < sum_lo || total > sum_hi || inverted) {
    return describe(total, sum_lo, sum_hi, bounds.size());
  }
  return {};
}

std::vector<double> fill_to_total(std::span<const double> base, std::span<const double> weight,
                                  std::span<const Bounds> bounds, double total) {
  check_sizes(base.size(), weight.size(), bounds.size(), "fill_to_total");
  check_weights(weight, "fill_to_total");
  require_feasible(bounds, static_cast<long long>(std::llround(total)));
  const std::size_t n = base.size();

  // Fast path, the usual case of a plan: no bound binds at the unclamped level.
  {
    double base_sum = 0.0, weight_sum = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      base_sum += base[i];
      weight_sum += weight[i];
    }
    const double level = (total - base_sum) / weight_sum;
    std::vector<double> x(n);
    bool inside = true;
    for (std::size_t i = 0; i < n && inside; ++i) {
      x[i] = base[i] + level * weight[i];
      inside = x[i] >= bounds[i].lo && x[i] <= bounds[i].hi;
    }
    if (inside) return x;
  }

  // f(level) = sum clamp(base + level * weight, lo, hi) is continuous, nondecreasing and linear
  // between the levels where an entry meets a bound; walk those breakpoints in order.
  struct Breakpoint {
    double level;
    double slope_change;
  };
  std::vector<Breakpoint> points;
  points.reserve(2 * n);
  double sum_lo = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    sum_lo += bounds[i].lo;
    if (bounds[i].lo == bounds[i].hi) continue;  // never free: contributes lo at every level
    points.push_back({(bounds[i].lo - base[i]) / weight[i], weight[i]});
    points.push_back({(bounds[i].hi - base[i]) / weight[i], -weight[i]});
  }
  std::sort(points.begin(), points.end(),
            [](const Breakpoint& a, const Breakpoint& b) { return a.level < b.level; });

  double level = points.empty() ? 0.0 : points.front().level;
  double value = sum_lo;
  double slope = 0.0;
  bool found = points.empty() || total <= sum_lo;
  for (const Breakpoint& p : points) {
    if (found) break;
    const double next = value + slope * (p.level - level);
    if (slope > 0.0 && next >= total) {
      level += (total - value) / slope;
      found = true;
      break;
    }
    value = next;
    level = p.level;
    slope += p.slope_change;
  }

  std::vector<double> x(n);
  double sum = 0.0;
  double free_weight = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double raw = base[i] + level * weight[i];
    x[i] = std::clamp(raw, static_cast<double>(bounds[i].lo), static_cast<double>(bounds[i].hi));
    sum += x[i];
    if (x[i] > bounds[i].lo && x[i] < bounds[i].hi) free_weight += weight[i];
  }
  // One correction pass for the float error of the walk, spread over the free entries.
  const double residual = total - sum;
  if (residual != 0.0 && free_weight > 0.0) {
    for (std::size_t i = 0; i < n; ++i) {
      if (x[i] > bounds[i].lo && x[i] < bounds[i].hi) {
        x[i] = std::clamp(x[i] + residual * weight[i] / free_weight,
                          static_cast<double>(bounds[i].lo), static_cast<double>(bounds[i].hi));
      }
    }
  }
  return x;
}

namespace {

// Floors x into bounds (snapping values a float error from an integer, so 63.9999999 floors to
// 64); returns the floors and their sum.
std::vector<int> floors_of(std::span<const double> x, std::span<const Bounds> bounds,
                           long long& sum) {
  std::vector<int> out(x.size());
  sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) throw std::invalid_argument("rounding: a target is not finite");
    const double nearest = std::round(x[i]);
    const double v =
        std::abs(x[i] - nearest) < 1e-9 * std::max(1.0, std::abs(x[i])) ? nearest : x[i];
    out[i] = static_cast<int>(std::clamp(std::floor(v), static_cast<double>(bounds[i].lo),
                                         static_cast<double>(bounds[i].hi)));
    sum += out[i];
  }
  return out;
}

bool fractional(double x, int floored) { return std::abs(x - floored) > 1e-9; }

// Brings sum(out) to total one unit at a time, each unit to the eligible entry that `before`
// orders first (a strict weak order on indices that reads out[], so it is re-evaluated for an
// entry after it takes a unit). Entries with a fractional part are eligible first; integer ones
// only when no fractional entry can move. O((n + units) log n).
template <typename Before>
void settle(std::vector<int>& out, long long sum, std::span<const double> x,
            std::span<const Bounds> bounds, long long total, Before before) {
  for (int pass = 0; pass < 2 && sum != total; ++pass) {
    const bool up = sum < total;
    auto has_room = [&](std::size_t i) {
      return up ? out[i] < bounds[i].hi : out[i] > bounds[i].lo;
    };
    // priority_queue pops its largest element: "largest" is the one `before` puts first.
    auto later = [&](std::size_t a, std::size_t b) { return before(b, a, up); };
    std::priority_queue<std::size_t, std::vector<std::size_t>, decltype(later)> queue(later);
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (pass == 0 && !fractional(x[i], out[i])) continue;
      if (has_room(i)) queue.push(i);
    }
    while (sum != total && !queue.empty()) {
      const std::size_t i = queue.top();
      queue.pop();  // out[i] may change only while i is outside the heap
      out[i] += up ? 1 : -1;
      sum += up ? 1 : -1;
      if (has_room(i)) queue.push(i);
    }
  }
}

}  // namespace

std::vector<int> round_largest_remainder(std::span<const double> x, std::span<const Bounds> bounds,
                                         long long total) {
  if (x.size() != bounds.size()) {
    throw std::invalid_argument("round_largest_remainder: inputs differ in length");
  }
  require_feasible(bounds, total);
  long long sum = 0;
  std::vector<int> out = floors_of(x, bounds, sum);
  // Normally 0 <= total - sum < n and the largest remainders each take one unit; a unit taken
  // or given back moves the entry away from x, so the remainder order updates itself.
  settle(out, sum, x, bounds, total, [&](std::size_t a, std::size_t b, bool up) {
    const double ra = up ? x[a] - out[a] : out[a] - x[a];
    const double rb = up ? x[b] - out[b] : out[b] - x[b];
    return ra != rb ? ra > rb : a < b;
  });
  return out;
}

std::vector<int> round_min_step_time(std::span<const double> x, std::span<const CostModel> costs,
                                     std::span<const Bounds> bounds, long long total) {
  check_sizes(x.size(), costs.size(), bounds.size(), "round_min_step_time");
  for (const CostModel& c : costs) {
    if (!(c.beta > 0.0) || !(c.alpha >= 0.0) || !std::isfinite(c.beta + c.alpha)) {
      throw std::invalid_argument("round_min_step_time: costs need alpha >= 0 and beta > 0");
    }
  }
  require_feasible(bounds, total);
  long long sum = 0;
  std::vector<int> out = floors_of(x, bounds, sum);
  settle(out, sum, x, bounds, total, [&](std::size_t a, std::size_t b, bool up) {
    // Adding: the step that ends earliest with one more sample. Removing: the one that ends last.
    const double ta = costs[a].time(out[a] + (up ? 1 : 0));
    const double tb = costs[b].time(out[b] + (up ? 1 : 0));
    if (ta != tb) return up ? ta < tb : ta > tb;
    const double ra = up ? x[a] - out[a] : out[a] - x[a];
    const double rb = up ? x[b] - out[b] : out[b] - x[b];
    return ra != rb ? ra > rb : a < b;
  });
  return out;
}

std::vector<int> allocate(std::span<const double> desired, std::span<const double> speed,
                          std::span<const Bounds> bounds, long long total) {
  const std::vector<double> x = fill_to_total(desired, speed, bounds, static_cast<double>(total));
  return round_largest_remainder(x, bounds, total);
}

}  // namespace omnilearn::scheduler
