#include "cluster/cpu_quota.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace omnilearn::actors {
namespace {

constexpr int kPeriodUs = 10000;  // short period: throttled in small slices, not in 100 ms stalls

void write_file(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.flush();
  if (!out) {
    throw std::runtime_error(fmt::format("cannot write '{}' to {}: {}", value, path,
                                         std::strerror(errno)));
  }
}

}  // namespace

CpuQuota::CpuQuota(std::string path, std::string parent, bool v2)
    : path_(std::move(path)), parent_(std::move(parent)), v2_(v2) {}

std::unique_ptr<CpuQuota> CpuQuota::create(const std::string& tag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  bool v2 = fs::exists("/sys/fs/cgroup/cgroup.controllers", ec);
  std::string parent = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/cpu";
  if (!v2 && !fs::exists(parent + "/cpu.cfs_quota_us", ec)) {
    throw std::runtime_error(
        "--cpu-quota needs cgroups: neither cgroup v2 (/sys/fs/cgroup/cgroup.controllers) nor "
        "the v1 cpu controller (/sys/fs/cgroup/cpu) is mounted here; use --slowdown instead");
  }
  std::string path = parent + "/omnilearn-" + tag;
  fs::create_directory(path, ec);
  if (ec) {
    throw std::runtime_error(fmt::format(
        "--cpu-quota cannot create the cgroup {}: {} (run as root or give this user a writable "
        "cgroup; or use --slowdown)",
        path, ec.message()));
  }
  if (v2) {
    // The cpu controller must be enabled for the children of the parent group.
    try {
      write_file(parent + "/cgroup.subtree_control", "+cpu");
    } catch (const std::exception&) {
      // Already enabled, or not allowed: cpu.max below tells.
    }
  }
  std::unique_ptr<CpuQuota> quota(new CpuQuota(path, parent, v2));
  quota->add(getpid());
  return quota;
}

CpuQuota::~CpuQuota() {
  // Members go back to the parent group; then the (empty) group can be removed. A member may be
  // on its way out (a trainer still exiting) or a thread may be starting while it moves, so the
  // move and the removal are retried for a bounded time while the kernel says the group is busy.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::vector<std::string> pids;
  for (;;) {
    pids.clear();
    std::ifstream procs(path_ + "/cgroup.procs");
    for (std::string pid; procs >> pid;) pids.push_back(pid);
    for (const auto& pid : pids) {
      try {
        write_file(parent_ + "/cgroup.procs", pid);
      } catch (const std::exception&) {
        // The process may have exited meanwhile.
      }
    }
    if (::rmdir(path_.c_str()) == 0 || errno == ENOENT) return;
    if (errno != EBUSY || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int error = errno;
  std::string members;
  for (const auto& pid : pids) {
    std::ifstream comm("/proc/" + pid + "/comm");
    std::string name;
    std::getline(comm, name);
    members += fmt::format(" {} ({})", pid, name.empty() ? "gone" : name);
  }
  spdlog::warn("cpu quota: could not remove {}: {}; members at the last try:{}", path_,
               std::strerror(error), members.empty() ? " none" : members);
}

void CpuQuota::set(double cpus) {
  if (v2_) {
    write_file(path_ + "/cpu.max",
               cpus > 0 ? fmt::format("{} {}", static_cast<long>(cpus * kPeriodUs), kPeriodUs)
                        : fmt::format("max {}", kPeriodUs));
  } else {
    write_file(path_ + "/cpu.cfs_period_us", std::to_string(kPeriodUs));
    write_file(path_ + "/cpu.cfs_quota_us",
               cpus > 0 ? std::to_string(static_cast<long>(cpus * kPeriodUs)) : "-1");
  }
  cpus_ = cpus;
}

void CpuQuota::add(pid_t pid) { write_file(path_ + "/cgroup.procs", std::to_string(pid)); }

}  // namespace omnilearn::actors
