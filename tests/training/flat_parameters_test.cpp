// The flat view asynchronous training exchanges (issue 13): the trainable parameters as one
// float32 vector, a range of it set in place, and the flat gradient of a batch with no step.
// A flat gradient applied by hand with plain SGD is the step a lone Trainer takes.
#include "tests/training/test_support.hpp"

namespace omnilearn::training {
namespace {

std::vector<float> flat(const Trainer& t) {
  std::vector<float> out(static_cast<size_t>(t.flat_parameter_count()));
  t.copy_flat_parameters(out.data());
  return out;
}

TEST(FlatParameters, CountAndRoundTripInModelOrder) {
  Trainer t(testing::synthetic_config(200, 12));
  int64_t expected = 0;
  for (const auto& [name, p] : t.named_parameters()) expected += p.numel();
  EXPECT_EQ(t.flat_parameter_count(), expected);
  std::vector<float> v = flat(t);
  const auto first = t.named_parameters().front().second.reshape({-1});
  EXPECT_EQ(v[0], first[0].item<float>());
  // Setting a range that spans two parameters changes exactly that range.
  const int64_t from = first.numel() - 3;
  std::vector<float> patch(6, 0.25f);
  t.set_flat_parameters(patch.data(), from, 6);
  const std::vector<float> after = flat(t);
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    const bool patched = i >= from && i < from + 6;
    EXPECT_EQ(after[static_cast<size_t>(i)], patched ? 0.25f : v[static_cast<size_t>(i)]) << i;
  }
  EXPECT_THROW(t.set_flat_parameters(patch.data(), t.flat_parameter_count() - 2, 6),
               std::invalid_argument);
  EXPECT_THROW(t.set_flat_parameters(patch.data(), -1, 2), std::invalid_argument);
}

TEST(FlatParameters, AFlatGradientAppliedWithSgdIsTheLoneTrainersStep) {
  TrainerConfig config = testing::synthetic_config(256, 12);
  config.optimizer.momentum = 0;  // plain SGD: p -= lr g
  Trainer stepped(config);
  Trainer by_hand(config);
  const EpochSampler sampler(256, config.data.seed);
  const std::vector<int64_t> indices = sampler.slice(Cursor{}, {64}, 0);
  std::vector<float> g(static_cast<size_t>(by_hand.flat_parameter_count()));
  const auto result = by_hand.flat_gradient(indices, g.data());
  EXPECT_EQ(result.samples, 64);
  EXPECT_GT(result.compute_time_s, 0.0);
  // No parameter moved.
  EXPECT_EQ(flat(by_hand), flat(stepped));
  std::vector<float> p = flat(by_hand);
  const float lr = static_cast<float>(config.optimizer.lr);
  for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
  by_hand.set_flat_parameters(p.data(), 0, static_cast<int64_t>(p.size()));
  const StepResult step = stepped.step({64});
  ASSERT_TRUE(step.committed);
  EXPECT_NEAR(result.loss, step.loss, 1e-6);
  const std::vector<float> a = flat(stepped), b = flat(by_hand);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  EXPECT_LE(worst, 1e-6);
  EXPECT_THROW(by_hand.flat_gradient({}, g.data()), std::invalid_argument);
}

}  // namespace
}  // namespace omnilearn::training
