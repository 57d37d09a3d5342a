#include "tests/support/etcd.hpp"

#include <unistd.h>

#include <chrono>
#include <stdexcept>

namespace omnilearn::testing {
namespace {

constexpr const char* kEtcd = "/usr/bin/etcd";

}  // namespace

std::string EtcdCluster::unavailable() {
  if (::access(kEtcd, X_OK) != 0) {
    return "etcd is not installed (Debian's etcd-server; scripts/install-deps.sh --test)";
  }
  return "";
}

EtcdCluster::EtcdCluster(int members, const std::filesystem::path& data_dir,
                         const std::string& host, std::vector<std::string> launcher) {
  std::vector<std::string> names, peers;
  std::string initial;
  for (int i = 0; i < members; ++i) {
    names.push_back("m" + std::to_string(i));
    clients_.push_back(host + ":" + std::to_string(unused_port()));
    peers.push_back("http://" + host + ":" + std::to_string(unused_port()));
    initial += (i ? "," : "") + names.back() + "=" + peers.back();
  }
  for (int i = 0; i < members; ++i) {
    const std::string client = "http://" + clients_[i];
    ProcessOptions options;
    options.name = "etcd " + names[i];
    std::vector<std::string> command = launcher;
    const std::vector<std::string> etcd{kEtcd,
                                        "--name",
                                        names[i],
                                        "--data-dir",
                                        (data_dir / names[i]).string(),
                                        "--listen-client-urls",
                                        client,
                                        "--advertise-client-urls",
                                        client,
                                        "--listen-peer-urls",
                                        peers[i],
                                        "--initial-advertise-peer-urls",
                                        peers[i],
                                        "--initial-cluster",
                                        initial,
                                        "--initial-cluster-state",
                                        "new",
                                        "--initial-cluster-token",
                                        data_dir.filename().string()};
    command.insert(command.end(), etcd.begin(), etcd.end());
    members_.push_back(std::make_unique<ChildProcess>(command, options));
  }
  for (auto& member : members_) {
    if (!member->wait_for_output("ready to serve client requests", std::chrono::seconds(30),
                                 Stream::kStderr)) {
      throw std::runtime_error("an etcd member did not start:\n" + member->describe());
    }
  }
}

EtcdCluster::~EtcdCluster() {
  for (auto& member : members_) member->kill_and_reap();
}

std::string EtcdCluster::store(const std::string& prefix) const {
  std::string spec = "etcd://";
  for (std::size_t i = 0; i < clients_.size(); ++i) spec += (i ? "," : "") + clients_[i];
  return spec + "/" + prefix;
}

}  // namespace omnilearn::testing
