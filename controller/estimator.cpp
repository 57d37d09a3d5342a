#include "controller/estimator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
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

std::optional<double> relative_spread(std::span<const double> values) {
  if (values.size() < 3) return std::nullopt;
  const double m = *median(values);
  if (!(m > 0.0)) return std::nullopt;
  std::vector<double> dev;
  dev.reserve(values.size());
  for (double v : values) dev.push_back(std::abs(v / m - 1.0));
  return 1.4826 * *median(dev);
}

double median_relative_error(double spread, std::size_t n) {
  return 1.2533 * spread / std::sqrt(static_cast<double>(std::max<std::size_t>(n, 1)));
}

std::optional<double> lag_one_autocorrelation(std::span<const NoisePair> pairs) {
  if (pairs.size() < 20) return std::nullopt;
  double cross = 0.0, square = 0.0;
  for (const NoisePair& p : pairs) {
    cross += p.first * p.second;
    square += 0.5 * (p.first * p.first + p.second * p.second);
  }
  if (!(square > 0.0)) return std::nullopt;
  return cross / square;
}

void ChangeDetection::validate() const {
  auto fail = [](const char* what) {
    throw std::invalid_argument(std::string("change detection: ") + what);
  };
  if (!(quick_min_change > 0.0) || !std::isfinite(quick_min_change)) {
    fail("quick_min_change must be positive");
  }
  if (!(quick_spread_z >= 0.0) || !std::isfinite(quick_spread_z)) {
    fail("quick_spread_z must be >= 0");
  }
  if (!(quick_max_change >= quick_min_change)) {
    fail("quick_max_change must be at least quick_min_change");
  }
  if (run < 1) fail("run must be at least 1 observation");
  if (!(min_change > 0.0) || !std::isfinite(min_change)) fail("min_change must be positive");
  if (!(spread_z >= 0.0) || !std::isfinite(spread_z)) fail("spread_z must be >= 0");
  if (!(run_min_spread >= 0.0) || !std::isfinite(run_min_spread)) {
    fail("run_min_spread must be >= 0");
  }
  if (!(slow_min_change > 0.0) || !std::isfinite(slow_min_change)) {
    fail("slow_min_change must be positive");
  }
  if (!(slow_spread_z >= 0.0) || !std::isfinite(slow_spread_z)) fail("slow_spread_z must be >= 0");
  if (!(slow_min_spread >= 0.0) || !std::isfinite(slow_min_spread)) {
    fail("slow_min_spread must be >= 0");
  }
  if (remembered_regimes > 0 && recall_within < 1) {
    fail("recall_within must be at least 1 observation when regimes are remembered");
  }
  if (!(recall_max_change > 0.0) || !std::isfinite(recall_max_change)) {
    fail("recall_max_change must be positive");
  }
  if (!(switch_llr >= 0.0) || !std::isfinite(switch_llr)) fail("switch_llr must be >= 0");
  if (!(switch_min_change > 0.0) || !std::isfinite(switch_min_change)) {
    fail("switch_min_change must be positive");
  }
  if (!(switch_min_spread > 0.0) || !std::isfinite(switch_min_spread)) {
    fail("switch_min_spread must be positive");
  }
}

ThroughputEstimator::ThroughputEstimator(std::size_t window, ChangeDetection change)
    : change_(change) {
  if (window == 0) {
    throw std::invalid_argument("ThroughputEstimator: window must be at least 1 step");
  }
  change_.validate();
  ring_.resize(window);
}

void ThroughputEstimator::observe(int batch, double seconds) {
  if (batch < 1 || !(seconds > 0.0) || !std::isfinite(seconds)) {
    std::ostringstream msg;
    msg << "step report needs batch >= 1 and a positive finite compute time (got batch " << batch
        << ", time " << seconds << ")";
    throw std::invalid_argument(msg.str());
  }
  ring_[next_] = Entry{batch, batch / seconds};
  next_ = (next_ + 1) % ring_.size();
  count_ = std::min(count_ + 1, ring_.size());
  check_for_change();
  try_recall();
}

