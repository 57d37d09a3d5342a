// omnilearn status: the nodes and jobs a head knows about; `node list` and `job list` show one
// half each. The tables are shared with `job status` (cli/tables.hpp).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "wire/job_protocol.hpp"
#include "wire/membership_protocol.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/flag_checks.hpp"
#include "cli/tables.hpp"
#include "dashboard/status_json.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::cli {
namespace {

struct StatusFlags {
  ClusterFlags cluster;
  bool json = false;
  int timeout_ms = 3000;
};

// Which half of the state a command shows.
enum class Show { kAll, kNodes, kJobs };

std::string human_bytes(std::int64_t bytes) {
  if (bytes >= (1LL << 30)) return fmt::format("{:.1f}G", bytes / double(1LL << 30));
  if (bytes >= (1LL << 20)) return fmt::format("{:.0f}M", bytes / double(1LL << 20));
  return fmt::format("{}B", bytes);
}

// One line on the head itself: its store, and what its last start restored.
void print_head(const actors::HeadInfo& head) {
  if (head.store.empty()) return;  // an older head
  std::string restart;
  if (head.epoch > 1) {
    restart = fmt::format(", restarted (start {})", head.epoch);
    if (head.outage_s >= 0) restart += fmt::format(" after {:.1f} s down", head.outage_s);
    restart += fmt::format(": {} nodes and {} jobs restored in {:.0f} ms", head.restored_nodes,
                           head.restored_jobs, head.restore_ms);
    if (head.nodes_back_ms >= 0) {
      restart += fmt::format(", nodes back after {:.0f} ms", head.nodes_back_ms);
    }
  }
  std::printf("head: %s, state in %s%s\n\n", head.role.c_str(), head.store.c_str(),
              restart.c_str());
}

int run_status(const StatusFlags& flags, Show show) {
  auto access = resolve_cluster_access(flags.cluster);
  const auto& head = access.head;
  runtime::ActorSystem system(access.system_options());
  auto timeout = std::chrono::milliseconds(flags.timeout_ms);
  auto answer = system
                    .ask(runtime::ActorAddress{runtime::tcp_endpoint(head), actors::kRegistryActor},
                         actors::StatusRequest{}, timeout)
                    .get();
  auto status = answer.as<actors::StatusReply>();
  if (!status) {
    throw CliError(
        fmt::format("cannot reach the head at {}:{} within {} ms ({}{}); is `omnilearn "
                    "head` running there?",
                    head.host, head.port, flags.timeout_ms,
                    answer.error.empty() ? "bad reply" : answer.error, handshake_hint(system)),
        no_answer_exit_code(system));
  }
  // Jobs live with the job manager; an older head without one simply has no jobs.
  if (show != Show::kNodes) {
    auto jobs = system
                    .ask(runtime::ActorAddress{runtime::tcp_endpoint(head), actors::kJobsActor},
                         actors::StatusRequest{}, timeout)
                    .get();
    if (auto job_status = jobs.as<actors::StatusReply>()) status->jobs = job_status->jobs;
  }
  if (flags.json) {
    auto json = dashboard::status_json(*status);
    if (show == Show::kNodes) json = json["nodes"];
    if (show == Show::kJobs) json = json["jobs"];
    std::printf("%s\n", json.dump().c_str());
    return 0;
  }
  if (show == Show::kAll) print_head(status->head);
  if (show != Show::kJobs) print_nodes(status->nodes);
  if (show == Show::kJobs && status->jobs.empty()) std::printf("(no jobs)\n");
  if (show != Show::kNodes && !status->jobs.empty()) {
    if (show == Show::kAll) std::printf("\n");
    print_jobs(status->jobs);
  }
  return 0;
}

void add_status_flags(CLI::App* command, StatusFlags& flags, const char* json_help) {
  add_cluster_flags(command, flags.cluster);
  command->add_flag("--json", flags.json, json_help);
  command->add_option("--timeout-ms", flags.timeout_ms, "How long to wait for the head, in ms")
      ->check(positive_number())
      ->capture_default_str();
}

}  // namespace

