// The NCCL backend (CUDA tensors). Compiled only with -DOMNILEARN_WITH_NCCL=ON, which needs a
// CUDA-enabled LibTorch (training/CMakeLists.txt); the CPU builds and CI do not compile it.
#include <stdexcept>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "training/process_group.hpp"

namespace omnilearn::training::internal {

c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(const GroupRequest& request) {
  if (!request.device.is_cuda()) {
    throw std::invalid_argument("the NCCL backend needs a CUDA device (config.device)");
  }
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = request.timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(request.store, request.rank, request.world,
                                                     opts);
}

}  // namespace omnilearn::training::internal
