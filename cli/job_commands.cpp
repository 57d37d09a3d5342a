// omnilearn submit | stop | drain | node set: clients of the head's job manager.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "actors/job_protocol.hpp"
#include "actors/job_spec.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/job_client.hpp"

namespace omnilearn::cli {
namespace {

struct ClientFlags {
  ClusterFlags cluster;
  int timeout_ms = 5000;
};

void add_client_flags(CLI::App* command, ClientFlags& flags) {
  add_cluster_flags(command, flags.cluster);
  command->add_option("--timeout-ms", flags.timeout_ms, "How long to wait for the head")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

runtime::ActorAddress jobs_at(const ClusterAccess& access) {
  return {runtime::tcp_endpoint(access.head), actors::kJobsActor};
}

// Reads and validates a job file; a bad file is a located one-line error and nothing starts.
std::string read_valid_job(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw CliError(path + ": cannot read the job file (does it exist?)");
  std::stringstream text;
  text << in.rdbuf();
  try {
    actors::parse_job_spec(text.str(), path);
  } catch (const actors::JobSpecError& e) {
    throw CliError(e.what());
  }
  return text.str();
}

void print_simple(const actors::SimpleReply& reply) {
  if (!reply.ok) throw CliError(reply.message, 1);
  std::printf("%s\n", reply.message.c_str());
}

}  // namespace

std::string read_valid_job_file(const std::string& path) { return read_valid_job(path); }

void add_job_commands(CLI::App& app, int& exit_code) {
  {
    struct SubmitFlags : ClientFlags {
      std::string job;
      std::string run_dir;
      bool follow = false;
    };
    auto flags = std::make_shared<SubmitFlags>();
    auto* command = app.add_subcommand("submit", "Submit a training job (TOML) to a cluster");
    command->add_option("job", flags->job, "Job file (TOML)")->required();
    add_client_flags(command, *flags);
    command->add_option("--run-dir", flags->run_dir,
                        "Run directory on the head (default: runs/<job-id>)");
    command->add_flag("--follow", flags->follow, "Stream progress until the job ends");
    command->callback([flags, &exit_code] {
      std::string toml = read_valid_job(flags->job);
      auto access = resolve_cluster_access(flags->cluster);
      auto jobs = jobs_at(access);
      runtime::ActorSystem system(access.system_options());
      auto timeout = std::chrono::milliseconds(flags->timeout_ms);
      auto reply = ask_or_fail<actors::SubmitJobReply>(
          system, jobs, actors::SubmitJob{toml, flags->job, flags->run_dir}, timeout,
          "submit the job");
      if (!reply.accepted) throw CliError("the head refused the job: " + reply.error);
      std::printf("submitted job %s (run directory %s on the head)\n", reply.job_id.c_str(),
                  reply.run_dir.c_str());
      std::fflush(stdout);
      exit_code = flags->follow ? follow_job(system, jobs, reply.job_id, timeout) : 0;
    });
  }
  {
    struct StopFlags : ClientFlags {
      std::string job;
    };
    auto flags = std::make_shared<StopFlags>();
    auto* command = app.add_subcommand("stop", "Stop a running job");
    command->add_option("job", flags->job, "Job id")->required();
    add_client_flags(command, *flags);
    command->callback([flags, &exit_code] {
      auto access = resolve_cluster_access(flags->cluster);
      runtime::ActorSystem system(access.system_options());
      auto answer = system.ask(jobs_at(access), actors::StopJob{flags->job, "stopped by user"},
                               std::chrono::milliseconds(flags->timeout_ms))
                        .get();
      if (auto reply = answer.as<actors::SimpleReply>()) {
        print_simple(*reply);
      } else if (answer.ok()) {
        throw CliError(answer.error);  // e.g. no-such-job
      } else {
        throw CliError("cannot reach the head (" + answer.error + ")" + handshake_hint(system));
      }
      exit_code = 0;
    });
  }
  {
    struct DrainFlags : ClientFlags {
      std::string node;
    };
    auto flags = std::make_shared<DrainFlags>();
    auto* command = app.add_subcommand(
        "drain", "Move a node's trainers out of their jobs at a step boundary (no lost steps)");
    command->add_option("node", flags->node, "Node name or id")->required();
    add_client_flags(command, *flags);
    command->callback([flags, &exit_code] {
      auto access = resolve_cluster_access(flags->cluster);
      runtime::ActorSystem system(access.system_options());
      print_simple(ask_or_fail<actors::SimpleReply>(
          system, jobs_at(access), actors::DrainNode{flags->node},
          std::chrono::milliseconds(flags->timeout_ms), "drain the node"));
      exit_code = 0;
    });
  }
  {
    struct NodeSetFlags : ClientFlags {
      std::string node;
      double slowdown = 0;
      double cpu_quota = -1;
    };
    auto flags = std::make_shared<NodeSetFlags>();
    auto* node = app.add_subcommand("node", "Manage nodes");
    node->require_subcommand(1);
    auto* command = node->add_subcommand("set", "Change a node's emulated resources while it runs");
    command->add_option("node", flags->node, "Node name or id")->required();
    command->add_option("--slowdown", flags->slowdown, "Slowdown factor (>= 1)")
        ->check(CLI::Range(1.0, 1000.0));
    command->add_option("--cpu-quota", flags->cpu_quota, "CPU quota in CPUs (0 removes it)")
        ->check(CLI::Range(0.0, 4096.0));
    add_client_flags(command, *flags);
    command->callback([flags, &exit_code] {
      if (flags->slowdown <= 0 && flags->cpu_quota < 0) {
        throw CliError("node set needs --slowdown F or --cpu-quota Q");
      }
      auto access = resolve_cluster_access(flags->cluster);
      runtime::ActorSystem system(access.system_options());
      print_simple(ask_or_fail<actors::SimpleReply>(
          system, jobs_at(access),
          actors::SetNodeResources{flags->node, flags->slowdown, flags->cpu_quota},
          std::chrono::milliseconds(flags->timeout_ms), "change the node"));
      exit_code = 0;
    });
  }
}

}  // namespace omnilearn::cli
