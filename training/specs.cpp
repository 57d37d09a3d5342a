#include "training/specs.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace omnilearn::training {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

std::string join(const std::vector<int64_t>& v) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << "]";
  return out.str();
}

void require_positive(const std::vector<int64_t>& v, const std::string& field) {
  for (int64_t x : v) {
    if (x <= 0) fail(field + " must hold positive widths, got " + join(v));
  }
}

bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

}  // namespace

void validate(const ModelSpec& spec) {
  if (spec.kind == "mlp") {
    require_positive(spec.hidden, "model.hidden");
  } else if (spec.kind == "cnn") {
    if (spec.channels.size() != 2) {
      fail("model.channels for cnn must have 2 entries (conv1, conv2), got " + join(spec.channels));
    }
    require_positive(spec.channels, "model.channels");
    require_positive(spec.fc, "model.fc");
  } else if (spec.kind == "resnet") {
    if (spec.channels.empty()) fail("model.channels for resnet must list at least one stage width");
    require_positive(spec.channels, "model.channels");
    if (spec.blocks_per_stage < 1) {
      fail("model.blocks_per_stage must be >= 1, got " + std::to_string(spec.blocks_per_stage));
    }
  } else if (spec.kind == "torchscript") {
    if (spec.path.empty()) {
      fail("model.path must name the TorchScript file (torch.jit.script(model).save(path))");
    }
  } else {
    fail("model.kind must be \"mlp\", \"cnn\", \"resnet\" or \"torchscript\", got \"" +
         spec.kind + "\"");
  }
}

void validate(const ScheduleSpec& spec) {
  if (spec.warmup_steps < 0) {
    fail("schedule.warmup_steps must be >= 0, got " + std::to_string(spec.warmup_steps));
  }
  if (spec.kind == "constant") return;
  if (spec.kind == "step") {
    if (spec.step_size <= 0) {
      fail("schedule.step_size must be > 0 for a step schedule, got " +
           std::to_string(spec.step_size));
    }
    if (!finite_positive(spec.gamma) || spec.gamma > 1) {
      fail("schedule.gamma must be in (0, 1], got " + std::to_string(spec.gamma));
    }
    return;
  }
  if (spec.kind == "cosine") {
    if (spec.total_steps <= spec.warmup_steps) {
      fail("schedule.total_steps must exceed warmup_steps for a cosine schedule, got " +
           std::to_string(spec.total_steps) + " <= " + std::to_string(spec.warmup_steps));
    }
    if (!std::isfinite(spec.min_lr) || spec.min_lr < 0) {
      fail("schedule.min_lr must be >= 0, got " + std::to_string(spec.min_lr));
    }
    return;
  }
  fail("schedule.kind must be \"constant\", \"step\" or \"cosine\", got \"" + spec.kind + "\"");
}

void validate(const OptimizerSpec& spec) {
  if (spec.kind != "sgd" && spec.kind != "adam" && spec.kind != "adamw") {
    fail("optimizer.kind must be \"sgd\", \"adam\" or \"adamw\", got \"" + spec.kind + "\"");
  }
  if (!finite_positive(spec.lr)) fail("optimizer.lr must be > 0, got " + std::to_string(spec.lr));
  if (!std::isfinite(spec.weight_decay) || spec.weight_decay < 0) {
    fail("optimizer.weight_decay must be >= 0, got " + std::to_string(spec.weight_decay));
  }
  if (spec.kind == "sgd") {
    if (!std::isfinite(spec.momentum) || spec.momentum < 0 || spec.momentum >= 1) {
      fail("optimizer.momentum must be in [0, 1), got " + std::to_string(spec.momentum));
    }
    if (spec.nesterov && spec.momentum == 0) {
      fail("optimizer.nesterov needs optimizer.momentum > 0");
    }
  } else {
    for (auto [name, beta] : {std::pair{"beta1", spec.beta1}, std::pair{"beta2", spec.beta2}}) {
      if (!std::isfinite(beta) || beta < 0 || beta >= 1) {
        fail(std::string("optimizer.") + name + " must be in [0, 1), got " + std::to_string(beta));
      }
    }
    if (!finite_positive(spec.eps)) {
      fail("optimizer.eps must be > 0, got " + std::to_string(spec.eps));
    }
  }
  validate(spec.schedule);
  if (spec.schedule.kind == "cosine" && spec.schedule.min_lr > spec.lr) {
    fail("schedule.min_lr must not exceed optimizer.lr");
  }
}

