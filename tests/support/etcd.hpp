#pragma once
// A real etcd cluster on loopback for tests of the head's shared state: Debian's etcd-server,
// one process per member on ports the OS picked, data in a scratch directory, every member
// killed and reaped by the destructor.

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
  // std::runtime_error with their output otherwise.
  EtcdCluster(int members, const std::filesystem::path& data_dir);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "etcd://127.0.0.1:P1,127.0.0.1:P2,.../<prefix>" for `omnilearn head --store`.
  std::string store(const std::string& prefix) const;
  const std::vector<std::string>& client_endpoints() const { return clients_; }

 private:
  std::vector<std::string> clients_;
  std::vector<std::unique_ptr<ChildProcess>> members_;
};

}  // namespace omnilearn::testing
