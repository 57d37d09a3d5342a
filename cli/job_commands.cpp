// omnilearn submit | logs | stop | drain | node set: clients of the head's job manager.
// Exit codes: 0 done; 1 the head said no (refused the job, no such job or node) or the job
// followed did not succeed; 2 the request never got an answer (bad input, unreachable head).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "actors/job_protocol.hpp"
#include "actors/job_spec.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/flag_checks.hpp"
#include "cli/job_client.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::cli {
namespace {

struct ClientFlags {
  ClusterFlags cluster;
  int timeout_ms = 5000;
};

void add_client_flags(CLI::App* command, ClientFlags& flags) {
  add_cluster_flags(command, flags.cluster);
  command->add_option("--timeout-ms", flags.timeout_ms, "How long to wait for the head")
      ->check(positive_number())
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
    // Here, on the submitting machine, the model and data files the job names must exist.
    actors::parse_job_spec(text.str(), path, actors::FileChecks::kLocal);
  } catch (const actors::JobSpecError& e) {
    throw CliError(e.what());
  }
  return text.str();
}

struct ClientFlagsWithJson : ClientFlags {
  bool json = false;
};

void add_json_flag(CLI::App* command, bool& json) {
  command->add_flag("--json", json, "Machine-readable output (JSON on stdout)");
}

// The head's yes or no to a request answered with SimpleReply (an ErrorReply, such as
// no-such-job, is a no); nullopt when there was no answer.
std::optional<actors::SimpleReply> as_simple(const runtime::AskResult& answer) {
  if (auto reply = answer.as<actors::SimpleReply>()) return reply;
  if (!answer.ok()) return std::nullopt;
  auto error = runtime::unpack_payload<runtime::ErrorReply>(answer.reply.payload);
  return actors::SimpleReply{false, error ? error->message : answer.error};
}

// Asks, prints the answer ({"ok":...,"message":...} with --json) and returns 0; a no is a
// CliError with exit code 1, no answer one with exit code 2.
template <class Request>
int ask_and_print(const ClientFlagsWithJson& flags, const Request& request,
                  const std::string& what) {
  auto access = resolve_cluster_access(flags.cluster);
  runtime::ActorSystem system(access.system_options());
  auto answer =
      system.ask(jobs_at(access), request, std::chrono::milliseconds(flags.timeout_ms)).get();
  auto reply = as_simple(answer);
  if (!reply) {
    throw CliError("cannot " + what + ": no answer from the head at " + jobs_at(access).system +
                   " (" + answer.error + handshake_hint(system) +
                   "); is `omnilearn head` running there?");
  }
  if (flags.json) {
    nlohmann::json out{{"ok", reply->ok}, {"message", reply->message}};
    std::printf("%s\n", out.dump().c_str());
  } else if (reply->ok) {
    std::printf("%s\n", reply->message.c_str());
  }
  std::fflush(stdout);
  if (!reply->ok) throw CliError(reply->message, 1);
  return 0;
}

}  // namespace

std::string read_valid_job_file(const std::string& path) { return read_valid_job(path); }

void add_job_commands(CLI::App& app, int& exit_code) {
  {
    struct SubmitFlags : ClientFlagsWithJson {
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
    command->add_flag("--follow", flags->follow,
                      "Stream progress until the job ends (exit 1 if it does not succeed)");
    add_json_flag(command, flags->json);
    command->callback([flags, &exit_code] {
      std::string toml = read_valid_job(flags->job);
      auto access = resolve_cluster_access(flags->cluster);
      auto jobs = jobs_at(access);
      runtime::ActorSystem system(access.system_options());
      auto timeout = std::chrono::milliseconds(flags->timeout_ms);
      auto reply = ask_or_fail<actors::SubmitJobReply>(
          system, jobs,
          // Absolute: the head and trainers resolve the job's relative file paths against it.
          actors::SubmitJob{toml, std::filesystem::absolute(flags->job).string(), flags->run_dir},
          timeout,
          "submit the job");
      if (!reply.accepted) throw CliError("the head refused the job: " + reply.error, 1);
      if (flags->json) {
        nlohmann::json out{{"job_id", reply.job_id}, {"run_dir", reply.run_dir}};
        std::printf("%s\n", out.dump().c_str());
      } else {
        std::printf("submitted job %s (run directory %s on the head)\n", reply.job_id.c_str(),
                    reply.run_dir.c_str());
      }
      std::fflush(stdout);
      FollowOptions follow;
      follow.json = flags->json;
      follow.run_dir = reply.run_dir;
      follow.live_progress = want_live_progress(flags->json);
      exit_code = flags->follow ? follow_job(system, jobs, reply.job_id, timeout, follow) : 0;
    });
  }
  {
    struct LogsFlags : ClientFlagsWithJson {
      std::string job;
      bool follow = false;
    };
    auto flags = std::make_shared<LogsFlags>();
    auto* command = app.add_subcommand(
        "logs", "Show a job's events (running or finished), and its summary once it has ended");
    command->add_option("job", flags->job, "Job id")->required();
    add_client_flags(command, *flags);
    command->add_flag("--follow", flags->follow,
                      "Keep printing until the job ends (exit 1 if it does not succeed)");
    add_json_flag(command, flags->json);
    command->callback([flags, &exit_code] {
      auto access = resolve_cluster_access(flags->cluster);
      runtime::ActorSystem system(access.system_options());
      FollowOptions options;
      options.follow = flags->follow;
      options.json = flags->json;
      options.head_answered = false;
      exit_code = follow_job(system, jobs_at(access), flags->job,
                             std::chrono::milliseconds(flags->timeout_ms), options);
    });
  }
  {
    struct StopFlags : ClientFlagsWithJson {
      std::string job;
    };
    auto flags = std::make_shared<StopFlags>();
    auto* command = app.add_subcommand("stop", "Stop a running job");
    command->add_option("job", flags->job, "Job id")->required();
    add_client_flags(command, *flags);
    add_json_flag(command, flags->json);
    command->callback([flags, &exit_code] {
      exit_code =
          ask_and_print(*flags, actors::StopJob{flags->job, "stopped by user"}, "stop the job");
    });
  }
  {
    struct DrainFlags : ClientFlagsWithJson {
      std::string node;
    };
    auto flags = std::make_shared<DrainFlags>();
    auto* command = app.add_subcommand(
        "drain", "Move a node's trainers out of their jobs at a step boundary (no lost steps)");
    command->add_option("node", flags->node, "Node name or id")->required();
    add_client_flags(command, *flags);
    add_json_flag(command, flags->json);
    command->callback([flags, &exit_code] {
      exit_code = ask_and_print(*flags, actors::DrainNode{flags->node}, "drain the node");
    });
  }
  {
    struct NodeSetFlags : ClientFlagsWithJson {
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
        ->check(number_in(1.0, 1000.0));
    command->add_option("--cpu-quota", flags->cpu_quota, "CPU quota in CPUs (0 removes it)")
        ->check(number_in(0.0, 4096.0));
    add_client_flags(command, *flags);
    add_json_flag(command, flags->json);
    command->callback([flags, &exit_code] {
      if (flags->slowdown <= 0 && flags->cpu_quota < 0) {
        throw CliError("node set needs --slowdown F or --cpu-quota Q");
      }
      exit_code = ask_and_print(
          *flags, actors::SetNodeResources{flags->node, flags->slowdown, flags->cpu_quota},
          "change the node");
    });
  }
}

}  // namespace omnilearn::cli
