#include "dashboard/job_timeline.hpp"

#include <gtest/gtest.h>

namespace omnilearn::dashboard {
namespace {

using Json = nlohmann::json;

Json step_event(std::int64_t step, double time, std::vector<std::pair<std::string, int>> workers,
                double compute_scale = 0.001) {
  Json ws = Json::array();
  Json batches = Json::array();
  int rank = 0;
  for (const auto& [trainer, batch] : workers) {
    ws.push_back({{"trainer", trainer},
                  {"node", "node-" + trainer},
                  {"rank", rank++},
                  {"batch", batch},
                  {"samples_per_s", batch / (batch * compute_scale)},
                  {"compute_time_s", batch * compute_scale},
                  {"step_time_s", 0.2}});
    batches.push_back(batch);
  }
  return {{"time", time},       {"event", "step"},    {"step", step},
          {"epoch", 0},         {"loss", 2.0 / step}, {"generation", 1},
          {"batches", batches}, {"step_time_s", 0.2}, {"allreduce_time_s", 0.01},
          {"workers", ws}};
}

TEST(ThinnedSeries, StaysBoundedAndSpansTheWholeRun) {
  ThinnedSeries<int> series(100);
  for (int i = 0; i < 100000; ++i) series.add(i);
  const auto& points = series.points();
  EXPECT_LE(points.size(), 100u);
  EXPECT_GE(points.size(), 50u);
  EXPECT_EQ(points.front(), 0);
  EXPECT_GE(points.back(), 100000 - static_cast<int>(series.stride()));
  for (std::size_t i = 1; i < points.size(); ++i) {
    EXPECT_EQ(points[i] - points[i - 1], static_cast<int>(series.stride())) << i;
  }
}

TEST(JobTimeline, CountsWhatMetricsNeed) {
  JobTimeline t("j1");
  t.add(Json{{"time", 100.0},
             {"event", "submitted"},
             {"name", "demo"},
             {"policy", "proportional"},
             {"global_batch", 96}});
  t.add(Json{{"time", 101.0},
             {"event", "generation"},
             {"generation", 1},
             {"step", 0},
             {"members", {"a", "b"}},
             {"batches", {48, 48}},
             {"reason", "start"}});
  for (int s = 1; s <= 10; ++s) t.add(step_event(s, 101.0 + s, {{"a", 48}, {"b", 48}}));
  t.add(Json{
      {"time", 112.0}, {"event", "plan"}, {"step", 10}, {"version", 2}, {"batches", {64, 32}}});
  t.add(Json{{"time", 113.0}, {"event", "trainer_exited"}, {"trainer", "b"}, {"exit_code", 137}});
  t.add(Json{{"time", 114.0},
             {"event", "recovered"},
             {"step", 9},
             {"recovery_s", 1.5},
             {"lost_steps", 1}});
  t.add(Json{{"time", 115.0}, {"event", "recovered"}, {"step", 9}, {"lost_steps", 2}});
  EXPECT_FALSE(t.finished());
  t.add(Json{{"time", 120.0}, {"event", "finished"}, {"status", "succeeded"}, {"step", 10}});

  EXPECT_TRUE(t.finished());
  EXPECT_EQ(t.status(), "succeeded");
  EXPECT_EQ(t.steps_committed(), 10u);
  EXPECT_EQ(t.plan_changes(), 1u);
  EXPECT_EQ(t.generations(), 1u);
  EXPECT_EQ(t.recoveries(), 2u);
  EXPECT_EQ(t.lost_steps(), 3u);
  EXPECT_EQ(t.trainer_failures(), 1u);
  EXPECT_EQ(t.step_seconds().count(), 10u);
  EXPECT_DOUBLE_EQ(t.allreduce_seconds().sum(), 10 * 0.01);
  ASSERT_EQ(t.timeline().size(), 7u);  // every event but the steps
  EXPECT_EQ(t.timeline()[2].category, "plan");
  EXPECT_EQ(t.timeline()[3].category, "death");
  EXPECT_EQ(t.timeline()[4].category, "recovery");
}

TEST(JobTimeline, ChartDataHasAGapWhereAWorkerHadNoPart) {
  JobTimeline t("j2");
  t.add(step_event(1, 1.0, {{"a", 64}, {"b", 32}}));
  t.add(step_event(2, 2.0, {{"a", 96}}));             // b left
  t.add(step_event(3, 3.0, {{"a", 48}, {"c", 48}}));  // c joined
  auto data = t.chart_data();
  EXPECT_EQ(data["steps"], Json::array({1, 2, 3}));
  ASSERT_EQ(data["workers"].size(), 3u);
  EXPECT_EQ(data["workers"][0]["trainer"], "a");
  EXPECT_EQ(data["workers"][0]["batch"], Json::array({64, 96, 48}));
  EXPECT_EQ(data["workers"][1]["batch"], Json::parse("[32, null, null]"));
  EXPECT_EQ(data["workers"][2]["batch"], Json::parse("[null, null, 48]"));
  EXPECT_EQ(data["workers"][2]["node"], "node-c");
  // Each step's batches sum to the global batch: the stacked chart's top line.
  for (std::size_t i = 0; i < 3; ++i) {
    int sum = 0;
    for (const auto& w : data["workers"]) {
      if (!w["batch"][i].is_null()) sum += w["batch"][i].get<int>();
    }
    EXPECT_EQ(sum, 96);
  }
}

TEST(JobTimeline, AnAsynchronousJobsIntervalsAreItsPoints) {
  JobTimeline t("asp");
  auto interval = [](std::int64_t step, double time, std::int64_t updates, std::int64_t p95) {
    return Json{{"time", time},
                {"event", "asp_interval"},
                {"step", step},
                {"loss", 0.5},
                {"interval_s", 2.0},
                {"updates", updates},
                {"staleness", {{"mean", 1.5}, {"p95", p95}, {"max", p95 + 2}}},
                {"workers",
                 {{"a", {{"batch", 48}, {"compute_time_s", 0.1}, {"updates", 6}, {"live", true}}},
                  {"b", {{"batch", 16}, {"compute_time_s", 0.1}, {"updates", 4}, {"live", true}}},
                  {"c", {{"batch", 8}, {"compute_time_s", 0.1}, {"live", false}}}}}};
  };
  t.add(interval(10, 1.0, 10, 3));
  auto with_eval = interval(30, 2.0, 20, 4);
  with_eval["test_accuracy"] = 0.75;
  with_eval["test_loss"] = 0.6;
  with_eval["eval_version"] = 24;  // pulled before this interval's last updates
  t.add(with_eval);
  t.add(Json{{"time", 2.5}, {"event", "batch_fenced"}, {"worker", 2}, {"batch", 7},
             {"samples", 16}, {"outcome", "dealt_again"}});
  EXPECT_EQ(t.last_step(), 30);
  auto data = t.chart_data();
  EXPECT_EQ(data["asp"], true);
  EXPECT_EQ(data["steps"], Json::array({10, 30}));
  ASSERT_EQ(data["workers"].size(), 2u);  // c had gone
  EXPECT_EQ(data["workers"][0]["batch"], Json::array({48, 48}));
  // Updates per second of each worker: its updates in the interval over the interval's 2 s.
  EXPECT_EQ(data["workers"][0]["updates_per_s"], Json::array({3.0, 3.0}));
  EXPECT_EQ(data["workers"][1]["updates_per_s"], Json::array({2.0, 2.0}));
  EXPECT_EQ(data["staleness"]["mean"], Json::array({1.5, 1.5}));
  EXPECT_EQ(data["staleness"]["p95"], Json::array({3, 4}));
  EXPECT_EQ(data["staleness"]["max"], Json::array({5, 6}));
  // The evaluation is placed at the version it evaluated.
  EXPECT_EQ(data["evals"]["steps"], Json::array({24}));
  EXPECT_EQ(data["evals"]["accuracy"], Json::array({0.75}));
  ASSERT_EQ(t.steps().size(), 2u);
  EXPECT_DOUBLE_EQ(t.steps()[1].step_time_s, 0.1);  // 2 s / 20 updates
  EXPECT_DOUBLE_EQ(t.steps()[0].workers[1].samples_per_s, 160.0);
  ASSERT_FALSE(t.timeline().empty());
  EXPECT_EQ(t.timeline().back().category, "recovery");
  EXPECT_NE(t.timeline().back().text.find("batch 7 of worker 2 (16 samples)"), std::string::npos)
      << t.timeline().back().text;
}

TEST(JobTimeline, ASynchronousJobsDataHasNoAsynchronousSeries) {
  JobTimeline t("bsp");
  t.add(Json{{"time", 1.0}, {"event", "step"}, {"step", 1}, {"loss", 1.0},
             {"workers", {{{"trainer", "a"}, {"batch", 8}}}}});
  auto data = t.chart_data();
  EXPECT_EQ(data["asp"], false);
  EXPECT_FALSE(data.contains("staleness"));
  EXPECT_FALSE(data["workers"][0].contains("updates_per_s"));
}

TEST(JobTimeline, IdealStepTimeIsTheBatchOverTheSummedThroughput) {
  // a: 100 samples in 1 s, b: 100 samples in 3 s. Throughputs 100 + 33.3 = 133.3/s; 200 samples
  // then take 1.5 s with a perfect split.
  std::vector<WorkerSample> workers{{"a", "n", 0, 100, 100, 1.0}, {"b", "n", 1, 100, 33.3, 3.0}};
  EXPECT_NEAR(ideal_compute_seconds(workers), 1.5, 1e-12);
  workers[1].compute_time_s = 0;  // unknown timing: no ideal
  EXPECT_EQ(ideal_compute_seconds(workers), 0);
  workers[1].batch = 0;  // a worker without a slice does not count
  EXPECT_NEAR(ideal_compute_seconds(workers), 1.0, 1e-12);
}

TEST(JobTimeline, CountsMalformedLinesAndTakesMissingFieldsAsAbsent) {
  JobTimeline t("j3");
  EXPECT_FALSE(t.add_line("not json"));
  EXPECT_FALSE(t.add_line("[1,2]"));
  EXPECT_FALSE(t.add_line("{\"step\": 3}"));
  EXPECT_TRUE(t.add_line("{\"event\": \"step\"}"));
  EXPECT_TRUE(t.add_line("{\"event\": \"recovered\", \"lost_steps\": \"many\"}"));
  EXPECT_EQ(t.malformed_lines(), 3u);
  EXPECT_EQ(t.steps_committed(), 1u);
  EXPECT_EQ(t.lost_steps(), 0u);
  EXPECT_NO_THROW(t.chart_data());
}

TEST(JobTimeline, LongRunsStayWithinTheirLimits) {
  TimelineLimits limits;
  limits.max_step_points = 64;
  limits.max_timeline_entries = 10;
  JobTimeline t("j4", limits);
  for (int s = 1; s <= 5000; ++s) t.add(step_event(s, s, {{"a", 48}, {"b", 48}}));
  for (int p = 0; p < 50; ++p) t.add(Json{{"time", 1.0 * p}, {"event", "plan"}, {"step", p}});
  EXPECT_LE(t.steps().size(), 64u);
  EXPECT_EQ(t.steps().front().step, 1);
  EXPECT_EQ(t.steps_committed(), 5000u);  // counters are not thinned
  EXPECT_EQ(t.step_seconds().count(), 5000u);
  EXPECT_EQ(t.timeline().size(), 10u);
  EXPECT_EQ(t.plan_changes(), 50u);
  EXPECT_EQ(t.chart_data()["timeline_dropped"], 40);
}

}  // namespace
}  // namespace omnilearn::dashboard
