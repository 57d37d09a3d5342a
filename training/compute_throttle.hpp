#pragma once
// Heterogeneity emulation for tests and benchmarks: a replica's compute made to take longer, as
// a slower machine's would. The trainer hands each stretch of compute it measured (forward,
// each part of backward before a gradient bucket is launched, an evaluation) to its throttle
// after the stretch, with no lock held; a throttle that is not active costs the trainer two
// clock reads per stretch and nothing else.

#include <atomic>
#include <chrono>

namespace omnilearn::training {

// What a throttle added after one stretch of compute.
struct ThrottleCharge {
  double added_s = 0;  // compute time the emulation adds (what the batch controller should see)
  double wall_s = 0;   // wall time the throttle itself took
};

// Injected into a Trainer (Trainer::set_compute_throttle). Any thread may call active(); the
// thread that ran a stretch of compute calls after_compute() for it (the training thread, or the
// one running backward while the training thread waits for it): never two at once for one
// trainer.
class ComputeThrottle {
 public:
  virtual ~ComputeThrottle() = default;
  // Whether after_compute() would add anything now. Asked once when a step, an evaluation or an
  // asynchronous gradient starts: while false, the trainer measures no CPU time for it.
  virtual bool active() const = 0;
  // A stretch of compute took `wall_s` seconds and `cpu_s` seconds of the process's CPU time;
  // delays the caller as the emulated machine would be delayed.
  virtual ThrottleCharge after_compute(double wall_s, double cpu_s) = 0;
  // The process's CPU time (all threads), in seconds: what cpu_s is measured with.
  static double process_cpu_seconds();
};

// `omnilearn worker --slowdown F`: after each stretch, sleeps (F - 1) x its wall time; with
// spins, burns the CPU until the process has used (F - 1) x the stretch's CPU time more. Under
// a CPU quota a sleeping worker uses less than its share and is never throttled, while a fast
// worker that never waits (asynchronous training) is: sleeping then understates the
// heterogeneity (1,1,2,4 under equal 0.4-CPU quotas ran at about 1 : 0.7 : 0.8 : 0.5).
// Spinning makes every worker's work per sample F x larger under the same quota, as a slower
// CPU's. Settings may change from any thread while the trainer runs.
class SlowdownThrottle final : public ComputeThrottle {
 public:
  // factor >= 1 and finite (std::invalid_argument otherwise).
  void set_factor(double factor);
  double factor() const { return factor_.load(); }
  void set_spins(bool spins) { spins_.store(spins); }
  bool spins() const { return spins_.load(); }

  bool active() const override { return factor_.load() > 1.0; }
  ThrottleCharge after_compute(double wall_s, double cpu_s) override;

 private:
  std::atomic<double> factor_{1.0};
  std::atomic<bool> spins_{false};
};

// The compute of one step (or evaluation, or asynchronous gradient), measured stretch by stretch
// and handed to a throttle after each: what StepResult::compute_time_s reports. Used by the
// thread that runs the compute (see ComputeThrottle); not thread-safe.
class ComputeMeter {
 public:
  // Starts a measure; `throttle` (may be null) paces it only if it is active now.
  void begin(ComputeThrottle* throttle);
  // The stretch since the last mark (or begin) is over: counted, and handed to the throttle.
  void mark();
  double compute_s() const { return active_s_ + added_s_; }    // measured + emulated
  double added_s() const { return added_s_; }                  // emulated
  double throttle_wall_s() const { return throttle_wall_s_; }  // wall time the throttle took

 private:
  using Clock = std::chrono::steady_clock;
  ComputeThrottle* throttle_ = nullptr;
  Clock::time_point mark_{};
  double cpu_mark_ = 0;
  double active_s_ = 0;
  double added_s_ = 0;
  double throttle_wall_s_ = 0;
};

}  // namespace omnilearn::training
