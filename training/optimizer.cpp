#include "training/optimizer.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

namespace omnilearn::training {

Optimizer::Optimizer(const OptimizerSpec& spec, std::vector<NamedTensor> parameters)
    : spec_(spec), params_(std::move(parameters)) {
  validate(spec_);
  for (const auto& [name, p] : params_) {
    if (spec_.kind == "sgd") {
      if (spec_.momentum != 0) state_.emplace_back(name + ".momentum_buffer", at::zeros_like(p));
    } else {
      state_.emplace_back(name + ".exp_avg", at::zeros_like(p));
      state_.emplace_back(name + ".exp_avg_sq", at::zeros_like(p));
    }
  }
}

void Optimizer::step(double lr, int64_t step_number) {
  c10::NoGradGuard no_grad;
  const double wd = spec_.weight_decay;
  size_t slot = 0;
  for (auto& [name, p] : params_) {
    at::Tensor grad = p.grad();
    if (spec_.kind == "sgd") {
      if (wd != 0) grad = grad.add(p, wd);
      if (spec_.momentum != 0) {
        at::Tensor& buf = state_[slot++].second;
        buf.mul_(spec_.momentum).add_(grad);
        grad = spec_.nesterov ? grad.add(buf, spec_.momentum) : buf;
      }
      p.add_(grad, -lr);
      continue;
    }
    at::Tensor& exp_avg = state_[slot++].second;
    at::Tensor& exp_avg_sq = state_[slot++].second;
    if (spec_.kind == "adamw") {
      p.mul_(1 - lr * wd);
    } else if (wd != 0) {
      grad = grad.add(p, wd);
    }
    const double bias1 = 1 - std::pow(spec_.beta1, static_cast<double>(step_number));
    const double bias2 = 1 - std::pow(spec_.beta2, static_cast<double>(step_number));
    exp_avg.mul_(spec_.beta1).add_(grad, 1 - spec_.beta1);
    exp_avg_sq.mul_(spec_.beta2).addcmul_(grad, grad, 1 - spec_.beta2);
    const at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(spec_.eps);
    p.addcdiv_(exp_avg, denom, -lr / bias1);
  }
}

}  // namespace omnilearn::training
