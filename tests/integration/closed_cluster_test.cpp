// The cluster is closed: without its cluster file, a client cannot read status or submit a job
// and a worker cannot join; the head counts the refusals and keeps serving members. Garbage sent
// to every port the head and a worker listen on changes nothing either. --insecure exists, and
// says so loudly.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/support/cluster.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kJob = R"([job]
name = "refused"
[model]
kind = "mlp"
hidden = [8]
[data]
dataset = "synthetic"
[train]
global_batch = 16
steps = 2
)";

std::uint64_t counter(const ClusterStatus& status, const std::string& name) {
  return status.json().at("counters").value(name, std::uint64_t{0});
}

// The last line of stderr: the one-line error (warnings and logs may come before it).
std::string last_line(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text.substr(text.rfind('\n') + 1);  // npos + 1 == 0: a single line
}

void expect_refused(const CommandResult& result, const std::string& what) {
  EXPECT_FALSE(result.timed_out) << what << " hung";
  EXPECT_EQ(result.status.code, 2) << what << "\n" << result.err;
  EXPECT_NE(last_line(result.err).find("handshake"), std::string::npos)
      << what << ": the error must say the secure handshake failed\n"
      << result.err;
}

TEST(ClosedCluster, WithoutTheClusterFileNobodyReadsStatusSubmitsOrJoins) {
  TestCluster cluster;
  auto job = std::filesystem::path(test_cluster_file()).parent_path() / "refused.toml";
  std::ofstream(job) << kJob;
  auto stranger = extra_cluster_file("stranger.toml", cluster.address(), false).string();
  const std::vector<std::vector<std::string>> no_credentials = {{"--insecure"},
                                                                {"--cluster-file", stranger}};
  for (const auto& credentials : no_credentials) {
    std::vector<std::string> status{"status", "--address", cluster.address(), "--timeout-ms", "1500"};
    status.insert(status.end(), credentials.begin(), credentials.end());
    expect_refused(run_omnilearn(status, 20s), "status " + credentials[0]);

    std::vector<std::string> submit{"submit", job.string(), "--address", cluster.address(),
                                    "--timeout-ms", "1500"};
    submit.insert(submit.end(), credentials.begin(), credentials.end());
    expect_refused(run_omnilearn(submit, 20s), "submit " + credentials[0]);

    std::vector<std::string> worker{"worker", "--address", cluster.address(), "--name",
                                    "intruder", "--join-timeout-s", "2"};
    worker.insert(worker.end(), credentials.begin(), credentials.end());
    expect_refused(run_omnilearn(worker, 20s), "worker " + credentials[0]);
  }
  std::string error;
  auto status = cluster.status(5s, &error);
  ASSERT_TRUE(status) << "a member still reads status: " << error;
  EXPECT_TRUE(status->nodes().empty()) << "nobody joined: " << status->json().dump();
  EXPECT_TRUE(status->json()["jobs"].empty()) << "no job was submitted";
  EXPECT_GE(counter(*status, "failed_handshakes") + counter(*status, "refused_peers"), 6u)
      << status->json().dump();
  EXPECT_EQ(counter(*status, "dropped_malformed"), 0u) << "nothing from them was decoded";

  cluster.start_worker("member");
  EXPECT_TRUE(cluster.wait_worker_joined("member")) << cluster.worker("member").describe();
}

TEST(ClosedCluster, TheHeadWritesAPrivateClusterFileThatWorkersFindTheHeadThrough) {
  auto file = std::filesystem::path(test_cluster_file()).parent_path() / "own" / "cluster.toml";
  HeadOptions head;
  head.extra_args = {"--cluster-file", file.string()};
  TestCluster cluster(head);
  struct stat info {};
  ASSERT_EQ(::stat(file.c_str(), &info), 0) << cluster.head().process().describe();
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_NE(cluster.head().process().output(Stream::kStdout).find(file.string()), std::string::npos)
      << "the head says where the file is";
  // No --address: the file names the head.
  ProcessOptions options;
  options.env = {"OMNILEARN_CLUSTER_FILE=" + file.string(), "OMNILEARN_ADDRESS="};
  auto status = run_omnilearn({"status", "--json"}, 20s, options);
  EXPECT_EQ(status.status.code, 0) << status.err;

  ::chmod(file.c_str(), 0644);
  auto loose = run_omnilearn({"status"}, 20s, options);
  EXPECT_EQ(loose.status.code, 2);
  EXPECT_NE(loose.err.find("chmod 600"), std::string::npos) << loose.err;
  ::chmod(file.c_str(), 0600);
}

