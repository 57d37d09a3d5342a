#include "cluster/worker_agent.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime/actor_scheduler.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::actors {
namespace {

constexpr std::size_t kKeptLines = 5;          // TrainerExited::last_error: the last 5 lines
constexpr std::size_t kMaxKeptLineBytes = 1000;
constexpr std::size_t kMaxPartialBytes = 1 << 16;  // a longer "line" is passed on in pieces

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stderr is gone: nothing better to do with the text
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

// Whether process `pid` is stopped by a signal or a tracer ('T' or 't' in /proc/PID/stat).
bool process_is_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  // The state follows the command name, which is in parentheses and may itself hold any.
  const auto paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'T' || state == 't';
}

}  // namespace

WorkerAgent::StderrTail::StderrTail(int fd) : fd_(fd) {}

WorkerAgent::StderrTail::~StderrTail() {
  if (fd_ >= 0) ::close(fd_);
}

WorkerAgent::StderrTail::StderrTail(StderrTail&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      partial_(std::move(other.partial_)),
      last_(std::move(other.last_)) {}

WorkerAgent::StderrTail& WorkerAgent::StderrTail::operator=(StderrTail&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    partial_ = std::move(other.partial_);
    last_ = std::move(other.last_);
  }
  return *this;
}

void WorkerAgent::StderrTail::take_line(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) return;
  if (line.size() > kMaxKeptLineBytes) line.resize(kMaxKeptLineBytes);
  last_.push_back(std::move(line));
  if (last_.size() > kKeptLines) last_.pop_front();
}

void WorkerAgent::StderrTail::drain(bool final) {
  char buffer[1 << 14];
  while (fd_ >= 0) {
    ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !final) return;
    if (n <= 0) {  // end of file, an error, or (final) all the exited trainer wrote
      ::close(fd_);
      fd_ = -1;
      break;
    }
    partial_.append(buffer, static_cast<std::size_t>(n));
    // Whole lines only, in one write: the agent's own log lines go to the same stderr from
    // other threads, and a trainer's line cut in two by one of them would be unreadable.
    auto end = partial_.rfind('\n');
    if (end == std::string::npos && partial_.size() >= kMaxPartialBytes) end = partial_.size() - 1;
    if (end == std::string::npos) continue;
    write_all(STDERR_FILENO, partial_.data(), end + 1);
    std::size_t start = 0;
    for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos && nl <= end;
         start = nl + 1) {
      take_line(partial_.substr(start, nl - start));
    }
    if (start <= end) take_line(partial_.substr(start, end + 1 - start));
    partial_.erase(0, end + 1);
  }
  if (final && !partial_.empty()) {
    partial_ += '\n';
    write_all(STDERR_FILENO, partial_.data(), partial_.size());
    partial_.pop_back();
    take_line(std::move(partial_));
    partial_.clear();
  }
}

std::string WorkerAgent::StderrTail::last_lines() const {
  std::string text;
  for (const auto& line : last_) text += (text.empty() ? "" : "\n") + line;
  return text;
}

WorkerAgent::WorkerAgent(WorkerOptions options, std::unique_ptr<CpuQuota> quota)
    : NodeAgent(options.agent), options_(std::move(options)), quota_(std::move(quota)) {}

WorkerAgent::~WorkerAgent() = default;

void WorkerAgent::on_start() {
  NodeAgent::on_start();
  after(std::chrono::milliseconds(100), [this] { reap(); });
}

