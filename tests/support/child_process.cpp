#include "tests/support/child_process.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace omnilearn::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(int error) { return std::strerror(error); }

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

bool echo_from_env() {
  const char* value = std::getenv("OMNILEARN_TEST_ECHO");
  return value && *value && std::string(value) != "0";
}

// The environment for the child: ours, with `extra` entries replacing ones of the same key.
std::vector<std::string> child_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  auto key_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    bool replaced = false;
    for (const auto& x : extra) replaced = replaced || key_of(x) == key_of(entry);
    if (!replaced) env.push_back(std::move(entry));
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

std::string ExitStatus::to_string() const {
  if (signaled()) {
    const char* name = ::strsignal(signal);
    return "signal " + std::to_string(signal) + " (" + (name ? name : "?") + ")";
  }
  return "exit " + std::to_string(code);
}

struct ChildProcess::Impl {
  struct Captured {
    std::vector<std::string> lines;  // complete lines, without '\n'
    std::string partial;             // bytes after the last '\n'
    std::size_t bytes = 0;
    std::size_t dropped_lines = 0;
    bool closed = false;
  };

  std::string name;
  ProcessOptions options;
  pid_t pid = -1;
  int pidfd = -1;
  int out_fd = -1;
  int err_fd = -1;
  int stop_fd = -1;  // eventfd: tells the reader thread to give up on pipes that never close

  mutable std::mutex mutex;
  std::condition_variable changed;
  std::array<Captured, 2> captured;  // guarded by mutex; [Stream]
  std::optional<ExitStatus> exit;    // guarded by mutex; set once the child is seen to exit
  bool reaped = false;               // guarded by mutex
  bool drained_after_exit = false;   // guarded by mutex
  std::thread reader;

  Captured& stream(Stream s) { return captured[static_cast<int>(s)]; }
  const Captured& stream(Stream s) const { return captured[static_cast<int>(s)]; }

  void add_line_locked(Stream s, std::string line) {
    auto& c = stream(s);
    if (options.echo) {
      std::fprintf(stderr, "[%s %s] %s\n", name.c_str(), s == Stream::kStdout ? "out" : "err",
                   line.c_str());
    }
    if (c.bytes + line.size() > options.max_captured_bytes) {
      ++c.dropped_lines;
      return;
    }
    c.bytes += line.size() + 1;
    c.lines.push_back(std::move(line));
  }

