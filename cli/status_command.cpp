// omnilearn status: the nodes (and jobs) a head knows about.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/job_protocol.hpp"
#include "actors/membership_protocol.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/flag_checks.hpp"
#include "dashboard/status_json.hpp"
#include "runtime/actor_system.hpp"

namespace omnilearn::cli {
namespace {

struct StatusFlags {
  ClusterFlags cluster;
  bool json = false;
  int timeout_ms = 3000;
};

std::string human_bytes(std::int64_t bytes) {
  if (bytes >= (1LL << 30)) return fmt::format("{:.1f}G", bytes / double(1LL << 30));
  if (bytes >= (1LL << 20)) return fmt::format("{:.0f}M", bytes / double(1LL << 20));
  return fmt::format("{}B", bytes);
}

void print_table(const actors::StatusReply& status) {
  const auto& head = status.head;
  if (!head.store.empty()) {
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
  auto nodes = status.nodes;
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
                node.id.c_str(), node.state.c_str(),
                static_cast<unsigned long long>(node.incarnation), age.c_str(),
                node.resources.cpus, human_bytes(node.resources.memory_bytes).c_str(),
                node.resources.gpus, labels.c_str());
  }
  if (nodes.empty()) std::printf("(no nodes have joined yet)\n");
  if (!status.jobs.empty()) {
    std::printf("\n%-14s %-16s %-10s %12s %5s  %s\n", "JOB", "NAME", "STATE", "STEP", "GEN",
                "WORKERS (node rank batch samples/s step-time)");
    for (const auto& job : status.jobs) {
      std::string workers;
      for (const auto& w : job.workers) {
        workers += fmt::format("{}{} r{} b{} {:.0f}/s {:.3f}s", workers.empty() ? "" : "; ",
                               w.node, w.rank, w.batch, w.samples_per_s, w.step_time_s);
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
}

int run_status(const StatusFlags& flags) {
  auto access = resolve_cluster_access(flags.cluster);
  const auto& head = access.head;
  runtime::ActorSystem system(access.system_options());
  auto timeout = std::chrono::milliseconds(flags.timeout_ms);
  auto answer = system.ask(runtime::ActorAddress{runtime::tcp_endpoint(head),
                                                 actors::kRegistryActor},
                           actors::StatusRequest{}, timeout)
                    .get();
  auto status = answer.as<actors::StatusReply>();
  if (!status) {
    throw CliError(fmt::format("cannot reach the head at {}:{} within {} ms ({}{}); is `omnilearn "
                               "head` running there?",
                               head.host, head.port, flags.timeout_ms,
                               answer.error.empty() ? "bad reply" : answer.error,
                               handshake_hint(system)));
  }
  // Jobs live with the job manager; an older head without one simply has no jobs.
  auto jobs = system.ask(runtime::ActorAddress{runtime::tcp_endpoint(head), actors::kJobsActor},
                         actors::StatusRequest{}, timeout)
                  .get();
  if (auto job_status = jobs.as<actors::StatusReply>()) status->jobs = job_status->jobs;
  if (flags.json) {
    std::printf("%s\n", dashboard::status_json(*status).dump().c_str());
  } else {
    print_table(*status);
  }
  return 0;
}

}  // namespace

void add_status_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<StatusFlags>();
  auto* command = app.add_subcommand("status", "Show the nodes and jobs of a cluster");
  add_cluster_flags(command, flags->cluster);
  command->add_flag("--json", flags->json, "Machine-readable output");
  command->add_option("--timeout-ms", flags->timeout_ms, "How long to wait for the head")
      ->check(positive_number())
      ->capture_default_str();
  command->callback([flags, &exit_code] { exit_code = run_status(*flags); });
}

}  // namespace omnilearn::cli
