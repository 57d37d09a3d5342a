#pragma once
// How a stale push is weighed, and what is recorded about staleness.
//
// staleness = the server's version when it applies a push - the version the worker pulled.
// Modes: "none" applies every push as is; "inverse" weighs its gradient by 1 / (1 + staleness);
// "bound" drops (and counts) a push whose staleness exceeds max_staleness. lr_scaling "linear"
// (the default) also weighs it by b_i / (B / n): a worker's batch over the mean batch of the
// plan in force (B = the sum of the workers' batches, n = the workers), so that under a
// proportional plan every sample counts the same whichever worker took it; "none" leaves it.
// The weight (StepDecision::scale) multiplies the push's gradient before the optimizer sees
// it (trainer/shard_checkpoint.hpp's apply_push), not the step: under momentum a scaled
// step would rescale the earlier pushes still in the momentum buffer as well.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "asp/worker_id.hpp"

namespace omnilearn::asp {

enum class StalenessMode { kNone, kInverse, kBound };
enum class LrScaling { kNone, kLinear };

// "none" | "inverse" | "bound", and "none" | "linear": the job file's words.
std::string_view to_string(StalenessMode mode);
std::string_view to_string(LrScaling scaling);
std::optional<StalenessMode> parse_staleness_mode(std::string_view name);
std::optional<LrScaling> parse_lr_scaling(std::string_view name);

struct StalenessConfig {
  StalenessMode mode = StalenessMode::kNone;
  std::int64_t max_staleness = 0;  // kBound only: >= 1 there, 0 otherwise
  LrScaling lr_scaling = LrScaling::kLinear;
};

// Throws std::invalid_argument unless max_staleness >= 1 under kBound and 0 under the others.
void validate(const StalenessConfig& config);

// What to do with one push.
struct StepDecision {
  bool apply = true;
  double scale = 1.0;  // multiplies the push's gradient when applied; 0 when dropped
};

// The one rule. staleness >= 0, batch >= 1; reference_batch = B / n > 0 (read only under
// kLinear). Throws std::invalid_argument otherwise.
StepDecision decide_step(const StalenessConfig& config, std::int64_t staleness,
                         std::int64_t batch, double reference_batch);

// Staleness over pushes and updates per worker, for one interval and in total.
struct StalenessSummary {
  std::int64_t pushes = 0;   // every push weighed (applied or dropped)
  std::int64_t applied = 0;
  std::int64_t dropped = 0;  // dropped as too stale (kBound)
  double mean = 0;           // over every push weighed, dropped ones included; 0 when none
  std::int64_t p95 = 0;      // nearest rank: the ceil(0.95 n)-th smallest staleness
  std::int64_t max = 0;
  std::map<WorkerId, std::int64_t> updates;  // applied pushes per worker
};

// Exact (staleness is an integer: a histogram, not a sample). Not thread-safe.
class StalenessStats {
 public:
  void record(WorkerId worker, std::int64_t staleness, bool applied);
  // The interval since the last take_interval (or the start).
  StalenessSummary interval() const;
  // Returns the interval and starts a new one; the totals keep counting.
  StalenessSummary take_interval();
  StalenessSummary total() const;

  // The totals, for a restarted scheduler (the interval starts afresh). restore_totals throws
  // std::invalid_argument on a state it cannot read.
  nlohmann::json totals_state() const;
  void restore_totals(const nlohmann::json& state);

 private:
  struct Tally {
    std::map<std::int64_t, std::int64_t> histogram;  // staleness -> pushes
    std::int64_t sum = 0;
    std::int64_t applied = 0;
    std::int64_t dropped = 0;
    std::map<WorkerId, std::int64_t> updates;
    void add(WorkerId worker, std::int64_t staleness, bool applied);
    StalenessSummary summary() const;
  };
  Tally interval_;
  Tally total_;
};

}  // namespace omnilearn::asp
