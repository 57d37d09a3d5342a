#pragma once
// Model zoo. Every model is a torch::nn::Sequential whose parameter names are those of the
// equivalent torch.nn.Sequential in PyTorch, so a state dict saved here loads there:
//
//   mlp    Flatten, [Linear, ReLU]*, Linear                         -> "1.weight", "3.bias", ...
//   cnn    Conv2d(C,c0,5,padding=2), ReLU, MaxPool2d(2), Conv2d(c0,c1,5), ReLU, MaxPool2d(2),
//          Flatten, [Linear, ReLU]*, Linear                         -> "0.weight", "7.weight", ...
//   resnet Conv2d(C,w0,3,padding=1,bias=False), BatchNorm2d, ReLU, BasicBlock*,
//   AdaptiveAvgPool2d(1),
//          Flatten, Linear. BasicBlock has conv1, bn1, conv2, bn2 (3x3, no bias) and, when the
//          width or stride changes, shortcut = Sequential(Conv2d 1x1 no bias, BatchNorm2d);
//          the first block of every stage after the first has stride 2.
//
// BatchNorm makes a rank's update depend on its own slice, so the exact-equivalence invariant
// holds for mlp and cnn only; the Trainer averages resnet's running statistics across ranks.

#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <vector>

#include "training/specs.hpp"

namespace omnilearn::training {

// Builds the model for inputs of shape {C, H, W} and `num_classes` outputs, initialized from
// spec.seed only (PyTorch's default init for Linear/Conv in mlp/cnn, Kaiming-normal for resnet
// convs), so equal specs give equal weights on every rank. Throws std::invalid_argument if the
// spec is invalid or the input is too small for the model.
torch::nn::Sequential make_model(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                                 int64_t num_classes);

}  // namespace omnilearn::training
