// The chores of a multi-machine cluster, with real processes:
// - the head listens on every interface and advertises an address other machines reach
//   (--advertise-address); a worker on "another machine" (a network namespace this test
//   creates, skipped with the reason where that is impossible) joins with the cluster file
//   alone, and a client there finds the head the same way;
// - a head that would send other machines to a loopback address says so at start;
// - a worker name alive on another machine is refused (exit 2, one line saying what to do);
//   the same machine restarting its worker is a new incarnation, and the process it replaced
//   cannot take the name back when it thaws. Machines are emulated with OMNILEARN_MACHINE_ID.

#include <gtest/gtest.h>
#include <signal.h>

#include <regex>

#include "runtime/cluster_file.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/job_run.hpp"
#include "tests/support/netns.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> with_prefix(std::vector<std::string> prefix,
                                     const std::vector<std::string>& args) {
  prefix.insert(prefix.end(), args.begin(), args.end());
  return prefix;
}

// Only the cluster file says where the head is: no --address, no OMNILEARN_ADDRESS.
ProcessOptions from_cluster_file(const std::filesystem::path& file, const std::string& name) {
  ProcessOptions options;
  options.name = name;
  options.env = {"OMNILEARN_CLUSTER_FILE=" + file.string(), "OMNILEARN_ADDRESS="};
  return omnilearn_process_options(options);
}

// Lines of an exited process's stderr that start with "omnilearn: error:" (once the output
// reader has caught up with the exit).
std::vector<std::string> error_lines(ChildProcess& process) {
  process.wait_for_output("omnilearn: error:", 10s, Stream::kStderr);
  std::vector<std::string> lines;
  for (const auto& line : process.lines(Stream::kStderr)) {
    if (line.rfind("omnilearn: error:", 0) == 0) lines.push_back(line);
  }
  return lines;
}

