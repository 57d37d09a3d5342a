// omnilearn worker: a node agent that joins a head and hosts the actors it is given.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include <spdlog/spdlog.h>

#include "cluster/trainer_program.hpp"
#include "cluster/worker_agent.hpp"
#include "core/executor.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "runtime/endpoint.hpp"
#include "cli/flag_checks.hpp"
#include "runtime/advertised_address.hpp"
#include "runtime/shutdown.hpp"

namespace omnilearn::cli {
namespace {

struct WorkerFlags {
  ClusterFlags cluster;
  std::string name;
  double cpus = 0;
  std::vector<std::string> labels;
  int join_timeout_s = 60;
  double slowdown = 1.0;
  bool slowdown_spin = false;
  double cpu_quota = 0;
  std::string advertise_address;  // --advertise-address, or its older name --gloo-host
  std::vector<std::string> load;  // --load: user libraries of remote functions and actors
  std::vector<std::string> other_heads;  // --other-heads: standbys over the same state
};

// The trainer program this worker starts: $OMNILEARN_TRAINER, or found beside this binary (the
// build tree) or in the prefix it was installed into (actors::find_trainer_program).
std::string trainer_binary() {
  std::optional<std::string> override_path;
  if (const char* env = std::getenv("OMNILEARN_TRAINER")) override_path = env;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  auto search = actors::find_trainer_program(self, override_path);
  if (search.found.empty()) {
    throw CliError(actors::trainer_program_not_found(search, override_path.has_value()));
  }
  return search.found;
}

std::map<std::string, std::string> parse_labels(const std::vector<std::string>& items) {
  std::map<std::string, std::string> labels;
  for (const auto& item : items) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw CliError("bad label '" + item + "': expected key=value (e.g. --labels zone=a,gpu=a100)");
    }
    labels[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return labels;
}

// What the main thread learns from the agent: whether it has registered, and whether the head
// refused its name (the main thread then exits; the agent would otherwise retry forever).
struct AgentOutcome {
  std::atomic<bool> registered{false};
  std::mutex mutex;
  std::string name_taken;  // the head's reason; guarded by mutex
};

// Watches the agent's registration from outside the actor (the main thread only reads).
class WatchedAgent : public actors::WorkerAgent {
 public:
  WatchedAgent(actors::WorkerOptions options, std::unique_ptr<actors::CpuQuota> quota,
               std::shared_ptr<AgentOutcome> outcome)
      : WorkerAgent(std::move(options), std::move(quota)), outcome_(std::move(outcome)) {}

 protected:
  void on_registered(const actors::AgentState&) override { outcome_->registered.store(true); }
  void on_refused(const actors::RegisterNodeReply& reply) override {
    if (reply.refusal != actors::kRefusedNameTaken) {
      WorkerAgent::on_refused(reply);
      return;
    }
    std::lock_guard lock(outcome_->mutex);
    outcome_->name_taken = reply.error;
  }

