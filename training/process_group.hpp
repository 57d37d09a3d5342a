#pragma once
// Process groups, one backend per file: the gradient exchange, state sync and control
// broadcasts run on whatever c10d::ProcessGroup these build, so a backend is one function here
// and its file. process_group_gloo.cpp builds Gloo's (CPU tensors); process_group_nccl.cpp,
// compiled only with -DOMNILEARN_WITH_NCCL=ON, builds NCCL's (CUDA tensors). Internal to
// training/.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>

#include "training/trainer.hpp"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace omnilearn::training::internal {

// What every backend is given: the generation's store (already prefixed), this rank, the world,
// the bound of every collective, the trainer's options and device.
struct GroupRequest {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  int world = 1;
  std::chrono::milliseconds timeout{0};
  const GroupOptions* options = nullptr;
  at::Device device{at::kCPU};
};

// Builds options.backend's group. Throws std::invalid_argument for a backend this build lacks or
// a device it cannot serve; anything else it throws is a rendezvous failure.
c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(const GroupRequest& request);

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(const GroupRequest& request);
#ifdef OMNILEARN_WITH_NCCL
c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(const GroupRequest& request);
#endif

}  // namespace omnilearn::training::internal
