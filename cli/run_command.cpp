// omnilearn run JOB.toml --local N: a whole cluster in one command (the README's main job): a
// head in this process, N worker processes on this machine (optionally made heterogeneous with
// --slowdown / --cpu-quota), the job submitted and followed to its summary.
#include <CLI/CLI.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "head/head.hpp"
#include "wire/job_protocol.hpp"
#include "jobs/job_spec.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/dashboard.hpp"
#include "cli/flag_checks.hpp"
#include "cli/job_client.hpp"
#include "runtime/cluster_file.hpp"
#include "runtime/endpoint.hpp"
#include "runtime/shutdown.hpp"

namespace omnilearn::cli {
namespace {

struct RunFlags {
  std::string job;
  int local = 0;
  std::vector<double> slowdown;
  bool slowdown_spin = false;
  std::vector<double> cpu_quota;
  std::string run_dir;
  int heartbeat_interval_ms = 500;
  int heartbeat_timeout_ms = 3000;
  bool pin = false;
  bool json = false;
  DashboardFlags dashboard;
};

// Worker processes of the embedded cluster; killed (and reaped) however `run` ends.
class LocalWorkers {
 public:
  ~LocalWorkers() { stop(); }

  void start(const std::vector<std::string>& args, int cpu) {
    std::vector<std::string> owned = args;
    std::vector<char*> argv;
    for (auto& a : owned) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) throw CliError("cannot start a worker process (fork failed)", 1);
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
      }
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    pids_.push_back(pid);
  }

  // Workers that already exited (e.g. a cgroup error): their count.
  int exited() {
    int count = 0;
    for (auto& pid : pids_) {
      int status = 0;
      if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        ++count;
      } else if (pid < 0) {
        ++count;
      }
    }
    return count;
  }

  void stop() {
    for (pid_t pid : pids_) {
      if (pid > 0) kill(pid, SIGTERM);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(6);
    for (pid_t& pid : pids_) {
      while (pid > 0) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) != 0) {
          pid = -1;
        } else if (std::chrono::steady_clock::now() > deadline) {
          kill(pid, SIGKILL);
          waitpid(pid, &status, 0);
          pid = -1;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    }
  }

 private:
  std::vector<pid_t> pids_;
};

// The embedded cluster is closed too: fresh keys in a private directory (0700, file 0600) that
// only this run's workers and trainers read, removed when the run ends.
class PrivateClusterFile {
 public:
  PrivateClusterFile() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/omnilearn-run-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      throw CliError("cannot create a private directory for the run's credentials under " +
                     pattern.substr(0, pattern.rfind('/')));
    }
    dir_ = pattern;
    path_ = dir_ + "/cluster.toml";
    file_.credentials = runtime::generate_cluster_credentials();
  }
  ~PrivateClusterFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PrivateClusterFile(const PrivateClusterFile&) = delete;
  PrivateClusterFile& operator=(const PrivateClusterFile&) = delete;

  void write(const std::string& address) {
    file_.address = address;
    runtime::write_cluster_file(path_, file_);
  }
  const std::string& path() const { return path_; }
  const runtime::ClusterCredentials& credentials() const { return file_.credentials; }

 private:
  std::string dir_;
  std::string path_;
  runtime::ClusterFile file_;
};

std::vector<double> expand(const std::vector<double>& values, int n, const char* flag) {
  if (values.empty()) return std::vector<double>(n, 0);
  if (values.size() == 1) return std::vector<double>(n, values[0]);
  if (static_cast<int>(values.size()) != n) {
    throw CliError(fmt::format("{} has {} values for --local {} workers (give 1 or {})", flag,
                               values.size(), n, n));
  }
  return values;
}

