// Our optimizers (eager zero state, broadcastable) against torch::optim's reference formulas.
#include "training/optimizer.hpp"

#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>

namespace omnilearn::training {
namespace {

// Runs `steps` updates with the same random gradients through ours and torch's.
void compare(const OptimizerSpec& spec,
             std::unique_ptr<torch::optim::Optimizer> (*make)(std::vector<torch::Tensor>,
                                                              const OptimizerSpec&)) {
  torch::manual_seed(0);
  const torch::Tensor init_a = torch::randn({7, 5}), init_b = torch::randn({5});
  torch::Tensor ours_a = init_a.clone().requires_grad_(), ours_b = init_b.clone().requires_grad_();
  torch::Tensor ref_a = init_a.clone().requires_grad_(), ref_b = init_b.clone().requires_grad_();
  Optimizer ours(spec, {{"a", ours_a}, {"b", ours_b}});
  auto reference = make({ref_a, ref_b}, spec);
  for (int step = 1; step <= 6; ++step) {
    const torch::Tensor ga = torch::randn({7, 5}), gb = torch::randn({5});
    ours_a.mutable_grad() = ga.clone();
    ours_b.mutable_grad() = gb.clone();
    ref_a.mutable_grad() = ga.clone();
    ref_b.mutable_grad() = gb.clone();
    ours.step(spec.lr, step);
    reference->step();
  }
  EXPECT_TRUE(torch::allclose(ours_a, ref_a, 1e-6, 1e-7)) << spec.kind;
  EXPECT_TRUE(torch::allclose(ours_b, ref_b, 1e-6, 1e-7)) << spec.kind;
  EXPECT_FALSE(torch::allclose(ours_a, init_a));
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(std::vector<torch::Tensor> p,
                                                  const OptimizerSpec& s) {
  return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(s.lr)
                                                    .momentum(s.momentum)
                                                    .nesterov(s.nesterov)
                                                    .weight_decay(s.weight_decay));
}
std::unique_ptr<torch::optim::Optimizer> make_adam(std::vector<torch::Tensor> p,
                                                   const OptimizerSpec& s) {
  return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(s.lr)
                                                     .betas({s.beta1, s.beta2})
                                                     .eps(s.eps)
                                                     .weight_decay(s.weight_decay));
}
std::unique_ptr<torch::optim::Optimizer> make_adamw(std::vector<torch::Tensor> p,
                                                    const OptimizerSpec& s) {
  return std::make_unique<torch::optim::AdamW>(p, torch::optim::AdamWOptions(s.lr)
                                                      .betas({s.beta1, s.beta2})
                                                      .eps(s.eps)
                                                      .weight_decay(s.weight_decay));
}

TEST(Optimizer, SgdMatchesTorch) {
  OptimizerSpec s;
  s.lr = 0.1;
  compare(s, make_sgd);
  s.momentum = 0.9;
  compare(s, make_sgd);
  s.weight_decay = 0.01;
  s.nesterov = true;
  compare(s, make_sgd);
}

TEST(Optimizer, AdamMatchesTorch) {
  OptimizerSpec s;
  s.kind = "adam";
  s.lr = 0.01;
  compare(s, make_adam);
  s.weight_decay = 0.05;
  s.beta1 = 0.8;
  compare(s, make_adam);
}

TEST(Optimizer, AdamWMatchesTorch) {
  OptimizerSpec s;
  s.kind = "adamw";
  s.lr = 0.01;
  s.weight_decay = 0.1;
  compare(s, make_adamw);
}

TEST(Optimizer, StateIsNamedAndAllocatedUpFront) {
  torch::Tensor w = torch::zeros({3}).requires_grad_();
  OptimizerSpec s;
  s.momentum = 0.5;
  EXPECT_EQ(Optimizer(s, {{"w", w}}).state().front().first, "w.momentum_buffer");
  s.momentum = 0;
  EXPECT_TRUE(Optimizer(s, {{"w", w}}).state().empty());
  s.kind = "adam";
  const Optimizer adam(s, {{"w", w}});
  ASSERT_EQ(adam.state().size(), 2u);
  EXPECT_EQ(adam.state()[1].first, "w.exp_avg_sq");
  EXPECT_TRUE(torch::equal(adam.state()[0].second, torch::zeros({3})));
}

}  // namespace
}  // namespace omnilearn::training