void ThroughputEstimator::refill(const std::vector<Entry>& entries) {
  next_ = 0;
  count_ = 0;
  for (const Entry& e : entries) {
    ring_[next_] = e;
    next_ = (next_ + 1) % ring_.size();
    ++count_;
  }
}

void ThroughputEstimator::try_recall() {
  if (!fresh_) return;
  // A new regime that filled the window leaves no room for a remembered one.
  if (count_ > change_.recall_within || count_ >= ring_.size() || regimes_.empty()) {
    fresh_ = false;
    return;
  }
  const std::vector<double> now = values();
  const double level = *median(now);
  std::size_t nearest = regimes_.size();
  double distance = std::log1p(change_.recall_max_change);
  for (std::size_t r = 0; r < regimes_.size(); ++r) {
    const double d = std::abs(std::log(level / regimes_[r].median));
    if (d <= distance) {
      nearest = r;
      distance = d;
    }
  }
  if (nearest == regimes_.size()) return;
  bring_back(nearest, entries(), {});
}

void ThroughputEstimator::bring_back(std::size_t regime, const std::vector<Entry>& since,
                                     std::vector<Entry> left) {
  std::vector<Entry> window = std::move(regimes_[regime].entries);
  regimes_.erase(regimes_.begin() + static_cast<std::ptrdiff_t>(regime));
  remember(std::move(left));
  // Its newest observations, as many as leave room for the new ones.
  const std::size_t room = ring_.size() - since.size();
  if (window.size() > room) {
    window.erase(window.begin(), window.end() - static_cast<std::ptrdiff_t>(room));
  }
  window.insert(window.end(), since.begin(), since.end());
  refill(window);
  fresh_ = false;
  reset_switch();
  ++recalls_;
}

std::vector<ThroughputEstimator::Entry> ThroughputEstimator::entries() const {
  std::vector<Entry> out;
  out.reserve(count_);
  const std::size_t first = (next_ + ring_.size() - count_) % ring_.size();
  for (std::size_t k = 0; k < count_; ++k) out.push_back(ring_[(first + k) % ring_.size()]);
  return out;
}

std::vector<double> ThroughputEstimator::values() const {
  std::vector<double> out;
  out.reserve(count_);
  for (const Entry& e : entries()) out.push_back(e.rate);
  return out;
}

std::vector<double> ThroughputEstimator::deviations() const {
  std::vector<Entry> v = entries();
  std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return a.batch < b.batch; });
  std::vector<double> out, group;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    group.clear();
    for (; j < v.size() && v[j].batch == v[i].batch; ++j) group.push_back(v[j].rate);
    if (group.size() >= 3) {
      const double m = *median(group);
      for (double x : group) out.push_back(std::abs(x / m - 1.0));
    }
    i = j;
  }
  return out;
}

void ThroughputEstimator::noise_pairs(std::vector<NoisePair>& out) const {
  const std::vector<Entry> v = entries();
  // Each observation's log deviation from its local level (NaN: too few around it).
  std::vector<double> deviation(v.size(), std::nan(""));
  std::vector<double> around;
  for (std::size_t i = 0; i < v.size(); ++i) {
    around.clear();
    const std::size_t lo = i >= kLocalLevel ? i - kLocalLevel : 0;
    const std::size_t hi = std::min(v.size() - 1, i + kLocalLevel);
    for (std::size_t j = lo; j <= hi; ++j) {
      if (v[j].batch == v[i].batch) around.push_back(v[j].rate);
    }
    if (around.size() >= 5) deviation[i] = std::log(v[i].rate / *median(around));
  }
  for (std::size_t i = 1; i < v.size(); ++i) {
    if (v[i].batch != v[i - 1].batch) continue;
    if (std::isnan(deviation[i - 1]) || std::isnan(deviation[i])) continue;
    out.push_back({deviation[i - 1], deviation[i]});
  }
}

