#pragma once
// The state behind training::Trainer, shared by the files that implement it, one concern each:
//   trainer.cpp           the replica (model, optimizer, data), groups, step(), evaluation
//   gradient_exchange.*   the reducer: gradient buckets, hooks, launches (DDP-style)
//   step_control.*        rank 0's control words inside the exchange, broadcast_control()
//   collectives.*         the group's collectives, bounded and abandonable
//   process_group*.cpp    one file per collective backend (Gloo; NCCL on CUDA builds)
//   state_sync.cpp        sync_state_from_*: the most advanced rank's state to every rank
//   checkpoint.cpp        save_checkpoint / load_checkpoint
//   flat_view.cpp         the flat-vector view asynchronous training uses
//   compute_throttle.*    the injected slowdown emulation
// Internal to training/.

#include <ATen/ATen.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "training/collectives.hpp"
#include "training/compute_throttle.hpp"
#include "training/gradient_exchange.hpp"
#include "training/models.hpp"
#include "training/trainer.hpp"

namespace omnilearn::training {

struct Trainer::Impl {
  TrainerConfig config;
  DatasetPair data;
  at::Device device{at::kCPU};
  std::optional<Model> model;
  std::vector<NamedTensor> params;        // live parameters, model order
  std::vector<NamedTensor> trainable;     // those that require grad: what the optimizer updates
  std::vector<NamedTensor> buffers;       // live buffers, model order
  std::vector<at::Tensor> float_buffers;  // averaged across ranks each step (BatchNorm stats)
  std::vector<at::Tensor> int_buffers;    // counters (num_batches_tracked)
  std::unique_ptr<Optimizer> optimizer;
  EpochSampler sampler;
  int64_t step = 0;
  int64_t commit_generation = -1;     // generation of the group that committed the last step
  std::function<bool()> commit_gate;  // set_commit_gate()
  Cursor cursor;

  // The slowdown set_slowdown() configures, and the throttle in use (it, unless one was
  // injected with set_compute_throttle()).
  std::shared_ptr<SlowdownThrottle> slowdown = std::make_shared<SlowdownThrottle>();
  std::shared_ptr<ComputeThrottle> throttle = slowdown;

  internal::Collectives group;  // the current generation's; alone without one
  std::unique_ptr<internal::GradientExchange> exchange;
  int64_t group_steps = 0;  // step() calls in the current group (the same count on every rank)

  // At the group's second step: rank 0's recorded gradient order to every rank, which re-plans
  // its buckets from it (GradientExchange::agree_order).
  CollectiveStatus agree_bucket_order();

  Impl(const TrainerConfig& cfg, DatasetPair d);
  void build();

  at::ScalarType real() const {
    return config.precision == Precision::kFloat64 ? at::kDouble : at::kFloat;
  }
  int64_t real_bytes() const { return config.precision == Precision::kFloat64 ? 8 : 4; }
  bool alone() const { return group.alone(); }

  // Moves a batch to the replica's device, and its floating-point inputs to its precision.
  at::Tensor to_replica(const at::Tensor& t) const {
    return t.is_floating_point() ? t.to(device, real()) : t.to(device);
  }
  // The loss of a batch (Mean: what a step trains with; Sum: what evaluate adds up).
  at::Tensor loss_of(const at::Tensor& out, const at::Tensor& y,
                     at::Reduction::Reduction reduction = at::Reduction::Mean) const;
  // Sums of the loss (Sum reduction) and correct predictions over test samples [begin, end).
  std::pair<double, int64_t> eval_sums(int64_t begin, int64_t end);
  EvalResult eval_result(double loss_sum, int64_t correct, int64_t n) const;

  // After a step's compute, in a group: the rest of the buckets launched and every all-reduce
  // waited for, then rank 0's words and the commit gate. Alone: the commit gate. False, with
  // result->error, when the step must not be committed (nothing has changed yet).
  bool settle_exchange(StepControl* control, StepResult* result);
  bool may_commit_alone(StepResult* result);

  // Step control (step_control.cpp): after the exchange completed, whether rank 0's words in it
  // confirm the step; *control gets them. False with *error set when they do not (then
  // *rejected) or when reading them failed (the group is then broken).
  bool settle_control(StepControl* control, bool* rejected, std::string* error);
  // Trainer::broadcast_control.
  CollectiveStatus broadcast_words(std::vector<int64_t>& words);

  // State sync (state_sync.cpp): what a state broadcast sends, and what must match for it.
  std::vector<at::Tensor> float_state() const;
  std::vector<int64_t> layout_fingerprint() const;

 private:
  static int64_t checked_train_size(DatasetPair& d, const TrainerConfig& cfg);
  void check_output(int64_t classes);
};

}  // namespace omnilearn::training
