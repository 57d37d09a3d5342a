#pragma once
// Gradient exchange: the DDP-style reducer that sums a step's gradients over the group while
// backward still runs. Gradients are grouped into flat buckets of about bucket_bytes in the order
// backward makes them ready (plan_buckets), and each bucket's all-reduce is launched from the
// gradient accumulators' hooks once its last gradient is ready, in bucket order on every rank.
//
// The ready order: a new group starts from reverse registration order (backward produces the
// last registered layers' gradients first when a model registers its layers in the order it uses
// them). The hooks record, every step, the order in which they fire; at the group's second step
// rank 0's recorded order is broadcast and every rank re-plans its buckets from it
// (agree_order), as PyTorch DDP rebuilds its buckets after the first iteration. So a model that
// registers its parameters in another order than it uses them (a head declared before its body,
// a shared or skip layer, a TorchScript module) still launches its first buckets while backward
// runs instead of waiting for the gradient backward makes last. With first_layer_alone the
// parameters made ready last close the last bucket alone.
//
// Bucket 0 holds the BatchNorm statistics, the loss, rank 0's control words
// (training/step_control.hpp) and one slot per rank for its compute time (so that rank 0 knows
// every rank's compute of every step); with extras_with_gradients it is the tail of the last
// gradient bucket's tensor and travels in its all-reduce (a small all-reduce of its own is far
// from free on a small machine: latency, wake-ups of every rank, and one launched after forward
// runs during backward, its threads preempting the compute).
//
// The exchange only launches collectives on a group; which group (Gloo, NCCL) is the caller's
// (training/collectives.hpp, training/process_group.hpp). Internal to training/.
//
// Threads: the hooks run on the thread that runs backward (the training thread on the CPU);
// everything else on the training thread. The in-flight state and the recorded order are
// guarded by one mutex, held only to record, claim and launch buckets: the compute throttle runs
// outside it.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <mutex>
#include <optional>
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
    bool observed_order = true;         // re-plan from rank 0's recorded order (agree_order)
  };

  // The order backward is assumed to make the gradients ready in before any was recorded:
  // reverse registration order, n - 1 down to 0.
  static std::vector<size_t> registration_order(size_t n);
  // True when `order` holds each of 0 .. n - 1 exactly once.
  static bool is_order_of(const std::vector<size_t>& order, size_t n);

  // Which gradient bucket each trainable parameter lands in, the buckets in launch order, each a
  // list of indices into `trainable`: filled in `order` (the order backward makes the gradients
  // ready, a permutation of the indices), up to `capacity` elements each (a parameter larger
  // than that fills one alone). With `last_module_alone` the parameters made ready last (the run
  // at the end of `order` whose names share the last one's module prefix, "0" of "0.weight")
  // close the last bucket alone: the buckets before it are launched while their backward still
  // runs and only that module's all-reduce follows the compute. Pure: the same on every rank
  // for the same order. std::invalid_argument when `order` is not a permutation.
  static std::vector<std::vector<size_t>> plan_buckets(const std::vector<NamedTensor>& trainable,
                                                       const std::vector<size_t>& order,
                                                       int64_t capacity, bool last_module_alone);
  // The same in registration_order(): with `first_layer_alone`, the first registered layer's
  // parameters close the last bucket.
  static std::vector<std::vector<size_t>> plan_buckets(const std::vector<NamedTensor>& trainable,
                                                       int64_t capacity, bool first_layer_alone);

  // How rank 0's recorded order travels to the group: n + 1 words, the first 1 when an order
  // follows (0: none recorded, the rest zeros). Every rank passes n + 1 words to the broadcast.
  static std::vector<int64_t> encode_order(const std::optional<std::vector<size_t>>& order,
                                           size_t n);
  // What a rank makes of the words rank 0 broadcast: the order they carry; registration_order(n)
  // when they carry none or are malformed (not n + 1 words, not a permutation of the trainable
  // indices: a rank with another model, a corrupted broadcast), with *malformed set then. Pure:
  // every rank decides alike from the same words.
  static std::vector<size_t> decode_order(const std::vector<int64_t>& words, size_t n,
                                          bool* malformed);

  // Lays the buckets out over `trainable` (what the optimizer updates) and `float_buffers`
  // (averaged each step), and registers a hook on each trainable parameter's gradient
  // accumulator. The tensors must outlive the exchange.
  GradientExchange(const std::vector<NamedTensor>& trainable,
                   const std::vector<at::Tensor>& float_buffers, const Layout& layout);
  ~GradientExchange();
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;

  // A new group: the buckets planned in registration_order() (every rank of a new group starts
  // from the same layout, whatever order an earlier group agreed on), bucket tensors for it
  // (reallocated per group: a failed op of the old one may still write its tensors), with a
  // control region of carried_words(world) words.
  void attach(c10d::ProcessGroup* group, int rank, int world, const at::TensorOptions& like);
  void detach();

  // The order the hooks fired in during the last step whose backward ran (each parameter's
  // first firing; parameters whose gradient that backward did not produce follow in
  // registration_order()), or nullopt before any. Recorded alone too, so that a trainer that
  // computed before joining a group brings its order with it. Training thread, between steps.
  std::optional<std::vector<size_t>> recorded_order() const;
  // Every rank of the group, between steps, with the words rank 0 broadcast
  // (encode_order(rank 0's recorded_order())): the buckets re-planned from decode_order and the
  // bucket tensors reallocated, so every rank holds rank 0's layout. Without the layout's
  // observed_order, the registration order. A malformed order keeps the registration order
  // and is logged once (stderr). Returns false in that case.
  bool agree_order(const std::vector<int64_t>& words);
  // The order the buckets are planned in now, and the buckets (indices into `trainable`).
  const std::vector<size_t>& order() const { return order_; }
  const std::vector<std::vector<size_t>>& buckets() const { return grad_members_; }

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
    // Of those, the buckets launched while some trainable parameter's gradient was still to come
    // (a parameter the forward did not use counts as still to come): their all-reduce overlapped
    // the rest of backward. The bucket the last gradient completes is not among them.
    int64_t launched_before_last_gradient = 0;
  };
  Launched launch_remaining();
  // The step's exchange is over (its works completed or failed): the hooks launch nothing more.
  void end();

  // After the works completed: the sums into the gradients and the float buffers; returns the
  // global loss.
  double apply_sums();
  // After the works completed: each rank's compute this step (seconds, forward and backward
  // up to the launch of the last gradient bucket, emulated slowdown included), by rank, as each
  // rank wrote it into its slot of bucket 0 (0 for a rank that computed nothing); empty when
  // not measured (bucket 0 launched on its own, after forward).
  std::vector<double> compute_times();
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
  // Plans the buckets in `order` (grad_members_, grad_slots_, bucket_sizes_).
  void plan(const std::vector<size_t>& order);
  // This group's bucket tensors for the current plan.
  void allocate();
  void on_gradient_ready(size_t k);
  // Fills and launches, in order, the gradient buckets whose gradients are all there.
  void launch_ready_locked();
  bool next_ready_locked() const;
  void launch_locked(size_t bucket);
  // Bucket 0's last `world` elements: one compute time per rank (compute_times).
  at::Tensor timing_region();

  Layout layout_;
  std::vector<NamedTensor> trainable_;
  std::vector<size_t> order_;                      // the order the buckets are planned in
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
  at::TensorOptions like_;
  int64_t control_capacity_ = 0;
  int64_t world_ = 0;
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
    int64_t launched_before_last_gradient = 0;
    // The hooks' order this step: whether each parameter's fired, and the first firings.
    bool recording = false;
    std::vector<char> fired;
    std::vector<size_t> fired_order;
    size_t still_to_fire = 0;
  };
  InFlight ex_;
  std::optional<std::vector<size_t>> recorded_;  // guarded by mutex_
  bool malformed_logged_ = false;
  mutable std::mutex mutex_;
  // Paced by the hooks without the lock: only the thread running backward touches it while
  // backward runs (the training thread waits for it).
  ComputeMeter* meter_ = nullptr;
};

}  // namespace omnilearn::training::internal
