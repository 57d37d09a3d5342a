#pragma once
// Gradient exchange: the DDP-style reducer that sums a step's gradients over the group while
// backward still runs. Gradients are grouped into flat buckets of about bucket_bytes in reverse
// parameter order (backward produces the last layers' gradients first), the first layer's in a
// bucket of its own (plan_buckets); each bucket's all-reduce is launched from the gradient
// accumulators' hooks once its last gradient is ready, in bucket order on every rank. Bucket 0
// holds the BatchNorm statistics, the loss and rank 0's control words (training/step_control.hpp);
// with extras_with_gradients it is the tail of the last gradient bucket's tensor and travels in its
// all-reduce (a small all-reduce of its own is far from free on a small machine: latency, wake-ups
// of every rank, and one launched after forward runs during backward, its threads preempting the
// compute).
//
// The exchange only launches collectives on a group; which group (Gloo, NCCL) is the caller's
// (training/collectives.hpp, training/process_group.hpp). Internal to training/.
//
// Threads: the hooks run on the thread that runs backward (the training thread on the CPU);
// everything else on the training thread. The in-flight state is guarded by one mutex, held
// only to claim and launch buckets: the compute throttle runs outside it.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "training/compute_throttle.hpp"
#include "training/optimizer.hpp"

namespace torch::autograd {
struct Node;
}

namespace omnilearn::training::internal {

class GradientExchange {
 public:
  struct Layout {
    int64_t bucket_bytes = 4 << 20;
    int64_t real_bytes = 4;             // bytes per element of the replica's precision
    bool overlap = true;                // launch from the hooks (else all after backward)
    bool extras_with_gradients = true;  // bucket 0 rides in the last gradient bucket
    bool first_layer_alone = true;      // see plan_buckets
  };

  // Which gradient bucket each trainable parameter lands in, the buckets in launch order, each a
  // list of indices into `trainable`. Backward makes the gradients ready in reverse parameter
  // order (the last layer's first), so the buckets are filled in that order, up to `capacity`
  // elements each (a parameter larger than that fills one alone). With `first_layer_alone` the
  // first layer's parameters (the run at the start of `trainable` whose names share the first
  // one's module prefix, "0" of "0.weight") close the last bucket alone: backward makes them
  // ready last, so the buckets before it are launched while their backward still runs and
  // only the first layer's all-reduce follows the compute. Pure: the same on every rank.
  static std::vector<std::vector<size_t>> plan_buckets(const std::vector<NamedTensor>& trainable,
                                                       int64_t capacity, bool first_layer_alone);

  // Lays the buckets out over `trainable` (what the optimizer updates) and `float_buffers`
  // (averaged each step), and registers a hook on each trainable parameter's gradient
  // accumulator. The tensors must outlive the exchange.
  GradientExchange(const std::vector<NamedTensor>& trainable,
                   const std::vector<at::Tensor>& float_buffers, const Layout& layout);
  ~GradientExchange();
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;

  // A new group: bucket tensors for it (reallocated per group: a failed op of the old one may
  // still write its tensors), with a control region of carried_words(world) words.
  void attach(c10d::ProcessGroup* group, int rank, int world, const at::TensorOptions& like);
  void detach();

  // Training thread, before forward: a step's exchange starts, each rank's contribution scaled
  // by `scale` (b_r / B). Alone (no group) the hooks launch nothing; `meter` is paced all the
  // same. `meter` must outlive end().
  void begin(double scale, ComputeMeter* meter);
  // Marks the backward pass: the hooks launch (and pace) only inside it.
  void set_in_backward(bool in_backward);
  // After forward: the statistics, the loss and rank 0's words (`words`, null on other ranks or
  // without control) into bucket 0, launched at once unless it rides in the last bucket.
  void launch_extras(double local_loss, const std::vector<int64_t>* words);
  // After backward: the buckets whose hooks did not all fire (an empty slice, parameters the
  // forward did not use, whose gradients are the zeros the step set), then the step's works.
  struct Launched {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;  // in launch order
    std::string error;    // a launch that threw (a hook must not throw into autograd)
    int64_t buckets = 0;  // gradient buckets
    int64_t launched_in_backward = 0;
  };
  Launched launch_remaining();
  // The step's exchange is over (its works completed or failed): the hooks launch nothing more.
  void end();

  // After the works completed: the sums into the gradients and the float buffers; returns the
  // global loss.
  double apply_sums();
  // The control region of bucket 0, and how many words it carries (this group).
  at::Tensor control_region();
  int64_t control_capacity() const { return control_capacity_; }

 private:
  // One tensor's place in a flat bucket.
  struct Slot {
    at::Tensor tensor;  // live tensor (a parameter's grad is looked up at fill time)
    size_t bucket = 0;
    int64_t offset = 0;
  };
  void on_gradient_ready(size_t k);
  // Fills and launches, in order, the gradient buckets whose gradients are all there.
  void launch_ready_locked();
  bool next_ready_locked() const;
  void launch_locked(size_t bucket);

  Layout layout_;
  std::vector<Slot> grad_slots_;                   // per trainable parameter
  std::vector<std::vector<size_t>> grad_members_;  // per gradient bucket: trainable indices
  std::vector<Slot> buffer_slots_;
  Slot loss_slot_;
  int64_t extras_size_ = 0;            // bucket 0 without the control region
  std::vector<int64_t> bucket_sizes_;  // bucket 0 without the control region, then gradients
  // Kept alive so that their hooks stay registered (a parameter holds only a weak reference).
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;

  // This group's tensors.
  c10d::ProcessGroup* group_ = nullptr;
  int rank_ = 0;
  int64_t control_capacity_ = 0;
  std::vector<at::Tensor> buckets_;
  // What bucket i's all-reduce sends: buckets_[i] itself, or for the last gradient bucket, when
  // bucket 0 rides in it, the whole tensor both are views of (undefined for bucket 0 then).
  std::vector<at::Tensor> wires_;
  bool extras_ride_ = false;

  // One step's exchange in flight. Guarded by mutex_.
  struct InFlight {
    bool active = false;
    double scale = 0;
    std::vector<int64_t> waiting;  // per gradient bucket: gradients not yet accumulated
    size_t next = 0;               // the next gradient bucket to launch (they go in order)
    std::vector<c10::intrusive_ptr<c10d::Work>> works;  // bucket 0 (unless it rides), 1, 2, ...
    std::string error;
    bool in_backward = false;
    int64_t launched_in_backward = 0;
  };
  InFlight ex_;
  std::mutex mutex_;
  // Paced by the hooks without the lock: only the thread running backward touches it while
  // backward runs (the training thread waits for it).
  ComputeMeter* meter_ = nullptr;
};

}  // namespace omnilearn::training::internal
