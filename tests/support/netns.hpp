#pragma once
// Two network namespaces joined by a veth pair, made by a test for itself (root and iproute2
// needed): a "head" side at 10.251.0.1 and a "worker" side at 10.251.0.2. Taking the link down
// partitions them; nothing outside the two namespaces is touched. Removed in the destructor.
//
// Threads: belongs to the test thread that made it.

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/cluster.hpp"

namespace omnilearn::testing {

class NetworkPair {
 public:
  static constexpr const char* kHeadAddress = "10.251.0.1";
  static constexpr const char* kWorkerAddress = "10.251.0.2";

  NetworkPair();   // names unique to this process; nothing is created yet
  ~NetworkPair();  // deletes the namespaces (and with them the veth pair)
  NetworkPair(const NetworkPair&) = delete;
  NetworkPair& operator=(const NetworkPair&) = delete;

  // Creates both namespaces and the link; false (with the reason in `why`) where this machine
  // does not allow it, e.g. not root or no iproute2: the caller skips its test.
  bool create(std::string* why);

  // Prefix that runs a program inside a namespace: {"/usr/sbin/ip", "netns", "exec", NAME}.
  // `ip netns exec` execs the program, so the child's PID is the program's.
  std::vector<std::string> in_head_namespace() const;
  std::vector<std::string> in_worker_namespace() const;

  // Sets the worker side of the link down (partition) or up (heal); throws on failure.
  void set_link_up(bool up);

 private:
  std::string head_ns_;
  std::string worker_ns_;
  bool created_ = false;
};

enum class Side { kHead, kWorker };

// A cluster across a NetworkPair: `omnilearn head` in the head namespace listening on
// kHeadAddress, workers in either namespace (collectives on their side's address), and the CLI
// run in the head namespace. Every process is killed when it goes away (before the network).
class NamespacedCluster {
 public:
  // Starts the head (heartbeats `interval`, dead after `timeout`, `head_args` appended to its
  // command line); throws if it does not come up.
  NamespacedCluster(NetworkPair& network,
                    std::chrono::milliseconds interval = std::chrono::milliseconds(100),
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(600),
                    std::vector<std::string> head_args = {});

  // `extra_args` are appended to `omnilearn worker`'s command line (e.g. --slowdown 4).
  ChildProcess& start_worker(const std::string& name, Side side,
                             const std::vector<std::string>& extra_args = {});
  ChildProcess& head() { return *head_; }
  const std::string& address() const { return address_; }  // "10.251.0.1:PORT"

  // `omnilearn ARGS... --address ADDR` in the head namespace.
  CommandResult run(std::vector<std::string> args,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20));
  std::optional<ClusterStatus> status();
  template <class Predicate>
  std::optional<ClusterStatus> wait_for_status(Predicate&& predicate,
                                               std::chrono::milliseconds timeout) {
    std::optional<ClusterStatus> hit;
    wait_until(
        [&] {
          auto now = status();
          if (now && predicate(*now)) hit = std::move(now);
          return hit.has_value();
        },
        timeout, std::chrono::milliseconds(50));
    return hit;
  }
  const std::string& last_status_text() const { return last_status_text_; }

 private:
  NetworkPair& network_;
  std::optional<ChildProcess> head_;
  std::deque<ChildProcess> workers_;
  std::string address_;
  std::string last_status_text_;
};

}  // namespace omnilearn::testing
