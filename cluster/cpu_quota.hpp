#pragma once
// A CPU quota for this process and the trainers it starts, as `docker --cpus` sets one: a
// cgroup (v1 /sys/fs/cgroup/cpu or v2 cpu.max) with the shortest CFS period the kernel takes
// (a quota of 1 ms: 2.5 ms at 0.4 CPU), so an emulated slow machine is slow because it gets
// less CPU, not because it sleeps, and a worker that waited does not run its next compute at
// full speed on a quota saved up while it waited.

#include <sys/types.h>

#include <memory>
#include <string>

namespace omnilearn::actors {

class CpuQuota {
 public:
  // Creates the group "omnilearn-<tag>" and moves this process into it. Throws
  // std::runtime_error saying what to do when cgroups are not available or not writable.
  static std::unique_ptr<CpuQuota> create(const std::string& tag);
  ~CpuQuota();  // moves every member back to the parent group and removes the group

  // `cpus` CPUs' worth of time per period (0: no limit). Throws std::runtime_error.
  void set(double cpus);
  // Moves another process (e.g. a trainer started before the quota existed) into the group.
  void add(pid_t pid);
  double cpus() const { return cpus_; }
  const std::string& path() const { return path_; }

 private:
  CpuQuota(std::string path, std::string parent, bool v2);
  std::string path_;
  std::string parent_;
  bool v2_;
  double cpus_ = 0;
};

}  // namespace omnilearn::actors
