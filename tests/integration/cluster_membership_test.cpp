// Real processes over real loopback: `omnilearn head`, workers, and `omnilearn status --json`.
// Heartbeats every 100 ms, dead after 600 ms, so each test takes a few seconds.

#include <gtest/gtest.h>
#include <signal.h>

#include <set>

#include "tests/support/cluster.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Detection lag allowed beyond the heartbeat timeout: the registry sweeps every interval / 4,
// and status is a process start away; generous because the test machine is small and shared.
constexpr auto kSlack = 1500ms;

bool all_alive(const ClusterStatus& status, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    if (status.state(name) != "alive") return false;
  }
  return true;
}

TEST(ClusterMembership, HeadAndThreeWorkersAreAliveWithTheDocumentedJsonShape) {
  TestCluster cluster;
  const std::vector<std::string> names{"w1", "w2", "w3"};
  for (const auto& name : names) {
    cluster.start_worker(name, {"--cpus", "2", "--labels", "zone=a,rack=r" + name});
  }
  for (const auto& name : names) {
    ASSERT_TRUE(cluster.wait_worker_joined(name)) << cluster.worker(name).describe();
  }
  auto status = cluster.wait_for_status([&](const auto& s) { return all_alive(s, names); }, 10s);
  ASSERT_TRUE(status) << cluster.last_status_text();

  // {"nodes":[{"id","name","state","incarnation","last_heartbeat_ms","resources":{..}}],"jobs":[]}
  const auto& json = status->json();
  ASSERT_TRUE(json.is_object());
  ASSERT_TRUE(json.contains("jobs"));
  EXPECT_TRUE(json["jobs"].is_array());
  EXPECT_TRUE(json["jobs"].empty());
  ASSERT_EQ(status->nodes().size(), 3u) << json.dump(2);
  std::set<std::string> ids;
  for (const auto& node : status->nodes()) {
    ASSERT_TRUE(node.is_object());
    ASSERT_TRUE(node["id"].is_string());
    EXPECT_EQ(node["id"].get<std::string>().rfind("n-", 0), 0u);
    ids.insert(node["id"].get<std::string>());
    ASSERT_TRUE(node["name"].is_string());
    EXPECT_EQ(node["state"], "alive");
    ASSERT_TRUE(node["incarnation"].is_number_unsigned());
    EXPECT_EQ(node["incarnation"].get<std::uint64_t>(), 1u);
    ASSERT_TRUE(node["last_heartbeat_ms"].is_number_integer());
    EXPECT_GE(node["last_heartbeat_ms"].get<std::int64_t>(), 0);
    EXPECT_LT(node["last_heartbeat_ms"].get<std::int64_t>(), 600) << "alive means heard lately";
    const auto& resources = node["resources"];
    ASSERT_TRUE(resources.is_object());
    EXPECT_EQ(resources["cpus"].get<double>(), 2.0);
    EXPECT_GT(resources["memory_bytes"].get<std::int64_t>(), 0);
    EXPECT_TRUE(resources["gpus"].is_number_integer());
    auto name = node["name"].get<std::string>();
    EXPECT_EQ(resources["labels"], (nlohmann::json{{"zone", "a"}, {"rack", "r" + name}}));
  }
  EXPECT_EQ(ids.size(), 3u) << "every node has its own id";

  // The human-readable table lists the same nodes.
  auto table = run_omnilearn({"status", "--address", cluster.address()}, 10s);
  ASSERT_EQ(table.status.code, 0) << table.err;
  EXPECT_NE(table.out.find("NAME"), std::string::npos) << table.out;
  for (const auto& name : names) EXPECT_NE(table.out.find(name), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("zone=a"), std::string::npos) << table.out;
}

TEST(ClusterMembership, AWorkerKilledWithSigkillIsDeadWithinTheTimeout) {
  TestCluster cluster;
  cluster.start_worker("victim");
  cluster.start_worker("survivor");
  ASSERT_TRUE(cluster.wait_worker_joined("victim"));
  ASSERT_TRUE(cluster.wait_worker_joined("survivor"));
  ASSERT_TRUE(cluster.wait_for_status(
      [](const auto& s) {
        return all_alive(s, {"victim", "survivor"});
      },
      10s))
      << cluster.last_status_text();

  auto killed_at = Clock::now();
  cluster.worker("victim").kill_and_reap();
  const auto timeout = cluster.head().options().heartbeat_timeout;
  auto status = cluster.wait_for_status([](const auto& s) { return s.state("victim") == "dead"; },
                                        timeout + 10s, 20ms);
  auto seen_after = Clock::now() - killed_at;
  ASSERT_TRUE(status) << "never declared dead: " << cluster.last_status_text();
  EXPECT_LE(seen_after, timeout + kSlack)
      << "seen dead after "
      << std::chrono::duration_cast<std::chrono::milliseconds>(seen_after).count() << " ms";
  // Not declared before the timeout: its last heartbeat is at least that old.
  EXPECT_GE(status->node("victim")->at("last_heartbeat_ms").get<std::int64_t>(), timeout.count());
  EXPECT_EQ(status->state("survivor"), "alive") << "the other worker is unaffected";
  EXPECT_EQ(status->node("victim")->at("incarnation"), 1);
}

