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
// set_slowdown() and slowdown(), which any thread may call.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

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
  double loss = 0;         // the loss averaged over the global batch
  // Wall time of gather + forward + backward on this rank, plus the emulated slowdown: the t_i
  // the batch controller balances.
  double compute_time_s = 0;
  double slowdown_time_s = 0;   // the part of compute_time_s spent sleeping (slowdown emulation)
  double allreduce_time_s = 0;  // gradient all-reduce, including waiting for slower ranks
  int64_t samples = 0;          // this rank's batch b_r
  int64_t global_samples = 0;   // B = sum(b)
  int64_t step = 0;             // committed steps after this call
  Cursor cursor;                // data cursor after this call
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
  // `gate` (training thread) is asked after a step's all-reduce succeeded and before anything
  // changes; false makes the step uncommitted ("commit refused") and the group broken. The
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
  StepResult step(const std::vector<int>& batches);

  // Loss and accuracy on the test split (all of it when max_samples <= 0). Local: no collective.
  EvalResult evaluate(int64_t max_samples = 0);

  // Writes model state dict (PyTorch names), optimizer state, step and cursor to `path`
  // atomically (temporary file, fsync, rename). Throws CheckpointError.
  void save_checkpoint(const std::string& path) const;
  // Restores what save_checkpoint wrote; validates everything before changing anything.
  // Throws CheckpointError if the file is unreadable or does not match this trainer.
  void load_checkpoint(const std::string& path);

  // Heterogeneity emulation: after each compute, sleep (factor - 1) x the compute time.
  // factor >= 1 (std::invalid_argument otherwise). Any thread.
  void set_slowdown(double factor);
  double slowdown() const;

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

 private:
  CollectiveStatus sync_state_from(int root);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace omnilearn::training
