#pragma once
// A real cluster for end-to-end tests: an `omnilearn head` process on a port the OS picks, worker
// processes by name, and `omnilearn status --json` parsed into something tests can query.
// Everything listens on 127.0.0.1 only, and every process is killed when the cluster goes away.
//
// Threads: a TestCluster belongs to the test thread that made it.

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/child_process.hpp"
#include "tests/support/wait.hpp"

namespace omnilearn::testing {

// The `omnilearn` executable: $OMNILEARN_BIN (the directory ctest passes) + "/omnilearn".
// Throws std::runtime_error if the variable is unset or the file is missing.
std::filesystem::path omnilearn_binary();

// A loopback TCP port nobody listens on (bound by the OS, then released); 0 if none was had.
std::uint16_t unused_port();

// The cluster file of this test program's clusters, in a private temporary directory removed at
// exit: created (with fresh keys and no address) on first use; every head reuses its keys and
// records its address in it.
std::filesystem::path test_cluster_file();

// Another cluster file `name` in the same private directory, holding `address` and either the
// test cluster's keys (same_cluster) or a stranger's.
std::filesystem::path extra_cluster_file(const std::string& name, const std::string& address,
                                         bool same_cluster);

// `options` plus what every omnilearn process started by a test needs: OMNILEARN_CLUSTER_FILE
// set to test_cluster_file() (heads, workers and clients share credentials), and, when no
// trainer program is built (OMNILEARN_WITH_TORCH=OFF) and $OMNILEARN_TRAINER is unset,
// OMNILEARN_TRAINER=/bin/false, so `omnilearn worker` starts for membership tests that host no
// trainers. Entries already in options.env win.
ProcessOptions omnilearn_process_options(ProcessOptions options);

// Runs `omnilearn <args...>` to completion (bounded by `timeout`), with
// omnilearn_process_options(options).
CommandResult run_omnilearn(const std::vector<std::string>& args,
                            std::chrono::milliseconds timeout = std::chrono::seconds(20),
                            ProcessOptions options = {});

struct HeadOptions {
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds heartbeat_timeout{600};
  std::uint16_t port = 0;               // 0: a free port the OS picks
  std::vector<std::string> extra_args;  // appended to the command line
  ProcessOptions process;
  std::chrono::milliseconds start_timeout{15000};
};

// `omnilearn head --host 127.0.0.1 --port P --heartbeat-interval-ms I --heartbeat-timeout-ms T`,
// started and waited for until it prints the address it listens on.
class HeadProcess {
 public:
  // Throws std::runtime_error (with the head's output) if it does not report its address within
  // options.start_timeout.
  explicit HeadProcess(HeadOptions options = {});

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  std::uint16_t port() const { return port_; }
  const HeadOptions& options() const { return options_; }
  ChildProcess& process() { return process_; }

 private:
  HeadOptions options_;
  ChildProcess process_;
  std::string address_;
  std::uint16_t port_ = 0;
};

// A parsed `omnilearn status --json`: {"nodes":[...],"jobs":[...],"counters":{...}}.
class ClusterStatus {
 public:
  explicit ClusterStatus(nlohmann::json json) : json_(std::move(json)) {}

  const nlohmann::json& json() const { return json_; }
  const nlohmann::json& nodes() const { return json_.at("nodes"); }
  // Every record (every incarnation) of the node named `name`, oldest incarnation first.
  std::vector<nlohmann::json> nodes_named(const std::string& name) const;
  // The newest incarnation of `name`, if the head knows it.
  std::optional<nlohmann::json> node(const std::string& name) const;
  // The state ("alive", "suspect", "dead", "left") of the newest incarnation of `name`, or ""
  // if unknown.
  std::string state(const std::string& name) const;
  // How many node records are in `state`.
  std::size_t count(const std::string& state) const;

 private:
  nlohmann::json json_;
};

class TestCluster {
 public:
  // Starts the head (throws like HeadProcess if it does not come up).
  explicit TestCluster(HeadOptions head = {});
  ~TestCluster();  // kills every worker, then the head
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  HeadProcess& head() { return *head_; }
  const std::string& address() const { return address_; }

  // Starts `omnilearn worker --address ADDR --name NAME [extra_args...]`. Returns the process;
  // the reference stays valid for the cluster's lifetime, even after restarts of that name.
  ChildProcess& start_worker(const std::string& name, std::vector<std::string> extra_args = {},
                             ProcessOptions options = {});
  // The newest worker process started as `name`; throws std::out_of_range if none.
  ChildProcess& worker(const std::string& name);
  // Waits until the newest process for `name` printed "joined" on stdout.
  bool wait_worker_joined(const std::string& name,
                          std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // SIGKILLs the head and reaps it.
  void kill_head();
  // Stops the head gracefully, as systemd or Kubernetes would (`sig`: SIGTERM, or SIGINT), and
  // waits up to `timeout` for it to exit. Returns its exit status; nullopt when it still ran
  // (it is then killed). restart_head() may follow.
  std::optional<ExitStatus> stop_head(int sig,
                                      std::chrono::milliseconds timeout = std::chrono::seconds(15));
  // Starts a new head on the same port with the same options (retrying briefly while the port
  // is still being released). The previous head must be dead (kill_head).
  HeadProcess& restart_head();

  // Runs `omnilearn status --json --address ADDR`; nullopt (with the reason in `error`, if
  // given) when it fails or prints something that is not the expected JSON.
  std::optional<ClusterStatus> status(std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                      std::string* error = nullptr);
  // Polls status() until `predicate(status)` holds; returns the status that satisfied it.
  template <class Predicate>
  std::optional<ClusterStatus> wait_for_status(
      Predicate&& predicate, std::chrono::milliseconds timeout,
      std::chrono::milliseconds poll = std::chrono::milliseconds(50)) {
    std::optional<ClusterStatus> hit;
    wait_until(
        [&] {
          auto now = status();
          if (now && predicate(*now)) hit = std::move(now);
          return hit.has_value();
        },
        timeout, poll);
    return hit;
  }
  // The last status polled by wait_for_status or status(), for failure messages.
  std::string last_status_text() const { return last_status_text_; }

 private:
  HeadOptions head_options_;
  std::unique_ptr<HeadProcess> head_;
  std::vector<std::unique_ptr<HeadProcess>> old_heads_;  // kept for their output
  std::string address_;
  std::deque<std::pair<std::string, std::unique_ptr<ChildProcess>>> workers_;
  std::string last_status_text_;
};

}  // namespace omnilearn::testing
