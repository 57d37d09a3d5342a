#pragma once
// The current generation's process group and the collectives the trainer runs on it. Every wait
// is bounded by the group timeout and, when an abandon check is set, given up as soon as it says
// so; any failure marks the group broken, after which every collective fails at once until the
// next join. Internal to training/; training thread only.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "training/trainer.hpp"

namespace omnilearn::training::internal {

class Collectives {
 public:
  // Leaves any current group, then rendezvouses `generation` on PrefixStore("gen/<generation>",
  // store) as `rank` of `world` with options.backend (training/process_group.hpp). Throws
  // std::invalid_argument for a backend or device this build cannot serve.
  CollectiveStatus join(const c10::intrusive_ptr<c10d::Store>& store, int generation, int rank,
                        int world, std::chrono::milliseconds timeout, const GroupOptions& options,
                        const at::Device& device);
  // Drops the group. A broken group may still have an abandoned collective queued, and its
  // destructor waits for it (up to the group timeout): it is destroyed on another thread, so the
  // next generation does not wait; finished ones are dropped here, the rest when this goes.
  void leave();

  bool alone() const { return !group_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  int generation() const { return generation_; }
  c10d::ProcessGroup& group() { return *group_; }
  void set_abandon_check(std::function<bool()> abandon) { abandon_ = std::move(abandon); }

  // Ok while the group is healthy; else why it is not.
  CollectiveStatus usable() const;
  // Marks the group broken because of `what`; returns the failure.
  CollectiveStatus fail(const std::string& what);
  // Waits for `work` within the group timeout or until the abandon check gives up on it.
  CollectiveStatus wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what);
  CollectiveStatus broadcast(at::Tensor& t, const char* what, int root = 0);
  // One all-reduce per tensor (Gloo overlaps them), all waited for.
  CollectiveStatus allreduce(std::vector<at::Tensor> tensors, c10d::ReduceOp op, const char* what);
  CollectiveStatus barrier();

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;  // null when training alone
  int rank_ = 0;
  int world_ = 1;
  int generation_ = -1;
  std::chrono::milliseconds timeout_{0};
  std::string broken_;  // why the group is unusable; empty while it is healthy
  std::function<bool()> abandon_;
  std::vector<std::future<void>> reaping_;  // broken groups being destroyed
};

}  // namespace omnilearn::training::internal
