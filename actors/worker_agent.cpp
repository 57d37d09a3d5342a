#include "actors/worker_agent.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime/system_messages.hpp"

namespace omnilearn::actors {

WorkerAgent::WorkerAgent(WorkerOptions options, std::unique_ptr<CpuQuota> quota)
    : NodeAgent(options.agent), options_(std::move(options)), quota_(std::move(quota)) {}

WorkerAgent::~WorkerAgent() = default;

void WorkerAgent::on_start() {
  NodeAgent::on_start();
  after(std::chrono::milliseconds(100), [this] { reap(); });
}

void WorkerAgent::on_stop() {
  // Trainers first (they tell their schedulers nothing: the leave below says the node is gone),
  // then the goodbye to the head.
  for (auto& [name, hosted] : hosted_) {
    if (hosted.pid > 0) ::kill(hosted.pid, SIGTERM);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (auto& [name, hosted] : hosted_) {
    while (hosted.pid > 0) {
      int status = 0;
      pid_t done = ::waitpid(hosted.pid, &status, WNOHANG);
      if (done == hosted.pid || done < 0) {
        hosted.pid = -1;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(hosted.pid, SIGKILL);
        ::waitpid(hosted.pid, &status, 0);
        hosted.pid = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  NodeAgent::on_stop();
  quota_.reset();
}

void WorkerAgent::spawn(const SpawnTrainer& request) {
  if (hosted_.count(request.trainer)) return;  // a retried request
  std::vector<std::string> args = {
      options_.trainer_binary,
      "--head", options().head_endpoint,
      "--agent", options_.local_endpoint,
      "--job", request.job_id,
      "--scheduler", request.scheduler,
      "--trainer", request.trainer,
      "--node", state().node_id,
      "--slowdown", fmt::format("{}", options_.slowdown),
      "--gloo-host", options_.gloo_host,
  };
  if (options_.cluster_file.empty()) {
    args.emplace_back("--insecure");
  } else {
    args.emplace_back("--cluster-file");
    args.push_back(options_.cluster_file);
  }
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    spdlog::error("agent: cannot start a trainer: fork failed: {}", std::strerror(errno));
    tell(runtime::ActorAddress{options().head_endpoint, request.scheduler},
         TrainerFailed{request.job_id, request.trainer, state().node_id, "fork failed"});
    return;
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec. The trainer dies with its agent, so a
    // killed node never leaves a trainer training on its own.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Hosted hosted;
  hosted.job_id = request.job_id;
  hosted.trainer = request.trainer;
  hosted.scheduler = request.scheduler;
  hosted.pid = pid;
  hosted_[request.trainer] = hosted;
  spdlog::info("agent: started trainer {} for job {} (pid {})", request.trainer, request.job_id,
               pid);
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

void WorkerAgent::reap() {
  for (auto it = hosted_.begin(); it != hosted_.end();) {
    auto& hosted = it->second;
    int status = 0;
    pid_t done = hosted.pid > 0 ? ::waitpid(hosted.pid, &status, WNOHANG) : -1;
    if (done == 0) {
      ++it;
      continue;
    }
    bool clean = done == hosted.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean) {
      std::string reason =
          done != hosted.pid        ? "lost track of the process"
          : WIFSIGNALED(status)     ? fmt::format("killed by signal {}", WTERMSIG(status))
          : WEXITSTATUS(status) == 127 ? fmt::format("could not run {}", options_.trainer_binary)
                                       : fmt::format("exited with code {}", WEXITSTATUS(status));
      spdlog::warn("agent: trainer {} {}", hosted.trainer, reason);
      tell(runtime::ActorAddress{options().head_endpoint, hosted.scheduler},
           TrainerFailed{hosted.job_id, hosted.trainer, state().node_id, reason});
    }
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
  switch (message.kind) {
    case MessageKind::kSpawnTrainer:
      if (auto request = runtime::unpack_payload<SpawnTrainer>(message.payload)) spawn(*request);
      return;
    case MessageKind::kTrainerReport: {
      auto report = runtime::unpack_payload<TrainerReport>(message.payload);
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
      if (auto request = runtime::unpack_payload<SetNodeResources>(message.payload)) {
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
