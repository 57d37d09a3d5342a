#include "training/models.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace omnilearn::training {
namespace {

namespace nn = torch::nn;

struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)),
        bn1(out),
        conv2(nn::Conv2dOptions(out, out, 3).stride(1).padding(1).bias(false)),
        bn2(out) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != out) {
      shortcut =
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out));
      register_module("shortcut", shortcut);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (shortcut.is_empty() ? x : shortcut->forward(x)));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

int64_t fan_in(const torch::Tensor& weight) { return weight.numel() / weight.size(0); }

// Re-initializes every parameter from one local generator: the global generator would make the
// weights depend on what other threads (ranks) drew before.
void initialize(nn::Sequential& model, uint64_t seed, bool kaiming_convs) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  for (const auto& module : model->modules(/*include_self=*/false)) {
    if (auto* linear = module->as<nn::Linear>()) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in(linear->weight)));
      linear->weight.uniform_(-bound, bound, gen);
      if (linear->bias.defined()) linear->bias.uniform_(-bound, bound, gen);
    } else if (auto* conv = module->as<nn::Conv2d>()) {
      if (kaiming_convs) {
        // kaiming_normal_(mode="fan_out", nonlinearity="relu"), as torchvision's ResNet.
        const int64_t fan_out = conv->weight.numel() / conv->weight.size(1);
        conv->weight.normal_(0.0, std::sqrt(2.0 / static_cast<double>(fan_out)), gen);
      } else {
        const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in(conv->weight)));
        conv->weight.uniform_(-bound, bound, gen);
      }
      if (conv->bias.defined()) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in(conv->weight)));
        conv->bias.uniform_(-bound, bound, gen);
      }
    } else if (auto* bn = module->as<nn::BatchNorm2d>()) {
      bn->weight.fill_(1.0);
      bn->bias.fill_(0.0);
    }
  }
}

int64_t flat_size(nn::Sequential& model, const std::vector<int64_t>& input_shape) {
  std::vector<int64_t> shape{1};
  shape.insert(shape.end(), input_shape.begin(), input_shape.end());
  torch::NoGradGuard no_grad;
  return model->forward(torch::zeros(shape)).numel();
}

void add_classifier(nn::Sequential& model, int64_t in, const std::vector<int64_t>& widths,
                    int64_t num_classes) {
  for (int64_t width : widths) {
    model->push_back(nn::Linear(in, width));
    model->push_back(nn::ReLU());
    in = width;
  }
  model->push_back(nn::Linear(in, num_classes));
}

}  // namespace

torch::nn::Sequential make_model(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                                 int64_t num_classes) {
  validate(spec);
  if (input_shape.size() != 3 || input_shape[0] <= 0 || input_shape[1] <= 0 ||
      input_shape[2] <= 0) {
    throw std::invalid_argument("model input shape must be {channels, height, width} > 0");
  }
  if (num_classes < 2) throw std::invalid_argument("model needs at least 2 classes");
  const int64_t c = input_shape[0], h = input_shape[1], w = input_shape[2];
  nn::Sequential model;
  if (spec.kind == "mlp") {
    model->push_back(nn::Flatten());
    add_classifier(model, c * h * w, spec.hidden, num_classes);
  } else if (spec.kind == "cnn") {
    // 5x5 "same" conv, pool, 5x5 valid conv, pool: needs at least 12x12 inputs.
    if (h < 12 || w < 12) {
      throw std::invalid_argument("cnn needs inputs of at least 12x12, got " + std::to_string(h) +
                                  "x" + std::to_string(w));
    }
    model->push_back(nn::Conv2d(nn::Conv2dOptions(c, spec.channels[0], 5).padding(2)));
    model->push_back(nn::ReLU());
    model->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2)));
    model->push_back(nn::Conv2d(nn::Conv2dOptions(spec.channels[0], spec.channels[1], 5)));
    model->push_back(nn::ReLU());
    model->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2)));
    model->push_back(nn::Flatten());
    add_classifier(model, flat_size(model, input_shape), spec.fc, num_classes);
  } else {
    const std::vector<int64_t>& widths = spec.channels;
    model->push_back(nn::Conv2d(nn::Conv2dOptions(c, widths[0], 3).padding(1).bias(false)));
    model->push_back(nn::BatchNorm2d(widths[0]));
    model->push_back(nn::ReLU());
    int64_t in = widths[0];
    for (size_t stage = 0; stage < widths.size(); ++stage) {
      for (int64_t b = 0; b < spec.blocks_per_stage; ++b) {
        const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        model->push_back(BasicBlock(in, widths[stage], stride));
        in = widths[stage];
      }
    }
    model->push_back(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(1)));
    model->push_back(nn::Flatten());
    model->push_back(nn::Linear(in, num_classes));
  }
  initialize(model, spec.seed, spec.kind == "resnet");
  return model;
}

