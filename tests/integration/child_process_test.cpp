// The test-support ChildProcess itself: output capture, exit statuses, signals, and that nothing
// it started outlives it.

#include "tests/support/child_process.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <thread>

#include "tests/support/wait.hpp"

namespace omnilearn::testing {
namespace {

using namespace std::chrono_literals;

ChildProcess shell(const std::string& script, ProcessOptions options = {}) {
  return ChildProcess({"/bin/sh", "-c", script}, std::move(options));
}

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  // Still a zombie waiting for its (new) parent to reap it counts as gone.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  stat >> pid_field >> comm >> state;
  return state == "Z" || state.empty();
}

TEST(ChildProcess, CapturesStdoutAndStderrLineByLine) {
  auto child = shell("echo one; echo two >&2; echo three; printf 'no newline'");
  ASSERT_TRUE(child.wait_exit(10s));
  auto line = child.wait_for_output("thr", 5s);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "three");
  EXPECT_EQ(child.wait_for_output("two", 5s, Stream::kStderr), "two");
  EXPECT_EQ(child.wait_for_output("no newline", 5s), "no newline")
      << "the last unterminated line counts once the stream ends";
  EXPECT_EQ(child.lines(Stream::kStdout), (std::vector<std::string>{"one", "three", "no newline"}));
  EXPECT_EQ(child.output(Stream::kStderr), "two\n");
}

TEST(ChildProcess, WaitsForOutputThatComesLater) {
  auto child = shell("sleep 0.2; echo 'listening on 127.0.0.1:4242'; sleep 30");
  auto line = child.wait_for_output(std::regex(R"(listening on [\d.]+:(\d+))"), 10s);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "listening on 127.0.0.1:4242");
  EXPECT_TRUE(child.running());
}