int run_local(const RunFlags& flags) {
  std::string toml = read_valid_job_file(flags.job);
  auto spec = actors::parse_job_spec(toml, flags.job);
  if (spec.elastic.min_workers > flags.local) {
    throw CliError(fmt::format("{}: the job needs at least {} workers ([elastic] min_workers) but "
                               "--local starts {}",
                               flags.job, spec.elastic.min_workers, flags.local));
  }
  auto slowdown = expand(flags.slowdown, flags.local, "--slowdowns");
  auto quota = expand(flags.cpu_quota, flags.local, "--cpu-quotas");
  if (!std::getenv("OMNILEARN_LOG")) {
    // Progress lines are the output here; the cluster's own logs only when something is wrong.
    setenv("OMNILEARN_LOG", "warn", 1);
    spdlog::set_level(spdlog::level::warn);
  }
  runtime::block_shutdown_signals();

  PrivateClusterFile cluster;
  runtime::SystemOptions system_options;
  system_options.credentials = cluster.credentials();
  runtime::ActorSystem system(system_options);
  std::string bound = system.listen("tcp://127.0.0.1:0");
  actors::HeadOptions head;
  head.membership.heartbeat_interval = std::chrono::milliseconds(flags.heartbeat_interval_ms);
  head.membership.heartbeat_timeout = std::chrono::milliseconds(flags.heartbeat_timeout_ms);
  std::string address = fmt::format("127.0.0.1:{}", runtime::endpoint_port(bound));
  cluster.write(address);
  if (!flags.json) {
    std::printf(
        "embedded cluster: head at %s, %d workers (slowdown %s)\n", address.c_str(), flags.local,
        flags.slowdown.empty() ? "none" : fmt::format("{}", fmt::join(slowdown, ",")).c_str());
    std::fflush(stdout);
  }
  // Before the head's actors, so that its registry can tell `omnilearn dashboard` the address.
  auto dashboard = start_dashboard(system, flags.dashboard, cluster.credentials(), !flags.json);
  if (dashboard) {
    head.dashboard_url = dashboard->base_url();
    head.dashboard_token = dashboard->needs_token();
  }
  actors::spawn_head_actors(system, head);

  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  LocalWorkers workers;
  for (int i = 0; i < flags.local; ++i) {
    std::vector<std::string> args = {self,    "worker", "--cluster-file",   cluster.path(),
                                     "--name", fmt::format("local-{}", i), "--join-timeout-s",
                                     "30"};
    if (slowdown[i] > 0) {
      args.push_back("--slowdown");
      args.push_back(fmt::format("{}", slowdown[i]));
      if (flags.slowdown_spin) args.push_back("--slowdown-spin");
    }
    if (quota[i] > 0) {
      args.push_back("--cpu-quota");
      args.push_back(fmt::format("{}", quota[i]));
    }
    workers.start(args, flags.pin ? i % cpus : -1);
  }

  // Submit once every worker has joined, so the job starts with all of them.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    auto answer = system.ask(runtime::ActorAddress{"", actors::kRegistryActor},
                             actors::StatusRequest{false}, std::chrono::seconds(2))
                      .get();
    auto status = answer.as<actors::StatusReply>();
    if (status && static_cast<int>(status->nodes.size()) >= flags.local) break;
    if (workers.exited() > 0) throw CliError("a worker process exited before joining (see above)", 1);
    if (std::chrono::steady_clock::now() > deadline) {
      throw CliError("the local workers did not join within 30 s", 1);
    }
    if (runtime::wait_for_shutdown_signal(std::chrono::milliseconds(100))) {
      throw CliError("interrupted before the job started", kExitInterrupted);
    }
  }

  runtime::ActorAddress jobs{"", actors::kJobsActor};
  // Absolute: the trainers resolve the job's relative file paths against it.
  auto answer = system.ask(jobs,
                           actors::SubmitJob{toml, std::filesystem::absolute(flags.job).string(),
                                             flags.run_dir},
                           std::chrono::seconds(5))
                    .get();
  auto submitted = answer.as<actors::SubmitJobReply>();
  if (!submitted || !submitted->accepted) {
    // Refused by the embedded head: exit 1, as `submit` refused by a head.
    throw CliError("the job was refused: " + (submitted ? submitted->error : answer.error), 1);
  }
  if (flags.json) {
    // As `job submit --json -f`: the ids, then events.jsonl's lines, then the summary.
    nlohmann::json ids{{"job_id", submitted->job_id}, {"run_dir", submitted->run_dir}};
    std::printf("%s\n", ids.dump().c_str());
  } else {
    std::printf("job %s, run directory %s\n", submitted->job_id.c_str(),
                submitted->run_dir.c_str());
  }
  std::fflush(stdout);

  // Ctrl-C stops the job (its summary still gets written), then everything shuts down.
  std::atomic<bool> done{false};
  std::atomic<bool> interrupted{false};
  std::thread interrupt([&] {
    while (!done) {
      if (runtime::wait_for_shutdown_signal(std::chrono::milliseconds(200))) {
        std::fprintf(stderr, "omnilearn: interrupted; stopping job %s\n",
                     submitted->job_id.c_str());
        interrupted = true;
        system.tell(jobs, actors::StopJob{submitted->job_id, "interrupted"});
        return;
      }
    }
  });
  int code = 1;
  try {
    FollowOptions follow;
    follow.json = flags.json;
    follow.run_dir = submitted->run_dir;
    follow.live_progress = want_live_progress(flags.json);
    code = follow_job(system, jobs, submitted->job_id, std::chrono::seconds(5), follow);
  } catch (...) {
    done = true;
    interrupt.join();
    throw;
  }
  done = true;
  interrupt.join();
  workers.stop();
  dashboard.reset();
  system.shutdown();
  // Stopped by Ctrl-C: the summary was written and shown; the exit code says why it ended.
  return interrupted ? kExitInterrupted : code;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<RunFlags>();
  auto* command = app.add_subcommand(
      "run", "Run a job on an embedded cluster on this machine (head + N workers)");
  command->add_option("job", flags->job, "Job file (TOML)")->required();
  command->add_option("--local", flags->local, "Number of local worker processes")
      ->required()
      ->check(CLI::Range(1, 64));
  // Lists are taken whole and checked item by item (a CLI11 delimiter drops empty items).
  // Plural: one value per worker (`worker --slowdown` and `node set --slowdown` take one number).
  // The singular spellings are older and still accepted: options of their own, listed apart in
  // --help, so that an error names the flag as it was typed.
  for (const char* name : {"--slowdowns", "--slowdown"}) {
    auto* option =
        command
            ->add_option_function<std::string>(
                name,
                [flags](const std::string& text) { flags->slowdown = parse_number_list(text); },
                "Per-worker slowdown factors, e.g. 1,1,2,4: worker i takes F times as long per "
                "step (>= 1; higher is slower; emulated heterogeneity)")
            ->check(number_list_in(1.0, 1000.0));
    if (std::string(name) == "--slowdown") {
      option->group("Older spellings")->description("The same as --slowdowns");
    }
  }
  command->add_flag("--slowdown-spin", flags->slowdown_spin,
                    "Slowed workers burn (F-1) x their compute's CPU time instead of sleeping, "
                    "as slower CPUs would (with --cpu-quota: a sleeping worker is never "
                    "throttled)");
  for (const char* name : {"--cpu-quotas", "--cpu-quota"}) {
    auto* option =
        command
            ->add_option_function<std::string>(
                name,
                [flags](const std::string& text) { flags->cpu_quota = parse_number_list(text); },
                "Per-worker CPU quotas in CPUs, e.g. 0.5,0.5,0.25 (needs cgroups)")
            ->check(positive_number_list());
    if (std::string(name) == "--cpu-quota") {
      option->group("Older spellings")->description("The same as --cpu-quotas");
    }
  }
  command->add_option("--run-dir", flags->run_dir, "Run directory (default: runs/<job-id>)");
  command->add_option("--heartbeat-interval-ms", flags->heartbeat_interval_ms)
      ->check(positive_number())
      ->capture_default_str();
  command->add_option("--heartbeat-timeout-ms", flags->heartbeat_timeout_ms)
      ->check(positive_number())
      ->capture_default_str();
  command->add_flag("--pin", flags->pin, "Pin worker i to CPU i mod #cpus");
  command->add_flag("--json", flags->json,
                    "Machine-readable output: {job_id, run_dir}, then the job's events (one JSON "
                    "object a line), then its summary");
  command->footer(
      "Example: omnilearn run examples/fashion_mnist_mlp.toml --local 4 --slowdowns "
      "1,1,2,4");
  add_dashboard_flags(command, flags->dashboard, /*allow_host=*/false);
  command->callback([flags, &exit_code] { exit_code = run_local(*flags); });
}

}  // namespace omnilearn::cli