TEST(ClusterMachines, AWorkerOnAnotherMachineJoinsThroughTheAdvertisedAddress) {
  NetworkPair network;
  std::string why;
  if (!network.create(&why)) GTEST_SKIP() << "cross-machine test skipped: " << why;
  ScratchDir dir("advertise");
  const auto cluster_file = dir.path() / "cluster.toml";

  // Listening everywhere, advertising the address the other side reaches.
  ChildProcess head(
      with_prefix(network.in_head_namespace(),
                  {omnilearn_binary().string(), "head", "--host", "0.0.0.0", "--port", "0",
                   "--advertise-address", NetworkPair::kHeadAddress, "--heartbeat-interval-ms",
                   "100", "--heartbeat-timeout-ms", "600"}),
      from_cluster_file(cluster_file, "head"));
  static const std::regex kListening(R"(listening on (\S+):(\d+))");
  auto line = head.wait_for_output(kListening, 15s);
  ASSERT_TRUE(line) << head.describe();
  std::smatch match;
  ASSERT_TRUE(std::regex_search(*line, match, kListening));
  const std::string advertised = std::string(NetworkPair::kHeadAddress) + ":" + match[2].str();
  EXPECT_EQ(match[1].str(), NetworkPair::kHeadAddress) << *line;
  EXPECT_EQ(runtime::read_cluster_file(cluster_file).address, advertised)
      << "the cluster file carries the advertised address, not the bind address";
  EXPECT_EQ(head.output(Stream::kStderr).find("WARNING: the head"), std::string::npos)
      << "a reachable advertised address is not warned about:\n"
      << head.output(Stream::kStderr);

  // The other machine: nothing but the cluster file.
  ChildProcess worker(with_prefix(network.in_worker_namespace(),
                                  {omnilearn_binary().string(), "worker", "--name", "far",
                                   "--advertise-address", NetworkPair::kWorkerAddress}),
                      from_cluster_file(cluster_file, "worker far"));
  ASSERT_TRUE(worker.wait_for_output("joined", 20s)) << worker.describe() << head.describe();
  EXPECT_TRUE(worker.wait_for_output("joining " + advertised, 1s)) << worker.describe();
  EXPECT_EQ(worker.output(Stream::kStderr).find("WARNING"), std::string::npos)
      << worker.output(Stream::kStderr);

  // A client on that machine finds the head the same way.
  auto status = run_command(
      with_prefix(network.in_worker_namespace(), {omnilearn_binary().string(), "status", "--json"}),
      20s, from_cluster_file(cluster_file, "status"));
  ASSERT_EQ(status.status.code, 0) << status.err;
  auto json = nlohmann::json::parse(status.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << status.out;
  ClusterStatus nodes(json);
  EXPECT_EQ(nodes.state("far"), "alive") << status.out;
}

TEST(ClusterMachines, AHeadAdvertisingLoopbackToOtherMachinesWarnsAtStart) {
  ScratchDir dir("loopback");
  ChildProcess head({omnilearn_binary().string(), "head", "--host", "0.0.0.0", "--port", "0",
                     "--advertise-address", "127.0.0.1"},
                    from_cluster_file(dir.path() / "cluster.toml", "head"));
  ASSERT_TRUE(head.wait_for_output("listening on 127.0.0.1:", 15s)) << head.describe();
  auto warning =
      head.wait_for_output("WARNING: the head advertises 127.0.0.1", 5s, Stream::kStderr);
  ASSERT_TRUE(warning) << head.describe();
  EXPECT_NE(warning->find("loopback"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("--advertise-address"), std::string::npos) << *warning;
  EXPECT_TRUE(head.running()) << "a warning, not an error";

  // A bad value is an error, though.
  auto bad = run_omnilearn({"head", "--port", "0", "--advertise-address", "bad host"}, 20s);
  EXPECT_EQ(bad.status.code, 2) << bad.err;
  EXPECT_EQ(bad.err.rfind("omnilearn: error: --advertise-address: bad advertise address", 0), 0u)
      << bad.err;
}

TEST(ClusterMachines, ANameAliveOnAnotherMachineIsRefusedAndTheOwnerKeepsIt) {
  TestCluster cluster;
  ProcessOptions machine_a;
  machine_a.env = {"OMNILEARN_MACHINE_ID=machine-a"};
  ProcessOptions machine_b;
  machine_b.env = {"OMNILEARN_MACHINE_ID=machine-b"};
  auto& owner = cluster.start_worker("w1", {}, machine_a);
  ASSERT_TRUE(cluster.wait_worker_joined("w1", 15s)) << owner.describe();

  auto& intruder = cluster.start_worker("w1", {}, machine_b);
  auto exit = intruder.wait_exit(30s);
  ASSERT_TRUE(exit) << "a worker whose name is taken must exit:\n" << intruder.describe();
  EXPECT_EQ(exit->code, 2) << intruder.describe();
  auto errors = error_lines(intruder);
  ASSERT_EQ(errors.size(), 1u) << intruder.output(Stream::kStderr);
  EXPECT_EQ(errors[0].rfind("omnilearn: error: the node name 'w1' is taken by a live worker on "
                            "another machine",
                            0),
            0u)
      << errors[0];
  EXPECT_NE(errors[0].find("--name"), std::string::npos) << "says what to do: " << errors[0];
  EXPECT_EQ(intruder.output(Stream::kStdout).find("joined"), std::string::npos);

  auto status = cluster.status();
  ASSERT_TRUE(status) << cluster.last_status_text();
  ASSERT_EQ(status->nodes_named("w1").size(), 1u) << status->json().dump(2);
  EXPECT_EQ(status->state("w1"), "alive");
  EXPECT_EQ(status->node("w1")->at("incarnation"), 1);
  EXPECT_TRUE(owner.running());
  EXPECT_GE(status->json().at("counters").at("refused_registrations").get<int>(), 1);
}

TEST(ClusterMachines, ARestartOnTheSameMachineTakesOverAndTheReplacedProcessExits) {
  TestCluster cluster;
  ProcessOptions machine_a;
  machine_a.env = {"OMNILEARN_MACHINE_ID=machine-a"};
  auto& old_process = cluster.start_worker("w1", {}, machine_a);
  ASSERT_TRUE(cluster.wait_worker_joined("w1", 15s)) << old_process.describe();

  // The old process hangs (as a frozen machine would) and its operator starts w1 again there.
  ASSERT_TRUE(old_process.send_signal(SIGSTOP, /*whole_group=*/true));
  auto& new_process = cluster.start_worker("w1", {}, machine_a);
  ASSERT_TRUE(cluster.wait_worker_joined("w1", 15s)) << new_process.describe();
  auto taken = cluster.wait_for_status(
      [](const auto& s) {
        return s.state("w1") == "alive" && s.node("w1")->at("incarnation") == 2;
      },
      10s);
  ASSERT_TRUE(taken) << cluster.last_status_text();

  // Thawed, the old process learns the head forgot it and tries to register again: refused,
  // it exits instead of taking the name back (and the two taking turns at it).
  ASSERT_TRUE(old_process.send_signal(SIGCONT, /*whole_group=*/true));
  auto exit = old_process.wait_exit(30s);
  ASSERT_TRUE(exit) << old_process.describe();
  EXPECT_EQ(exit->code, 2) << old_process.describe();
  auto errors = error_lines(old_process);
  ASSERT_EQ(errors.size(), 1u) << old_process.output(Stream::kStderr);
  EXPECT_NE(errors[0].find("now belongs to a newer worker"), std::string::npos) << errors[0];

  auto status = cluster.status();
  ASSERT_TRUE(status) << cluster.last_status_text();
  EXPECT_EQ(status->state("w1"), "alive");
  EXPECT_EQ(status->node("w1")->at("incarnation"), 2) << status->json().dump(2);
  EXPECT_TRUE(new_process.running());
}

}  // namespace
}  // namespace omnilearn::testing