void ThroughputEstimator::remember(std::vector<Entry> regime) {
  if (change_.remembered_regimes == 0 || 2 * regime.size() < ring_.size()) return;
  std::vector<double> rates;
  rates.reserve(regime.size());
  for (const Entry& e : regime) rates.push_back(e.rate);
  const double level = *median(rates);
  const double spread = relative_spread(rates).value_or(0.0);
  regimes_.insert(regimes_.begin(), Regime{std::move(regime), level, spread});
  if (regimes_.size() > change_.remembered_regimes) regimes_.pop_back();
}

void ThroughputEstimator::reset_switch() {
  switch_sum_.assign(regimes_.size(), 0.0);
  switch_run_.assign(regimes_.size(), 0);
}

bool ThroughputEstimator::switched(const std::vector<Entry>& v) {
  // Needs a current level from at least 7 observations before the newest.
  if (!(change_.switch_llr > 0.0) || regimes_.empty() || v.size() < 8) {
    reset_switch();
    return false;
  }
  if (switch_sum_.size() != regimes_.size()) reset_switch();  // a regime came or went
  const double x = std::log(v.back().rate);
  std::vector<double> rates;
  rates.reserve(v.size());
  // The window's level and spread over its first `counted` observations; regimes whose sums
  // rest at zero share them.
  std::size_t counted = 0;
  double level = 0.0, spread = 0.0;
  std::size_t found = regimes_.size();
  for (std::size_t r = 0; r < regimes_.size(); ++r) {
    // The current level from the observations before the run that raised this sum, at least
    // 7 of them: the run's own observations, when the worker did switch, pull the window's
    // median towards the regime, and a gap near switch_min_change closed before the sum
    // could rise to switch_llr.
    const std::size_t before =
        std::max<std::size_t>(v.size() - 1 - std::min(switch_run_[r], v.size() - 1), 7);
    if (before != counted) {
      rates.clear();
      for (auto it = v.begin(); it != v.begin() + static_cast<std::ptrdiff_t>(before); ++it) {
        rates.push_back(it->rate);
      }
      level = std::log(*median(rates));
      spread = relative_spread(rates).value_or(0.0);
      counted = before;
    }
    const double other = std::log(regimes_[r].median);
    const double d = other - level;
    if (std::abs(d) < std::log1p(change_.switch_min_change)) {
      switch_sum_[r] = 0.0;
      switch_run_[r] = 0;
      continue;
    }
    const double sigma = std::max({spread, regimes_[r].spread, change_.switch_min_spread});
    switch_sum_[r] =
        std::max(0.0, switch_sum_[r] + d * (x - 0.5 * (level + other)) / (sigma * sigma));
    switch_run_[r] = switch_sum_[r] > 0.0 ? switch_run_[r] + 1 : 0;
    if (switch_sum_[r] <= change_.switch_llr || found != regimes_.size()) continue;
    // ... and only to a level the observations since fit: a likelihood ratio also favours
    // the farther level for an observation beyond both, as a speed neither regime had.
    const std::size_t n = std::clamp<std::size_t>(switch_run_[r], 1, v.size() - 1);
    std::vector<double> since;
    for (auto it = v.end() - static_cast<std::ptrdiff_t>(n); it != v.end(); ++it) {
      since.push_back(it->rate);
    }
    const double off = std::abs(std::log(*median(since)) - other);
    if (off <=
        std::max(std::log1p(change_.recall_max_change), 2.0 * median_relative_error(sigma, n))) {
      found = r;
    }
  }
  if (found == regimes_.size()) return false;
  const std::size_t since = std::clamp<std::size_t>(switch_run_[found], 1, v.size() - 1);
  const auto first_new = v.end() - static_cast<std::ptrdiff_t>(since);
  bring_back(found, std::vector<Entry>(first_new, v.end()),
             std::vector<Entry>(v.begin(), first_new));
  ++regime_changes_;
  return true;
}

