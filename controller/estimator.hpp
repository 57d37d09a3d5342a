#pragma once
// Robust per-worker throughput from step reports, with its spread: the median of the recent
// observations' samples per second (one pause, a step 10x slower than the rest, does not move it
// once the window holds three or more), the observations' own relative spread (so a plan can be
// judged against what the noise could explain), and a change detector that forgets the old
// regime when the worker really got slower or faster (a `node set`, a new neighbour), so a long
// smoothing window does not make the controller slow to follow.

#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <vector>

namespace omnilearn::scheduler {

// Median of `values` (the mean of the middle two for an even count); nullopt when empty.
std::optional<double> median(std::span<const double> values);

// Robust relative spread of `values` around their median: 1.4826 x the median absolute relative
// deviation, which is the standard deviation for Gaussian noise and ignores a few outliers.
// nullopt with fewer than 3 values or a median that is not positive.
std::optional<double> relative_spread(std::span<const double> values);

// Relative standard error of the median of n observations with relative spread `spread`
// (1.2533 sigma / sqrt(n) for Gaussian noise).
double median_relative_error(double spread, std::size_t n);

// Two consecutive observations' noise: each as the log of its rate over the local level (the
// median of the observations around it at the same batch).
struct NoisePair {
  double first = 0.0;
  double second = 0.0;
};

// The lag-one autocorrelation of the noise over `pairs` (pooled, each pair's deviations
// weighed alike): sum(first x second) / sum((first^2 + second^2) / 2). nullopt with fewer than
// 20 pairs or no deviation at all.
std::optional<double> lag_one_autocorrelation(std::span<const NoisePair> pairs);

// When a run of observations says the worker's speed changed for real.
// Three levels: a large change is caught after a short run of observations all beyond a wide
// threshold (two observations beyond a very wide one, three beyond a wide one); a small one
// when the median of a longer run moves off the older median by more than the noise explains
// (an all-beyond test misses a small change: one observation near the threshold breaks the
// run, and the window's median then takes half a window to follow).
struct ChangeDetection {
  // Large changes, quickly: the newest `quick_run` observations all off the older median by
  // more than quick_min_change (relative, in logarithms) and quick_spread_z x the spread. A
  // heartbeat window holds a few steps, so every observation a detection waits for is a few
  // steps at the old plan: a worker 2x slower is caught after two windows instead of three.
  // Two, not one: a single window can hold a pause (a step 10x slower than the rest). Compared
  // only with at least eight older observations at the same batch: under a fixed per-step cost
  // a plan change moves the throughput too, and a spread from fewer is a guess.
  std::size_t quick_run = 2;
  double quick_min_change = 0.4;
  double quick_spread_z = 4.0;
  // ... but never a bar above this change (relative, as quick_min_change; infinity: none).
  // Beside a CPU hog under extra step noise a step's spread reached 40%: three spreads then
  // hid a 3x slowdown, which waited 30 steps for the window's median to move; three
  // observations in a row each this far off are a change worth a round at any noise. Right
  // after a plan change (fewer than eight older observations at the newest batch) the quick
  // level compares by this bar alone with the older observations at batches within 25% of
  // the newest, at least eight of them: a fixed per-step cost moves a throughput by less than
  // the batch moved, and a plan change made just after a change of speed otherwise left the
  // detector blind until the window's median followed.
  double quick_max_change = std::numeric_limits<double>::infinity();
  std::size_t run = 3;      // this many newest observations in a row, all on one side ...
  double min_change = 0.15; // ... each off the older median by more than this (relative) ...
  double spread_z = 2.5;    // ... and by more than spread_z x the older observations' spread
  // ... and only where that spread is at least this large (0: at any noise). Where the noise
  // is small, the quick level already sees every change worth a round; a run of three
  // observations beyond a few small spreads is then as often a burst of a shared CPU (a hog's
  // bursts last from 3 to 12 steps) as a change of speed, and every detection drops the
  // window the estimate stood on. Under large noise the quick level's bar (quick_spread_z
  // spreads) hides even a halved speed, and this level is what catches it.
  double run_min_spread = 0.0;
  std::size_t slow_run = 8;        // small changes: the median of this many newest ...
  double slow_min_change = 0.05;   // ... off the older median by more than this (relative) ...
  double slow_spread_z = 5.0;      // ... and by more than this many standard errors of the
                                   // difference of the two medians (0 runs disable a level)
  // ... and only where the spread of one observation is at least this large (0: at any
  // noise), as run_min_spread: under small noise a run of a shared CPU's bursts moves a median
  // of eight as far as a change of speed, and under large noise the other levels' bars, in
  // spreads of one observation, hide a halved speed.
  double slow_min_spread = 0.0;
  // Speeds that come back. A neighbour that comes and goes, a quota that throttles and
  // releases, move a worker between a few levels it has held before. A detected change keeps
  // the observations it drops as a remembered regime when they filled at least half the
  // window (a burst of a few steps is not a regime); at most `remembered_regimes` of them are
  // kept, the newest first (0: none). While the new regime holds at most `recall_within`
  // observations, a remembered one whose median lies within `recall_max_change` (relative) of
  // the new observations' median comes back: the window is then its observations with the
  // new ones after them. The estimate stands on a whole window again at once, where a fresh
  // one needs tens of steps before the noise gate lets a plan follow it (BatchController runs
  // a round at once after a recall, as after a quick-level change).
  std::size_t remembered_regimes = 0;
  std::size_t recall_within = 12;
  double recall_max_change = 0.15;
  // A switch back to a remembered regime, found sooner than the levels above find a change of
  // that size: they must tell a change from the noise, this only which of two known levels
  // the newest observations fit better. Per remembered regime whose median lies at least
  // switch_min_change (relative) from the current level, a one-sided CUSUM of each new
  // observation's log-likelihood ratio between the two levels (Gaussian in logarithms, with
  // the larger of the two regimes' spreads and switch_min_spread: on a quiet machine a spread
  // of 2% would make one observation 10% off decisive). The current level is the window's
  // median before the observations since the sum last rose from zero: those pull the window
  // towards the regime when the worker did switch, and a gap near switch_min_change closed
  // before the sum could rise. Above switch_llr (0: off) the worker
  // switched at the observation from which that sum last rose from zero. The remembered
  // regime's observations become the window, those since the switch after them, and the
  // regime left is remembered in its place (a recall: BatchController runs a round at once).
  // A switch counts only to a level the observations since fit (their median within
  // recall_max_change or 2 standard errors of it): a likelihood ratio also favours the
  // farther level for an observation beyond both. Under 20% step noise a neighbour's return is
  // found within three observations, where the run and slow levels need 3 to 10;
  // with switch_min_change at 22% the test flipped between two levels of a worker beside a
  // CPU hog 35% apart, round after round.
  double switch_llr = 0.0;
  double switch_min_change = 0.4;
  double switch_min_spread = 0.1;
  // Throws std::invalid_argument naming the first field out of range.
  void validate() const;
};

// Windowed median of per-sample throughput (batch / compute time). Throughput, not raw time, is
// averaged so that steps run at different batches (before and after a plan change) stay
// comparable under a cost that grows with the batch. Not thread-safe; one owner.
class ThroughputEstimator {
 public:
  // Window of the most recent observations the median is taken over (>= 1; 5 by default).
  explicit ThroughputEstimator(std::size_t window = 5, ChangeDetection change = {});

