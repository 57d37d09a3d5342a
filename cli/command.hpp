#pragma once
// How a subcommand of `omnilearn` plugs into the one binary: each command file defines one
// add_*_command function that registers its flags and a callback on the shared CLI11 app.
// Errors are thrown as CliError: main prints the message on one line and exits with its code.
// Exit codes, the same for every command (README, "Exit codes"):
//   0   success;
//   1   the job or the request failed: the head answered no (refused a job, no such job or
//       node), or the job followed failed or was stopped;
//   2   usage or bad input: flags, job file, address, cluster file, environment, a worker name
//       another machine holds;
//   3   the head (or a worker) could not be reached: no answer within the timeout;
//   130 interrupted (SIGINT or SIGTERM while following a job or running one).

#include <stdexcept>
#include <string>

namespace CLI {
class App;
}

namespace omnilearn::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;
inline constexpr int kExitInterrupted = 130;

class CliError : public std::runtime_error {
 public:
  explicit CliError(const std::string& message, int exit_code = kExitUsage)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Each callback stores the process exit code in `exit_code` (0 on success).
void add_head_command(CLI::App& app, int& exit_code);
void add_worker_command(CLI::App& app, int& exit_code);
void add_status_command(CLI::App& app, int& exit_code);
void add_simulate_command(CLI::App& app, int& exit_code);
// job submit|list|status|logs|stop, node list|set|drain|undrain, and the older spellings
// submit, logs, stop, drain.
void add_job_commands(CLI::App& app, int& exit_code);
// job list and node list (status_command.cpp, beside the tables they print).
void add_job_list_command(CLI::App* job, int& exit_code);
void add_node_list_command(CLI::App* node, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
// report RUN_DIR [-o FILE]
void add_report_command(CLI::App& app, int& exit_code);
void add_dashboard_token_command(CLI::App& app, int& exit_code);
// dashboard: the running head's dashboard URL, once it answers there.
void add_dashboard_command(CLI::App& app, int& exit_code);

// Reads a job file and validates it; CliError with file:line:column otherwise.
std::string read_valid_job_file(const std::string& path);

}  // namespace omnilearn::cli