void validate(const DataSpec& spec) {
  if (spec.dataset == "fashion-mnist") {
    if (spec.path.empty()) fail("data.path must name the Fashion-MNIST directory");
    return;
  }
  if (spec.dataset == "tensors") {
    const TensorFilesSpec& t = spec.tensors;
    for (auto [split, file, x, y] : {std::tuple{"train", &t.train, &t.train_x, &t.train_y},
                                     std::tuple{"test", &t.test, &t.test_x, &t.test_y}}) {
      const std::string s = split;
      if (!file->empty() && (!x->empty() || !y->empty())) {
        fail("data." + s + " and data." + s + "_x / " + s + "_y both name the " + s +
             " split; give one torch.save file or one pair of .npy files");
      }
      if (file->empty() && (x->empty() != y->empty())) {
        fail("data." + s + (x->empty() ? "_y" : "_x") + " needs data." + s +
             (x->empty() ? "_x" : "_y") + ": .npy inputs and labels come in pairs");
      }
      if (file->empty() && x->empty()) {
        fail("a tensors dataset needs data." + s + " (a torch.save({\"x\": X, \"y\": Y}) file) " +
             "or data." + s + "_x and data." + s + "_y (.npy files)");
      }
    }
    if (t.classes < 0 || t.classes == 1) {
      fail("data.classes must be >= 2 (or 0: from the labels), got " + std::to_string(t.classes));
    }
    return;
  }
  if (spec.dataset != "synthetic") {
    fail("data.dataset must be \"fashion-mnist\", \"synthetic\" or \"tensors\", got \"" +
         spec.dataset + "\"");
  }
  const SyntheticSpec& s = spec.synthetic;
  const std::pair<const char*, int64_t> fields[] = {{"train_size", s.train_size},
                                                    {"test_size", s.test_size},
                                                    {"channels", s.channels},
                                                    {"height", s.height},
                                                    {"width", s.width}};
  for (auto [name, value] : fields) {
    if (value <= 0) {
      fail(std::string("data.synthetic.") + name + " must be > 0, got " + std::to_string(value));
    }
  }
  if (s.num_classes < 2) {
    fail("data.synthetic.num_classes must be >= 2, got " + std::to_string(s.num_classes));
  }
}

void validate_loss(const std::string& loss, const ModelSpec& model) {
  if (loss == "cross_entropy") return;
  if (loss != "mse") fail("loss must be \"cross_entropy\" or \"mse\", got \"" + loss + "\"");
  if (model.kind != "torchscript") {
    fail("loss = \"mse\" needs model.kind = \"torchscript\": the built-in models are "
         "classifiers");
  }
}

double scheduled_lr(const OptimizerSpec& spec, int64_t committed_steps) {
  const ScheduleSpec& s = spec.schedule;
  const int64_t step = committed_steps < 0 ? 0 : committed_steps;
  if (step < s.warmup_steps) {
    return spec.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  const int64_t t = step - s.warmup_steps;
  if (s.kind == "step") {
    return spec.lr * std::pow(s.gamma, static_cast<double>(t / s.step_size));
  }
  if (s.kind == "cosine") {
    const double span = static_cast<double>(s.total_steps - s.warmup_steps);
    const double progress = std::min(static_cast<double>(t), span) / span;
    return s.min_lr + (spec.lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return spec.lr;
}

}  // namespace omnilearn::training
