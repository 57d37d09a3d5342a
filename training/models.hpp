#pragma once
// Model zoo, and users' own models. A built-in model is a torch::nn::Sequential whose parameter
// names are those of the equivalent torch.nn.Sequential in PyTorch, so a state dict saved here
// loads there:
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
//
// A "torchscript" model is any PyTorch module saved with torch.jit.script(model).save(path) (or
// torch.jit.trace): loaded with torch::jit::load, its parameters and buffers keep the names
// Python's named_parameters()/named_buffers() give them ("conv1.weight"), so the checkpoint's
// state dict loads back into the same module with load_state_dict.

#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "training/optimizer.hpp"  // NamedTensor
#include "training/specs.hpp"
#include "training/user_files.hpp"  // ModelError

namespace torch::jit {
struct Module;
}

namespace omnilearn::training {

// Builds the model for inputs of shape {C, H, W} and `num_classes` outputs, initialized from
// spec.seed only (PyTorch's default init for Linear/Conv in mlp/cnn, Kaiming-normal for resnet
// convs), so equal specs give equal weights on every rank. Throws std::invalid_argument if the
// spec is invalid or the input is too small for the model.
torch::nn::Sequential make_model(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                                 int64_t num_classes);

// The network a Trainer trains: a built-in Sequential or a TorchScript module, behind one
// interface. Parameters and buffers are listed in the module's own order, which is the same on
// every rank that builds the same spec (for TorchScript, the order of the attributes in the
// archive, as in Python). Called from the one thread that owns the Trainer.
class Model {
 public:
  explicit Model(torch::nn::Sequential sequential);
  explicit Model(std::shared_ptr<torch::jit::Module> script);
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  // The output for a batch. Throws ModelError if a TorchScript forward returns no tensor.
  at::Tensor forward(const at::Tensor& x);
  // Training mode (BatchNorm uses batch statistics, dropout is on) or evaluation mode.
  void set_training(bool on);
  // The live tensors (not copies), in model order, with PyTorch's names.
  std::vector<NamedTensor> named_parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  // Moves parameters and buffers to `device` and floating-point ones to `dtype`.
  void to(const at::Device& device, at::ScalarType dtype);
  bool is_torchscript() const { return script_ != nullptr; }

 private:
  torch::nn::Sequential sequential_{nullptr};
  std::shared_ptr<torch::jit::Module> script_;
};

// Loads a module saved with torch.jit.save, on the CPU. Throws ModelError naming the file when
// it is missing, is not a TorchScript archive, or has no forward method.
Model load_torchscript(const std::string& path);

// The model `spec` names: make_model for the built-in kinds, load_torchscript for
// "torchscript" (which takes its input shape and outputs from the file; the Trainer checks them
// against the data). Throws std::invalid_argument or ModelError.
Model build_model(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                  int64_t num_classes);

// Writes to `path` a TorchScript MLP whose modules are registered in the reverse of the order
// forward uses them: "head" first, then "fc<n>" down to "fc1", while forward runs flatten, fc1,
// ReLU, ..., fc<n>, ReLU, head (n = widths.size() >= 1, Linear layers, `inputs` features in,
// `classes` out, weights uniform in +-1/sqrt(fan-in) from `seed`). Reverse registration order
// is then the order forward runs, the opposite of the order backward makes the gradients
// ready, as in a user's module that declares its head before its body: what the tests and the
// benchmark of the gradient buckets' order train. Throws ModelError if it cannot be written.
void save_head_first_mlp(const std::string& path, int64_t inputs,
                         const std::vector<int64_t>& widths, int64_t classes, uint64_t seed);

}  // namespace omnilearn::training