  void append(Stream s, const char* data, std::size_t size) {
    std::lock_guard lock(mutex);
    auto& c = stream(s);
    c.partial.append(data, size);
    std::size_t start = 0;
    for (std::size_t nl; (nl = c.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      add_line_locked(s, c.partial.substr(start, nl - start));
    }
    c.partial.erase(0, start);
    changed.notify_all();
  }

  void close_stream(Stream s) {
    std::lock_guard lock(mutex);
    auto& c = stream(s);
    if (!c.partial.empty()) add_line_locked(s, std::move(c.partial));
    c.partial.clear();
    c.closed = true;
    changed.notify_all();
  }

  void read_loop() {
    std::array<char, 65536> buffer;
    bool open[2] = {true, true};
    while (open[0] || open[1]) {
      pollfd fds[3] = {{out_fd, static_cast<short>(open[0] ? POLLIN : 0), 0},
                       {err_fd, static_cast<short>(open[1] ? POLLIN : 0), 0},
                       {stop_fd, POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[2].revents) break;
      for (int i = 0; i < 2; ++i) {
        if (!open[i] || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
        if (n > 0) {
          append(static_cast<Stream>(i), buffer.data(), static_cast<std::size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          open[i] = false;
          close_stream(static_cast<Stream>(i));
        }
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (open[i]) close_stream(static_cast<Stream>(i));
    }
  }

  static ExitStatus decode(const siginfo_t& info) {
    ExitStatus status;
    if (info.si_code == CLD_EXITED) {
      status.code = info.si_status;
    } else {
      status.signal = info.si_status;
    }
    return status;
  }

  // Checks (without reaping) whether the child has exited; records the status once.
  std::optional<ExitStatus> poll_exit() {
    {
      std::lock_guard lock(mutex);
      if (exit) return exit;
    }
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != pid) {
      return std::nullopt;
    }
    std::lock_guard lock(mutex);
    exit = decode(info);
    return exit;
  }

  std::optional<ExitStatus> wait_exit(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    auto nap = std::chrono::milliseconds(1);
    while (true) {
      if (auto status = poll_exit()) {
        drain_after_exit();
        return status;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left <= std::chrono::milliseconds(0)) return std::nullopt;
      if (pidfd >= 0) {
        // Readable once the child has exited; a zero timeout still gets one last check above.
        pollfd fd{pidfd, POLLIN, 0};
        ::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1 << 30)));
      } else {
        std::this_thread::sleep_for(std::min(nap, left));
        nap = std::min(nap * 2, std::chrono::milliseconds(20));
      }
    }
  }

  bool all_streams_closed() const { return captured[0].closed && captured[1].closed; }

  // What the child wrote before it exited is read before its exit is reported: a test that
  // checks the last lines of a stopped process must not race the reader thread. Bounded, and
  // waited for once: a grandchild that left the group may hold the pipes open.
  void drain_after_exit() {
    std::unique_lock lock(mutex);
    if (drained_after_exit) return;
    drained_after_exit = true;
    changed.wait_for(lock, std::chrono::seconds(1), [&] { return all_streams_closed(); });
  }

  ExitStatus kill_and_reap() {
    {
      std::lock_guard lock(mutex);
      if (reaped) return *exit;
    }
    // The child (leader of its group) is not reaped yet, so the group id cannot have been
    // reused: signalling the group reaches only what this child started.
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED) != 0 && errno == EINTR) {
    }
    std::unique_lock lock(mutex);
    if (!exit) exit = info.si_pid == pid ? decode(info) : ExitStatus{-1, SIGKILL};
    reaped = true;
    // Output still in the pipes is read before we return (bounded: a grandchild that left the
    // group may hold the pipes open forever).
    changed.wait_for(lock, std::chrono::seconds(2), [&] { return all_streams_closed(); });
    return *exit;
  }

  std::string tail(Stream s, std::size_t max_lines) const {
    const auto& c = stream(s);
    std::ostringstream text;
    std::size_t first = c.lines.size() > max_lines ? c.lines.size() - max_lines : 0;
    if (first > 0) text << "    ... (" << first << " earlier lines)\n";
    for (std::size_t i = first; i < c.lines.size(); ++i) text << "    " << c.lines[i] << "\n";
    if (!c.partial.empty()) text << "    " << c.partial << " (no newline yet)\n";
    if (c.dropped_lines) text << "    (" << c.dropped_lines << " lines over the capture limit)\n";
    return text.str();
  }

  template <class Match>
  std::optional<std::string> wait_for(Match&& matches, std::chrono::milliseconds timeout, Stream s,
                                      std::size_t from_line) {
    std::unique_lock lock(mutex);
    auto deadline = Clock::now() + timeout;
    std::size_t next = from_line;
    while (true) {
      auto& c = stream(s);
      for (; next < c.lines.size(); ++next) {
        if (matches(c.lines[next])) return c.lines[next];
      }
      if (c.closed) return std::nullopt;
      if (changed.wait_until(lock, deadline) == std::cv_status::timeout) {
        // One last look: lines may have arrived with the timeout.
        auto& again = stream(s);
        for (; next < again.lines.size(); ++next) {
          if (matches(again.lines[next])) return again.lines[next];
        }
        return std::nullopt;
      }
    }
  }
};

ChildProcess::ChildProcess(std::vector<std::string> argv, ProcessOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (argv.empty()) throw std::invalid_argument("ChildProcess: empty argv");
  auto& impl = *impl_;
  impl.options = std::move(options);
  impl.options.echo = impl.options.echo || echo_from_env();
  impl.name = impl.options.name.empty() ? std::filesystem::path(argv[0]).filename().string()
                                        : impl.options.name;

  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (the test process has other threads).
  std::vector<char*> args;
  for (auto& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  auto env_storage = child_environment(impl.options.env);
  std::vector<char*> envp;
  for (auto& entry : env_storage) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const char* workdir =
      impl.options.working_directory.empty() ? nullptr : impl.options.working_directory.c_str();

  int out[2], err[2], status_pipe[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe2: " + errno_text(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw std::runtime_error("pipe2: " + errno_text(errno));
  }
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    throw std::runtime_error("pipe2: " + errno_text(errno));
  }
  const pid_t parent = ::getpid();
  const bool die_with_parent = impl.options.kill_with_parent_thread;

  pid_t pid = ::fork();
  if (pid < 0) {
    int error = errno;
    for (int fd : {out[0], out[1], err[0], err[1], status_pipe[0], status_pipe[1]}) ::close(fd);
    throw std::runtime_error("fork: " + errno_text(error));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    auto fail = [&](int error) {
      [[maybe_unused]] auto n = ::write(status_pipe[1], &error, sizeof error);
      ::_exit(127);
    };
    if (die_with_parent) {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
      if (::getppid() != parent) ::_exit(127);
    }
    ::setpgid(0, 0);
    // The test may have blocked or ignored signals (block_shutdown_signals, SIGPIPE): the child
    // starts with the defaults, as it would from a shell.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(out[1], 1) < 0 || ::dup2(err[1], 2) < 0) {
      fail(errno);
    }
    if (workdir && ::chdir(workdir) != 0) fail(errno);
    // Only 0, 1, 2 and the status pipe (close-on-exec) survive into the child.
    int keep = status_pipe[1];
    if (keep > 3) ::syscall(SYS_close_range, 3u, static_cast<unsigned>(keep - 1), 0u);
    ::syscall(SYS_close_range, static_cast<unsigned>(keep + 1), ~0u, 0u);
    ::execve(args[0], args.data(), envp.data());
    fail(errno);
  }

  // Parent. Also set the group here: whichever of the two runs first, the group exists before
  // anyone signals it.
  ::setpgid(pid, pid);
  ::close(out[1]);
  ::close(err[1]);
  ::close(status_pipe[1]);
  int exec_error = 0;
  ssize_t n;
  do {
    n = ::read(status_pipe[0], &exec_error, sizeof exec_error);
  } while (n < 0 && errno == EINTR);
  ::close(status_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof exec_error)) {
    ::waitpid(pid, nullptr, 0);
    ::close(out[0]);
    ::close(err[0]);
    throw std::runtime_error("cannot start " + argv[0] + ": " + errno_text(exec_error));
  }
  impl.pid = pid;
  impl.pidfd = open_pidfd(pid);
  impl.out_fd = out[0];
  impl.err_fd = err[0];
  impl.stop_fd = ::eventfd(0, EFD_CLOEXEC);
  impl.reader = std::thread([&impl] { impl.read_loop(); });
}