void WorkerAgent::on_stop() {
  // Trainers first, then the goodbye to the head. These exits are the one kind not reported as
  // TrainerExited: the leave below says the node is gone, and a scheduler told of the exits
  // first would place replacements on this very node before it learns that the node left.
  for (auto& [name, hosted] : hosted_) {
    if (hosted.pid <= 0) continue;
    ::kill(hosted.pid, SIGTERM);
    // A stopped trainer (SIGSTOP, a debugger) would read the SIGTERM only when it runs again:
    // waiting out the grace for it costs this agent its heartbeats, and the head would declare
    // the node dead before the goodbye. It is leaving either way.
    if (process_is_stopped(hosted.pid)) {
      spdlog::warn("agent: trainer {} is stopped (pid {}); killing it", name, hosted.pid);
      ::kill(hosted.pid, SIGKILL);
    }
  }
  runtime::ActorScheduler::BlockingScope blocking;  // up to 3 s of waiting for the exits
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (auto& [name, hosted] : hosted_) {
    while (hosted.pid > 0) {
      // Read while waiting: a trainer logging its way out must not block on a full pipe.
      for (auto& [other, each] : hosted_) each.stderr_tail.drain();
      int status = 0;
      pid_t done = ::waitpid(hosted.pid, &status, WNOHANG);
      if (done == hosted.pid || done < 0) {
        hosted.pid = -1;
        hosted.stderr_tail.drain(/*final=*/true);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(hosted.pid, SIGKILL);
        ::waitpid(hosted.pid, &status, 0);
        hosted.pid = -1;
        hosted.stderr_tail.drain(/*final=*/true);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // The cgroup goes even when the goodbye fails: nothing else would remove it.
  try {
    NodeAgent::on_stop();
  } catch (...) {
    quota_.reset();
    throw;
  }
  quota_.reset();
}

void WorkerAgent::spawn(const SpawnTrainer& request) {
  if (hosted_.count(request.trainer)) return;  // a retried request
  std::vector<std::string> args = {
      options_.trainer_binary,
      "--head", head_endpoint(),
      "--agent", options_.local_endpoint,
      "--job", request.job_id,
      "--scheduler", request.scheduler,
      "--trainer", request.trainer,
      "--node", request.node_id.empty() ? state().node_id : request.node_id,
      "--slowdown", fmt::format("{}", options_.slowdown),
      "--gloo-host", options_.gloo_host,
  };
  if (options_.slowdown_spins) args.emplace_back("--slowdown-spin");
  if (options_.cluster_file.empty()) {
    args.emplace_back("--insecure");
  } else {
    args.emplace_back("--cluster-file");
    args.push_back(options_.cluster_file);
  }
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // The trainer's stderr goes through a pipe the agent reads (reap), so that when it dies the
  // scheduler learns its last words, not only its exit code. Without a pipe it still runs, with
  // the agent's stderr. Close-on-exec: other trainers started later must not hold this one's
  // pipe open.
  int stderr_pipe[2] = {-1, -1};
  if (::pipe2(stderr_pipe, O_CLOEXEC) != 0) {
    spdlog::warn("agent: no stderr pipe for trainer {} ({}); its TrainerExited will carry no "
                 "last_error", request.trainer, std::strerror(errno));
    stderr_pipe[0] = stderr_pipe[1] = -1;
  }
  static constexpr char kExecFailed[] = "omnilearn worker: cannot execute the trainer program ";
  pid_t parent = getpid();
  // Forked on the agent's fork thread, not this handler's pool thread: the death signal below
  // is tied to the forking thread (see fork_thread.hpp).
  pid_t pid = fork_thread_.run([&]() -> pid_t {
    pid_t child = ::fork();
    if (child != 0) return child;
    // Child: only async-signal-safe calls until exec. The trainer dies with its agent, so a
    // killed node never leaves a trainer training on its own.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (stderr_pipe[1] >= 0) ::dup2(stderr_pipe[1], STDERR_FILENO);  // the copy stays open
    ::execv(argv[0], argv.data());
    [[maybe_unused]] ssize_t written =
        ::write(STDERR_FILENO, kExecFailed, sizeof kExecFailed - 1);
    written = ::write(STDERR_FILENO, argv[0], ::strlen(argv[0]));
    written = ::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  });
  if (pid < 0) {
    int error = errno;
    for (int fd : stderr_pipe) {
      if (fd >= 0) ::close(fd);
    }
    spdlog::error("agent: cannot start a trainer: fork failed: {}", std::strerror(error));
    tell(runtime::ActorAddress{head_endpoint(), request.scheduler},
         TrainerExited{request.job_id, request.trainer, state().node_id,
                       fmt::format("fork failed: {}", std::strerror(error)), -1, ""});
    return;
  }
  if (stderr_pipe[1] >= 0) {
    ::close(stderr_pipe[1]);
    ::fcntl(stderr_pipe[0], F_SETFL, ::fcntl(stderr_pipe[0], F_GETFL) | O_NONBLOCK);
    // The agent reads every 100 ms; a larger pipe keeps a burst of trainer output (a long
    // traceback) from ever blocking the trainer meanwhile. Best effort: 64 KiB otherwise.
    ::fcntl(stderr_pipe[0], F_SETPIPE_SZ, 1 << 20);
  }
  Hosted hosted;
  hosted.job_id = request.job_id;
  hosted.trainer = request.trainer;
  hosted.scheduler = request.scheduler;
  hosted.node_id = request.node_id.empty() ? state().node_id : request.node_id;
  hosted.pid = pid;
  hosted.stderr_tail = StderrTail(stderr_pipe[0]);
  hosted_[request.trainer] = std::move(hosted);
  spdlog::info("agent: started trainer {} for job {} (pid {})", request.trainer, request.job_id,
               pid);
}

void WorkerAgent::on_registered(const AgentState& state) {
  for (auto& [name, hosted] : hosted_) {
    if (hosted.pid <= 0 || hosted.node_id.empty() || hosted.node_id == state.node_id) continue;
    spdlog::warn("agent: stopping trainer {}: it was started for node {}, which the head "
                 "declared dead (this agent is node {} now)",
                 name, hosted.node_id, state.node_id);
    ::kill(hosted.pid, SIGTERM);
  }
}

void WorkerAgent::on_forgotten() {
  // The jobs have moved on without these trainers (their generation formed without them); left
  // running, a thawed or reconnected trainer would wait on collectives and rendezvous that no
  // longer exist. The reaper collects them.
  std::size_t stopped = 0;
  for (auto& [name, hosted] : hosted_) {
    if (hosted.pid > 0 && ::kill(hosted.pid, SIGTERM) == 0) ++stopped;
  }
  if (stopped > 0) {
    spdlog::warn("agent: stopping {} trainer(s) of the previous incarnation of this node", stopped);
  }
}

void WorkerAgent::on_head_restarted(std::uint64_t epoch) {
  head_epoch_ = epoch;
  std::set<std::string> jobs;
  for (const auto& [name, hosted] : hosted_) {
    if (hosted.pid > 0) jobs.insert(hosted.job_id);
  }
  for (const auto& reported : recent_exits_) jobs.insert(reported.exit.job_id);
  for (const auto& job : jobs) check_job_after_restart(job, epoch, 0);
}

void WorkerAgent::on_head_answers_again(std::chrono::steady_clock::time_point since) {
  std::size_t told = 0;
  for (const auto& reported : recent_exits_) {
    if (reported.at < since) continue;
    tell(runtime::ActorAddress{head_endpoint(), reported.scheduler}, reported.exit);
    ++told;
  }
  if (told > 0) {
    spdlog::info("agent: reporting again {} trainer exit(s) told while the head did not answer",
                 told);
  }
}

void WorkerAgent::check_job_after_restart(const std::string& job_id, std::uint64_t epoch,
                                          int attempt) {
  // Only the state of the job matters, not its events: ask from far past the last one.
  JobStatusRequest request{job_id, std::uint64_t{1} << 40};
  ask(runtime::ActorAddress{head_endpoint(), kJobsActor}, request, std::chrono::seconds(3),
      [this, job_id, epoch, attempt](runtime::AskResult result) {
        if (epoch != head_epoch_) return;  // a newer start asks again
        if (auto status = result.as<JobStatusReply>()) {
          if (status->found && !status->finished) {
            for (const auto& reported : recent_exits_) {
              if (reported.exit.job_id == job_id) {
                tell(runtime::ActorAddress{head_endpoint(), reported.scheduler}, reported.exit);
              }
            }
            // It goes on: its trainers follow this head (a standby may have taken over).
            for (const auto& [name, hosted] : hosted_) {
              if (hosted.job_id == job_id && !hosted.system.empty()) {
                tell(runtime::ActorAddress{hosted.system, "trainer"},
                     HeadMoved{job_id, head_endpoint(), epoch});
              }
            }
            return;
          }
          stop_job_trainers(job_id, status->found ? "the restarted head ended the job (" +
                                                        status->job.state + ")"
                                                  : "the restarted head does not know the job");
          return;
        }
        if (auto error = result.as<runtime::ErrorReply>(); error && error->code == "no-such-job") {
          stop_job_trainers(job_id, "the restarted head does not know the job");
          return;
        }
        if (attempt >= 30) {
          spdlog::warn("agent: the restarted head did not say whether job {} goes on ({}); its "
                       "trainers stay until their own timeouts",
                       job_id, result.error);
          return;
        }
        after(std::chrono::seconds(1), [this, job_id, epoch, attempt] {
          check_job_after_restart(job_id, epoch, attempt + 1);
        });
      });
}

void WorkerAgent::stop_job_trainers(const std::string& job_id, const std::string& why) {
  std::size_t stopped = 0;
  for (auto& [name, hosted] : hosted_) {
    if (hosted.job_id == job_id && hosted.pid > 0 && ::kill(hosted.pid, SIGTERM) == 0) ++stopped;
  }
  if (stopped > 0) {
    spdlog::warn("agent: stopping {} trainer(s) of job {}: {}", stopped, job_id, why);
  }
}

void WorkerAgent::reap() {
  for (auto it = hosted_.begin(); it != hosted_.end();) {
    auto& hosted = it->second;
    hosted.stderr_tail.drain();
    int status = 0;
    pid_t done = hosted.pid > 0 ? ::waitpid(hosted.pid, &status, WNOHANG) : -1;
    if (done == 0) {
      ++it;
      continue;
    }
    hosted.stderr_tail.drain(/*final=*/true);
    // Every exit is reported, a clean one too: the scheduler decides what an exit means (a
    // finished trainer, or a member that vanished), and none may go unseen.
    std::int32_t exit_code = -1;
    std::string reason;
    if (done != hosted.pid) {
      reason = "lost track of the process";
    } else if (WIFSIGNALED(status)) {
      exit_code = 128 + WTERMSIG(status);
      reason = fmt::format("killed by signal {} ({})", WTERMSIG(status),
                           ::strsignal(WTERMSIG(status)));
    } else {
      exit_code = WEXITSTATUS(status);
      reason = exit_code == 127 ? fmt::format("could not run {}", options_.trainer_binary)
                                : fmt::format("exited with code {}", exit_code);
    }
    if (exit_code == 0) {
      spdlog::info("agent: trainer {} {}", hosted.trainer, reason);
    } else {
      spdlog::warn("agent: trainer {} {}", hosted.trainer, reason);
    }
    TrainerExited exited{hosted.job_id, hosted.trainer, state().node_id,
                         reason,        exit_code,      hosted.stderr_tail.last_lines()};
    tell(runtime::ActorAddress{head_endpoint(), hosted.scheduler}, exited);
    recent_exits_.push_back(
        {hosted.scheduler, std::move(exited), std::chrono::steady_clock::now()});
    while (recent_exits_.size() > kKeptExits) recent_exits_.pop_front();
    it = hosted_.erase(it);
  }
  after(std::chrono::milliseconds(100), [this] { reap(); });
}

std::vector<ActorCounters> WorkerAgent::hosted_counters() {
  std::vector<ActorCounters> counters;
  for (auto& [name, hosted] : hosted_) {
    if (hosted.samples > 0) {
      // Means since the last heartbeat, at one batch: what the controller balances.
      auto& c = hosted.published;
      c.actor = hosted.trainer;
      c.job_id = hosted.job_id;
      c.rank = hosted.last.rank;
      c.steps = hosted.last.step;
      c.batch = hosted.last.batch;
      c.compute_time_s = hosted.compute_sum / hosted.samples;
      c.step_time_s = hosted.step_sum / hosted.samples;
      c.samples_per_s = c.step_time_s > 0 ? c.batch / c.step_time_s : 0;
      hosted.compute_sum = hosted.step_sum = 0;
      hosted.samples = 0;
    }
    if (!hosted.published.actor.empty()) counters.push_back(hosted.published);
  }
  return counters;
}

void WorkerAgent::fill_usage(NodeUsage& usage) {
  usage.slowdown = options_.slowdown;
  usage.cpu_quota = quota_ ? quota_->cpus() : 0;
}

void WorkerAgent::set_resources(const runtime::Envelope& message,
                                const SetNodeResources& request) {
  std::string done;
  try {
    if (request.slowdown > 0) {
      if (request.slowdown < 1) throw std::invalid_argument("slowdown must be >= 1");
      options_.slowdown = request.slowdown;
      for (auto& [name, hosted] : hosted_) {
        if (!hosted.system.empty()) {
          tell(runtime::ActorAddress{hosted.system, "trainer"}, SetTrainerSpeed{request.slowdown});
        }
      }
      done += fmt::format("slowdown {} ", request.slowdown);
    }
    if (request.cpu_quota >= 0) {
      if (!quota_ && request.cpu_quota > 0) {
        quota_ = CpuQuota::create(fmt::format("{}-{}", options().name, getpid()));
        for (auto& [name, hosted] : hosted_) {
          if (hosted.pid > 0) quota_->add(hosted.pid);
        }
      }
      if (quota_) quota_->set(request.cpu_quota);
      done += fmt::format("cpu-quota {} ", request.cpu_quota);
    }
  } catch (const std::exception& e) {
    reply(message, SimpleReply{false, e.what()});
    return;
  }
  spdlog::info("agent: resources changed: {}", done);
  reply(message, SimpleReply{true, "node " + options().name + ": " + done});
}

void WorkerAgent::on_other_message(const runtime::Envelope& message) {
  if (message.kind == runtime::kind_of<TrainerStarted>()) {
    if (auto started = decode<TrainerStarted>(message)) {
      auto it = hosted_.find(started->trainer);
      if (it != hosted_.end() && it->second.job_id == started->job_id) {
        it->second.system = message.from.system;
        // Started with the slowdown in force at its spawn: a `node set` since then reached
        // only the trainers whose address was known, so it hears the current one here.
        tell(runtime::ActorAddress{it->second.system, "trainer"},
             SetTrainerSpeed{options_.slowdown});
      }
    }
    return;
  }
  switch (message.kind) {
    case MessageKind::kSpawnTrainer:
      if (auto request = decode<SpawnTrainer>(message)) spawn(*request);
      return;
    case MessageKind::kTrainerReport: {
      auto report = decode<TrainerReport>(message);
      if (!report) return;
      auto it = hosted_.find(report->trainer);
      if (it == hosted_.end()) return;
      auto& hosted = it->second;
      hosted.system = message.from.system;
      if (report->collective_failed) return;
      if (report->batch != hosted.last.batch) {
        // A new batch: timings of the old one must not be mixed in.
        hosted.compute_sum = hosted.step_sum = 0;
        hosted.samples = 0;
      }
      hosted.last = *report;
      hosted.compute_sum += report->compute_time_s;
      hosted.step_sum += report->step_time_s;
      ++hosted.samples;
      return;
    }
    case MessageKind::kSetNodeResources:
      if (auto request = decode<SetNodeResources>(message)) {
        set_resources(message, *request);
      }
      return;
    default:
      if (message.correlation != 0) {
        reply(message, runtime::ErrorReply{"bad-request", "agent does not handle " +
                                                              std::string(runtime::kind_name(message.kind))});
      }
  }
}

}  // namespace omnilearn::actors
