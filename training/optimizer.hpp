#pragma once
// SGD (momentum, Nesterov, weight decay), Adam and AdamW with the update formulas of
// torch.optim, but with state allocated up front (zeros) so it has the same layout on every rank
// and can be broadcast and checkpointed without a first step. For SGD, PyTorch's "first step
// copies the gradient into the momentum buffer" equals momentum * 0 + grad, so nothing changes.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "training/specs.hpp"

namespace omnilearn::training {

using NamedTensor = std::pair<std::string, at::Tensor>;

// Owns the optimizer state of a fixed list of parameters. Called from the training thread only.
class Optimizer {
 public:
  // Validates the spec (std::invalid_argument) and allocates zero state for every parameter.
  Optimizer(const OptimizerSpec& spec, std::vector<NamedTensor> parameters);

  // One update of every parameter from its .grad() with learning rate `lr`; `step_number` is
  // 1-based (Adam's bias correction uses it).
  void step(double lr, int64_t step_number);

  // The state tensors (live, not copies), named "<param>.<slot>" with slots momentum_buffer
  // (sgd with momentum) or exp_avg, exp_avg_sq (adam, adamw), in a fixed order.
  const std::vector<NamedTensor>& state() const { return state_; }

  const OptimizerSpec& spec() const { return spec_; }

 private:
  OptimizerSpec spec_;
  std::vector<NamedTensor> params_;
  std::vector<NamedTensor> state_;
};

}  // namespace omnilearn::training
