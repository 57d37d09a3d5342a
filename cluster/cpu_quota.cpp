#include "cluster/cpu_quota.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
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

// The CFS period for a quota of `cpus`: the shortest the kernel takes, whose quota is 1 ms.
// The group's runtime refills every period, so a worker that waited (for the slowest, for the
// all-reduce) starts its next compute with up to one period's quota in hand and runs it at
// full speed: under a 10 ms period a 5 ms compute after a wait ran unthrottled at 0.4 CPU,
// and the emulated machine was fast exactly when a real slow one would not be. At 0.4 CPU
// this gives 2.5 ms (1 ms of full speed at most); the kernel's floor for a period is 1 ms.
constexpr long kMinQuotaUs = 1000;  // the kernel refuses a smaller quota (EINVAL)

long period_us(double cpus) {
  constexpr double kMinPeriodUs = 1000.0, kMaxPeriodUs = 1000000.0;
  return static_cast<long>(std::clamp(std::ceil(kMinQuotaUs / cpus), kMinPeriodUs, kMaxPeriodUs));
}

long quota_us(double cpus, long period) {
  return std::max(kMinQuotaUs, std::lround(cpus * static_cast<double>(period)));
}

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
  constexpr long kUnlimitedPeriodUs = 100000;  // the kernel's default
  const long period = cpus > 0 ? period_us(cpus) : kUnlimitedPeriodUs;
  if (v2_) {
    write_file(path_ + "/cpu.max", cpus > 0
                                       ? fmt::format("{} {}", quota_us(cpus, period), period)
                                       : fmt::format("max {}", period));
  } else {
    // Unlimited for the moment the period changes: the old quota over a new, shorter period
    // can exceed what the parent group allows, and the kernel refuses that write.
    write_file(path_ + "/cpu.cfs_quota_us", "-1");
    write_file(path_ + "/cpu.cfs_period_us", std::to_string(period));
    if (cpus > 0) write_file(path_ + "/cpu.cfs_quota_us", std::to_string(quota_us(cpus, period)));
  }
  cpus_ = cpus;
}

void CpuQuota::add(pid_t pid) { write_file(path_ + "/cgroup.procs", std::to_string(pid)); }

}  // namespace omnilearn::actors
