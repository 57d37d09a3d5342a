// A real process dies mid-step: rank 2 is a forked child that is SIGKILLed while ranks 0 and 1
// (threads of this process) wait for it in the all-reduce. The survivors must see the step fail
// promptly (connection loss, well before the collective timeout), keep their state, re-form
// without it and redo the step.
#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/training/test_support.hpp"

namespace omnilearn::training {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = 30s;
const std::vector<int> kPlan = {30, 40, 26};

TrainerConfig config() { return testing::synthetic_config(800, 16); }

// Child: rank 2 for two steps, then reports and waits to be killed. Never returns.
[[noreturn]] void child_main(int port_fd, int ready_fd) {
  uint16_t port = 0;
  if (::read(port_fd, &port, sizeof(port)) != sizeof(port)) ::_exit(3);
  try {
    at::set_num_threads(1);
    Trainer t(config());
    auto store = testing::LoopbackStore::connect(port);
    if (!t.join_group(store, 0, 2, 3, kTimeout, testing::loopback()).ok) ::_exit(4);
    if (!t.sync_state_from_rank0().ok) ::_exit(5);
    for (int s = 0; s < 2; ++s) {
      if (!t.step(kPlan).committed) ::_exit(6);
    }
    const char ready = 'r';
    if (::write(ready_fd, &ready, 1) != 1) ::_exit(7);
    for (;;) ::pause();
  } catch (...) {
    ::_exit(8);
  }
}

TEST(PeerKilled, SurvivorsFailTheStepKeepStateAndReform) {
  int port_pipe[2], ready_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  ASSERT_EQ(::pipe(ready_pipe), 0);
  // Fork before this process starts any thread (TCPStore daemon, Gloo, OpenMP).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(port_pipe[1]);
    ::close(ready_pipe[0]);
    child_main(port_pipe[0], ready_pipe[1]);
  }
  // Without our copies of the child's ends, a child that dies early reads as end-of-file.
  ::close(port_pipe[0]);
  ::close(ready_pipe[1]);

  at::set_num_threads(1);
  testing::LoopbackStore store;
  const uint16_t port = store.port();
  ASSERT_EQ(::write(port_pipe[1], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));

  const DatasetPair data = load_datasets(config().data);
  std::atomic<int> entered_third_step{0};
  std::thread killer([&] {
    char ready = 0;
    ASSERT_EQ(::read(ready_pipe[0], &ready, 1), 1);
    while (entered_third_step.load() < 2) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(300ms);  // let both survivors block in the all-reduce
    ::kill(child, SIGKILL);
  });

  testing::run_ranks(2, [&](int rank) {
    Trainer t(config(), data);
    ASSERT_TRUE(t.join_group(store.client(), 0, rank, 3, kTimeout, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(t.step(kPlan).committed);
    const auto params = t.named_parameters();
    const auto momentum = t.named_optimizer_state();
    const Cursor cursor = t.cursor();

    entered_third_step.fetch_add(1);
    const auto start = Clock::now();
    const StepResult r = t.step(kPlan);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_FALSE(r.committed);
    EXPECT_LT(elapsed, 10.0) << "peer death was noticed only by the timeout: " << r.error;
    testing::expect_equal(t.named_parameters(), params, "parameters");
    testing::expect_equal(t.named_optimizer_state(), momentum, "momentum");
    EXPECT_EQ(t.step_count(), 2);
    EXPECT_EQ(t.cursor(), cursor);

    ASSERT_TRUE(t.join_group(store.client(), 1, rank, 2, kTimeout, testing::loopback()).ok);
    ASSERT_TRUE(t.sync_state_from_rank0().ok);
    const StepResult redo = t.step({50, 46});
    EXPECT_TRUE(redo.committed) << redo.error;
    EXPECT_EQ(redo.step, 3);
  });
  killer.join();
  ::close(port_pipe[1]);
  ::close(ready_pipe[0]);

  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "child exited on its own with status " << status;
}

}  // namespace
}  // namespace omnilearn::training
