// The Gloo backend (CPU tensors): what every build has.
#include <algorithm>
#include <stdexcept>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "training/process_group.hpp"

namespace omnilearn::training::internal {

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(const GroupRequest& request) {
  if (request.device.is_cuda()) throw std::invalid_argument("use Backend::kNccl for a CUDA device");
  const GroupOptions& options = *request.options;
  auto opts = c10d::ProcessGroupGloo::Options::create(request.timeout);
  if (!options.gloo_hostname.empty()) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.gloo_hostname));
  } else if (!options.gloo_interface.empty()) {
    opts->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForInterface(options.gloo_interface));
  } else {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  opts->threads = std::max(1, options.gloo_threads);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(request.store, request.rank, request.world,
                                                     opts);
}

}  // namespace omnilearn::training::internal