 private:
  std::shared_ptr<AgentOutcome> outcome_;
};

int run_worker(const WorkerFlags& flags) {
  auto access = resolve_cluster_access(flags.cluster);
  const auto& head = access.head;
  actors::WorkerOptions worker;
  worker.cluster_file = access.cluster_file;
  auto& options = worker.agent;
  options.head_endpoint = runtime::tcp_endpoint(head);
  // --address H1,H2: the heads after the one that answered are the agent's others too.
  for (std::size_t i = 1; i < access.heads.size(); ++i) {
    options.other_head_endpoints.push_back(runtime::tcp_endpoint(access.heads[i]));
  }
  for (const auto& other : flags.other_heads) {
    try {
      options.other_head_endpoints.push_back(
          runtime::tcp_endpoint(runtime::parse_host_port(other)));
    } catch (const std::invalid_argument& e) {
      throw CliError("--other-heads: '" + other + "': " + e.what());
    }
  }
  options.name = flags.name.empty() ? local_hostname() : flags.name;
  options.machine_id = actors::local_machine_id();
  options.resources = actors::probe_local_resources();
  if (flags.cpus > 0) options.resources.cpus = flags.cpus;
  options.resources.labels = parse_labels(flags.labels);
  worker.trainer_binary = trainer_binary();
  worker.slowdown = flags.slowdown;
  worker.slowdown_spins = flags.slowdown_spin;
  // The head's host resolving to loopback means the head is on this machine (a one-machine
  // cluster, or a head bound to all interfaces whose host name is 127.0.1.1).
  auto head_addresses = runtime::resolve_host(head.host);
  bool loopback_head =
      runtime::is_loopback_host(head.host) ||
      (!head_addresses.empty() &&
       std::all_of(head_addresses.begin(), head_addresses.end(), runtime::is_loopback_host));
  // Empty: the trainers' Gloo picks the address the host name resolves to.
  worker.gloo_host = !flags.advertise_address.empty() ? flags.advertise_address
                     : loopback_head                  ? "127.0.0.1"
                                                      : "";
  runtime::AdvertiseCheck check;
  check.who = "this worker";
  check.flag = "--advertise-address";
  check.advertised = worker.gloo_host.empty() ? local_hostname() : worker.gloo_host;
  check.resolved = runtime::resolve_host(check.advertised);
  check.others_connect = !loopback_head;
  check.suggestions = runtime::non_loopback_interface_addresses();
  if (auto warning = runtime::advertise_warning(check)) {
    std::fprintf(stderr,
                 "WARNING: %s (trainers on other machines connect there for the "
                 "collectives)\n",
                 warning->c_str());
  }
  // User libraries load before anything joins: one that cannot load is an error at start.
  std::vector<core::LoadedLibrary> libraries;
  std::string loaded;
  for (const auto& path : flags.load) {
    try {
      libraries.push_back(core::load_library(path));
    } catch (const std::exception& e) {
      throw CliError(e.what());
    }
    loaded += (loaded.empty() ? "" : "+") + std::filesystem::path(path).filename().string();
  }
  if (!loaded.empty()) options.resources.labels["omnilearn.load"] = loaded;  // shown by status
  std::unique_ptr<actors::CpuQuota> quota;
  if (flags.cpu_quota > 0) {
    try {
      quota = actors::CpuQuota::create(options.name + "-" + std::to_string(getpid()));
      quota->set(flags.cpu_quota);
    } catch (const std::exception& e) {
      throw CliError(e.what());
    }
  }

  runtime::block_shutdown_signals();
  runtime::ActorSystem system(access.system_options());
  // Trainers on this machine connect here (loopback only: they are this agent's children).
  worker.local_endpoint = system.listen("tcp://127.0.0.1:0");
  auto outcome = std::make_shared<AgentOutcome>();
  system.spawn<WatchedAgent>(actors::kAgentActor, worker, std::move(quota), outcome);
  if (!libraries.empty()) {
    core::ExecutorOptions executor;
    executor.router = runtime::ActorAddress{options.head_endpoint, core::kTaskRouterActor};
    executor.node = options.name;
    executor.resources = core::ResourceSpec{options.resources.cpus,
                                            static_cast<double>(options.resources.gpus),
                                            options.resources.labels};
    executor.libraries = std::move(libraries);
    system.spawn<core::Executor>(core::kExecutorActor, std::move(executor));
  }
  std::printf("omnilearn worker '%s' joining %s:%u\n", options.name.c_str(), head.host.c_str(),
              head.port);
  std::fflush(stdout);
  // A name the head gives to another worker ends this one, before or after it joined: two
  // processes must not take turns at one name.
  auto check_name = [&] {
    std::lock_guard lock(outcome->mutex);
    if (!outcome->name_taken.empty()) throw CliError(outcome->name_taken);
  };

  // Until the first registration succeeds a missing head is a user error with a bounded wait;
  // afterwards the agent keeps reconnecting on its own (head restarts, network blips).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(flags.join_timeout_s);
  while (!outcome->registered.load()) {
    if (int signal = runtime::wait_for_shutdown_signal(std::chrono::milliseconds(50))) {
      spdlog::info("worker: signal {} received before joining; exiting", signal);
      return 0;
    }
    check_name();
    if (flags.join_timeout_s > 0 && std::chrono::steady_clock::now() > deadline) {
      throw CliError("could not reach the head at " + head.host + ":" + std::to_string(head.port) +
                         " within " + std::to_string(flags.join_timeout_s) +
                         " s (is `omnilearn head` running there, and the port open?)" +
                         handshake_hint(system),
                     no_answer_exit_code(system));
    }
  }
  std::printf("omnilearn worker '%s' joined\n", options.name.c_str());
  std::fflush(stdout);
  int signal = 0;
  while ((signal = runtime::wait_for_shutdown_signal(std::chrono::milliseconds(200))) == 0) {
    check_name();
  }
  spdlog::info("worker: signal {} received, leaving the cluster", signal);
  system.shutdown();  // the agent's on_stop tells the head it is leaving
  return 0;
}

}  // namespace

void add_worker_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<WorkerFlags>();
  auto* command = app.add_subcommand("worker", "Join a cluster as a worker node");
  add_cluster_flags(command, flags->cluster);
  command->add_option("--name", flags->name, "Node name (default: the host name)");
  command->add_option("--cpus", flags->cpus, "CPUs to advertise (default: all)")
      ->check(positive_number());
  command->add_option("--labels", flags->labels, "Labels k=v,k2=v2")->delimiter(',');
  command->add_option("--slowdown", flags->slowdown,
                      "Emulate a slower machine: trainers sleep (F-1) x their compute time")
      ->check(number_in(1.0, 1000.0));
  command->add_flag("--slowdown-spin", flags->slowdown_spin,
                    "With --slowdown: burn (F-1) x the compute's CPU time instead of sleeping, as "
                    "a slower CPU would (use it with --cpu-quota: a sleeping trainer is never "
                    "throttled)");
  command->add_option("--cpu-quota", flags->cpu_quota,
                      "Emulate a smaller machine: CPU quota (in CPUs) for this node's trainers "
                      "(needs a writable cgroup)")
      ->check(positive_number());
  command->add_option("--advertise-address,--gloo-host", flags->advertise_address,
                      "Address of this machine that trainers on other machines reach its "
                      "trainers' collectives (Gloo) at; they listen there (default: 127.0.0.1 "
                      "for a head on this machine, else the host name's address). --gloo-host "
                      "is its older name");
  command->add_option("--other-heads", flags->other_heads,
                      "HOST:PORT,... of standby heads (omnilearn head --standby): when the head "
                      "stops answering, this worker tries them in turn, and keeps its identity "
                      "with the one that took over (the same as listing them after the first "
                      "in --address)")
      ->delimiter(',');
  command->add_option("--load", flags->load,
                      "Shared library of remote functions and actors to run here (repeatable; "
                      "see include/omnilearn/omnilearn.hpp)");
  command->add_option("--join-timeout-s", flags->join_timeout_s,
                      "Give up if the head cannot be reached this long at start (0: never)")
      ->check(non_negative_number())
      ->capture_default_str();
  command->footer("Example: omnilearn worker --name gpu-a --advertise-address 10.0.0.2");
  command->callback([flags, &exit_code] { exit_code = run_worker(*flags); });
}

}  // namespace omnilearn::cli