TEST(ClusterMembership, ARestartedWorkerIsANewIncarnationAndTheOldOneStaysDead) {
  TestCluster cluster;
  cluster.start_worker("w1");
  ASSERT_TRUE(cluster.wait_worker_joined("w1"));
  auto before =
      cluster.wait_for_status([](const auto& s) { return s.state("w1") == "alive"; }, 10s);
  ASSERT_TRUE(before);
  auto old_id = before->node("w1")->at("id").get<std::string>();

  // Restart at once, well within the heartbeat timeout: the new process must supersede the old
  // incarnation, not be mistaken for it.
  cluster.worker("w1").kill_and_reap();
  cluster.start_worker("w1");
  ASSERT_TRUE(cluster.wait_worker_joined("w1"));
  auto after = cluster.wait_for_status(
      [](const auto& s) { return s.nodes_named("w1").size() == 2 && s.state("w1") == "alive"; },
      10s);
  ASSERT_TRUE(after) << cluster.last_status_text();
  auto records = after->nodes_named("w1");
  EXPECT_EQ(records[0]["id"], old_id);
  EXPECT_EQ(records[0]["incarnation"], 1);
  EXPECT_EQ(records[0]["state"], "dead");
  EXPECT_NE(records[1]["id"], old_id);
  EXPECT_EQ(records[1]["incarnation"], 2);
  EXPECT_EQ(records[1]["state"], "alive");

  // Past the timeout, a third life after the second died silently.
  std::this_thread::sleep_for(cluster.head().options().heartbeat_timeout + 200ms);
  auto later = cluster.status();
  ASSERT_TRUE(later);
  EXPECT_EQ(later->nodes_named("w1")[0]["state"], "dead") << "the old incarnation stays dead";
  EXPECT_EQ(later->state("w1"), "alive");

  cluster.worker("w1").kill_and_reap();
  ASSERT_TRUE(cluster.wait_for_status([](const auto& s) { return s.state("w1") == "dead"; }, 10s));
  cluster.start_worker("w1");
  auto third = cluster.wait_for_status(
      [](const auto& s) { return s.state("w1") == "alive" && s.nodes_named("w1").size() == 3; },
      10s);
  ASSERT_TRUE(third) << cluster.last_status_text();
  EXPECT_EQ(third->node("w1")->at("incarnation"), 3);
  EXPECT_EQ(third->count("dead"), 2u);
}

TEST(ClusterMembership, SigtermMakesAWorkerLeaveGracefully) {
  TestCluster cluster;
  auto& worker = cluster.start_worker("polite");
  ASSERT_TRUE(cluster.wait_worker_joined("polite"));
  ASSERT_TRUE(
      cluster.wait_for_status([](const auto& s) { return s.state("polite") == "alive"; }, 10s));
  ASSERT_TRUE(worker.send_signal(SIGTERM));
  auto exit = worker.wait_exit(10s);
  ASSERT_TRUE(exit) << "the worker did not exit on SIGTERM";
  EXPECT_EQ(exit->code, 0) << exit->to_string();
  auto status = cluster.status();
  ASSERT_TRUE(status);
  EXPECT_EQ(status->state("polite"), "left") << "the head heard the goodbye before the exit";
  // Leaving is final: the failure detector does not turn it into "dead" later.
  std::this_thread::sleep_for(cluster.head().options().heartbeat_timeout + 300ms);
  status = cluster.status();
  ASSERT_TRUE(status);
  EXPECT_EQ(status->state("polite"), "left");
  EXPECT_TRUE(worker.wait_for_output("left the cluster", 1s, Stream::kStderr));
}

TEST(ClusterMembership, SigintLeavesToo) {
  TestCluster cluster;
  auto& worker = cluster.start_worker("w");
  ASSERT_TRUE(cluster.wait_worker_joined("w"));
  ASSERT_TRUE(worker.send_signal(SIGINT));
  auto exit = worker.wait_exit(10s);
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->code, 0);
  auto status = cluster.status();
  ASSERT_TRUE(status);
  EXPECT_EQ(status->state("w"), "left");
}

TEST(ClusterMembership, TheHeadExitsCleanlyOnSigterm) {
  TestCluster cluster;
  ASSERT_TRUE(cluster.head().process().send_signal(SIGTERM));
  auto exit = cluster.head().process().wait_exit(10s);
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->code, 0) << exit->to_string();
}

}  // namespace
}  // namespace omnilearn::testing
