#pragma once
// Deterministic replay of recorded step-time traces through the controller: a trace holds what
// the scheduler saw in a real run (each worker's heartbeat windows: the steps they cover, the
// batch and the mean compute time), the generations and any real speed change; the replay
// derives each worker's cost at every step from the recorded per-sample time, runs the same
// rules as the SchedulerActor (ControlRounds + BatchController) with time injected, and scores
// the plans against an oracle that knows each regime's true speeds. Pure: no clock, no I/O
// beyond the stream it is given.

#include <cstdint>
#include <istream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/batch_controller.hpp"
#include "controller/control_rounds.hpp"

namespace omnilearn::scheduler {

// One heartbeat window of one worker: steps [first_step, last_step] ran at `batch` samples and
// took `compute_s` seconds of compute per step on average.
struct TraceObservation {
  std::string worker;
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
  int batch = 0;
  double compute_s = 0.0;
};

// A generation: `members` (in rank order) train from step + 1.
struct TraceGeneration {
  std::int64_t step = 0;
  std::vector<std::string> members;
};

// A real speed change of `worker` (a `node set`, a new neighbour), in effect from step + 1.
struct TraceChange {
  std::int64_t step = 0;
  std::string worker;
  std::string what;
};

// A recorded run. Text format, one record a line, '#' starts a comment:
//   global_batch,256
//   generation,STEP,W0;W1;...        members train from STEP + 1
//   change,STEP,WORKER,DESCRIPTION   a real speed change from STEP + 1
//   alpha,WORKER,SECONDS             fixed compute per step (ReplayConfig::use_trace_alpha)
//   obs,WORKER,FIRST,LAST,BATCH,COMPUTE_S
struct Trace {
  std::string name;
  int global_batch = 0;
  std::vector<TraceGeneration> generations;  // ascending step
  std::vector<TraceChange> changes;          // ascending step
  std::map<std::string, double> alpha_s;
  std::vector<TraceObservation> observations;  // ascending last_step