ChildProcess::~ChildProcess() {
  if (!impl_) return;
  auto& impl = *impl_;
  impl.kill_and_reap();
  if (::testing::Test::HasFailure()) {
    std::fprintf(stderr, "--- child process (test failed) ---\n%s", describe().c_str());
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(impl.stop_fd, &one, sizeof one);
  if (impl.reader.joinable()) impl.reader.join();
  close_fd(impl.out_fd);
  close_fd(impl.err_fd);
  close_fd(impl.stop_fd);
  close_fd(impl.pidfd);
}

ChildProcess::ChildProcess(ChildProcess&&) noexcept = default;
ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    ChildProcess discarded(std::move(*this));  // ends the process this object held
    impl_ = std::move(other.impl_);
  }
  return *this;
}

pid_t ChildProcess::pid() const { return impl_->pid; }
const std::string& ChildProcess::name() const { return impl_->name; }

std::optional<std::string> ChildProcess::wait_for_output(const std::string& substring,
                                                         std::chrono::milliseconds timeout,
                                                         Stream stream, std::size_t from_line) {
  return impl_->wait_for(
      [&](const std::string& line) { return line.find(substring) != std::string::npos; }, timeout,
      stream, from_line);
}

std::optional<std::string> ChildProcess::wait_for_output(const std::regex& pattern,
                                                         std::chrono::milliseconds timeout,
                                                         Stream stream, std::size_t from_line) {
  return impl_->wait_for([&](const std::string& line) { return std::regex_search(line, pattern); },
                         timeout, stream, from_line);
}

std::size_t ChildProcess::line_count(Stream stream) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stream(stream).lines.size();
}

std::vector<std::string> ChildProcess::lines(Stream stream) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stream(stream).lines;
}

std::string ChildProcess::output(Stream stream) const {
  std::lock_guard lock(impl_->mutex);
  std::string text;
  for (const auto& line : impl_->stream(stream).lines) text += line + "\n";
  text += impl_->stream(stream).partial;
  return text;
}

bool ChildProcess::send_signal(int sig, bool whole_group) {
  if (impl_->poll_exit()) return false;
  return ::kill(whole_group ? -impl_->pid : impl_->pid, sig) == 0;
}

std::optional<ExitStatus> ChildProcess::wait_exit(std::chrono::milliseconds timeout) {
  return impl_->wait_exit(timeout);
}

bool ChildProcess::running() { return !impl_->poll_exit(); }

ExitStatus ChildProcess::kill_and_reap() { return impl_->kill_and_reap(); }

std::string ChildProcess::describe(std::size_t max_lines) const {
  std::lock_guard lock(impl_->mutex);
  std::ostringstream text;
  text << impl_->name << " (pid " << impl_->pid << ", "
       << (impl_->exit ? impl_->exit->to_string() : std::string("running")) << ")\n";
  text << "  stdout:\n" << impl_->tail(Stream::kStdout, max_lines);
  text << "  stderr:\n" << impl_->tail(Stream::kStderr, max_lines);
  return text.str();
}

CommandResult run_command(std::vector<std::string> argv, std::chrono::milliseconds timeout,
                          ProcessOptions options) {
  auto start = Clock::now();
  ChildProcess child(std::move(argv), std::move(options));
  CommandResult result;
  auto status = child.wait_exit(timeout);
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  result.timed_out = !status.has_value();
  result.status = child.kill_and_reap();  // also waits for the rest of the output
  result.out = child.output(Stream::kStdout);
  result.err = child.output(Stream::kStderr);
  return result;
}

}  // namespace omnilearn::testing