  // Records one observation: `batch` samples took `seconds` of compute (one step, or the mean
  // of a few steps at that batch). Throws std::invalid_argument unless batch >= 1 and seconds
  // is positive and finite. When the newest `change.run` observations all sit on one side of
  // the older ones' median, beyond the tolerance, the older ones are dropped (compared with
  // the older observations at the same batch when there are two or more, so that a plan
  // change under a fixed per-step cost is not taken for a change of speed).
  void observe(int batch, double seconds);

  // Median samples per second over the window; nullopt before the first observation.
  std::optional<double> throughput() const;

  // Step time the worker would take at `batch` under the linear model batch / throughput.
  std::optional<double> time_at(int batch) const;

  // Relative spread of one observation: 1.4826 x the median of deviations(); nullopt with
  // fewer than 3 of them.
  std::optional<double> spread() const;

  // Each observation's relative deviation from the median of the observations at its batch
  // (batches with 3 or more observations only): the noise, without what a plan change does to
  // the throughput when a step has a fixed cost.
  std::vector<double> deviations() const;

  // Appends to `out` each two consecutive observations of the window at the same batch, as
  // their deviations from their local levels: the median of the observations at that batch
  // within kLocalLevel places on either side, when there are at least 5 of them. A local
  // level, not the window's: a change of speed the detector has not caught yet, or a slow
  // drift, would otherwise read as noise that lasts.
  void noise_pairs(std::vector<NoisePair>& out) const;
  // Places on either side of an observation that its local level is taken over: wider than the
  // bursts of a shared CPU (a few steps, which should count as lasting noise), narrower than
  // the window.
  static constexpr std::size_t kLocalLevel = 7;