TEST(ClosedCluster, NoClusterFileAnywhereSaysHowToGetOne) {
  auto home = std::filesystem::path(test_cluster_file()).parent_path() / "empty-home";
  std::filesystem::create_directories(home);
  ProcessOptions options;
  options.env = {"OMNILEARN_CLUSTER_FILE=", "HOME=" + home.string()};
  auto result = run_omnilearn({"status", "--address", "127.0.0.1:7070"}, 20s, options);
  EXPECT_EQ(result.status.code, 2) << result.err;
  EXPECT_NE(result.err.find("--cluster-file"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("--insecure"), std::string::npos) << result.err;
}

TEST(ClosedCluster, InsecureModeWorksAndWarnsEveryone) {
  HeadOptions head;
  head.extra_args = {"--insecure"};
  TestCluster cluster(head);
  EXPECT_NE(cluster.head().process().output(Stream::kStderr).find("WARNING"), std::string::npos)
      << cluster.head().process().describe();
  auto& worker = cluster.start_worker("open", {"--insecure"});
  EXPECT_TRUE(cluster.wait_worker_joined("open")) << worker.describe();
  EXPECT_NE(worker.output(Stream::kStderr).find("--insecure"), std::string::npos);
  auto status = run_omnilearn({"status", "--insecure", "--address", cluster.address()}, 20s);
  EXPECT_EQ(status.status.code, 0) << status.err;
  EXPECT_NE(status.out.find("open"), std::string::npos) << status.out;
  // A client with credentials does not fall back to plain text.
  auto secure = run_omnilearn({"status", "--address", cluster.address(), "--timeout-ms", "1500"},
                              20s);
  expect_refused(secure, "status with a cluster file against an --insecure head");
}

// TCP ports `pid` listens on: its socket inodes matched against /proc/net/tcp (loopback tests
// only; the process shares this test's network namespace).
std::set<std::uint16_t> listening_ports(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<std::uint16_t> ports;
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
        inode;
    if (state == "0A" && inodes.count(inode)) {
      ports.insert(static_cast<std::uint16_t>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

// Connects to 127.0.0.1:port and writes `bytes`, then closes.
void send_raw(std::uint16_t port, const std::string& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    [[maybe_unused]] auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(50ms);
  }
  ::close(fd);
}

TEST(ClosedCluster, GarbageTruncatedAndOversizedFramesAtEveryPortChangeNothing) {
  TestCluster cluster;
  cluster.start_worker("steady");
  ASSERT_TRUE(cluster.wait_worker_joined("steady")) << cluster.worker("steady").describe();
  auto head_ports = listening_ports(cluster.head().process().pid());
  auto worker_ports = listening_ports(cluster.worker("steady").pid());
  ASSERT_TRUE(head_ports.count(cluster.head().port())) << "found the head's port";
  ASSERT_FALSE(worker_ports.empty()) << "the worker listens for its trainers";
  std::vector<std::uint16_t> ports(head_ports.begin(), head_ports.end());
  ports.insert(ports.end(), worker_ports.begin(), worker_ports.end());

  // A ZMTP 3 greeting asking for the NULL mechanism, cut short; the same followed by a frame
  // header announcing 2^62 bytes; and 64 KiB of noise.
  std::string greeting("\xff\0\0\0\0\0\0\0\x01\x7f\x03\x00NULL", 16);
  greeting.resize(64, '\0');
  std::string oversized = greeting + std::string("\x06\x40\0\0\0\0\0\0\0", 9);
  std::string noise(64 * 1024, '\0');
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 7919) >> 3);
  for (auto port : ports) {
    send_raw(port, greeting.substr(0, 11));
    send_raw(port, oversized);
    send_raw(port, noise);
  }
  auto status = cluster.wait_for_status(
      [&](const ClusterStatus& s) {
        // The oversized header and the noise each fail a handshake; a greeting cut short is
        // just a closed connection to ZeroMQ (no handshake began), so it is not counted.
        return s.state("steady") == "alive" && counter(s, "failed_handshakes") >= 2;
      },
      10s);
  ASSERT_TRUE(status) << cluster.last_status_text();
  EXPECT_TRUE(cluster.worker("steady").running()) << cluster.worker("steady").describe();
  auto later = cluster.status();
  ASSERT_TRUE(later);
  EXPECT_EQ(later->node("steady")->value("incarnation", 0ull), 1u)
      << "the worker never lost its membership";
}

}  // namespace
}  // namespace omnilearn::testing
