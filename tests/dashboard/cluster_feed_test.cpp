#include "dashboard/cluster_feed.hpp"

#include <gtest/gtest.h>

#include "dashboard/status_json.hpp"

namespace omnilearn::dashboard {
namespace {

using Json = nlohmann::json;

// A head in memory: a status, and per job a list of event lines served in pages.
class FakeHead : public HeadSource {
 public:
  actors::StatusReply status;
  std::map<std::string, std::vector<std::string>> events;
  std::map<std::string, bool> finished;
  std::size_t page_size = 3;
  bool answer = true;
  int status_calls = 0;
  int event_calls = 0;

  std::optional<actors::StatusReply> cluster_status() override {
    ++status_calls;
    if (!answer) return std::nullopt;
    return status;
  }
  std::optional<actors::JobStatusReply> job_status(const std::string& job_id,
                                                   std::uint64_t since) override {
    ++event_calls;
    if (!answer || !events.count(job_id)) return std::nullopt;
    actors::JobStatusReply reply;
    reply.found = true;
    const auto& all = events[job_id];
    for (auto i = since; i < all.size() && reply.events.size() < page_size; ++i) {
      reply.events.push_back(all[i]);
    }
    reply.next = since + reply.events.size();
    reply.finished = finished[job_id] && reply.next >= all.size();
    return reply;
  }
};

std::string step_line(int s) {
  return Json{{"event", "step"},
              {"step", s},
              {"time", 1.0 * s},
              {"step_time_s", 0.1},
              {"batches", {32, 32}}}
      .dump();
}

struct Fixture : ::testing::Test {
  FakeHead* head = nullptr;
  std::unique_ptr<ClusterFeed> feed;
  void SetUp() override {
    auto fake = std::make_unique<FakeHead>();
    head = fake.get();
    actors::NodeInfo node;
    node.id = "n-1";
    node.name = "a";
    node.state = "alive";
    head->status.nodes.push_back(node);
    actors::JobInfo job;
    job.id = "j1";
    job.state = "running";
    head->status.jobs.push_back(job);
    head->status.counters["messages_in"] = 5;
    for (int s = 1; s <= 7; ++s) head->events["j1"].push_back(step_line(s));
    // Max age 0: every call fetches again, as if time had passed.
    feed = std::make_unique<ClusterFeed>(std::move(fake), std::chrono::milliseconds(0));
  }
};

TEST_F(Fixture, StatusIsExactlyStatusJson) {
  auto status = feed->status();
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, status_json(head->status));
}

TEST_F(Fixture, FollowsEventsIncrementallyAcrossPages) {
  auto charts = feed->job_charts("j1");
  ASSERT_TRUE(charts);
  EXPECT_EQ((*charts)["counters"]["steps_committed"], 7);  // 3 pages of 3, 3, 1
  EXPECT_EQ((*charts)["job"]["id"], "j1");
  head->events["j1"].push_back(step_line(8));
  head->finished["j1"] = true;
  charts = feed->job_charts("j1");
  EXPECT_EQ((*charts)["counters"]["steps_committed"], 8);  // no event counted twice
  // A finished job whose every event is in is not asked again.
  int calls = head->event_calls;
  feed->job_charts("j1");
  EXPECT_EQ(head->event_calls, calls);
}

TEST_F(Fixture, ForgetsJobsTheHeadForgot) {
  ASSERT_TRUE(feed->job_charts("j1"));
  head->status.jobs.clear();
  EXPECT_FALSE(feed->job_charts("j1"));
  EXPECT_FALSE(feed->job_charts("nope"));
}

TEST_F(Fixture, ServesTheLastStateWhenTheHeadIsSilentAndNothingBeforeItAnswered) {
  head->answer = false;
  EXPECT_FALSE(feed->status());
  EXPECT_FALSE(feed->metrics());
  head->answer = true;
  ASSERT_TRUE(feed->status());
  head->answer = false;
  EXPECT_TRUE(feed->status());
}

TEST_F(Fixture, EventsPagesAreTheLinesAsObjects) {
  auto page = feed->events("j1", 2);
  ASSERT_TRUE(page.found);
  ASSERT_EQ(page.events.size(), 3u);
  EXPECT_EQ(page.events[0], Json::parse(step_line(3)));
  EXPECT_EQ(page.next, 5u);
  EXPECT_FALSE(page.finished);
  EXPECT_FALSE(feed->events("nope", 0).found);
}

TEST_F(Fixture, MetricsCoverTheJobsTimeline) {
  auto text = feed->metrics();
  ASSERT_TRUE(text);
  EXPECT_NE(text->find("omnilearn_job_step_seconds_count{job=\"j1\"} 7\n"), std::string::npos)
      << *text;
  EXPECT_NE(text->find("omnilearn_messages_received_total 5\n"), std::string::npos);
}

TEST(ClusterFeedCache, ReusesAFreshFetch) {
  auto fake = std::make_unique<FakeHead>();
  auto* head = fake.get();
  ClusterFeed feed(std::move(fake), std::chrono::hours(1));
  feed.status();
  feed.status();
  feed.metrics();
  EXPECT_EQ(head->status_calls, 1);
}

}  // namespace
}  // namespace omnilearn::dashboard
