// The affine step-cost fit: exact on clean data, cautious on noisy data, robust to one outlier,
// and quick to forget a machine whose speed changed.
#include "controller/cost_model.hpp"

#include <gtest/gtest.h>

#include <random>

namespace omnilearn::scheduler {
namespace {

std::vector<StepObservation> steps(std::initializer_list<std::pair<int, double>> list) {
  std::vector<StepObservation> out;
  for (auto [b, t] : list) out.push_back({b, t});
  return out;
}

TEST(FitCostModel, RecoversAlphaAndBetaFromTwoBatches) {
  // t = 0.02 + 0.001 b, three steps at b = 64 and at b = 32.
  const auto s =
      steps({{64, 0.084}, {64, 0.084}, {64, 0.084}, {32, 0.052}, {32, 0.052}, {32, 0.052}});
  const auto m = fit_cost_model(s, CostFitConfig{});
  ASSERT_TRUE(m.has_value());
  EXPECT_NEAR(m->alpha, 0.02, 1e-12);
  EXPECT_NEAR(m->beta, 0.001, 1e-12);
}

TEST(FitCostModel, NeedsTwoBatchValuesWithEnoughStepsAndSpread) {
  CostFitConfig c;
  EXPECT_FALSE(fit_cost_model(steps({{64, 0.1}, {64, 0.1}, {64, 0.1}}), c));
  // The second batch has only two steps (min_steps_per_batch = 3).
  EXPECT_FALSE(fit_cost_model(steps({{64, 0.1}, {64, 0.1}, {64, 0.1}, {32, 0.06}, {32, 0.06}}), c));
  // 64 vs 63 is a 1.6% spread: below min_spread.
  EXPECT_FALSE(fit_cost_model(
      steps({{64, 0.1}, {64, 0.1}, {64, 0.1}, {63, 0.099}, {63, 0.099}, {63, 0.099}}), c));
  c.min_spread = 0.01;
  EXPECT_TRUE(fit_cost_model(
      steps({{64, 0.1}, {64, 0.1}, {64, 0.1}, {63, 0.099}, {63, 0.099}, {63, 0.099}}), c));
}

TEST(FitCostModel, NegativeInterceptIsRefitThroughTheOrigin) {
  // Time grows faster than linearly between these points: the affine line has alpha < 0.
  const auto m = fit_cost_model(
      steps({{32, 0.03}, {32, 0.03}, {32, 0.03}, {64, 0.07}, {64, 0.07}, {64, 0.07}}), {});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->alpha, 0.0);
  EXPECT_GT(m->beta, 0.0);
}

TEST(FitCostModel, OneTenfoldOutlierDoesNotMoveTheFit) {
  auto s = steps(
      {{64, 0.084}, {64, 0.084}, {64, 0.84}, {64, 0.084}, {32, 0.052}, {32, 0.052}, {32, 0.052}});
  const auto m = fit_cost_model(s, CostFitConfig{});
  // The outlier inflates the scatter, so the fit may decline (linear fallback), but if it
  // answers it must be the clean line.
  if (m) {
    EXPECT_NEAR(m->alpha, 0.02, 1e-9);
    EXPECT_NEAR(m->beta, 0.001, 1e-9);
  }
  CostFitConfig lenient;
  lenient.max_slope_error = 1e9;
  const auto forced = fit_cost_model(s, lenient);
  ASSERT_TRUE(forced.has_value());
  EXPECT_NEAR(forced->alpha, 0.02, 1e-9);
  EXPECT_NEAR(forced->beta, 0.001, 1e-9);
}

// With 10% noise on batches only 20% apart the slope is noise: the fit must decline rather
// than report a wild overhead. With batches 4x apart it must answer, close to the truth.
TEST(FitCostModel, DeclinesWhenNoiseSwampsTheSlope) {
  std::mt19937_64 rng(11);
  auto noisy = [&](double t) { return t * (1.0 + 0.1 * ((rng() % 2001) / 1000.0 - 1.0)); };
  const CostModel truth{0.01, 0.001};
  int accepted_close = 0, accepted_far = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<StepObservation> close, far;
    for (int k = 0; k < 5; ++k) {
      close.push_back({50, noisy(truth.time(50))});
      close.push_back({60, noisy(truth.time(60))});
      far.push_back({16, noisy(truth.time(16))});
      far.push_back({64, noisy(truth.time(64))});
    }
    if (fit_cost_model(close, {})) ++accepted_close;
    if (const auto m = fit_cost_model(far, {})) {
      ++accepted_far;
      EXPECT_NEAR(m->beta, truth.beta, 0.35 * truth.beta);
    }
  }
  EXPECT_LT(accepted_close, 10);  // a rare lucky draw only
  EXPECT_GT(accepted_far, 100);
}