  std::int64_t first_step() const;  // the first generation's step
  std::int64_t last_step() const;   // the last observed step
};

// Parses the format above. Throws std::invalid_argument naming `name`, the line and what is
// wrong (an unknown record, a bad number, an observation of a worker in no generation, ...).
Trace parse_trace(std::istream& in, const std::string& name);

struct ReplayConfig {
  ControllerConfig controller;  // global_batch is taken from the trace
  ControlRoundsConfig rounds;
  // Extra per-step noise on every worker's compute time: a log-normal factor with this
  // relative standard deviation (seeded), on top of the noise the recording holds. The
  // controller sees it through the recorded heartbeat windows, averaged as the agent does.
  double step_noise = 0.0;
  std::uint64_t seed = 1;
  // Use the trace's alpha lines (each worker's fixed compute per step, fitted from the windows
  // at different batches) in the replayed cost; otherwise cost is linear in the batch through
  // each window's recorded per-sample time. The fits rest on a few batch values each, so they
  // are an option (to compare the affine policy), not the default.
  bool use_trace_alpha = false;
  // A plan has followed a regime once the batch of every worker the regime concerns is within
  // this relative distance of the regime's oracle batch: every member after the first
  // generation (steady), the changed worker after a change, the newcomers after a join (every
  // member after a leave); or once its step time under the regime's speeds is within the
  // deadband of the oracle's (no controller with that deadband would change it: a slow
  // newcomer a few samples under its share costs the step nothing). Speeds drift on a shared
  // machine, so the whole run's noise-free step time is judged by the steady efficiency.
  double follow_tolerance = 0.25;
  // Rounds after a generation or a change that may still change the plan without counting as
  // churn (the "steady within 3 rounds" allowance).
  int settle_rounds = 3;
  // A plan change outside the settle rounds is justified when the speeds recorded over this
  // many steps from where it applies (without the extra noise) make the new plan faster than
  // the old by more than the deadband (by more than persist_gain for a change the smoothing
  // across rounds made): the shared machine's speeds drift for real, and following them is
  // wanted, not churn.
  std::int64_t justify_steps = 30;
};

// One stretch of the run with fixed members and speeds.
struct ReplayRegime {
  std::int64_t start_step = 0;  // first step of the regime
  std::string cause;            // "generation N" or the change's description
  std::vector<std::string> members;
  std::vector<double> speeds;         // samples/s: the median recorded per-sample compute time
  std::vector<int> oracle_batches;    // the best integer split under those speeds
  double nominal_ideal_speedup = 0;   // sum(speed) / (n x slowest): the linear-cost ideal
  std::vector<std::string> concerned;  // whose batches say whether the regime is followed
  int rounds_to_follow = -1;          // rounds until a plan within follow_tolerance; -1 never
  std::int64_t steps_to_follow = -1;  // steps from start_step to the first step run with that
                                      // plan (0: the plan in force already follows); -1 never
};

struct ReplayPlan {
  std::int64_t step = 0;  // the round's step (the plan applies two steps later)
  std::vector<int> batches;
  bool forced = false;    // made for a new generation, not by a round
};

struct ReplayResult {
  std::string trace;
  std::int64_t steps = 0;              // steps replayed
  std::int64_t steady_from = 0;        // first step after the first generation's settle rounds
  // The steady steps: after steady_from, outside the settle rounds that follow every later
  // generation or change (churn_steps of them).
  double efficiency = 0;               // sum oracle step time / sum controller step time, steady
  double efficiency_all = 0;           // the same over every step, transients included
  double time_lost = 0;                // sum controller / sum oracle - 1 over every step from
                                       // steady_from on: every later transient included, the
                                       // job's start (no speeds known yet) left out
  // The reference that learns a speed change as early as any controller fed by heartbeat
  // windows can: it runs the oracle's batches, but after a change it keeps the previous
  // regime's until the end of the changed worker's first window that starts after the change,
  // plus the two steps a plan takes to apply (a generation's members and their speeds it knows
  // at once, as the oracle does). What it loses against the oracle no such controller avoids.
  double reference_time_lost = 0;      // sum reference / sum oracle - 1, the steps of time_lost
  // The measuring reference: it knows the step at which each speed changes (and every
  // generation's members) but not the new speed, which it measures as any controller must: the
  // median per-sample time of the steps it ran at its own batches since the worker's last
  // change (at most the controller's throughput window of them), the same noise included. It
  // plans the best integer split under those estimates after every step, in force at the next,
  // with no deadband and no gate. What it loses against the oracle is what measuring the
  // speeds costs when changes are found at once; a reference, not a bound (where the recorded
  // speeds drift, a controller that plans less often can lose less).
  double measuring_time_lost = 0;      // sum measuring / sum oracle - 1, the steps of time_lost
  double time_lost_to_reference = 0;   // sum controller / sum reference - 1, the same steps
  double speedup_over_uniform = 0;     // sum uniform / sum controller, steady
  double ideal_speedup = 0;            // sum uniform / sum oracle, steady: the ideal this run's
                                       // measured speeds allow
  int rounds = 0;                      // control rounds run
  int plan_changes = 0;                // rounds that changed the plan
  int churn_changes = 0;               // of those, outside any regime's settle rounds
  std::int64_t churn_steps = 0;        // steps outside the settle rounds (the churn's base)
  double changes_per_100_steps = 0;    // churn_changes per 100 churn_steps
  int persisted_changes = 0;           // of churn_changes, those the smoothing across rounds
                                       // made (judged against persist_gain, not the deadband)
  int unjustified_changes = 0;         // of churn_changes, those the recorded speeds did not
                                       // justify (ReplayConfig::justify_steps): noise chased
  double unjustified_per_100_steps = 0;  // unjustified_changes per 100 churn_steps
  std::vector<ReplayRegime> regimes;
  std::vector<ReplayPlan> plans;

  // One paragraph: efficiency, speed-ups, churn, rounds to follow per regime.
  std::string describe() const;
};

// Replays `trace` under `config`. Deterministic. Throws std::invalid_argument on a trace the
// controller cannot plan (B below the members' minimum batches).
ReplayResult replay(const Trace& trace, const ReplayConfig& config);

}  // namespace omnilearn::scheduler
