#pragma once
// A real etcd cluster for tests of the head's shared state: Debian's etcd-server, one process
// per member on ports the OS picked, on loopback or in a network namespace the test made, data
// in a scratch directory, every member killed and reaped by the destructor.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/child_process.hpp"
#include "tests/support/cluster.hpp"

namespace omnilearn::testing {

class EtcdCluster {
 public:
  // Empty when etcd can run here; otherwise why not (for GTEST_SKIP).
  static std::string unavailable();

  // Starts `members` members and waits (bounded) until each serves clients; throws
  // std::runtime_error with their output otherwise. The members listen on `host`; `launcher`
  // runs each of them (e.g. NetworkPair::in_worker_namespace(): etcd on one side of a link the
  // test can cut).
  EtcdCluster(int members, const std::filesystem::path& data_dir,
              const std::string& host = "127.0.0.1", std::vector<std::string> launcher = {});
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "etcd://HOST:P1,HOST:P2,.../<prefix>" for `omnilearn head --store`.
  std::string store(const std::string& prefix) const;
  const std::vector<std::string>& client_endpoints() const { return clients_; }
  // Member `i`'s process (to freeze it with SIGSTOP, say).
  ChildProcess& member(std::size_t i) { return *members_.at(i); }

 private:
  std::vector<std::string> clients_;
  std::vector<std::unique_ptr<ChildProcess>> members_;
};

}  // namespace omnilearn::testing
