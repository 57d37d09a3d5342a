#include "dashboard/progress_line.hpp"

#include <gtest/gtest.h>

namespace omnilearn::dashboard {
namespace {

using Json = nlohmann::json;

Json step(std::int64_t s, double time, std::vector<int> batches = {64, 32}, double loss = 0.5) {
  return {{"event", "step"}, {"step", s}, {"time", time}, {"loss", loss}, {"batches", batches}};
}

TEST(ProgressLine, ShowsStepPercentEtaThroughputLossAndBatches) {
  ProgressLine p(100);
  for (int s = 1; s <= 21; ++s) p.observe(step(s, 1000 + 0.5 * (s - 1)));  // 2 steps/s
  EXPECT_DOUBLE_EQ(p.steps_per_second(), 2.0);
  EXPECT_DOUBLE_EQ(p.eta_seconds(), (100 - 21) / 2.0);
  EXPECT_EQ(p.render(), "step 21/100  21.0%  ETA 40s  192 samples/s  loss 0.5000  batches [64,32]");
}

TEST(ProgressLine, UnknownTotalAndTooFewStepsSayLess) {
  ProgressLine p;
  p.observe(step(1, 5.0));
  EXPECT_EQ(p.render(), "step 1  loss 0.5000  batches [64,32]");
  p.set_total_steps(10);
  EXPECT_EQ(p.render(), "step 1/10  10.0%  ETA ?  loss 0.5000  batches [64,32]");
}

TEST(ProgressLine, IgnoresOtherEventsAndRestartsTheRateWhenStepsGoBack) {
  ProgressLine p(1000);
  p.observe(Json{{"event", "plan"}, {"step", 500}, {"time", 1.0}});
  EXPECT_FALSE(p.has_step());
  for (int s = 1; s <= 10; ++s) p.observe(step(s, s));  // 1 step/s
  p.observe(step(8, 20.0));                             // a recovery redoes steps 8..
  EXPECT_EQ(p.steps_per_second(), 0);                   // one point: no rate yet
  p.observe(step(9, 20.25));
  EXPECT_DOUBLE_EQ(p.steps_per_second(), 4.0);
}

TEST(ProgressLine, AnAsynchronousJobShowsUpdatesPerSecondAndStaleness) {
  ProgressLine p;
  p.observe({{"event", "asp_interval"}, {"step", 40}, {"total", 200}, {"loss", 0.25},
             {"updates_per_s", 20.0}, {"staleness", {{"mean", 1.5}, {"p95", 3}, {"max", 4}}}});
  EXPECT_TRUE(p.has_step());
  EXPECT_DOUBLE_EQ(p.eta_seconds(), 8.0);
  EXPECT_EQ(p.render(), "update 40/200  20.0%  ETA 8s  20.0 updates/s  staleness mean 1.50 p95 3 "
                        "max 4  loss 0.2500");
}

TEST(ProgressLine, CutsToTheTerminalWidth) {
  ProgressLine p(100);
  p.observe(step(1, 1.0, std::vector<int>(50, 16)));
  EXPECT_EQ(p.render(40).size(), 40u);
}

TEST(ProgressLine, FormatsDurations) {
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(-1), "?");
}

}  // namespace
}  // namespace omnilearn::dashboard
