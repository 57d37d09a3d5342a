#pragma once
// One data-parallel replica: model, optimizer, LR schedule, sampler cursor and the process group
// it all-reduces gradients over. The actor layer drives it; it knows nothing of actors.
//
// Error vocabulary: bad arguments and specs throw std::invalid_argument; dataset, model and
// checkpoint files throw DatasetError / ModelError / CheckpointError; anything a peer can cause
// (a rendezvous that times out, a collective that fails because a peer died or hung) is returned
// as a value (CollectiveStatus, StepResult::committed == false) because the elastic protocol
// handles it on every membership change. After such a failure the group is "broken": every later collective
// fails at once until join_group() builds a new generation.
//
// Threads: every method is called from the one training thread that owns the Trainer, except
// set_slowdown(), set_slowdown_spins() and slowdown(), which any thread may call.
//
// The implementation is in parts, one file each (training/trainer_impl.hpp lists them): the
// gradient exchange, step control, state sync, checkpoints, the flat view for asynchronous
// training and the compute throttle.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include "training/compute_throttle.hpp"
#include "training/dataset.hpp"
#include "training/optimizer.hpp"
#include "training/sampler.hpp"
#include "training/specs.hpp"

namespace c10d {
class Store;
}

namespace omnilearn::training {

// A checkpoint file is unreadable, malformed or does not match this trainer's model/optimizer.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Collective backend. kNccl exists only when built with OMNILEARN_WITH_NCCL (CUDA LibTorch).
enum class Backend { kGloo, kNccl };

// How join_group() builds the process group.
struct GroupOptions {
  Backend backend = Backend::kGloo;
  // Gloo transport address: a hostname/IP to bind, or else an interface name; both empty means
  // Gloo's default (the address the machine's hostname resolves to, else loopback).
  std::string gloo_hostname;
  std::string gloo_interface;
  int gloo_threads = 2;
};

// Floating-point type of parameters, gradients, optimizer state and inputs.
enum class Precision { kFloat32, kFloat64 };

// Everything a replica needs to be built; equal configs give equal replicas.
struct TrainerConfig {
  ModelSpec model;
  OptimizerSpec optimizer;
  DataSpec data;
  std::string loss = kDefaultLoss;  // "cross_entropy" | "mse" (validate_loss)
  int64_t bucket_bytes = 4 << 20;  // gradients are all-reduced in flat buckets of at most this
  // false: every bucket's all-reduce starts after backward instead of from the gradient hooks
  // (the older exchange), for side-by-side measurements.
  bool overlap_allreduce = true;
  // true: BatchNorm statistics, the loss and the control words travel at the end of the last
  // gradient bucket, so a model whose gradients fit one bucket makes one all-reduce per step;
  // false: in a bucket of their own, launched right after forward (before the last
  // change), for side-by-side measurements. The sums are the same either way.
  bool extras_with_gradients = true;
  // true: the gradients backward makes ready last (the first layer's) are all-reduced in a
  // bucket of their own, so the buckets before it are launched while backward still runs;
  // false: buckets filled up to bucket_bytes whatever the layers (one for a model whose
  // gradients fit), for side-by-side measurements. The sums are the same either way.
  bool first_layer_bucket = false;
  // true: the buckets follow the order backward makes the gradients ready, recorded by the
  // hooks and agreed on (rank 0's) at each group's second step, as PyTorch DDP rebuilds its
  // buckets after the first iteration; with first_layer_bucket the module whose gradients
  // arrive last is then the one alone in the last bucket. false: reverse registration order
  // throughout, for side-by-side measurements. The sums are the same either way.
  bool observed_bucket_order = true;
  std::string device = "cpu";      // a torch device string: "cpu", "cuda:0", ...
  // kFloat64 makes kernel choice (oneDNN picks per CPU and per slice size) change results by
  // ~1e-15 instead of ~1e-7: what the equivalence tests use to test the math, not the CPU.
  Precision precision = Precision::kFloat32;
};

// Outcome of a collective that a peer can make fail.
struct CollectiveStatus {
  bool ok = true;
  std::string error;  // what failed, when !ok
  explicit operator bool() const { return ok; }
};

// Outcome of one training step.
struct StepResult {
  bool committed = false;  // parameters, optimizer state, step and cursor advanced
  std::string error;       // why not, when !committed (state is then exactly as before)
  // Not committed because rank 0's control words (StepControl) did not confirm the batches the
  // step was computed with. Every rank decides this alike: the group stays usable.
  bool control_rejected = false;
  double loss = 0;         // the loss averaged over the global batch
  // Wall time of gather + forward + backward on this rank, plus the emulated slowdown: the t_i
  // the batch controller balances. = data + forward + backward + slowdown below.
  double compute_time_s = 0;
  // Every rank's compute this step, by rank, as the exchange carried it (committed steps in a
  // group; empty alone or when not measured; 0 for a rank with an empty slice): up to the
  // launch of the last gradient bucket, so a little short of each rank's compute_time_s.
  std::vector<double> rank_compute_times_s;
  double data_time_s = 0;       // slicing the sampler's order, gathering, moving the batch
  double forward_time_s = 0;    // forward and loss
  double backward_time_s = 0;   // backward, with the bucket copies and launches inside it
  double slowdown_time_s = 0;   // the part of compute_time_s spent sleeping (slowdown emulation)
  // The gradient exchange's exposed part: from the end of backward until every bucket's
  // all-reduce completed. It includes waiting for slower ranks; the part of the all-reduce that
  // ran during backward is not in it.
  double allreduce_time_s = 0;
  double optimizer_time_s = 0;  // copying the sums back and the optimizer update
  int64_t buckets = 0;          // gradient buckets all-reduced (0 alone)
  // Gradient buckets whose all-reduce was launched while backward was still running (from the
  // gradient accumulators' hooks): how much of the exchange could overlap compute.
  int64_t buckets_launched_in_backward = 0;
  // Of those, the buckets launched before backward made its last gradient ready: their
  // all-reduce ran while backward still computed (the rest follow the compute).
  int64_t buckets_launched_before_last_gradient = 0;
  int64_t samples = 0;          // this rank's batch b_r
  int64_t global_samples = 0;   // B = sum(b)
  int64_t step = 0;             // committed steps after this call
  Cursor cursor;                // data cursor after this call
};

// Rank 0's control words carried in a step's gradient exchange instead of a broadcast of their
// own before the step. Every rank computes the step with the batches it expects (the
// last plan); rank 0 adds its words to the same all-reduce; once it completed, every rank asks
// `accept` whether the words confirm those batches, and commits only then. A step whose words
// do not confirm it (a new plan, regroup, abandon) is dropped by every rank alike and the
// caller acts on the words. Words longer than the exchange carries (world + 4) follow in a
// broadcast_control() inside the step, on every rank.
struct StepControl {
  // Rank 0: its words (in). Every rank, after the step: rank 0's words (out), whenever the
  // exchange completed, committed or not.
  std::vector<int64_t> words;
  // Same answer on every rank for the same words; empty means accept anything. On rank 0 it is
  // also asked before computing: words it would refuse make it skip forward and backward.
  std::function<bool(const std::vector<int64_t>& words)> accept;
};

// Loss and top-1 accuracy over (a prefix of) the test split.
struct EvalResult {
  double loss = 0;       // per sample (mse: per target element, as training's)
  double accuracy = 0;   // -1 with loss = "mse", where there are no classes
  int64_t samples = 0;
};

class Trainer {
 public:
  // Builds the replica. `data` may be shared by all ranks of a process; when empty it is loaded
  // from config.data. Checks the data against the loss (check_splits) and a TorchScript model's
  // output against the data. Throws std::invalid_argument (bad config), DatasetError or
  // ModelError.
  explicit Trainer(const TrainerConfig& config, DatasetPair data = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Tears down any current group, then rendezvouses generation `generation` on
  // PrefixStore("gen/<generation>", store) as `rank` of `world`. `timeout` bounds the rendezvous
  // and every later collective of this group. Generations must not be reused on one store.
  CollectiveStatus join_group(c10::intrusive_ptr<c10d::Store> store, int generation, int rank,
                              int world, std::chrono::milliseconds timeout,
                              const GroupOptions& options = {});
  // Drops the current group (if any); afterwards the trainer trains alone (world 1).
  void leave_group();
  // `abandon` (called from the training thread, about every 50 ms while a collective waits)
  // returning true makes that collective fail at once with "abandoned", leaving the group
  // broken: how a trainer stops waiting on a peer that hangs (frozen, cut off) once the
  // scheduler has formed a generation without it, instead of waiting for the group timeout.
  void set_abandon_check(std::function<bool()> abandon);
  // `gate` (training thread) is asked after a step's all-reduce succeeded (alone: after its
  // backward) and before anything changes; false makes the step uncommitted ("commit
  // refused") and the group broken. The
  // elastic protocol's leader refuses when its lease ran out while the step ran, so that a
  // leader frozen or cut off mid-step never commits outside its lease.
  void set_commit_gate(std::function<bool()> gate);
  bool in_group() const;
  int rank() const;        // 0 without a group
  int world() const;       // 1 without a group
  int generation() const;  // -1 without a group

  // Makes every rank's parameters, buffers, optimizer state, step and cursor (and so the LR
  // schedule position) equal rank 0's. Fails, changing nothing, if a peer fails or if the ranks'
  // model/optimizer/data layouts differ.
  CollectiveStatus sync_state_from_rank0();
  // The same from the rank that committed the most steps (on a tie, the one whose last step was
  // committed by the newest generation, then the lowest rank), which it stores in *root: after
  // a fault the survivors may be a step apart (an all-reduce can complete on some ranks and
  // fail on others), and the furthest one holds every committed step.
  CollectiveStatus sync_state_from_most_advanced(int* root = nullptr);

  // Rank 0's `words` replace every other rank's `words` (any length up to 1 << 20). This is how
  // the actor layer publishes a batch plan at a step boundary (one plan per step).
  CollectiveStatus broadcast_control(std::vector<int64_t>& words);

  // Blocks until every rank of the group calls it.
  CollectiveStatus barrier();

  // One synchronous data-parallel step with batch vector `batches` (one entry per rank, equal on
  // every rank): my slice of the next sum(b) samples, forward/backward, gradients scaled by
  // b_r / B, all-reduced (SUM), optimizer step. Throws std::invalid_argument if the vector has
  // the wrong length or a negative entry or sums to zero.
  //
  // The exchange overlaps backward as PyTorch DDP's does: gradients are grouped into buckets of
  // about config.bucket_bytes in the order backward makes them ready (reverse parameter order
  // until the group's second step, then the order rank 0 recorded:
  // config.observed_bucket_order), the last-ready module's alone (config.first_layer_bucket),
  // and each bucket's all-reduce is launched from the gradient accumulators' hooks as soon as
  // its last gradient is ready; the
  // BatchNorm statistics, the loss and the control words travel at the end of the last bucket
  // (config.extras_with_gradients; else in a small bucket of their own launched after
  // forward). Every rank launches the buckets in the same order (a rank with an empty slice
  // launches zeros), and all are waited for before the optimizer step.
  StepResult step(const std::vector<int>& batches);
  // The same with rank 0's control words in the exchange (see StepControl); nullptr = step().
  StepResult step(const std::vector<int>& batches, StepControl* control);

  // Loss and accuracy on the test split (all of it when max_samples <= 0). Local: no collective.
  EvalResult evaluate(int64_t max_samples = 0);
  // The same figures, computed by every rank of the group on its contiguous share of the test
  // prefix and summed with one all-reduce (float64: the correct count is exact, the loss equal
  // up to summation order). Shares are in proportion to `shares` (one weight per rank: the
  // plan's batches, so that a worker evaluates as much as its speed earns it, as it trains),
  // equal without them; the slowdown emulation paces the evaluation as it paces compute. Every
  // rank of the group must call it with the same max_samples and shares; alone it is
  // evaluate(). A failure leaves the group broken and *out untouched.
  CollectiveStatus evaluate_sharded(EvalResult* out, int64_t max_samples = 0,
                                    std::span<const int> shares = {});

  // Writes model state dict (PyTorch names), optimizer state, step and cursor to `path`
  // through runtime::write_file_atomically (the old file or the whole new one survives a
  // crash). Throws CheckpointError.
  void save_checkpoint(const std::string& path) const;
  // Restores what save_checkpoint wrote; validates everything before changing anything.
  // Throws CheckpointError if the file is unreadable or does not match this trainer.
  void load_checkpoint(const std::string& path);

  // Heterogeneity emulation: after each compute, sleep (factor - 1) x the compute time (the
  // built-in SlowdownThrottle; it has no effect while set_compute_throttle() has replaced it).
  // factor >= 1 (std::invalid_argument otherwise). Any thread.
  void set_slowdown(double factor);
  double slowdown() const;
  // With `spins`, the emulation burns the CPU a slower machine would instead of sleeping: it
  // spins until the process has used (factor - 1) x the compute's CPU time more. Under a CPU
  // quota a sleeping worker uses less than its share and is never throttled, while a fast
  // worker that never waits (asynchronous training) is: sleeping then understates the
  // heterogeneity (1,1,2,4 under equal 0.4-CPU quotas ran at about 1 : 0.7 : 0.8 : 0.5).
  // Spinning makes every worker's work per sample factor x larger under the same quota, as a
  // slower CPU's. Any thread.
  void set_slowdown_spins(bool spins);
  // Replaces the slowdown emulation above with `throttle` (null: back to it). It paces every
  // stretch of compute of a step, an evaluation and an asynchronous gradient, after the stretch,
  // with no lock held (training/compute_throttle.hpp). Training thread, between steps.
  void set_compute_throttle(std::shared_ptr<ComputeThrottle> throttle);

  int64_t step_count() const;  // committed steps
  Cursor cursor() const;
  double current_lr() const;  // learning rate the next step will use
  const DatasetPair& data() const;
  const TrainerConfig& config() const;

  // Copies (detached, on the CPU) of the named parameters (trainable or not), buffers and
  // optimizer state.
  std::vector<NamedTensor> named_parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  std::vector<NamedTensor> named_optimizer_state() const;
  int64_t parameter_bytes() const;  // bytes of all parameters (= gradient bytes per step)

  // Asynchronous training: the trainable parameters as one flat float32 vector, in
  // model order (what the parameter servers shard; buffers: flat_buffer_count() below).
  int64_t flat_parameter_count() const;
  // Writes the flat vector into `out` (flat_parameter_count() floats).
  void copy_flat_parameters(float* out) const;
  // Sets the part [offset, offset + count) of the flat vector from `count` floats at `data` (one
  // copy, straight into the parameters). std::invalid_argument outside the vector.
  void set_flat_parameters(const float* data, int64_t offset, int64_t count);
  // The model's shared buffers as one flat float32 vector in model order: floating-point ones
  // (BatchNorm running statistics) and BatchNorm's counters (num_batches_tracked, as floats:
  // exact below 2^24 batches); what an asynchronous job's shard 0 keeps for every worker. Other
  // integer buffers stay with each replica. 0 for a model without shared buffers.
  int64_t flat_buffer_count() const;
  // Per element of the flat buffers: true where it is a counter (counts, not an average).
  std::vector<bool> flat_buffer_counters() const;
  // Writes the flat buffers into `out` (flat_buffer_count() floats).
  void copy_flat_buffers(float* out) const;
  // Sets every buffer from flat_buffer_count() floats at `data` (integers rounded).
  void set_flat_buffers(const float* data);
  // Sets the running statistics (BatchNorm) from the current parameters: `passes` forwards in
  // training mode, without gradients, over `batch` training samples each, drawn at random
  // (with replacement) by a generator seeded with `seed`. An exponential running average
  // keeps (1 - momentum)^passes of where it started (0.9^32 = 3% for BatchNorm's default), so
  // 32 passes make the statistics the parameters' own, whatever they held before. Parameters,
  // optimizer state and counters (num_batches_tracked) are left as they were. Why: in
  // asynchronous training the running statistics lag parameters that move on every push, and
  // an evaluation with them can lose tens of points (docs/benchmarks.md). No-op for a model
  // without shared buffers or for passes <= 0; std::invalid_argument for batch < 1.
  void refresh_statistics(int64_t passes, int64_t batch, uint64_t seed);
  // What one asynchronous gradient took.
  struct GradientResult {
    double loss = 0;            // the batch's mean loss
    int64_t samples = 0;
    double compute_time_s = 0;  // gather + forward + backward + emulated slowdown
    double slowdown_time_s = 0;
  };
  // The gradient of the mean loss over the samples `indices` of the training split, written
  // flat into `out` (flat_parameter_count() floats). Changes no parameter and no optimizer
  // state (BatchNorm running statistics do move, as in any training forward). Local: no
  // collective. Throws std::invalid_argument on an empty batch.
  GradientResult flat_gradient(const std::vector<int64_t>& indices, float* out);

 private:
  CollectiveStatus sync_state_from(int root);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace omnilearn::training
