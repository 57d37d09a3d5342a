// ForkThread: a child whose death signal is tied to its forking thread survives the exit of the
// thread that asked for it (as an actor's spare pool thread does), and still dies with the
// ForkThread. CpuQuota: a group is removed with its members moved out, including one that keeps
// running.
#include "cluster/fork_thread.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "cluster/cpu_quota.hpp"

namespace omnilearn::actors {
namespace {

// Returns once the child has its death signal set (it says so through a pipe), so that the
// signal cannot miss the exit of the thread it is tied to.
pid_t fork_sleeper(ForkThread& launcher) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  pid_t pid = launcher.run([&]() -> pid_t {
    pid_t child = ::fork();
    if (child != 0) return child;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    char byte = 1;
    [[maybe_unused]] ssize_t written = ::write(ready[1], &byte, 1);
    ::pause();
    ::_exit(0);
  });
  ::close(ready[1]);
  char byte = 0;
  if (pid > 0 && ::read(ready[0], &byte, 1) != 1) pid = -1;
  ::close(ready[0]);
  return pid;
}

// The child's exit status within `limit`, or nothing while it still runs.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TEST(ForkThread, AChildOutlivesTheThreadThatAskedForIt) {
  auto launcher = std::make_unique<ForkThread>();
  pid_t pid = -1;
  std::thread asker([&] { pid = fork_sleeper(*launcher); });
  asker.join();  // the asking thread is gone, as a retired spare pool thread would be
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(wait_child(pid, std::chrono::milliseconds(300)))
      << "the child died with the thread that asked for it";
  launcher.reset();  // the forking thread exits: now the death signal fires
  auto status = wait_child(pid, std::chrono::seconds(5));
  if (!status) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  ASSERT_TRUE(status) << "the child outlived its ForkThread";
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
}

TEST(ForkThread, AFailedForkReportsItsErrno) {
  ForkThread launcher;
  errno = 0;
  pid_t pid = launcher.run([]() -> pid_t {
    errno = EAGAIN;
    return -1;
  });
  EXPECT_EQ(pid, -1);
  EXPECT_EQ(errno, EAGAIN);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::string all, line;
  while (std::getline(in, line)) all += line + "\n";
  return all;
}

std::string cgroup_of(pid_t pid) { return read_all("/proc/" + std::to_string(pid) + "/cgroup"); }

TEST(CpuQuota, RemovingTheGroupMovesItsMembersOutFirst) {
  std::unique_ptr<CpuQuota> quota;
  try {
    quota = CpuQuota::create("test-" + std::to_string(::getpid()));
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no writable cgroup here: " << e.what();
  }
  const std::string path = quota->path();
  quota->set(0.5);
  // The shortest period the kernel takes for the quota (1 ms of quota): a worker that waited
  // must not run its next compute at full speed on a quota saved up meanwhile.
  const std::string v1_period = path + "/cpu.cfs_period_us";
  const std::string limits = std::filesystem::exists(v1_period)
                                 ? read_all(v1_period) + read_all(path + "/cpu.cfs_quota_us")
                                 : read_all(path + "/cpu.max");
  EXPECT_TRUE(limits == "2000\n1000\n" || limits == "1000 2000\n") << limits;
  ForkThread launcher;
  pid_t child = fork_sleeper(launcher);
  ASSERT_GT(child, 0);
  // Forked after create(): in the group with this process.
  EXPECT_NE(cgroup_of(child).find("omnilearn-test-"), std::string::npos) << cgroup_of(child);
  quota.reset();
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists(path, ec)) << path << " is still there";
  EXPECT_EQ(cgroup_of(child).find("omnilearn-test-"), std::string::npos) << cgroup_of(child);
  EXPECT_EQ(cgroup_of(::getpid()).find("omnilearn-test-"), std::string::npos);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  if (std::filesystem::exists(path, ec)) ::rmdir(path.c_str());
}

}  // namespace
}  // namespace omnilearn::actors