std::string shown_state(const actors::NodeInfo& node) {
  if (!node.drained || (node.state != "alive" && node.state != "suspect")) return node.state;
  return node.actors.empty() ? "drained" : "draining";
}

void print_nodes(std::vector<actors::NodeInfo> nodes) {
  auto rank = [](const std::string& state) {
    return state == "alive" ? 0 : state == "suspect" ? 1 : state == "left" ? 2 : 3;
  };
  std::sort(nodes.begin(), nodes.end(), [&](const auto& a, const auto& b) {
    return std::make_tuple(rank(a.state), a.name, a.incarnation) <
           std::make_tuple(rank(b.state), b.name, b.incarnation);
  });
  std::printf("%-20s %-11s %-8s %4s %9s %6s %8s %5s  %s\n", "NAME", "ID", "STATE", "INC",
              "LAST-HB", "CPUS", "MEMORY", "GPUS", "LABELS");
  for (const auto& node : nodes) {
    std::string labels;
    for (const auto& [key, value] : node.resources.labels) {
      labels += (labels.empty() ? "" : ",") + key + "=" + value;
    }
    std::string age = fmt::format("{:.1f}s", node.last_heartbeat_ms / 1000.0);
    std::printf("%-20s %-11s %-8s %4llu %9s %6.1f %8s %5d  %s\n", node.name.c_str(),
                node.id.c_str(), shown_state(node).c_str(),
                static_cast<unsigned long long>(node.incarnation), age.c_str(), node.resources.cpus,
                human_bytes(node.resources.memory_bytes).c_str(), node.resources.gpus,
                labels.c_str());
  }
  if (nodes.empty()) std::printf("(no nodes have joined yet)\n");
}

void print_jobs(const std::vector<actors::JobInfo>& jobs) {
  std::printf("%-14s %-16s %-10s %12s %5s  %s\n", "JOB", "NAME", "STATE", "STEP", "GEN",
              "WORKERS (node rank batch samples/s step-time)");
  for (const auto& job : jobs) {
    std::string workers;
    for (const auto& w : job.workers) {
      workers += fmt::format("{}{} r{} b{} {:.0f}/s {:.3f}s", workers.empty() ? "" : "; ", w.node,
                             w.rank, w.batch, w.samples_per_s, w.step_time_s);
    }
    std::string step = fmt::format("{}/{}", job.step, job.total_steps);
    std::printf("%-14s %-16s %-10s %12s %5lld  %s\n", job.id.c_str(), job.name.c_str(),
                job.state.c_str(), step.c_str(), static_cast<long long>(job.generation),
                workers.c_str());
    if (!job.reason.empty()) std::printf("  reason: %s\n", job.reason.c_str());
    if (!job.checkpoint.empty()) {
      std::printf("  checkpoint: %s (on %s)\n", job.checkpoint.c_str(),
                  job.checkpoint_node.c_str());
    }
  }
}

void add_status_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<StatusFlags>();
  auto* command = app.add_subcommand("status", "Show the nodes and jobs of a cluster");
  add_status_flags(command, *flags, "Machine-readable output");
  command->footer("Example: omnilearn status --json");
  command->callback([flags, &exit_code] { exit_code = run_status(*flags, Show::kAll); });
}

void add_node_list_command(CLI::App* node, int& exit_code) {
  auto flags = std::make_shared<StatusFlags>();
  auto* command = node->add_subcommand(
      "list", "List the nodes a head knows: state (draining and drained too), resources");
  add_status_flags(command, *flags, "Machine-readable output (a JSON array of nodes)");
  command->footer("Example: omnilearn node list");
  command->callback([flags, &exit_code] { exit_code = run_status(*flags, Show::kNodes); });
}

void add_job_list_command(CLI::App* job, int& exit_code) {
  auto flags = std::make_shared<StatusFlags>();
  auto* command = job->add_subcommand("list", "List the jobs a head knows: state, step, workers");
  add_status_flags(command, *flags, "Machine-readable output (a JSON array of jobs)");
  command->footer("Example: omnilearn job list --json");
  command->callback([flags, &exit_code] { exit_code = run_status(*flags, Show::kJobs); });
}

}  // namespace omnilearn::cli
