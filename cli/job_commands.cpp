// omnilearn job submit | status | logs | stop and node set | drain | undrain: clients of the
// head's job manager (job list and node list are in status_command.cpp, with the tables).
// The older top-level spellings (submit, logs, stop, drain) are the same commands.
// Exit codes (command.hpp): 0 done; 1 the head said no (refused the job, no such job or node)
// or the job followed did not succeed; 2 bad input; 3 no answer from the head; 130 interrupted.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "wire/job_protocol.hpp"
#include "jobs/job_spec.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/flag_checks.hpp"
#include "cli/job_client.hpp"
#include "cli/tables.hpp"
#include "dashboard/status_json.hpp"
#include "runtime/shutdown.hpp"
#include "runtime/system_messages.hpp"

namespace omnilearn::cli {
namespace {

struct ClientFlags {
  ClusterFlags cluster;
  int timeout_ms = 5000;
};

void add_client_flags(CLI::App* command, ClientFlags& flags) {
  add_cluster_flags(command, flags.cluster);
  command->add_option("--timeout-ms", flags.timeout_ms, "How long to wait for the head, in ms")
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
// CliError with exit code 1, no answer one with exit code 3 (2 when the handshake failed).
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
                       "); is `omnilearn head` running there?",
                   no_answer_exit_code(system));
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

namespace {

// The group the older top-level spellings are listed under in `omnilearn --help`.
constexpr const char* kOlderSpellings = "Older spellings (the same commands)";

void add_submit(CLI::App* parent, const std::string& example, int& exit_code) {
  struct SubmitFlags : ClientFlagsWithJson {
    std::string job;
    std::string run_dir;
    bool follow = false;
  };
  auto flags = std::make_shared<SubmitFlags>();
  auto* command = parent->add_subcommand("submit", "Submit a training job (TOML) to a cluster");
  command->add_option("job", flags->job, "Job file (TOML; docs/job-file.md)")->required();
  add_client_flags(command, *flags);
  command->add_option("--run-dir", flags->run_dir,
                      "Run directory on the head (default: runs/<job-id>)");
  command->add_flag("-f,--follow", flags->follow,
                    "Stream progress until the job ends (exit 1 if it does not succeed; Ctrl-C "
                    "stops following, not the job)");
  add_json_flag(command, flags->json);
  command->footer("Example: " + example);
  command->callback([flags, &exit_code] {
    std::string toml = read_valid_job(flags->job);
    auto access = resolve_cluster_access(flags->cluster);
    auto jobs = jobs_at(access);
    // Before the actor system's threads exist, so that Ctrl-C reaches the follow loop.
    if (flags->follow) runtime::block_shutdown_signals();
    runtime::ActorSystem system(access.system_options());
    auto timeout = std::chrono::milliseconds(flags->timeout_ms);
    auto reply = ask_or_fail<actors::SubmitJobReply>(
        system, jobs,
        // Absolute: the head and trainers resolve the job's relative file paths against it.
        actors::SubmitJob{toml, std::filesystem::absolute(flags->job).string(), flags->run_dir},
        timeout, "submit the job");
    if (!reply.accepted) throw CliError("the head refused the job: " + reply.error, kExitFailed);
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
    follow.interruptible = true;
    exit_code = flags->follow ? follow_job(system, jobs, reply.job_id, timeout, follow) : 0;
  });
}

void add_logs(CLI::App* parent, const std::string& example, int& exit_code) {
  struct LogsFlags : ClientFlagsWithJson {
    std::string job;
    bool follow = false;
  };
  auto flags = std::make_shared<LogsFlags>();
  auto* command = parent->add_subcommand(
      "logs", "Show a job's events (running or finished), and its summary once it has ended");
  command->add_option("job", flags->job, "Job id")->required();
  add_client_flags(command, *flags);
  command->add_flag("-f,--follow", flags->follow,
                    "Keep printing until the job ends (exit 1 if it does not succeed; Ctrl-C "
                    "stops following, not the job)");
  add_json_flag(command, flags->json);
  command->footer("Example: " + example);
  command->callback([flags, &exit_code] {
    auto access = resolve_cluster_access(flags->cluster);
    if (flags->follow) runtime::block_shutdown_signals();
    runtime::ActorSystem system(access.system_options());
    FollowOptions options;
    options.follow = flags->follow;
    options.json = flags->json;
    options.head_answered = false;
    options.interruptible = flags->follow;
    exit_code = follow_job(system, jobs_at(access), flags->job,
                           std::chrono::milliseconds(flags->timeout_ms), options);
  });
}

void add_stop(CLI::App* parent, const std::string& example, int& exit_code) {
  struct StopFlags : ClientFlagsWithJson {
    std::string job;
  };
  auto flags = std::make_shared<StopFlags>();
  auto* command = parent->add_subcommand("stop", "Stop a running job");
  command->add_option("job", flags->job, "Job id")->required();
  add_client_flags(command, *flags);
  add_json_flag(command, flags->json);
  command->footer("Example: " + example);
  command->callback([flags, &exit_code] {
    exit_code =
        ask_and_print(*flags, actors::StopJob{flags->job, "stopped by user"}, "stop the job");
  });
}

void add_drain(CLI::App* parent, const std::string& example, int& exit_code) {
  struct DrainFlags : ClientFlagsWithJson {
    std::string node;
  };
  auto flags = std::make_shared<DrainFlags>();
  auto* command = parent->add_subcommand(
      "drain",
      "Move a node's trainers out of their jobs at a step boundary (no lost steps) and keep "
      "every job, later ones too, off it until `node undrain`");
  command->add_option("node", flags->node, "Node name or id")->required();
  add_client_flags(command, *flags);
  add_json_flag(command, flags->json);
  command->footer("Example: " + example);
  command->callback([flags, &exit_code] {
    exit_code = ask_and_print(*flags, actors::DrainNode{flags->node}, "drain the node");
  });
}

// One job's state: its line of `job list`, or JSON; exit 1 if it failed or was stopped.
void add_job_status(CLI::App* job, int& exit_code) {
  struct JobStatusFlags : ClientFlagsWithJson {
    std::string job;
  };
  auto flags = std::make_shared<JobStatusFlags>();
  auto* command = job->add_subcommand(
      "status",
      "Show one job's state, step, generation and workers (exit 1 if it failed or was "
      "stopped)");
  command->add_option("job", flags->job, "Job id")->required();
  add_client_flags(command, *flags);
  add_json_flag(command, flags->json);
  command->footer("Example: omnilearn job status 1a2b3c4d --json");
  command->callback([flags, &exit_code] {
    auto access = resolve_cluster_access(flags->cluster);
    runtime::ActorSystem system(access.system_options());
    // No events: only the state (the events start past any there can be).
    auto answer = system
                      .ask(jobs_at(access),
                           actors::JobStatusRequest{flags->job,
                                                    std::numeric_limits<std::uint64_t>::max() / 2},
                           std::chrono::milliseconds(flags->timeout_ms))
                      .get();
    auto status = answer.as<actors::JobStatusReply>();
    if (!status && answer.ok()) {
      auto error = runtime::unpack_payload<runtime::ErrorReply>(answer.reply.payload);
      throw CliError((error ? error->message : "the head did not understand the request") +
                         " (omnilearn job list shows the jobs the head knows)",
                     kExitFailed);
    }
    if (!status) {
      throw CliError("cannot read job " + flags->job + ": no answer from the head at " +
                         jobs_at(access).system + " (" + answer.error + handshake_hint(system) +
                         "); is `omnilearn head` running there?",
                     no_answer_exit_code(system));
    }
    if (flags->json) {
      std::printf("%s\n", dashboard::to_json(status->job).dump().c_str());
    } else {
      print_jobs({status->job});
    }
    std::fflush(stdout);
    const auto& state = status->job.state;
    exit_code = state == "failed" || state == "stopped" ? kExitFailed : kExitOk;
  });
}

void add_undrain(CLI::App* node, int& exit_code) {
  struct UndrainFlags : ClientFlagsWithJson {
    std::string node;
  };
  auto flags = std::make_shared<UndrainFlags>();
  auto* command = node->add_subcommand("undrain", "Make a drained node usable again by every job");
  command->add_option("node", flags->node, "Node name or id")->required();
  add_client_flags(command, *flags);
  add_json_flag(command, flags->json);
  command->footer("Example: omnilearn node undrain worker-3");
  command->callback([flags, &exit_code] {
    exit_code = ask_and_print(*flags, actors::UndrainNode{flags->node}, "undrain the node");
  });
}

void add_node_set(CLI::App* node, int& exit_code) {
  struct NodeSetFlags : ClientFlagsWithJson {
    std::string node;
    double slowdown = 0;
    double cpu_quota = -1;
  };
  auto flags = std::make_shared<NodeSetFlags>();
  auto* command = node->add_subcommand("set", "Change a node's emulated resources while it runs");
  command->add_option("node", flags->node, "Node name or id")->required();
  command
      ->add_option("--slowdown", flags->slowdown,
                   "Slowdown factor: each step takes F times as long (>= 1; 1 is native)")
      ->check(number_in(1.0, 1000.0));
  command->add_option("--cpu-quota", flags->cpu_quota, "CPU quota in CPUs (0 removes it)")
      ->check(number_in(0.0, 4096.0));
  add_client_flags(command, *flags);
  add_json_flag(command, flags->json);
  command->footer("Example: omnilearn node set worker-3 --slowdown 2");
  command->callback([flags, &exit_code] {
    if (flags->slowdown <= 0 && flags->cpu_quota < 0) {
      throw CliError("node set needs --slowdown F or --cpu-quota Q");
    }
    exit_code = ask_and_print(
        *flags, actors::SetNodeResources{flags->node, flags->slowdown, flags->cpu_quota},
        "change the node");
  });
}

}  // namespace

void add_job_commands(CLI::App& app, int& exit_code) {
  auto* job = app.add_subcommand("job", "Submit, list, inspect, follow and stop jobs");
  job->require_subcommand(1);
  job->footer("Example: omnilearn job submit examples/fashion_mnist_mlp.toml -f");
  add_submit(job, "omnilearn job submit examples/fashion_mnist_mlp.toml -f", exit_code);
  add_job_list_command(job, exit_code);
  add_job_status(job, exit_code);
  add_logs(job, "omnilearn job logs 1a2b3c4d -f", exit_code);
  add_stop(job, "omnilearn job stop 1a2b3c4d", exit_code);

  auto* node = app.add_subcommand(
      "node", "List nodes, drain and undrain them, change their emulated resources");
  node->require_subcommand(1);
  node->footer("Example: omnilearn node drain worker-3");
  add_node_list_command(node, exit_code);
  add_node_set(node, exit_code);
  add_drain(node, "omnilearn node drain worker-3", exit_code);
  add_undrain(node, exit_code);

  // The older spellings: the same commands, flags and output, listed apart in --help.
  add_submit(&app, "omnilearn submit examples/fashion_mnist_mlp.toml --follow", exit_code);
  add_logs(&app, "omnilearn logs 1a2b3c4d --follow", exit_code);
  add_stop(&app, "omnilearn stop 1a2b3c4d", exit_code);
  add_drain(&app, "omnilearn drain worker-3", exit_code);
  for (const char* name : {"submit", "logs", "stop", "drain"}) {
    app.get_subcommand(name)->group(kOlderSpellings);
  }
}

}  // namespace omnilearn::cli