TEST(ChildProcess, WaitForOutputTimesOutAndStopsAtEndOfStream) {
  auto child = shell("echo hello; sleep 30");
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(child.wait_for_output("never", 200ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);

  auto quick = shell("echo bye");
  start = std::chrono::steady_clock::now();
  EXPECT_FALSE(quick.wait_for_output("never", 10s)) << "the stream closed: no point waiting";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(ChildProcess, FromLineSkipsEarlierOutput) {
  auto child = shell("echo ready; sleep 0.3; echo ready again; sleep 30");
  ASSERT_TRUE(child.wait_for_output("ready", 5s));
  auto mark = child.line_count(Stream::kStdout);
  EXPECT_EQ(mark, 1u);
  auto line = child.wait_for_output("ready", 5s, Stream::kStdout, mark);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "ready again");
}

TEST(ChildProcess, ReportsExitCodesAndSignals) {
  auto exits = shell("exit 3");
  auto status = exits.wait_exit(10s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(status->exited());
  EXPECT_EQ(status->code, 3);
  EXPECT_EQ(status->to_string(), "exit 3");
  EXPECT_EQ(exits.wait_exit(0ms)->code, 3) << "the same status every time";
  EXPECT_FALSE(exits.send_signal(SIGTERM)) << "it has exited";

  auto sleeper = shell("exec sleep 30");
  EXPECT_FALSE(sleeper.wait_exit(50ms)) << "still running";
  EXPECT_TRUE(sleeper.send_signal(SIGTERM));
  status = sleeper.wait_exit(10s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(status->signaled());
  EXPECT_EQ(status->signal, SIGTERM);

  auto killed = shell("exec sleep 30");
  auto final_status = killed.kill_and_reap();
  EXPECT_EQ(final_status.signal, SIGKILL);
  EXPECT_EQ(killed.kill_and_reap().signal, SIGKILL) << "idempotent";
}

// Once wait_exit reports an exit, everything the child wrote before it is in output(): a
// test that checks the last line a stopped head logged must not race the reader thread.
TEST(ChildProcess, AnExitIsReportedAfterTheOutputWrittenBeforeIt) {
  for (int i = 0; i < 500; ++i) {
    SCOPED_TRACE("run " + std::to_string(i));
    // The last write fills most of a pipe's buffer, and the child exits right after it.
    auto child = shell("{ head -c 60000 /dev/zero | tr '\\0' x; echo; echo last line; } >&2");
    ASSERT_TRUE(child.wait_exit(10s));
    const std::string err = child.output(Stream::kStderr);
    ASSERT_NE(err.find("last line"), std::string::npos) << err.size() << " bytes captured";
  }
}

TEST(ChildProcess, TheChildStartsWithDefaultSignalsAndNoStdin) {
  // Block SIGTERM in this (the parent's) thread; the child must not inherit the mask.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  auto child = shell("read line; echo \"stdin:$?\"; exec sleep 30");
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_TRUE(child.wait_for_output("stdin:1", 5s)) << "stdin is /dev/null (read fails)";
  child.send_signal(SIGTERM);
  auto status = child.wait_exit(5s);
  ASSERT_TRUE(status) << "SIGTERM was blocked in the child";
  EXPECT_EQ(status->signal, SIGTERM);
}

TEST(ChildProcess, PassesEnvironmentAndWorkingDirectory) {
  ProcessOptions options;
  options.env = {"OMNILEARN_TEST_VALUE=42", "HOME=/nonexistent-home"};
  options.working_directory = "/tmp";
  auto child = shell("echo \"$OMNILEARN_TEST_VALUE $HOME $(pwd)\"", options);
  ASSERT_TRUE(child.wait_exit(10s));
  EXPECT_EQ(child.wait_for_output("42", 5s), "42 /nonexistent-home /tmp");
}

TEST(ChildProcess, AMissingExecutableThrowsWithTheReason) {
  try {
    ChildProcess child({"/nonexistent/omnilearn"});
    FAIL() << "started a missing executable";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/omnilearn"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST(ChildProcess, DestructorKillsTheWholeProcessGroup) {
  pid_t leader = 0, grandchild = 0;
  {
    auto child = shell("sleep 300 & echo \"grandchild $!\"; wait");
    auto line = child.wait_for_output("grandchild", 5s);
    ASSERT_TRUE(line);
    grandchild = std::stoi(line->substr(line->find(' ') + 1));
    leader = child.pid();
    EXPECT_EQ(::getpgid(grandchild), leader) << "the grandchild is in the child's group";
  }
  EXPECT_TRUE(process_gone(leader));
  EXPECT_TRUE(wait_until([&] { return process_gone(grandchild); }, 5s))
      << "grandchild " << grandchild << " survived";
}

TEST(ChildProcess, DestructorKillsAChildThatIgnoresSigterm) {
  pid_t pid = 0;
  {
    auto child = shell("trap '' TERM; echo armed; while :; do sleep 1; done");
    ASSERT_TRUE(child.wait_for_output("armed", 5s));
    child.send_signal(SIGTERM);
    EXPECT_FALSE(child.wait_exit(200ms)) << "the trap ignores SIGTERM";
    pid = child.pid();
  }
  EXPECT_TRUE(process_gone(pid));
}

TEST(ChildProcess, MovesKeepOwnership) {
  auto first = shell("echo first; exec sleep 30");
  pid_t pid = first.pid();
  ChildProcess moved(std::move(first));
  EXPECT_EQ(moved.pid(), pid);
  EXPECT_TRUE(moved.wait_for_output("first", 5s));
  auto other = shell("exec sleep 30");
  pid_t other_pid = other.pid();
  other = std::move(moved);  // ends the process `other` held
  EXPECT_TRUE(process_gone(other_pid));
  EXPECT_EQ(other.pid(), pid);
  EXPECT_TRUE(other.running());
}

TEST(RunCommand, CollectsOutputAndStatus) {
  auto result = run_command({"/bin/sh", "-c", "echo out; echo err >&2; exit 2"}, 10s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.status.code, 2);
  EXPECT_EQ(result.out, "out\n");
  EXPECT_EQ(result.err, "err\n");
}

TEST(RunCommand, KillsWhatRunsTooLong) {
  auto result = run_command({"/bin/sh", "-c", "echo started; exec sleep 30"}, 200ms);
  EXPECT_TRUE(result.timed_out);
  EXPECT_EQ(result.status.signal, SIGKILL);
  EXPECT_EQ(result.out, "started\n");
  EXPECT_LT(result.elapsed, 5s);
}

TEST(RunCommand, ManyInParallelFromThreads) {
  // Children started concurrently must not inherit each other's pipes (or a reader would
  // never see end-of-stream).
  std::vector<std::jthread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        ProcessOptions options;
        options.kill_with_parent_thread = false;
        auto result = run_command({"/bin/echo", std::to_string(t * 10 + i)}, 10s, options);
        if (!result.timed_out && result.status.code == 0 &&
            result.out == std::to_string(t * 10 + i) + "\n" && result.elapsed < 5s) {
          good.fetch_add(1);
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), 40);
}

}  // namespace
}  // namespace omnilearn::testing