TEST(FitCostModel, ForgettingFavoursRecentPoints) {
  // Three batch values; the oldest (b = 16) disagrees with the two recent ones.
  std::vector<StepObservation> s;
  for (int k = 0; k < 3; ++k) s.push_back({16, 0.08});  // truth: 0.036
  for (int k = 0; k < 3; ++k) s.push_back({32, 0.052});
  for (int k = 0; k < 3; ++k) s.push_back({64, 0.084});
  CostFitConfig slow_forget;
  slow_forget.forgetting = 1.0;
  slow_forget.max_slope_error = 1e9;
  CostFitConfig fast_forget = slow_forget;
  fast_forget.forgetting = 0.3;
  const auto equal = fit_cost_model(s, slow_forget);
  const auto recent = fit_cost_model(s, fast_forget);
  ASSERT_TRUE(equal && recent);
  EXPECT_NEAR(recent->time(48), 0.068, 0.001);
  EXPECT_GT(std::abs(equal->time(48) - 0.068), std::abs(recent->time(48) - 0.068));
}

TEST(CostHistory, KeepsABoundedHistory) {
  CostFitConfig c;
  c.history = 8;
  CostHistory h(c);
  for (int k = 0; k < 20; ++k) h.observe(32, 0.1);
  EXPECT_EQ(h.steps().size(), 8u);
}

TEST(CostHistory, SpeedChangeDropsTheOldRegime) {
  CostHistory h;
  const CostModel before{0.02, 0.001}, after{0.02, 0.002};  // the worker got 2x slower per sample
  for (int k = 0; k < 5; ++k) h.observe(64, before.time(64));
  for (int k = 0; k < 5; ++k) h.observe(32, before.time(32));
  h.checkpoint();
  ASSERT_TRUE(h.model().has_value());
  EXPECT_NEAR(h.model()->beta, before.beta, 1e-12);
  for (int k = 0; k < 3; ++k) h.observe(32, after.time(32));
  EXPECT_EQ(h.regime_changes(), 1u);
  EXPECT_EQ(h.steps().size(), 3u);  // only the new regime is left
  EXPECT_FALSE(h.model().has_value());
  for (int k = 0; k < 3; ++k) h.observe(64, after.time(64));
  ASSERT_TRUE(h.model().has_value());
  EXPECT_NEAR(h.model()->beta, after.beta, 1e-12);
  EXPECT_NEAR(h.model()->alpha, after.alpha, 1e-12);
}

TEST(CostHistory, SpeedChangeAtAnUnchangedBatchIsCaughtBeforeThereIsAFit) {
  CostHistory h;
  for (int k = 0; k < 5; ++k) h.observe(64, 0.1);
  h.checkpoint();  // no fit (one batch value): the reference is the median time at 64
  for (int k = 0; k < 3; ++k) h.observe(64, 0.2);
  EXPECT_EQ(h.regime_changes(), 1u);
  EXPECT_EQ(h.steps().size(), 3u);
}

TEST(CostHistory, OneOutlierIsNotAChange) {
  CostHistory h;
  for (int k = 0; k < 5; ++k) h.observe(64, 0.1);
  h.checkpoint();
  h.observe(64, 1.0);
  h.observe(64, 0.1);
  h.observe(64, 1.0);
  h.observe(64, 0.1);
  EXPECT_EQ(h.regime_changes(), 0u);
  EXPECT_EQ(h.steps().size(), 9u);
}

// CostHistory keeps its per-batch statistics step by step; they must give exactly the fit that
// fit_cost_model computes from scratch over the same steps, through evictions and resets.
TEST(CostHistory, IncrementalFitEqualsTheFitFromScratch) {
  std::mt19937_64 rng(8);
  int compared = 0;
  for (int run = 0; run < 50; ++run) {
    CostFitConfig c;
    c.history = 8 + rng() % 40;
    c.forgetting = 0.5 + 0.5 * ((rng() % 1000) / 1000.0);
    c.max_slope_error = 1e9;  // compare every fit, not only the confident ones
    CostHistory h(c);
    int batch = 32;
    double speed = 1000.0;
    for (int step = 0; step < 300; ++step) {
      if (rng() % 5 == 0) batch = 8 + static_cast<int>(rng() % 120);
      if (rng() % 97 == 0) speed *= 3.0;  // now and then a regime change
      const double noise = 1.0 + 0.1 * ((rng() % 2001) / 1000.0 - 1.0);
      h.observe(batch, (0.01 + batch / speed) * noise);
      if (step % 7 == 0) h.checkpoint();
      const auto incremental = h.model();
      const auto scratch = fit_cost_model(h.steps(), c);
      ASSERT_EQ(incremental.has_value(), scratch.has_value()) << "run " << run << " step " << step;
      if (incremental) {
        ++compared;
        ASSERT_NEAR(incremental->alpha, scratch->alpha, 1e-9 * (1.0 + scratch->alpha));
        ASSERT_NEAR(incremental->beta, scratch->beta, 1e-9 * scratch->beta);
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

TEST(CostHistory, RejectsBadConfigAndSteps) {
  CostFitConfig c;
  c.forgetting = 0.0;
  EXPECT_THROW(CostHistory{c}, std::invalid_argument);
  c = {};
  c.min_steps_per_batch = 20;  // two batches of 20 do not fit a 32-step history
  EXPECT_THROW(CostHistory{c}, std::invalid_argument);
  CostHistory h;
  EXPECT_THROW(h.observe(0, 0.1), std::invalid_argument);
  EXPECT_THROW(h.observe(4, -1.0), std::invalid_argument);
}

}  // namespace
}  // namespace omnilearn::scheduler
