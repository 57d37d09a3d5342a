#include "tests/support/cluster.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <regex>
#include <stdexcept>
#include <thread>

#include "runtime/cluster_file.hpp"

namespace omnilearn::testing {

std::filesystem::path omnilearn_binary() {
  const char* dir = std::getenv("OMNILEARN_BIN");
  if (!dir || !*dir) {
    throw std::runtime_error(
        "OMNILEARN_BIN is not set: run the test through ctest, or set it to the directory of "
        "the omnilearn executable (e.g. build/cli)");
  }
  auto path = std::filesystem::path(dir) / "omnilearn";
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error("no omnilearn executable at " + path.string() +
                             " (build the omnilearn target)");
  }
  return path;
}

namespace {

// One private directory per test program, removed at exit: the heads it starts write their
// cluster file there, and every other process it starts reads it (OMNILEARN_CLUSTER_FILE), so
// tests run closed clusters like users do without touching ~/.omnilearn.
class TestClusterFileDir {
 public:
  TestClusterFileDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "omnilearn-test-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    dir_ = pattern;
  }
  ~TestClusterFileDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

TestClusterFileDir& test_cluster_dir() {
  static TestClusterFileDir dir;
  return dir;
}

}  // namespace

std::uint16_t unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

std::filesystem::path test_cluster_file() {
  // Written once, before any head starts, so that heads started concurrently by one test share
  // keys instead of racing to create them; each head then records its own address in it.
  static const std::filesystem::path path = [] {
    auto file = test_cluster_dir().path() / "cluster.toml";
    runtime::write_cluster_file(file, {"", runtime::generate_cluster_credentials()});
    return file;
  }();
  return path;
}

std::filesystem::path extra_cluster_file(const std::string& name, const std::string& address,
                                         bool same_cluster) {
  auto file = test_cluster_dir().path() / name;
  auto credentials = same_cluster ? runtime::read_cluster_file(test_cluster_file()).credentials
                                  : runtime::generate_cluster_credentials();
  runtime::write_cluster_file(file, {address, credentials});
  return file;
}

ProcessOptions omnilearn_process_options(ProcessOptions options) {
  auto has_key = [&](const std::string& key) {
    return std::any_of(options.env.begin(), options.env.end(),
                       [&](const std::string& entry) { return entry.rfind(key + "=", 0) == 0; });
  };
  if (!has_key("OMNILEARN_CLUSTER_FILE")) {
    options.env.push_back("OMNILEARN_CLUSTER_FILE=" + test_cluster_file().string());
  }
  if (!has_key("OMNILEARN_TRAINER") && !std::getenv("OMNILEARN_TRAINER") &&
      !std::filesystem::exists(omnilearn_binary().parent_path() / "omnilearn-trainer")) {
    options.env.push_back("OMNILEARN_TRAINER=/bin/false");
  }
  return options;
}

CommandResult run_omnilearn(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                            ProcessOptions options) {
  std::vector<std::string> argv{omnilearn_binary().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  if (options.name.empty()) options.name = "omnilearn " + (args.empty() ? "" : args[0]);
  return run_command(std::move(argv), timeout, omnilearn_process_options(std::move(options)));
}

namespace {

std::vector<std::string> head_argv(const HeadOptions& options) {
  std::vector<std::string> argv{omnilearn_binary().string(),
                                "head",
                                "--host",
                                "127.0.0.1",
                                "--port",
                                std::to_string(options.port),
                                "--heartbeat-interval-ms",
                                std::to_string(options.heartbeat_interval.count()),
                                "--heartbeat-timeout-ms",
                                std::to_string(options.heartbeat_timeout.count())};
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  return argv;
}

ProcessOptions named(ProcessOptions options, const std::string& name) {
  if (options.name.empty()) options.name = name;
  return omnilearn_process_options(std::move(options));
}

}  // namespace

HeadProcess::HeadProcess(HeadOptions options)
    : options_(std::move(options)), process_(head_argv(options_), named(options_.process, "head")) {
  static const std::regex kListening(R"(listening on (\S+):(\d+))");
  auto line = process_.wait_for_output(kListening, options_.start_timeout);
  std::smatch match;
  if (!line || !std::regex_search(*line, match, kListening)) {
    throw std::runtime_error("the head did not report its address within " +
                             std::to_string(options_.start_timeout.count()) + " ms:\n" +
                             process_.describe());
  }
  address_ = match[1].str() + ":" + match[2].str();
  port_ = static_cast<std::uint16_t>(std::stoi(match[2].str()));
}

std::vector<nlohmann::json> ClusterStatus::nodes_named(const std::string& name) const {
  std::vector<nlohmann::json> result;
  for (const auto& node : nodes()) {
    if (node.value("name", "") == name) result.push_back(node);
  }
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) {
    return a.value("incarnation", 0ull) < b.value("incarnation", 0ull);
  });
  return result;
}

