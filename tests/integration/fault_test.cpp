// Faults a real cluster meets: a worker frozen with SIGSTOP, and a worker cut off from the head
// by a network partition (a veth link taken down between two network namespaces this test
// creates). Both are declared dead after the heartbeat timeout and come back as a new
// incarnation when they can talk again. Heartbeats every 100 ms, dead after 600 ms.

#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "tests/support/cluster.hpp"
#include "tests/support/netns.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kSlack = 1500ms;  // detection lag beyond the timeout on a small, shared machine

TEST(Faults, AWorkerStoppedLongerThanTheTimeoutIsDeadThenRejoinsAsANewIncarnation) {
  TestCluster cluster;
  cluster.start_worker("sleepy");
  cluster.start_worker("steady");
  ASSERT_TRUE(cluster.wait_worker_joined("sleepy"));
  ASSERT_TRUE(cluster.wait_worker_joined("steady"));

  auto stopped_at = Clock::now();
  ASSERT_TRUE(cluster.worker("sleepy").send_signal(SIGSTOP, /*whole_group=*/true));
  const auto timeout = cluster.head().options().heartbeat_timeout;
  auto dead = cluster.wait_for_status([](const auto& s) { return s.state("sleepy") == "dead"; },
                                      timeout + 10s, 20ms);
  ASSERT_TRUE(dead) << cluster.last_status_text();
  EXPECT_LE(Clock::now() - stopped_at, timeout + kSlack);
  EXPECT_EQ(dead->state("steady"), "alive");

  std::this_thread::sleep_for(timeout);  // well past the timeout: still frozen, still dead
  ASSERT_TRUE(cluster.worker("sleepy").send_signal(SIGCONT, /*whole_group=*/true));
  auto back = cluster.wait_for_status(
      [](const auto& s) { return s.nodes_named("sleepy").size() == 2 && s.state("sleepy") == "alive"; },
      10s);
  ASSERT_TRUE(back) << "the resumed worker did not rejoin: " << cluster.last_status_text() << "\n"
                    << cluster.worker("sleepy").describe();
  auto records = back->nodes_named("sleepy");
  EXPECT_EQ(records[0]["state"], "dead") << "the frozen incarnation stays dead";
  EXPECT_EQ(records[1]["incarnation"], 2);
  EXPECT_NE(records[0]["id"], records[1]["id"]);
}

TEST(Faults, APartitionedWorkerIsDeadThenRejoinsAsANewIncarnationWhenTheLinkReturns) {
  NetworkPair network;
  std::string why;
  if (!network.create(&why)) GTEST_SKIP() << "partition test skipped: " << why;
  NamespacedCluster cluster(network);
  auto& worker = cluster.start_worker("remote", Side::kWorker);
  ASSERT_TRUE(worker.wait_for_output("joined", 15s)) << worker.describe() << cluster.head().describe();
  ASSERT_TRUE(cluster.wait_for_status([](const auto& s) { return s.state("remote") == "alive"; }, 10s))
      << cluster.last_status_text();

  auto cut_at = Clock::now();
  network.set_link_up(false);
  auto dead = cluster.wait_for_status([](const auto& s) { return s.state("remote") == "dead"; }, 10s);
  ASSERT_TRUE(dead) << cluster.last_status_text();
  EXPECT_LE(Clock::now() - cut_at, 600ms + kSlack);
  EXPECT_TRUE(worker.running()) << "the worker itself is fine, only cut off";

  std::this_thread::sleep_for(1s);
  network.set_link_up(true);
  auto back = cluster.wait_for_status(
      [](const auto& s) { return s.nodes_named("remote").size() == 2 && s.state("remote") == "alive"; },
      20s);
  ASSERT_TRUE(back) << "the worker did not rejoin after the link came back: " << cluster.last_status_text()
                    << "\n"
                    << worker.describe();
  auto records = back->nodes_named("remote");
  EXPECT_EQ(records[0]["state"], "dead");
  EXPECT_EQ(records[1]["incarnation"], 2);
}

}  // namespace
}  // namespace omnilearn::testing