void ThroughputEstimator::check_for_change() {
  const std::vector<Entry> v = entries();
  if (switched(v)) return;
  if (changed(v, Level::kQuick, change_.quick_run, change_.quick_min_change,
              change_.quick_spread_z)) {
    return;
  }
  if (changed(v, Level::kRun, change_.run, change_.min_change, change_.spread_z)) return;
  changed(v, Level::kSlow, change_.slow_run, change_.slow_min_change, change_.slow_spread_z);
}

// The slow level. A small change hides among the noise one observation at a time (at -7% with
// +-2% noise, one observation in eight lands within 5% and breaks an all-beyond run), so it
// compares the newest run's median with the older observations' median, beyond spread_z
// standard errors of the difference of the two.
bool ThroughputEstimator::median_shifted(const std::vector<Entry>& v, std::size_t run,
                                         double min_change, double spread_z) const {
  const auto newest = v.end() - static_cast<std::ptrdiff_t>(run);
  // Observations at batches within 5% of the newest run's: under a fixed per-step cost a plan
  // change moves the throughput too, but a plan that moved a worker by a sample or two must
  // not blind the test for a whole window.
  auto near = [&](int batch) { return std::abs(batch - newest->batch) <= 0.05 * newest->batch; };
  const bool one_batch = std::all_of(newest, v.end(), [&](const Entry& e) { return near(e.batch); });
  std::vector<double> older, recent;
  for (auto it = v.begin(); it != newest; ++it) {
    if (!one_batch || near(it->batch)) older.push_back(it->rate);
  }
  for (auto it = newest; it != v.end(); ++it) recent.push_back(it->rate);
  // Medians of as many older observations as newer ones: a median of two or three is any of
  // them, and alternating noise would pass for a shift.
  if (older.size() < run) return false;
  const double center = *median(older);
  // The noise from the larger of the two sides' spreads: a spread measured from a dozen
  // observations is itself off by a third at times, and an underestimate is a false alarm.
  const double noise = std::max(relative_spread(older).value_or(0.0),
                                relative_spread(recent).value_or(0.0));
  if (noise < change_.slow_min_spread) return false;
  const double se = std::hypot(median_relative_error(noise, run),
                               median_relative_error(noise, older.size()));
  const double recent_median = *median(recent);
  // In logarithms, as all_beyond: relative to the rate a halved speed is only 50% off, inside
  // five standard errors of a window mixed under 20% noise (a neighbour's 2x went unseen until
  // the window's median moved, 57 steps).
  if (std::abs(std::log(recent_median / center)) <=
      std::max(std::log1p(min_change), spread_z * se)) {
    return false;
  }
  // ... and outside the older observations' middle half, which a median of values half at one
  // level and half at another (MAD 0) can otherwise leave.
  std::sort(older.begin(), older.end());
  const double q1 = older[older.size() / 4];
  const double q3 = older[older.size() - 1 - older.size() / 4];
  return recent_median < q1 || recent_median > q3;
}