std::optional<nlohmann::json> ClusterStatus::node(const std::string& name) const {
  auto all = nodes_named(name);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string ClusterStatus::state(const std::string& name) const {
  auto newest = node(name);
  return newest ? newest->value("state", "") : "";
}

std::size_t ClusterStatus::count(const std::string& state) const {
  return static_cast<std::size_t>(std::count_if(nodes().begin(), nodes().end(), [&](const auto& n) {
    return n.value("state", "") == state;
  }));
}

namespace {

// A head keeps its state in head-<port> beside the cluster file unless told otherwise. Every
// head of one test program shares that file, so a later cluster whose head got a port an
// earlier one used would restore that head's nodes and jobs: each cluster gets a folder of its
// own instead (kept across restart_head), unless the test chose a store itself.
HeadOptions with_own_state(HeadOptions head) {
  const auto& args = head.extra_args;
  const bool chosen = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a.rfind("--state-dir", 0) == 0 || a.rfind("--store", 0) == 0;
  });
  if (chosen) return head;
  static std::atomic<int> clusters{0};
  const auto dir = test_cluster_dir().path() / ("cluster-" + std::to_string(++clusters) + "-state");
  head.extra_args.push_back("--state-dir");
  head.extra_args.push_back(dir.string());
  return head;
}

}  // namespace

TestCluster::TestCluster(HeadOptions head)
    : head_options_(with_own_state(std::move(head))),
      head_(std::make_unique<HeadProcess>(head_options_)) {
  address_ = head_->address();
  head_options_.port = head_->port();  // a restarted head comes back on the same port
}

TestCluster::~TestCluster() {
  // Workers first, so none of them logs a lost head while the test is being torn down.
  workers_.clear();
  head_.reset();
  old_heads_.clear();
}

ChildProcess& TestCluster::start_worker(const std::string& name,
                                        std::vector<std::string> extra_args,
                                        ProcessOptions options) {
  std::vector<std::string> argv{
      omnilearn_binary().string(), "worker", "--address", address_, "--name", name};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  auto process = std::make_unique<ChildProcess>(std::move(argv), named(options, "worker " + name));
  auto& ref = *process;
  workers_.emplace_back(name, std::move(process));
  return ref;
}

ChildProcess& TestCluster::worker(const std::string& name) {
  for (auto it = workers_.rbegin(); it != workers_.rend(); ++it) {
    if (it->first == name) return *it->second;
  }
  throw std::out_of_range("no worker named '" + name + "' was started");
}

bool TestCluster::wait_worker_joined(const std::string& name, std::chrono::milliseconds timeout) {
  return worker(name).wait_for_output("joined", timeout).has_value();
}

void TestCluster::kill_head() {
  if (head_) head_->process().kill_and_reap();
}

std::optional<ExitStatus> TestCluster::stop_head(int sig, std::chrono::milliseconds timeout) {
  if (!head_ || !head_->process().send_signal(sig)) return std::nullopt;
  auto status = head_->process().wait_exit(timeout);
  if (!status) head_->process().kill_and_reap();
  return status;
}

HeadProcess& TestCluster::restart_head() {
  kill_head();
  if (head_) old_heads_.push_back(std::move(head_));
  // The kernel frees a killed listener's port at once, but give a slow machine a few tries.
  std::string last_error;
  for (int attempt = 0; attempt < 20; ++attempt) {
    try {
      head_ = std::make_unique<HeadProcess>(head_options_);
      return *head_;
    } catch (const std::runtime_error& e) {
      last_error = e.what();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  throw std::runtime_error("could not restart the head on port " +
                           std::to_string(head_options_.port) + ": " + last_error);
}

std::optional<ClusterStatus> TestCluster::status(std::chrono::milliseconds timeout,
                                                 std::string* error) {
  auto result = run_omnilearn({"status", "--address", address_, "--json", "--timeout-ms",
                               std::to_string(std::max<std::int64_t>(timeout.count() / 2, 1))},
                              timeout);
  auto fail = [&](std::string why) -> std::optional<ClusterStatus> {
    last_status_text_ = why;
    if (error) *error = std::move(why);
    return std::nullopt;
  };
  if (result.timed_out || !result.status.exited() || result.status.code != 0) {
    return fail("status: " + result.status.to_string() + (result.timed_out ? " (timed out)" : "") +
                ": " + result.err);
  }
  auto json = nlohmann::json::parse(result.out, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object() || !json.contains("nodes") ||
      !json["nodes"].is_array()) {
    return fail("status printed something that is not the expected JSON: " + result.out);
  }
  last_status_text_ = result.out;
  return ClusterStatus(std::move(json));
}

}  // namespace omnilearn::testing
