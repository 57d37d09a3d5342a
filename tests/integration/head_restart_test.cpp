// The head dies and a new one comes up on the same port: workers notice (their heartbeats are
// unknown to the new head) and register again by themselves, without being restarted.

#include <gtest/gtest.h>

#include "tests/support/cluster.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;

bool all_alive(const ClusterStatus& status, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    if (status.state(name) != "alive") return false;
  }
  return true;
}

class HeadRestart : public ::testing::TestWithParam<std::chrono::milliseconds> {};

TEST_P(HeadRestart, WorkersReRegisterWithANewHeadOnTheSamePort) {
  const auto downtime = GetParam();
  TestCluster cluster;
  const std::vector<std::string> names{"w1", "w2", "w3"};
  for (const auto& name : names) cluster.start_worker(name);
  for (const auto& name : names) ASSERT_TRUE(cluster.wait_worker_joined(name));
  auto before = cluster.wait_for_status([&](const auto& s) { return all_alive(s, names); }, 10s);
  ASSERT_TRUE(before) << cluster.last_status_text();
  std::vector<pid_t> pids;
  std::vector<std::size_t> marks;
  for (const auto& name : names) {
    pids.push_back(cluster.worker(name).pid());
    marks.push_back(cluster.worker(name).line_count(Stream::kStderr));
  }
  const auto port = cluster.head().port();

  cluster.kill_head();
  std::this_thread::sleep_for(downtime);
  auto& head = cluster.restart_head();
  ASSERT_EQ(head.port(), port);

  auto after = cluster.wait_for_status([&](const auto& s) { return all_alive(s, names); }, 15s);
  ASSERT_TRUE(after) << "workers did not come back: " << cluster.last_status_text();
  EXPECT_EQ(after->nodes().size(), names.size()) << "the new head knows each worker once";
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto& worker = cluster.worker(names[i]);
    EXPECT_EQ(worker.pid(), pids[i]);
    EXPECT_TRUE(worker.running()) << names[i] << " exited instead of reconnecting";
    EXPECT_TRUE(worker.wait_for_output("registered as " + names[i], 5s, Stream::kStderr, marks[i]))
        << worker.describe();
    // A new head has no memory: it hands out fresh ids and starts the incarnations again.
    EXPECT_EQ(after->node(names[i])->at("incarnation"), 1);
  }
  // And they stay alive on the new head.
  std::this_thread::sleep_for(cluster.head().options().heartbeat_timeout + 200ms);
  auto later = cluster.status();
  ASSERT_TRUE(later);
  EXPECT_TRUE(all_alive(*later, names)) << later->json().dump();
}

// Down for less than the heartbeat timeout, and for longer than it.
INSTANTIATE_TEST_SUITE_P(Downtime, HeadRestart, ::testing::Values(100ms, 1500ms),
                         [](const auto& info) {
                           return std::to_string(info.param.count()) + "ms";
                         });

TEST(HeadRestartStatus, StatusFailsWhileTheHeadIsDownAndWorksWhenItIsBack) {
  TestCluster cluster;
  cluster.start_worker("w1");
  ASSERT_TRUE(cluster.wait_worker_joined("w1"));
  cluster.kill_head();
  std::string error;
  EXPECT_FALSE(cluster.status(3s, &error));
  EXPECT_NE(error.find("exit 2"), std::string::npos) << error;
  cluster.restart_head();
  EXPECT_TRUE(cluster.wait_for_status([](const auto& s) { return s.state("w1") == "alive"; }, 15s))
      << cluster.last_status_text();
}

}  // namespace
}  // namespace omnilearn::testing
