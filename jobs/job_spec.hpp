#pragma once
// A training job as a user writes it (TOML), validated before anything runs. Every error names
// the file, line and column and says what was expected.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "controller/batch_controller.hpp"
#include "training/specs.hpp"

namespace omnilearn::actors {

struct TrainSection {
  int global_batch = 256;
  std::int64_t epochs = 0;  // exactly one of epochs / steps is > 0
  std::int64_t steps = 0;
  std::uint64_t seed = 0;
  std::int64_t eval_every = 0;  // steps between evaluations on the test set (0: only at the end)
  int threads = 1;              // intra-op threads per trainer
  std::string loss = training::kDefaultLoss;  // "cross_entropy" | "mse"
  // "float32" | "float64": the floating-point type of parameters, gradients, optimizer state and
  // inputs. float64 makes a run's result independent of how its batches were split (rounding
  // ~1e-16 instead of ~1e-7 per operation); BSP only.
  std::string precision = "float32";
};

struct ControllerSection {
  scheduler::ControllerConfig config;  // policy, bounds, deadband, gain
  std::int64_t interval_steps = 10;    // a controller round every this many steps ...
  double interval_s = 0;               // ... or every this many seconds, when > 0
  std::int64_t cooldown_steps = 5;     // steps at a new plan before its timings are trusted
};

struct ElasticSection {
  int min_workers = 1;
  // Without the key: every worker the cluster has, up to what the batch allows (the parser
  // sets min(4096, global_batch / controller.min_batch), so every worker gets min_batch).
  int max_workers = 1;
  int slots = 1;               // trainers per node
  double grace_period_s = 30;  // below min_workers this long -> the job fails
};

struct CheckpointSection {
  std::string dir;          // empty: <run-dir>/checkpoints
  std::int64_t every = 0;   // steps between checkpoints (0: only the final one)
  // `dir` is the same directory on every node (a shared file system): a trainer on any node can
  // resume the job from a checkpoint written on another. Otherwise only a trainer on the node
  // that wrote it can (the node back after a restart, say).
  bool shared = false;
};

// [asp]: asynchronous training's settings; only a job with mode = "asp" may carry
// the table.
struct AspSection {
  int servers = 1;                     // parameter-server shards of the flat parameter vector
  std::string staleness = "none";      // "none" | "inverse" | "bound"
  std::int64_t max_staleness = 0;      // >= 1 with "bound" (required there), 0 otherwise
  std::string lr_scaling = "linear";   // "none" | "linear": gradient x b_i / (B / n)
  // Each push's learning rate is [train] lr / n, n the workers of the current batch plan: BSP's
  // rate, shared out over the n pushes that take the place of one BSP step.
  bool scale_lr_by_workers = true;
  // Training-mode forward passes (64 samples each) by which a worker sets the running
  // statistics (BatchNorm) from the parameters it evaluates, before each evaluation and the
  // final model: the servers' running average lags parameters that move on every push.
  // 0: evaluate with the servers' statistics as they are.
  std::int64_t refresh_statistics = 32;
};

struct JobSpec {
  std::string name;
  std::string mode = "bsp";
  training::ModelSpec model;
  training::DataSpec data;
  training::OptimizerSpec optimizer;
  TrainSection train;
  ControllerSection controller;
  ElasticSection elastic;
  CheckpointSection checkpoint;
  AspSection asp;
};

// A problem in a job file, located.
class JobSpecError : public std::runtime_error {
 public:
  JobSpecError(std::string source, std::uint32_t line, std::uint32_t column, std::string message);
  const std::string& source() const { return source_; }
  std::uint32_t line() const { return line_; }
  std::uint32_t column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  std::string source_;
  std::uint32_t line_;
  std::uint32_t column_;
  std::string message_;
};

// Which files a parse opens besides the job file itself.
enum class FileChecks {
  kNone,   // the head and the trainers: files are checked where they are used
  kLocal,  // the submitting machine: the model and data files a job names must exist here, and
           // what can be read without LibTorch (.npy headers and labels) must be valid
};

// Parses and validates a job. `source` names the text in errors ("jobs/mlp.toml"); relative
// file paths in the job (model.path, data.path, data.train, ...) are resolved against its
// directory, so a job submitted to a cluster should be sent with an absolute `source`.
// Throws JobSpecError ("jobs/mlp.toml:12:7: [train] global_batch: expected ...").
JobSpec parse_job_spec(std::string_view toml_text, const std::string& source,
                       FileChecks checks = FileChecks::kNone);
// Reads the file first; a missing file is a JobSpecError at line 0.
JobSpec load_job_spec(const std::string& path, FileChecks checks = FileChecks::kNone);

// One key of a job file as the parser reads it: its type, the range it accepts and the value a
// job without it gets. What the reference (docs/job-file.md) must say about the key.
struct JobKey {
  std::string section;  // "train"
  std::string key;      // "global_batch"
  // Set only for a key read two ways, by the other keys' values ("dataset = \"tensors\"").
  std::string when;
  std::string type;           // "integer" | "number" | "string" | "boolean" | "array of integers"
  std::string default_value;  // as TOML writes it, or words for a default other keys decide
  std::string range;          // "[1, 4096]", ">= 0", "(0, 1000]", "\"bsp\", \"asp\"", "any"
};

// Every key of every section, recorded from the parser's own reads of representative jobs (so
// the ranges are the ones it enforces and the defaults the ones a job gets), in section order.
std::vector<JobKey> job_spec_keys();

}  // namespace omnilearn::actors
