#pragma once
// A real child process for multi-process tests: started with fork/exec in its own process group,
// stdout and stderr captured line by line by a reader thread, and killed (SIGKILL to the whole
// group) and reaped by the destructor, so no test leaves a process behind, even when an
// assertion fails half-way.
//
// Threads: every method may be called from any thread, but a ChildProcess is meant to be owned
// and driven by one test thread; the reader thread only appends output.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace omnilearn::testing {

using namespace std::chrono_literals;

// How a process ended: exited with `code`, or killed by `signal`.
struct ExitStatus {
  int code = -1;   // exit code when the process exited normally, else -1
  int signal = 0;  // the signal that killed it, else 0

  bool exited() const { return signal == 0; }
  bool signaled() const { return signal != 0; }
  std::string to_string() const;  // "exit 2" or "signal 9 (Killed)"
};

enum class Stream { kStdout, kStderr };

struct ProcessOptions {
  std::string name;               // shown in diagnostics (default: argv[0]'s file name)
  std::vector<std::string> env;   // extra "KEY=VALUE" entries on top of this process's env
  std::string working_directory;  // empty: inherit
  // The child gets SIGKILL if the thread that started it dies (PR_SET_PDEATHSIG), so a crashed
  // or killed test binary leaves nothing behind. Caveat: it is the *thread*, not the process:
  // start long-lived children from the test's main thread, or turn this off.
  bool kill_with_parent_thread = true;
  // Echo every captured line to this process's stderr, prefixed with the name (also enabled for
  // all children by OMNILEARN_TEST_ECHO=1).
  bool echo = false;
  std::size_t max_captured_bytes = 16u << 20;  // per stream; beyond this, lines are dropped
};

class ChildProcess {
 public:
  // Starts argv[0] (a path; PATH is not searched) with argv. Throws std::runtime_error if it
  // cannot be started (fork failed, exec failed: the message says which and why).
  explicit ChildProcess(std::vector<std::string> argv, ProcessOptions options = {});
  // SIGKILLs the process group, reaps the child, stops the reader thread. When the running test
  // has failed, prints the tail of the child's output to stderr.
  ~ChildProcess();
  ChildProcess(ChildProcess&&) noexcept;
  ChildProcess& operator=(ChildProcess&&) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const;
  const std::string& name() const;

  // Waits until a line of `stream` at index >= from_line contains `substring` (or matches
  // `pattern`, std::regex_search); returns that line without its newline, or nullopt on
  // timeout or when the stream ended without a match. The last unterminated line counts once
  // the stream is closed.
  std::optional<std::string> wait_for_output(const std::string& substring,
                                             std::chrono::milliseconds timeout,
                                             Stream stream = Stream::kStdout,
                                             std::size_t from_line = 0);
  std::optional<std::string> wait_for_output(const std::regex& pattern,
                                             std::chrono::milliseconds timeout,
                                             Stream stream = Stream::kStdout,
                                             std::size_t from_line = 0);
  // Complete lines captured so far: use as `from_line` to wait only for output that comes after
  // an event ("the worker registered *again* after the head restart").
  std::size_t line_count(Stream stream) const;
  std::vector<std::string> lines(Stream stream) const;
  std::string output(Stream stream) const;  // everything captured, newlines included

  // Sends `sig` to the process (or to its whole process group). False if it has already exited
  // (and been seen to exit) or kill(2) failed.
  bool send_signal(int sig, bool whole_group = false);

  // Waits up to `timeout` for the process to exit; nullopt if it is still running. Once it has
  // exited, returns the same status every time, after the output it wrote has been captured
  // (up to 1 s more, once, while a grandchild holds the pipes open). The child stays a zombie until the destructor
  // or kill_and_reap(), so its PID and process group cannot be reused meanwhile.
  std::optional<ExitStatus> wait_exit(std::chrono::milliseconds timeout);
  bool running();

  // SIGKILL to the group, reap, and wait (bounded) for the output pipes to close. Idempotent;
  // returns the exit status (signal 9 unless it had already exited).
  ExitStatus kill_and_reap();

  // Name, PID, exit status if known, and the last `max_lines` lines of both streams.
  std::string describe(std::size_t max_lines = 40) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs a command to completion (stdout and stderr captured). If it is still running after
// `timeout`, it is killed and `timed_out` is set.
struct CommandResult {
  ExitStatus status;
  bool timed_out = false;
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};
CommandResult run_command(std::vector<std::string> argv, std::chrono::milliseconds timeout,
                          ProcessOptions options = {});

}  // namespace omnilearn::testing
