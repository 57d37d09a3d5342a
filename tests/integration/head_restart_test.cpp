// The head dies and a new one comes up on the same port. With its state store (the default) the
// new head knows the workers as they were: same node ids and incarnations, nothing registered
// again, and each worker hears that the head restarted. With `--store memory:` it knows nothing,
// and the workers register again by themselves, without being restarted. A state file that is
// not intact, or a state directory another head holds, stops a head from starting.

#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "tests/support/cluster.hpp"
#include "tests/support/job_run.hpp"

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

TEST_P(HeadRestart, ARestartedHeadKnowsItsWorkersAsTheyWere) {
  const auto downtime = GetParam();
  TestCluster cluster;
  const std::vector<std::string> names{"w1", "w2", "w3"};
  for (const auto& name : names) cluster.start_worker(name);
  for (const auto& name : names) ASSERT_TRUE(cluster.wait_worker_joined(name));
  auto before = cluster.wait_for_status([&](const auto& s) { return all_alive(s, names); }, 10s);
  ASSERT_TRUE(before) << cluster.last_status_text();
  EXPECT_EQ(before->json().at("head").at("epoch"), 1);
  std::vector<std::size_t> marks;
  for (const auto& name : names) marks.push_back(cluster.worker(name).line_count(Stream::kStderr));

  cluster.kill_head();
  std::this_thread::sleep_for(downtime);
  cluster.restart_head();

  for (std::size_t i = 0; i < names.size(); ++i) {
    auto& worker = cluster.worker(names[i]);
    EXPECT_TRUE(worker.wait_for_output("the head restarted (start 2) and still knows node", 15s,
                                       Stream::kStderr, marks[i]))
        << worker.describe();
  }
  auto after = cluster.wait_for_status(
      [&](const auto& s) {
        return all_alive(s, names) && !s.json().at("head").at("nodes_back_ms").is_null();
      },
      15s);
  ASSERT_TRUE(after) << cluster.last_status_text();
  const auto& head = after->json().at("head");
  EXPECT_EQ(head.at("epoch"), 2);
  EXPECT_EQ(head.at("restored_nodes"), 3);
  EXPECT_EQ(head.at("role"), "active");
  EXPECT_NE(head.at("store").get<std::string>().find("sqlite:"), std::string::npos) << head;
  EXPECT_GE(head.at("outage_s").get<double>(), 0.0) << head;
  EXPECT_EQ(after->nodes().size(), names.size()) << "the new head knows each worker once";
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto& worker = cluster.worker(names[i]);
    EXPECT_TRUE(worker.running()) << names[i] << " exited instead of reconnecting";
    const auto was = *before->node(names[i]);
    const auto is = *after->node(names[i]);
    EXPECT_EQ(is.at("id"), was.at("id")) << names[i];
    EXPECT_EQ(is.at("incarnation"), was.at("incarnation")) << names[i];
    for (const auto& line : worker.lines(Stream::kStderr)) {
      EXPECT_EQ(line.find("registering again"), std::string::npos) << names[i] << ": " << line;
    }
  }
  // And they stay alive on the new head.
  std::this_thread::sleep_for(cluster.head().options().heartbeat_timeout + 200ms);
  auto later = cluster.status();
  ASSERT_TRUE(later);
  EXPECT_TRUE(all_alive(*later, names)) << later->json().dump();

  // A worker restarted while the head was down gets a newer incarnation from the new head:
  // the name's counter was kept.
  cluster.kill_head();
  cluster.worker("w3").kill_and_reap();
  cluster.restart_head();
  cluster.start_worker("w3");
  auto restarted = cluster.wait_for_status(
      [&](const auto& s) {
        auto w3 = s.node("w3");
        return w3 && w3->value("state", "") == "alive" && w3->value("incarnation", 0) == 2;
      },
      15s);
  EXPECT_TRUE(restarted) << cluster.last_status_text();
}

TEST_P(HeadRestart, AHeadWithAMemoryStoreForgetsAndWorkersRegisterAgain) {
  const auto downtime = GetParam();
  HeadOptions options;
  options.extra_args = {"--store", "memory:"};
  TestCluster cluster(options);
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

// The head's state directory for this test: given on the command line, so that the test can
// damage it first.
class HeadState : public ::testing::Test {
 protected:
  std::filesystem::path state_dir() const { return scratch_.path() / "state"; }
  CommandResult start_head(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"head", "--host", "127.0.0.1", "--port", "0", "--state-dir",
                                  state_dir().string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_omnilearn(args, 10s);
  }
  static std::string read_all(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  ScratchDir scratch_{"omnilearn-head-state"};
};

TEST_F(HeadState, ADamagedStateFileStopsTheHeadAndIsLeftAsItWas) {
  std::filesystem::create_directories(state_dir());
  const auto file = state_dir() / "state.db";
  for (const std::string content : {std::string(), std::string("not a database\n"),
                                    std::string(8192, '\x42')}) {
    { std::ofstream(file, std::ios::binary) << content; }
    auto result = start_head();
    EXPECT_FALSE(result.timed_out) << "the head started over a damaged state: " << result.out;
    EXPECT_EQ(result.status.code, 2) << result.err;
    EXPECT_NE(result.err.find(file.string()), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("Nothing was changed"), std::string::npos) << result.err;
    EXPECT_EQ(result.out.find("listening"), std::string::npos) << result.out;
    EXPECT_EQ(read_all(file), content);
  }
}

TEST_F(HeadState, OneHeadPerStateDirectory) {
  HeadOptions options;
  options.extra_args = {"--state-dir", state_dir().string()};
  HeadProcess first(options);
  auto second = start_head();
  EXPECT_EQ(second.status.code, 2) << second.err;
  EXPECT_NE(second.err.find("another head is using the state directory"), std::string::npos)
      << second.err;
}

TEST(HeadRestartStatus, StatusFailsWhileTheHeadIsDownAndWorksWhenItIsBack) {
  TestCluster cluster;
  cluster.start_worker("w1");
  ASSERT_TRUE(cluster.wait_worker_joined("w1"));
  cluster.kill_head();
  std::string error;
  EXPECT_FALSE(cluster.status(3s, &error));
  EXPECT_NE(error.find("exit 3"), std::string::npos) << error;  // the head cannot be reached
  cluster.restart_head();
  EXPECT_TRUE(cluster.wait_for_status([](const auto& s) { return s.state("w1") == "alive"; }, 15s))
      << cluster.last_status_text();
}

}  // namespace
}  // namespace omnilearn::testing
