#include "tests/support/netns.hpp"

#include <unistd.h>

#include <regex>
#include <stdexcept>

#include "tests/support/child_process.hpp"

namespace omnilearn::testing {
namespace {

constexpr const char* kIp = "/usr/sbin/ip";

// Runs `ip args...`; empty on success, else what it printed.
std::string ip(std::vector<std::string> args) {
  args.insert(args.begin(), kIp);
  auto result = run_command(std::move(args), std::chrono::seconds(10));
  if (result.status.exited() && result.status.code == 0) return "";
  return result.err.empty() ? result.status.to_string() : result.err;
}

}  // namespace

NetworkPair::NetworkPair() {
  auto suffix = std::to_string(::getpid());
  head_ns_ = "olh-" + suffix;
  worker_ns_ = "olw-" + suffix;
}

NetworkPair::~NetworkPair() {
  if (!created_) return;
  ip({"netns", "delete", head_ns_});
  ip({"netns", "delete", worker_ns_});
}

bool NetworkPair::create(std::string* why) {
  if (::access(kIp, X_OK) != 0) {
    *why = "iproute2 (/usr/sbin/ip) is not installed";
    return false;
  }
  if (auto error = ip({"netns", "add", head_ns_}); !error.empty()) {
    *why = "cannot create a network namespace (needs root and CAP_SYS_ADMIN): " + error;
    return false;
  }
  created_ = true;
  const std::vector<std::vector<std::string>> steps = {
      {"netns", "add", worker_ns_},
      {"link", "add", "vh", "netns", head_ns_, "type", "veth", "peer", "name", "vw", "netns",
       worker_ns_},
      {"-n", head_ns_, "addr", "add", std::string(kHeadAddress) + "/24", "dev", "vh"},
      {"-n", worker_ns_, "addr", "add", std::string(kWorkerAddress) + "/24", "dev", "vw"},
      {"-n", head_ns_, "link", "set", "lo", "up"},
      {"-n", worker_ns_, "link", "set", "lo", "up"},
      {"-n", head_ns_, "link", "set", "vh", "up"},
      {"-n", worker_ns_, "link", "set", "vw", "up"},
      // `ip netns exec` remounts /sys; some containers allow namespaces but not that.
      {"netns", "exec", worker_ns_, "/bin/true"},
  };
  for (const auto& step : steps) {
    if (auto error = ip(step); !error.empty()) {
      *why = "cannot set up the test network (ip";
      for (const auto& arg : step) *why += " " + arg;
      *why += "): " + error;
      return false;
    }
  }
  return true;
}

std::vector<std::string> NetworkPair::in_head_namespace() const {
  return {kIp, "netns", "exec", head_ns_};
}

std::vector<std::string> NetworkPair::in_worker_namespace() const {
  return {kIp, "netns", "exec", worker_ns_};
}

void NetworkPair::set_link_up(bool up) {
  if (auto error = ip({"-n", worker_ns_, "link", "set", "vw", up ? "up" : "down"});
      !error.empty()) {
    throw std::runtime_error("cannot set the test link " + std::string(up ? "up" : "down") +
                             ": " + error);
  }
}

namespace {

std::vector<std::string> with_prefix(std::vector<std::string> prefix,
                                     const std::vector<std::string>& args) {
  prefix.insert(prefix.end(), args.begin(), args.end());
  return prefix;
}

}  // namespace

NamespacedCluster::NamespacedCluster(NetworkPair& network, std::chrono::milliseconds interval,
                                     std::chrono::milliseconds timeout,
                                     std::vector<std::string> head_args)
    : network_(network) {
  ProcessOptions options;
  options.name = "head";
  std::vector<std::string> command{omnilearn_binary().string(),
                                   "head",
                                   "--host",
                                   NetworkPair::kHeadAddress,
                                   "--port",
                                   "0",
                                   "--heartbeat-interval-ms",
                                   std::to_string(interval.count()),
                                   "--heartbeat-timeout-ms",
                                   std::to_string(timeout.count())};
  command.insert(command.end(), head_args.begin(), head_args.end());
  head_.emplace(with_prefix(network.in_head_namespace(), command),
                omnilearn_process_options(options));
  static const std::regex kListening(R"(listening on (\S+):(\d+))");
  auto line = head_->wait_for_output(kListening, std::chrono::seconds(15));
  std::smatch match;
  if (!line || !std::regex_search(*line, match, kListening)) {
    throw std::runtime_error("the head did not start:\n" + head_->describe());
  }
  address_ = std::string(NetworkPair::kHeadAddress) + ":" + match[2].str();
}

ChildProcess& NamespacedCluster::start_worker(const std::string& name, Side side,
                                              const std::vector<std::string>& extra_args) {
  bool head_side = side == Side::kHead;
  ProcessOptions options;
  options.name = name;
  std::vector<std::string> args{omnilearn_binary().string(), "worker", "--address", address_,
                                "--name", name, "--gloo-host",
                                head_side ? NetworkPair::kHeadAddress : NetworkPair::kWorkerAddress};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  workers_.emplace_back(
      with_prefix(head_side ? network_.in_head_namespace() : network_.in_worker_namespace(), args),
      omnilearn_process_options(options));
  return workers_.back();
}

CommandResult NamespacedCluster::run(std::vector<std::string> args,
                                     std::chrono::milliseconds timeout) {
  args.insert(args.begin(), omnilearn_binary().string());
  args.push_back("--address");
  args.push_back(address_);
  return run_command(with_prefix(network_.in_head_namespace(), args), timeout,
                     omnilearn_process_options({}));
}

std::optional<ClusterStatus> NamespacedCluster::status() {
  auto result = run({"status", "--json", "--timeout-ms", "2000"});
  last_status_text_ = result.out + result.err;
  if (result.status.code != 0) return std::nullopt;
  auto json = nlohmann::json::parse(result.out, nullptr, false);
  if (json.is_discarded()) return std::nullopt;
  return ClusterStatus(std::move(json));
}

}  // namespace omnilearn::testing