Model::Model(torch::nn::Sequential sequential) : sequential_(std::move(sequential)) {}
Model::Model(std::shared_ptr<torch::jit::Module> script) : script_(std::move(script)) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

at::Tensor Model::forward(const at::Tensor& x) {
  if (!script_) return sequential_->forward(x);
  const c10::IValue out = script_->forward({x});
  if (!out.isTensor()) {
    throw ModelError("the TorchScript model's forward returned a " + out.tagKind() +
                     "; it must return one tensor (the logits or predictions)");
  }
  return out.toTensor();
}

void Model::set_training(bool on) {
  if (script_) {
    script_->train(on);
  } else {
    sequential_->train(on);
  }
}

std::vector<NamedTensor> Model::named_parameters() const {
  std::vector<NamedTensor> out;
  if (script_) {
    for (const auto& item : script_->named_parameters(/*recurse=*/true)) {
      out.emplace_back(item.name, item.value);
    }
  } else {
    for (const auto& item : sequential_->named_parameters()) {
      out.emplace_back(item.key(), item.value());
    }
  }
  return out;
}

std::vector<NamedTensor> Model::named_buffers() const {
  std::vector<NamedTensor> out;
  if (script_) {
    for (const auto& item : script_->named_buffers(/*recurse=*/true)) {
      out.emplace_back(item.name, item.value);
    }
  } else {
    for (const auto& item : sequential_->named_buffers()) {
      out.emplace_back(item.key(), item.value());
    }
  }
  return out;
}

void Model::to(const at::Device& device, at::ScalarType dtype) {
  if (!script_) {
    sequential_->to(device, dtype);
    return;
  }
  // Not jit::Module::to(dtype): it converts integer buffers too (num_batches_tracked would
  // become a double). set_data keeps each tensor's identity, so the module sees the change.
  torch::NoGradGuard no_grad;
  for (auto list : {named_parameters(), named_buffers()}) {
    for (auto& [name, t] : list) {
      const at::Tensor moved = t.is_floating_point() ? t.to(device, dtype) : t.to(device);
      if (!moved.is_same(t)) t.set_data(moved);
    }
  }
}

Model load_torchscript(const std::string& path) {
  check_torchscript_file(path);
  auto module = std::make_shared<torch::jit::Module>();
  try {
    *module = torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    throw ModelError(path + ": cannot load it as a TorchScript module (" + why +
                     "): save it with torch.jit.script(model).save(path)");
  }
  if (!module->find_method("forward")) {
    throw ModelError(path + ": the TorchScript module has no forward method");
  }
  return Model(std::move(module));
}

Model build_model(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                  int64_t num_classes) {
  validate(spec);
  if (spec.kind == "torchscript") return load_torchscript(spec.path);
  return Model(make_model(spec, input_shape, num_classes));
}

void save_head_first_mlp(const std::string& path, int64_t inputs,
                         const std::vector<int64_t>& widths, int64_t classes, uint64_t seed) {
  if (inputs < 1 || classes < 1 || widths.empty()) {
    throw std::invalid_argument("save_head_first_mlp: needs inputs >= 1, classes >= 1 and a width");
  }
  auto gen = at::detail::createCPUGenerator(seed);
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  auto linear = [&](const std::string& type, int64_t in, int64_t out) {
    torch::jit::Module m(c10::QualifiedName("__torch__.head_first." + type), cu);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    m.register_parameter("weight",
                         at::empty({out, in}).uniform_(-bound, bound, gen).requires_grad_(), false);
    m.register_parameter("bias", at::empty({out}).uniform_(-bound, bound, gen).requires_grad_(),
                         false);
    m.define("def forward(self, x):\n    return torch.addmm(self.bias, x, self.weight.t())\n");
    return m;
  };
  // Built in use order (fc1's weights drawn first), registered head first.
  std::vector<torch::jit::Module> hidden;
  int64_t in = inputs;
  for (size_t i = 0; i < widths.size(); ++i) {
    hidden.push_back(linear("Fc" + std::to_string(i + 1), in, widths[i]));
    in = widths[i];
  }
  torch::jit::Module head = linear("Head", in, classes);
  torch::jit::Module model(c10::QualifiedName("__torch__.head_first.HeadFirstMlp"), cu);
  model.register_module("head", head);
  for (size_t i = hidden.size(); i-- > 0;) {
    model.register_module("fc" + std::to_string(i + 1), hidden[i]);
  }
  std::string forward = "def forward(self, x):\n    x = torch.flatten(x, 1)\n";
  for (size_t i = 0; i < hidden.size(); ++i) {
    forward += "    x = torch.relu(self.fc" + std::to_string(i + 1) + ".forward(x))\n";
  }
  forward += "    return self.head.forward(x)\n";
  model.define(forward);
  try {
    model.save(path);
  } catch (const std::exception& e) {
    std::string why = e.what();
    throw ModelError(path + ": cannot write the model (" + why.substr(0, why.find('\n')) + ")");
  }
}

}  // namespace omnilearn::training