bool ThroughputEstimator::all_beyond(const std::vector<Entry>& v, std::size_t run,
                                     double min_change, double spread_z, bool same_batch_only,
                                     double min_spread, double max_change) const {
  const auto newest = v.end() - static_cast<std::ptrdiff_t>(run);
  std::vector<double> older, same_batch;
  const bool one_batch =
      std::all_of(newest, v.end(), [&](const Entry& e) { return e.batch == newest->batch; });
  for (auto it = v.begin(); it != newest; ++it) {
    older.push_back(it->rate);
    if (one_batch && it->batch == newest->batch) same_batch.push_back(it->rate);
  }
  // One side: every one of the newest beyond `tolerance` from `center`, all on the same side.
  auto beyond_from = [&](double center, double tolerance) {
    int side = 0;
    for (auto it = newest; it != v.end(); ++it) {
      const double off = std::log(it->rate / center);
      const int s = off > tolerance ? 1 : off < -tolerance ? -1 : 0;
      if (s == 0 || (side != 0 && s != side)) return false;
      side = s;
    }
    return true;
  };
  const double max_bar = std::log1p(max_change);
  if (same_batch_only && same_batch.size() < 8) {
    // Right after a plan change: only a change beyond max_change, against the older
    // observations at batches within 25% of the newest.
    if (!one_batch || !std::isfinite(max_bar)) return false;
    std::vector<double> near;
    for (auto it = v.begin(); it != newest; ++it) {
      if (std::abs(it->batch - newest->batch) <= 0.25 * newest->batch) near.push_back(it->rate);
    }
    return near.size() >= 8 && beyond_from(*median(near), max_bar);
  }
  // The noise: the spread of the observations at the newest batch once there are 8 of them;
  // before that (right after a plan change) the larger of theirs and every older one's. Two
  // or three windows have no spread worth the name (none for two, often zero for three), and
  // with it zero three noisy windows 15% off their median passed for a change: under 20% step
  // noise a slow worker's window reset again and again, each reset moving the plan by its few
  // windows (5 plan changes in 228 steps of a recorded trace).
  std::optional<double> spread = relative_spread(older);
  if (same_batch.size() >= 2) {
    const std::optional<double> own = relative_spread(same_batch);
    spread = same_batch.size() >= 8 ? own : std::max(own, spread);
    older = same_batch;
  }
  if (spread.value_or(0.0) < min_spread) return false;
  const double center = *median(older);
  // In logarithms: step-time noise is multiplicative, so a worker twice as slow (rate -50%)
  // lies as far beyond the noise as one twice as fast (+100%). Relative to the rate, a
  // slowdown can never pass a tolerance of 100%, and under 20% step noise (a spread near 0.2,
  // a tolerance near 50%) a worker that halved its speed went unseen until the window's median
  // moved, half a window later.
  auto beyond = [&](double tolerance) { return beyond_from(center, tolerance); };
  // The fixed tolerance first: it fails most observations without the spread's two medians
  // (this runs for every level on every observation).
  return beyond(std::log1p(min_change)) &&
         beyond(
             std::max(std::log1p(min_change), std::min(spread_z * spread.value_or(0.0), max_bar)));
}

bool ThroughputEstimator::changed(const std::vector<Entry>& v, Level level, std::size_t run,
                                  double min_change, double spread_z) {
  // The newest `run` against at least two older ones (a median of one is any outlier).
  if (run == 0 || v.size() < run + 2) return false;
  const bool moved =
      level == Level::kSlow
          ? median_shifted(v, run, min_change, spread_z)
          : all_beyond(v, run, min_change, spread_z, level == Level::kQuick,
                       level == Level::kRun ? change_.run_min_spread : 0.0,
                       level == Level::kQuick ? change_.quick_max_change
                                              : std::numeric_limits<double>::infinity());
  if (!moved) return false;
  // The worker's speed changed: the older observations describe a machine that is gone, for
  // now (ChangeDetection::remembered_regimes).
  const auto first_new = v.end() - static_cast<std::ptrdiff_t>(run);
  remember(std::vector<Entry>(v.begin(), first_new));
  reset_switch();
  fresh_ = change_.remembered_regimes > 0;
  refill(std::vector<Entry>(first_new, v.end()));
  ++regime_changes_;
  if (level == Level::kQuick) ++quick_changes_;
  return true;
}

std::optional<double> ThroughputEstimator::throughput() const { return median(values()); }

std::optional<double> ThroughputEstimator::time_at(int batch) const {
  const std::optional<double> x = throughput();
  if (!x) return std::nullopt;
  return batch / *x;
}

std::optional<double> ThroughputEstimator::spread() const {
  const std::vector<double> d = deviations();
  if (d.size() < 3) return std::nullopt;
  return 1.4826 * *median(d);
}

void ThroughputEstimator::clear() {
  next_ = 0;
  count_ = 0;
  regimes_.clear();
  switch_sum_.clear();
  switch_run_.clear();
  fresh_ = false;
}

}  // namespace omnilearn::scheduler