  // The window's observations (samples/s), oldest first.
  std::vector<double> values() const;

  // Observations currently in the window.
  std::size_t size() const { return count_; }

  // How many times a detected change of speed dropped the older observations.
  std::size_t regime_changes() const { return regime_changes_; }
  // Of those, the ones the quick level caught (ChangeDetection::quick_run).
  std::size_t quick_changes() const { return quick_changes_; }
  // Times a remembered regime came back as the window (ChangeDetection::remembered_regimes).
  std::size_t recalls() const { return recalls_; }
  // Regimes remembered now.
  std::size_t remembered() const { return regimes_.size(); }

  // Forgets every observation and every remembered regime (a worker whose hardware changed).
  void clear();

 private:
  void check_for_change();
  // The three levels of ChangeDetection.
  enum class Level { kQuick, kRun, kSlow };
  struct Entry {
    int batch;
    double rate;  // samples per second
  };
  // Whether the newest `run` of `v` (the window, oldest first) moved off the older ones
  // (all_beyond, or for the slow level median_shifted); then drops the older ones.
  bool changed(const std::vector<Entry>& v, Level level, std::size_t run, double min_change,
               double spread_z);

  // The levels' tests on `v` (the window, oldest first). all_beyond: the newest `run` all
  // lie on one side of the older median beyond the threshold, a bar of spreads at most
  // `max_change` (with `same_batch_only`, the older observations at their batch, at least 8 of
  // them; with fewer, those at batches within 25%, beyond `max_change` alone; the spread is
  // that of the older observations at their batch with 8 or more, else the larger of theirs
  // and all older ones'; no change when it is below `min_spread`). median_shifted: their
  // median lies off the older median beyond the threshold and the noise.
  bool all_beyond(const std::vector<Entry>& v, std::size_t run, double min_change, double spread_z,
                  bool same_batch_only, double min_spread, double max_change) const;
  bool median_shifted(const std::vector<Entry>& v, std::size_t run, double min_change,
                      double spread_z) const;
  std::vector<Entry> entries() const;  // oldest first
  // Replaces the window with `entries` (oldest first, at most the window's size).
  void refill(const std::vector<Entry>& entries);
  // While the window is a regime that began at a detected change and holds at most
  // recall_within observations: brings back the remembered regime nearest to it, when one
  // lies within recall_max_change.
  void try_recall();

  ChangeDetection change_;
  std::vector<Entry> ring_;  // circular
  std::size_t next_ = 0;
  std::size_t count_ = 0;
  std::size_t regime_changes_ = 0;
  std::size_t quick_changes_ = 0;
  std::size_t recalls_ = 0;
  // A remembered regime with its median rate and relative spread, taken once when it is
  // remembered: the recall and the switch test read them on every observation.
  struct Regime {
    std::vector<Entry> entries;  // oldest first
    double median;
    double spread;  // 0 with fewer than 3 observations
  };
  std::vector<Regime> regimes_;  // remembered, the newest first
  bool fresh_ = false;  // the window began at a detected change and may still be recalled
  // Per remembered regime (ChangeDetection::switch_llr): the CUSUM of the log-likelihood
  // ratios, and the observations since it last rose from zero.
  std::vector<double> switch_sum_;
  std::vector<std::size_t> switch_run_;
  // Restarts every switch sum (a regime came or went, or the window changed regime).
  void reset_switch();
  // The switch test on `v` (the window, oldest first, the newest observation last); on a
  // switch, brings back the regime and returns true.
  bool switched(const std::vector<Entry>& v);
  // Remembers `regime` (oldest first) when it filled at least half the window.
  void remember(std::vector<Entry> regime);
  // Makes remembered regime `regime` the window, `since` (the observations of the new regime,
  // oldest first) after it, and remembers `left` (the regime the worker left, if any) instead.
  void bring_back(std::size_t regime, const std::vector<Entry>& since, std::vector<Entry> left);
};

}  // namespace omnilearn::scheduler
