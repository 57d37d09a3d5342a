#include "dashboard/metrics.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

namespace omnilearn::dashboard {
namespace {

using Json = nlohmann::json;

actors::StatusReply sample_status() {
  actors::StatusReply status;
  actors::NodeInfo a;
  a.id = "n-1";
  a.name = "gpu-a";
  a.state = "alive";
  a.incarnation = 2;
  a.last_heartbeat_ms = 250;
  a.resources.cpus = 4;
  a.usage.load_average = 1.25;
  actors::NodeInfo b = a;
  b.id = "n-2";
  b.name = "odd \"name\"\\with\nnewline";
  b.state = "dead";
  status.nodes = {a, b};
  actors::JobInfo job;
  job.id = "j-7";
  job.name = "demo";
  job.state = "running";
  job.step = 42;
  job.total_steps = 100;
  job.generation = 3;
  job.loss = 0.5;
  job.workers = {{"gpu-a", "j-7-gpu-a-t0", 0, 64, 1234.5, 0.05},
                 {"gpu-b", "j-7-gpu-b-t0", 1, 32, 600, 0.05}};
  actors::JobInfo ended = job;
  ended.id = "j-6";
  ended.state = "succeeded";
  status.jobs = {job, ended};
  status.counters = {{"messages_in", 10},      {"messages_out", 12}, {"dropped_malformed", 1},
                     {"dropped_oversized", 0}, {"refused_peers", 3}, {"failed_handshakes", 4},
                     {"threads", 17},          {"open_fds", 40},     {"store_keys", 2}};
  return status;
}

JobTimeline sample_timeline() {
  JobTimeline t("j-7");
  for (int s = 1; s <= 5; ++s) {
    t.add(Json{{"time", 1.0 * s},
               {"event", "step"},
               {"step", s},
               {"step_time_s", 0.02 * s},
               {"allreduce_time_s", 0.004},
               {"batches", {64, 32}}});
  }
  t.add(Json{{"time", 6.0}, {"event", "plan"}, {"step", 5}});
  t.add(Json{{"time", 7.0}, {"event", "generation"}, {"generation", 2}, {"step", 5}});
  t.add(Json{{"time", 8.0}, {"event", "recovered"}, {"step", 5}, {"lost_steps", 2}});
  return t;
}

std::string render_sample() {
  auto timeline = sample_timeline();
  return render_exposition(head_metrics(sample_status(), {&timeline}));
}

TEST(Exposition, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  MetricFamily f{"x_total", "counter", "help", {}};
  f.add({{"who", "say \"hi\""}}, 3);
  EXPECT_EQ(render_exposition({f}),
            "# HELP x_total help\n# TYPE x_total counter\nx_total{who=\"say \\\"hi\\\"\"} 3\n");
}

TEST(Exposition, RejectsNamesPrometheusWouldReject) {
  MetricFamily bad{"1st", "gauge", "h", {}};
  bad.add({}, 1);
  EXPECT_THROW(render_exposition({bad}), std::invalid_argument);
  MetricFamily bad_label{"ok", "gauge", "h", {}};
  bad_label.add({{"bad-label", "v"}}, 1);
  EXPECT_THROW(render_exposition({bad_label}), std::invalid_argument);
  MetricFamily twice{"ok", "gauge", "h", {}};
  twice.add({}, 1);
  EXPECT_THROW(render_exposition({twice, twice}), std::invalid_argument);
}

TEST(Exposition, HistogramsAreCumulativeWithInfSumAndCount) {
  Histogram h({0.1, 1});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  MetricFamily f{"d_seconds", "histogram", "h", {}};
  f.add_histogram({{"job", "j"}}, h);
  EXPECT_EQ(render_exposition({f}),
            "# HELP d_seconds h\n# TYPE d_seconds histogram\n"
            "d_seconds_bucket{job=\"j\",le=\"0.1\"} 1\n"
            "d_seconds_bucket{job=\"j\",le=\"1\"} 2\n"
            "d_seconds_bucket{job=\"j\",le=\"+Inf\"} 3\n"
            "d_seconds_sum{job=\"j\"} 5.55\n"
            "d_seconds_count{job=\"j\"} 3\n");
}

TEST(HeadMetrics, ExportsEveryFamilyTheIssueAsksFor) {
  const auto text = render_sample();
  for (const char* family :
       {"omnilearn_node_up", "omnilearn_worker_batch", "omnilearn_worker_samples_per_second",
        "omnilearn_job_step_seconds", "omnilearn_job_allreduce_seconds",
        "omnilearn_job_plan_changes_total", "omnilearn_job_generations_total",
        "omnilearn_job_recoveries_total", "omnilearn_job_lost_steps_total",
        "omnilearn_messages_received_total", "omnilearn_messages_sent_total",
        "omnilearn_dropped_frames_total", "omnilearn_refused_peers_total",
        "omnilearn_failed_handshakes_total"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  EXPECT_NE(text.find("omnilearn_node_up{node=\"gpu-a\",id=\"n-1\"} 1\n"), std::string::npos);
  EXPECT_NE(
      text.find("omnilearn_node_up{node=\"odd \\\"name\\\"\\\\with\\nnewline\",id=\"n-2\"} 0\n"),
      std::string::npos);
  EXPECT_NE(text.find("omnilearn_worker_batch{job=\"j-7\",trainer=\"j-7-gpu-a-t0\",node=\"gpu-a\","
                      "rank=\"0\"} 64\n"),
            std::string::npos);
  // The ended job keeps its job gauges but no worker gauges.
  EXPECT_EQ(text.find("omnilearn_worker_batch{job=\"j-6\""), std::string::npos);
  EXPECT_NE(text.find("omnilearn_job_running{job=\"j-6\",name=\"demo\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("omnilearn_job_step_seconds_count{job=\"j-7\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("omnilearn_job_lost_steps_total{job=\"j-7\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("omnilearn_dropped_frames_total{reason=\"malformed\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("omnilearn_refused_peers_total 3\n"), std::string::npos);
  EXPECT_NE(text.find("omnilearn_head_threads 17\n"), std::string::npos);
}

TEST(HeadMetrics, PromtoolAcceptsTheExposition) {
  const char* promtool = "/usr/bin/promtool";
  if (::access(promtool, X_OK) != 0) {
    GTEST_SKIP() << "promtool is not installed (Debian package prometheus; scripts/test.sh "
                    "installs it)";
  }
  auto dir =
      std::filesystem::temp_directory_path() / ("metrics-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto input = dir / "metrics.txt";
  auto output = dir / "promtool.txt";
  std::ofstream(input) << render_sample();
  std::string command = std::string(promtool) + " check metrics < " + input.string() + " > " +
                        output.string() + " 2>&1";
  int status = std::system(command.c_str());
  std::ifstream in(output);
  std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(status, 0) << said;
  EXPECT_EQ(said, "") << "promtool's lint found problems";
}

}  // namespace
}  // namespace omnilearn::dashboard
